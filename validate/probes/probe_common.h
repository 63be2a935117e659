/*
 * probe_common.h - what both probes share: fatal MPI errors (CHECK), allocation that cannot
 * fail silently (plain; page-aligned, as OSU's buffers; MPI_Alloc_mem, as IMB's), and option
 * errors collected for the usage message. Include it after defining PROBE_NAME (the program's
 * name) and PROBE_RANK (its MPI_COMM_WORLD rank variable).
 */
#ifndef PROBE_COMMON_H
#define PROBE_COMMON_H

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void die(const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error code %d", rc);
    fprintf(stderr, PROBE_NAME ": rank %d: %s failed: %s\n", PROBE_RANK, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

#define CHECK(call)                          \
    do {                                     \
        int rc_ = (call);                    \
        if (rc_ != MPI_SUCCESS)              \
            die(#call, rc_);                 \
    } while (0)

static void no_memory(size_t n)
{
    fprintf(stderr, PROBE_NAME ": rank %d: cannot allocate %zu bytes\n", PROBE_RANK, n);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        no_memory(n);
    return p;
}

/* page-aligned (OSU's posix_memalign(getpagesize()) buffers); release with free() */
static inline void *xmalloc_pages(size_t n)
{
    static size_t page;
    void *p = NULL;
    if (!page) {
        long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (size_t)ps : 4096;
    }
    if (posix_memalign(&p, page, n ? n : 1) != 0 || !p)
        no_memory(n);
    return p;
}

/* MPI_Alloc_mem (IMB's buffers: some MPIs hand out registered or huge-page memory here);
   release with MPI_Free_mem */
static inline void *xmalloc_mpi(size_t n)
{
    void *p = NULL;
    if (n > (size_t)PTRDIFF_MAX ||
        MPI_Alloc_mem((MPI_Aint)(n ? n : 1), MPI_INFO_NULL, &p) != MPI_SUCCESS || !p)
        no_memory(n);
    return p;
}

/* ---------------------------------------------------------------- options */

static char errbuf[512];

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

#endif
