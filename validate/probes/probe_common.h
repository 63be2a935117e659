/*
 * probe_common.h - what both probes share: fatal MPI errors (CHECK), allocation that cannot
 * fail silently, and option errors collected for the usage message. Include it after defining
 * PROBE_NAME (the program's name) and PROBE_RANK (its MPI_COMM_WORLD rank variable).
 */
#ifndef PROBE_COMMON_H
#define PROBE_COMMON_H

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, PROBE_NAME ": rank %d: cannot allocate %zu bytes\n", PROBE_RANK, n);
        MPI_Abort(MPI_COMM_WORLD, 3);
        exit(3);
    }
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
