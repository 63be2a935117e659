/*
 * probe_coll.c - IMB-MPI1-style timing of MPI_Alltoall, MPI_Allgather,
 * MPI_Allreduce and MPI_Bcast, for machines without Intel MPI Benchmarks
 * (tunedmpi validate/probes, docs/design.md, "Benchmarks and probes").
 *
 * The table is printed byte-for-byte in IMB-MPI1 2021.11's format so one
 * parser reads both; the first output line says that this is a probe.
 * Methodology (same as IMB-MPI1, written independently):
 *   - sizes 0, then 2^min rounded up to the element size, doubling to 2^max;
 *     Allreduce counts MPI_FLOAT elements (bytes / 4) with MPI_SUM,
 *     Alltoall/Allgather send `bytes` MPI_BYTEs to / from every process;
 *     Bcast sends `bytes` MPI_BYTEs from root 0 (-root_shift on: the root
 *     moves by one rank after every repetition), the root from its send
 *     buffer, the others into their receive buffer, both at the same
 *     -off_cache slot (IMB_bcast.c);
 *   - repetitions per size: n = min(msgspersample, overall_vol / bytes)
 *     (defaults 1000 and 40 MB), then with -iter_policy dynamic cut to what
 *     fits into -time seconds (estimated from 1 and n trial repetitions) and
 *     never more than the previous size used; -iter_policy auto is dynamic,
 *     except for Bcast (a root-based benchmark), where it is multiple_np;
 *     a policy that does not adapt runs the size once, untimed, instead;
 *   - warm-up: n/10 repetitions (at least min(10, n)) before each size;
 *   - 2 MPI_Barriers before each size, then each repetition is timed alone
 *     with MPI_Wtime around the collective call, followed by an (untimed)
 *     MPI_Barrier unless -sync off;
 *   - per rank: time / n; table: min, max and mean of that over the ranks;
 *   - buffers from MPI_Alloc_mem, allocated for each size, written in full
 *     before any timing and freed after the size;
 *   - -off_cache C[,L]: send and receive buffers of about 2 x C MB, each
 *     repetition uses the next slot (message rounded up to L-byte lines plus
 *     one spare line), so consecutive repetitions touch different memory;
 *   - -npmin P: run on P, 2P, 4P, ... and finally all processes; the others
 *     wait in MPI_Barrier (as IMB).
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <time.h>

#define PROBE_VERSION 3
#define OW 13                    /* IMB column width */
#define N_BARR 2                 /* barriers before each size */
#define MSGSPERSAMPLE 1000
#define OVERALL_VOL_MB 40
#define SECS_PER_SAMPLE 10.0
#define MAX_MEM_GB 2.0
#define MIN_LOG 0
#define MAX_LOG 22
#define MAX_INT_LOG 31
#define WARMUP_PERCENT 10
#define MIN_WARMUP_ITERS 10
#define CACHE_SIZE_MB 8.0        /* -off_cache -1 */
#define CACHE_LINE 64
#define MB 1048576.0
#define GB 1073741824.0
#define MAX_BENCH 16

typedef int (*coll_fn)(const void *sbuf, void *rbuf, int count, int root, MPI_Comm comm);

static int run_alltoall(const void *s, void *r, int n, int root, MPI_Comm c)
{
    (void)root;
    return MPI_Alltoall(s, n, MPI_BYTE, r, n, MPI_BYTE, c);
}

static int run_allgather(const void *s, void *r, int n, int root, MPI_Comm c)
{
    (void)root;
    return MPI_Allgather(s, n, MPI_BYTE, r, n, MPI_BYTE, c);
}

static int run_allreduce(const void *s, void *r, int n, int root, MPI_Comm c)
{
    (void)root;
    return MPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, c);
}

/* the kernel passes the root's send slot, or another rank's receive slot, as r */
static int run_bcast(const void *s, void *r, int n, int root, MPI_Comm c)
{
    (void)s;
    return MPI_Bcast(r, n, MPI_BYTE, root, c);
}

typedef struct {
    const char *name;  /* spelled as IMB prints it */
    coll_fn fn;
    int unit;          /* bytes per element */
    int s_all, r_all;  /* buffer holds one block per process */
    int rooted;        /* IMB's root-based benchmarks (policy auto = multiple_np) */
} bench_t;

/* IMB's order when no benchmark is named */
static const bench_t BENCHES[] = {
    {"Allreduce", run_allreduce, (int)sizeof(float), 0, 0, 0},
    {"Allgather", run_allgather, 1, 0, 1, 0},
    {"Alltoall", run_alltoall, 1, 1, 1, 0},
    {"Bcast", run_bcast, 1, 0, 0, 1},
};
#define N_KNOWN ((int)(sizeof(BENCHES) / sizeof(BENCHES[0])))

enum policy { POL_DYNAMIC, POL_OFF, POL_MULTIPLE_NP, POL_AUTO };
static const char *POLICY_NAMES[] = {"dynamic", "off", "multiple_np", "auto"};

typedef struct {
    int minlog, maxlog;
    int npmin;
    int msgspersample, overall_vol_mb, msgs_nonaggr;
    enum policy policy;
    double secs;
    int off_cache;
    double cache_mb;
    int cache_line;
    double max_mem_gb;
    int warm_up;          /* -warm_up on|off */
    long warmup_iters;    /* -warmup N; -1 = IMB's n/10 rule */
    int sync;
    int root_shift;       /* -root_shift on|off: 1 or 0 (IMB's default off) */
    int zero_size;
    int nbench;
    const bench_t *bench[MAX_BENCH];
} opts_t;

enum failure { OK_SAMPLE, FAIL_MEMORY, FAIL_INT_OVERFLOW, FAIL_TIME_OUT };

static int world_rank;

#define PROBE_NAME "probe_coll"
#define PROBE_RANK world_rank
#include "probe_common.h"

/* strict: the whole string must be a number (IMB's sscanf accepts junk) */
static int to_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int to_double(const char *s, double *out, const char *allowed_suffix)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s)
        return -1;
    if (*end && !(allowed_suffix && strcasecmp(end, allowed_suffix) == 0))
        return -1;
    *out = v;
    return 0;
}

static int on_off(const char *s, int *out)
{
    static const char *on[] = {"on", "1", "enable", "yes"};
    static const char *off[] = {"off", "0", "disable", "no"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, on[i])) { *out = 1; return 0; }
        if (!strcasecmp(s, off[i])) { *out = 0; return 0; }
    }
    return -1;
}

static int add_bench(opts_t *o, const char *name)
{
    for (int k = 0; k < N_KNOWN; k++) {
        if (strcasecmp(name, BENCHES[k].name))
            continue;
        for (int j = 0; j < o->nbench; j++)
            if (o->bench[j] == &BENCHES[k])
                return 0;        /* named twice: run once, as IMB */
        if (o->nbench == MAX_BENCH)
            return fail("too many benchmarks");
        o->bench[o->nbench++] = &BENCHES[k];
        return 0;
    }
    return fail("unknown benchmark \"%s\" (this probe knows Alltoall, Allgather, Allreduce, Bcast)", name);
}

enum { PARSE_OK = 0, PARSE_HELP = 1, PARSE_ERROR = -1 };

static int parse(int argc, char **argv, opts_t *o)
{
    long v;
    *o = (opts_t){
        .minlog = MIN_LOG, .maxlog = MAX_LOG, .npmin = 2,
        .msgspersample = MSGSPERSAMPLE, .overall_vol_mb = OVERALL_VOL_MB,
        .msgs_nonaggr = 100, .policy = POL_DYNAMIC, .secs = SECS_PER_SAMPLE,
        .cache_mb = CACHE_SIZE_MB, .cache_line = CACHE_LINE,
        .max_mem_gb = MAX_MEM_GB, .warm_up = 1, .warmup_iters = -1,
        .sync = 1, .zero_size = 1,
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            /* names may also be given comma-separated, as IMB allows */
            char *copy = strdup(a), *save = NULL;
            if (!copy)
                return fail("out of memory");
            int rc = 0;
            for (char *t = strtok_r(copy, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save))
                rc = add_bench(o, t);
            free(copy);
            if (rc)
                return PARSE_ERROR;
            continue;
        }
        if (!strcmp(a, "-help") || !strcmp(a, "-h") || !strcmp(a, "--help"))
            return PARSE_HELP;
        if (i + 1 >= argc)
            return fail("missing argument after \"%s\"", a);
        const char *val = argv[++i];
        if (!strcmp(a, "-msglog")) {
            const char *colon = strchr(val, ':');
            long lo = 0, hi;
            if (colon) {
                char lo_s[32];
                size_t n = (size_t)(colon - val);
                if (n == 0 || n >= sizeof lo_s)
                    return fail("invalid -msglog \"%s\", must be min:max", val);
                memcpy(lo_s, val, n);
                lo_s[n] = '\0';
                if (to_long(lo_s, &lo) || to_long(colon + 1, &hi))
                    return fail("invalid -msglog \"%s\", must be min:max", val);
            } else if (to_long(val, &hi)) {
                return fail("invalid -msglog \"%s\", must be min:max", val);
            }
            if (lo < 0 || hi <= lo || hi >= MAX_INT_LOG)
                return fail("invalid -msglog \"%s\": need 0 <= min < max < %d", val, MAX_INT_LOG);
            o->minlog = (int)lo;
            o->maxlog = (int)hi;
        } else if (!strcmp(a, "-npmin")) {
            if (to_long(val, &v) || v < 1 || v > INT_MAX)
                return fail("invalid -npmin \"%s\"", val);
            o->npmin = (int)v;
        } else if (!strcmp(a, "-iter")) {
            /* msgspersample[,overall_vol_MB[,msgs_nonaggr]] */
            long f[3] = {o->msgspersample, o->overall_vol_mb, o->msgs_nonaggr};
            char *copy = strdup(val), *save = NULL;
            int k = 0, bad = !copy;
            for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && !bad; t = strtok_r(NULL, ",", &save), k++)
                bad = k >= 3 || to_long(t, &f[k]) || f[k] < 1 || f[k] > INT_MAX / (k == 1 ? 1048576 : 1);
            free(copy);
            if (bad || k == 0)
                return fail("invalid -iter \"%s\", must be n[,overall_vol_MB[,n_nonaggr]]", val);
            o->msgspersample = (int)f[0];
            o->overall_vol_mb = (int)f[1];
            o->msgs_nonaggr = (int)f[2];
        } else if (!strcmp(a, "-iter_policy")) {
            int k;
            for (k = 0; k < 4 && strcasecmp(val, POLICY_NAMES[k]); k++)
                ;
            if (k == 4)
                return fail("invalid -iter_policy \"%s\" (dynamic, off, multiple_np, auto)", val);
            o->policy = (enum policy)k;
        } else if (!strcmp(a, "-time")) {
            if (to_double(val, &o->secs, NULL) || !(o->secs > 0))
                return fail("invalid -time \"%s\", must be seconds > 0", val);
        } else if (!strcmp(a, "-off_cache")) {
            /* cache_MB[,line_bytes]; -1 means the defaults */
            char *end;
            errno = 0;
            double c = strtod(val, &end);
            long line = CACHE_LINE;
            if (errno || end == val || (*end && (*end != ',' || to_long(end + 1, &line))))
                return fail("invalid -off_cache \"%s\", must be cache_MB[,line_bytes]", val);
            if (c < 0)
                c = CACHE_SIZE_MB;
            if (line < 1 || line > 65536)
                return fail("invalid -off_cache line size %ld", line);
            o->off_cache = 1;
            o->cache_mb = c;
            o->cache_line = (int)line;
        } else if (!strcmp(a, "-mem")) {
            /* GB per process for message buffers; "2.3G" as IMB users write it */
            if ((to_double(val, &o->max_mem_gb, "G") && to_double(val, &o->max_mem_gb, "GB")) ||
                !(o->max_mem_gb > 0))
                return fail("invalid -mem \"%s\", must be GB > 0", val);
        } else if (!strcmp(a, "-warm_up")) {
            if (on_off(val, &o->warm_up))
                return fail("invalid -warm_up \"%s\", must be on or off", val);
        } else if (!strcmp(a, "-warmup")) {
            if (to_long(val, &v) || v < 0 || v > INT_MAX)
                return fail("invalid -warmup \"%s\", must be a count >= 0", val);
            o->warmup_iters = v;
        } else if (!strcmp(a, "-sync")) {
            if (on_off(val, &o->sync))
                return fail("invalid -sync \"%s\", must be on or off", val);
        } else if (!strcmp(a, "-root_shift")) {
            if (on_off(val, &o->root_shift))
                return fail("invalid -root_shift \"%s\", must be on or off", val);
        } else if (!strcmp(a, "-zero_size")) {
            if (on_off(val, &o->zero_size))
                return fail("invalid -zero_size \"%s\", must be on or off", val);
        } else {
            return fail("unsupported option \"%s\"", a);
        }
    }
    if (o->nbench == 0)
        for (int k = 0; k < N_KNOWN; k++)
            o->bench[o->nbench++] = &BENCHES[k];
    return PARSE_OK;
}

static void usage(FILE *f)
{
    fprintf(f,
        "probe_coll %d (tunedmpi): IMB-MPI1-compatible collective probe, not Intel MPI Benchmarks\n"
        "Usage: mpirun -np N probe_coll [options] [alltoall] [allgather] [allreduce] [bcast]\n"
        "  (names case-insensitive, also comma-separated; none = all four)\n"
        "  -msglog min:max      sizes 0, 2^min .. 2^max bytes (default %d:%d; max < %d)\n"
        "  -npmin P             run on P, 2P, 4P, ... and all processes (default 2)\n"
        "  -iter n[,vol[,nna]]  at most n repetitions per size (default %d) and at most\n"
        "                       vol MB moved per process per size (default %d): n_size =\n"
        "                       max(1, min(n, vol*2^20 / bytes)); nna accepted, unused\n"
        "  -iter_policy P       dynamic (default; also cut to fit -time, never more than\n"
        "                       the previous size), off (always n), multiple_np, auto\n"
        "                       (multiple_np for bcast, else dynamic)\n"
        "  -time S              seconds per size for the dynamic policy (default %g)\n"
        "  -off_cache C[,L]     cycle through ~2*C MB buffers in L-byte lines (-1: %g,%d)\n"
        "  -mem G               max GB per process for message buffers (default %g)\n"
        "  -warm_up on|off      warm-up before each size: n/10, at least min(10, n) (on)\n"
        "  -warmup N            warm-up of exactly N repetitions per size instead\n"
        "  -sync on|off         MPI_Barrier (untimed) after each repetition (default on)\n"
        "  -root_shift on|off   bcast: move the root by one rank each repetition (off)\n"
        "  -zero_size on|off    include the 0-byte size (default on)\n"
        "Exit: 0 ok, 2 usage error, 3 MPI error.\n",
        PROBE_VERSION, MIN_LOG, MAX_LOG, MAX_INT_LOG, MSGSPERSAMPLE, OVERALL_VOL_MB,
        SECS_PER_SAMPLE, CACHE_SIZE_MB, CACHE_LINE, MAX_MEM_GB);
}

/* ----------------------------------------------------------------- output */

static void line(int fields)
{
    char buf[OW * 8 + 2];
    int n = fields * OW;
    buf[0] = '#';
    memset(buf + 1, '-', (size_t)n - 1);
    buf[n] = '\0';
    printf("%s\n", buf);
}

static void preamble(int argc, char **argv, const opts_t *o)
{
    struct utsname u;
    char date[64] = "";
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0, ver = 0, sub = 0;
    time_t now = time(NULL);
    struct tm tmv;

    if (uname(&u) != 0)
        memset(&u, 0, sizeof u);
    if (localtime_r(&now, &tmv))
        strftime(date, sizeof date, "%a %b %e %H:%M:%S %Y", &tmv);
    CHECK(MPI_Get_version(&ver, &sub));
    CHECK(MPI_Get_library_version(lib, &len));
    lib[strcspn(lib, "\r\n")] = '\0';    /* first line only */

    printf("# tunedmpi-probe %d: IMB-MPI1-compatible output, not Intel MPI Benchmarks\n", PROBE_VERSION);
    line(5);
    printf("#    IMB-MPI1-compatible probe (tunedmpi probe_coll %d), MPI-1 part\n", PROBE_VERSION);
    line(5);
    printf("# Date                  : %s\n", date);
    printf("# Machine               : %s\n", u.machine);
    printf("# System                : %s\n", u.sysname);
    printf("# Release               : %s\n", u.release);
    printf("# Version               : %s\n", u.version);
    printf("# MPI Version           : %d.%d\n", ver, sub);
    printf("# MPI Thread Environment: \n");
    printf("# MPI Library           : %s\n", lib);
    printf("# Probe repetitions     : -iter %d,%d -iter_policy %s -time %g\n",
           o->msgspersample, o->overall_vol_mb, POLICY_NAMES[o->policy], o->secs);
    if (o->warmup_iters >= 0)
        printf("# Probe warm-up         : %ld repetitions per size\n", o->warmup_iters);
    else
        printf("# Probe warm-up         : %s\n", o->warm_up ? "n/10 (at least min(10, n)) repetitions per size" : "off");
    if (o->off_cache)
        printf("# Probe buffers         : -off_cache %g,%d -mem %g -sync %s -root_shift %s -npmin %d\n",
               o->cache_mb, o->cache_line, o->max_mem_gb, o->sync ? "on" : "off",
               o->root_shift ? "on" : "off", o->npmin);
    else
        printf("# Probe buffers         : cache-resident (no -off_cache) -mem %g -sync %s -root_shift %s -npmin %d\n",
               o->max_mem_gb, o->sync ? "on" : "off", o->root_shift ? "on" : "off", o->npmin);
    printf("\n\n# Calling sequence was: \n\n# ");
    for (int i = 0; i < argc; i++)
        printf("%s ", argv[i]);
    printf("\n\n");
    printf("# Minimum message length in bytes:   %ld\n", o->zero_size ? 0L : 1L << o->minlog);
    printf("# Maximum message length in bytes:   %ld\n", 1L << o->maxlog);
    printf("#\n");
    printf("# MPI_Datatype                   :   MPI_BYTE \n");
    printf("# MPI_Datatype for reductions    :   MPI_FLOAT \n");
    printf("# MPI_Op                         :   MPI_SUM  \n");
    printf("# \n# \n\n");
    printf("# List of Benchmarks to run:\n\n");
    for (int b = 0; b < o->nbench; b++)
        printf("# %s\n", o->bench[b]->name);
    fflush(stdout);
}

static void table_header(const bench_t *b, int np, int world)
{
    printf("\n");
    line(5);
    printf("# Benchmarking %s \n", b->name);
    printf("# #processes = %d \n", np);
    if (world > np)
        printf("# ( %d additional process%s waiting in MPI_Barrier)\n", world - np,
               world - np == 1 ? "" : "es");
    line(5);
    printf("%*s%*s%*s%*s%*s\n", OW, "#bytes", OW, "#repetitions", OW, "t_min[usec]",
           OW, "t_max[usec]", OW, "t_avg[usec]");
    fflush(stdout);
}

/* -------------------------------------------------------------- measuring */

typedef struct {
    char *s, *r;            /* buffers */
    size_t s_offs, r_offs;  /* distance between repetition slots (0: one slot) */
    int s_iter, r_iter;     /* number of slots */
    int count;              /* elements per call */
    int rank, np;           /* in the benchmark's communicator (rooted benchmarks) */
    int root_shift;
} bufs_t;

/* IMB's kernel: only the collective call is inside the timed region */
static double kernel(const bench_t *b, const bufs_t *bf, int n, int sync, MPI_Comm comm)
{
    double t = 0.0;
    for (int i = 0; i < N_BARR; i++)
        CHECK(MPI_Barrier(comm));
    int root = 0;           /* IMB starts every call of the kernel at root 0 */
    for (int i = 0; i < n; i++) {
        const char *s = bf->s + (size_t)(i % bf->s_iter) * bf->s_offs;
        char *r = bf->r + (size_t)(i % bf->r_iter) * bf->r_offs;
        if (b->rooted) {
            /* IMB_bcast: the root's send buffer is never overwritten; every rank steps by the
               send-slot distance (the same as the receive one: both buffers are one message) */
            r = (bf->rank == root ? bf->s : bf->r) + (size_t)(i % bf->s_iter) * bf->s_offs;
        }
        t -= MPI_Wtime();
        int rc = b->fn(s, r, bf->count, root, comm);
        t += MPI_Wtime();
        if (rc != MPI_SUCCESS)
            die(b->name, rc);
        if (b->rooted)
            root = (root + bf->root_shift) % bf->np;
        if (sync)
            CHECK(MPI_Barrier(comm));
    }
    return n > 0 ? t / n : 0.0;
}

static double max_over(double t, MPI_Comm comm)
{
    double m;
    CHECK(MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, comm));
    return m;
}

/* -iter_policy dynamic: shrink n so that one size takes about -time seconds */
static int adapt(const bench_t *b, const bufs_t *bf, int selected, int n_prev,
                 const opts_t *o, MPI_Comm comm)
{
    double t = max_over(kernel(b, bf, 1, o->sync, comm), comm);
    int rep = 1, acc_rep, n;
    if (t < 1.0 / MSGSPERSAMPLE)
        rep = MSGSPERSAMPLE;
    else if (t < 1.0)
        rep = (int)(1.0 / t + 0.5);
    CHECK(MPI_Allreduce(&rep, &acc_rep, 1, MPI_INT, MPI_MAX, comm));
    n = selected < acc_rep ? selected : acc_rep;
    if (n > 1)
        t = max_over(kernel(b, bf, n, o->sync, comm), comm);
    double want = 1.0 + o->secs / t;
    int t_sample = (t > 1e-8 && want <= (double)INT_MAX) ? (int)want : selected;
    n = selected;
    if (n_prev < n) n = n_prev;
    if (t_sample < n) n = t_sample;
    CHECK(MPI_Bcast(&n, 1, MPI_INT, 0, comm));
    return n;
}

/* one slot of send data; small exact floats keep the sums finite and normal */
static void fill(char *p, size_t bytes, int unit, int rank)
{
    if (unit == (int)sizeof(float)) {
        float *f = (float *)(void *)p;
        for (size_t i = 0; i < bytes / sizeof(float); i++)
            f[i] = (float)((rank + 1) % 8) + (float)(i % 64) * 0.25f;
    } else {
        for (size_t i = 0; i < bytes; i++)
            p[i] = (char)('a' + (rank + (int)(i % 26)) % 26);
    }
}

static void run_benchmark(const bench_t *b, int np, const opts_t *o, int world)
{
    MPI_Comm comm = MPI_COMM_NULL;
    CHECK(MPI_Comm_split(MPI_COMM_WORLD, world_rank < np ? 0 : MPI_UNDEFINED, world_rank, &comm));
    const int active = comm != MPI_COMM_NULL;
    if (active)
        CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    if (world_rank == 0)
        table_header(b, np, world);

    const long unit = b->unit;
    const long maxmsg = (1L << o->maxlog) / unit * unit;
    const double t_start = MPI_Wtime();
    /* IMB stops a benchmark after max(#sizes - 1, 1) x -time seconds */
    const double budget = (o->maxlog - o->minlog - 1 > 1 ? o->maxlog - o->minlog - 1 : 1) * o->secs;
    int n_prev = o->msgspersample;
    double *all = world_rank == 0 ? xmalloc(sizeof(double) * (size_t)world) : NULL;
    long size = 0;

    for (int iter = 0; size < maxmsg; iter++) {
        if (iter == 0)
            size = 0;
        else if (iter == 1)
            size = ((1L << o->minlog) + unit - 1) / unit * unit;
        else
            size = size * 2 < maxmsg ? size * 2 : maxmsg;
        if (size == 0 && !o->zero_size)
            continue;

        /* repetitions: per-size count bounded by the byte budget (IMB) */
        const long init_size = size > (long)sizeof(float) ? size : (long)sizeof(float);
        long vol = (long)o->overall_vol_mb * 1048576L;
        long n = size > 0 ? (vol / size < o->msgspersample ? vol / size : o->msgspersample) : o->msgspersample;
        if (n < 1)
            n = 1;
        /* IMB_init_buffers_iter: auto means multiple_np for root-based benchmarks, else dynamic */
        const int adapting = o->policy == POL_DYNAMIC || (o->policy == POL_AUTO && !b->rooted);
        if (o->policy == POL_OFF) {
            n = o->msgspersample;
        } else if (o->policy == POL_MULTIPLE_NP || (o->policy == POL_AUTO && b->rooted)) {
            double mx = (double)(1L << o->maxlog);
            long tmp = (long)(o->msgspersample * mx / ((double)np * (double)init_size + mx) + 0.5);
            n = tmp - tmp % np > np ? tmp - tmp % np : np;
        }

        const long s_len = init_size * (b->s_all ? np : 1);
        const long r_len = init_size * (b->r_all ? np : 1);
        bufs_t bf = {NULL, NULL, 0, 0, 1, 1, (int)(size / unit), 0, np, o->root_shift};
        if (active)
            CHECK(MPI_Comm_rank(comm, &bf.rank));
        size_t s_alloc = (size_t)s_len, r_alloc = (size_t)r_len;
        if (o->off_cache && o->cache_mb > 0) {
            /* slots one cache line apart, about 2 x cache size per buffer */
            size_t cls = (size_t)o->cache_line, span = (size_t)(2.0 * o->cache_mb * MB);
            bf.s_offs = ((size_t)s_len + cls - 1) / cls * cls + cls;
            bf.r_offs = ((size_t)r_len + cls - 1) / cls * cls + cls;
            size_t si = (span + bf.s_offs - 1) / bf.s_offs, ri = (span + bf.r_offs - 1) / bf.r_offs;
            bf.s_iter = (int)((size_t)n < si ? (size_t)n : si);
            bf.r_iter = (int)((size_t)n < ri ? (size_t)n : ri);
            if (bf.s_iter < 1) bf.s_iter = 1;
            if (bf.r_iter < 1) bf.r_iter = 1;
            if ((size_t)bf.s_iter * bf.s_offs > s_alloc) s_alloc = (size_t)bf.s_iter * bf.s_offs;
            if ((size_t)bf.r_iter * bf.r_offs > r_alloc) r_alloc = (size_t)bf.r_iter * bf.r_offs;
        }
        const double used_gb = (double)(s_alloc + r_alloc) / GB;

        enum failure why = OK_SAMPLE;
        if (s_len > INT_MAX || r_len > INT_MAX)
            why = FAIL_INT_OVERFLOW;
        else if (used_gb > o->max_mem_gb)
            why = FAIL_MEMORY;

        int reps = (int)n;
        if (why == OK_SAMPLE && active) {
            /* fresh MPI_Alloc_mem buffers for each size, every slot written before any timing
               (IMB allocates them per size, fills them, and frees them after the size) */
            bf.s = xmalloc_mpi(s_alloc);
            bf.r = xmalloc_mpi(r_alloc);
            fill(bf.s, (size_t)s_len, b->unit, world_rank);
            for (int k = 1; k < bf.s_iter; k++)
                memcpy(bf.s + (size_t)k * bf.s_offs, bf.s, (size_t)s_len);
            memset(bf.r, 0, r_alloc);
            if (adapting)
                reps = adapt(b, &bf, reps, n_prev, o, comm);
            else
                kernel(b, &bf, reps, o->sync, comm);   /* IMB runs it once untimed instead */
            n_prev = reps;   /* later (larger) sizes never use more */
        }

        int late = 0, any_late = 0;
        if (why == OK_SAMPLE && active)
            late = MPI_Wtime() - t_start >= budget;
        CHECK(MPI_Allreduce(&late, &any_late, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
        if (why == OK_SAMPLE && any_late)
            why = FAIL_TIME_OUT;

        double t = -1.0;   /* idle ranks and failed sizes report nothing */
        if (why == OK_SAMPLE && active) {
            long w = o->warmup_iters;
            if (w < 0) {
                w = o->warm_up ? reps / WARMUP_PERCENT : 0;
                if (o->warm_up && w < MIN_WARMUP_ITERS)
                    w = reps < MIN_WARMUP_ITERS ? reps : MIN_WARMUP_ITERS;
            }
            if (w > 0)
                kernel(b, &bf, (int)w, o->sync, comm);
            t = kernel(b, &bf, reps, o->sync, comm) * 1e6;
        }

        /* idle processes wait here, as in IMB */
        CHECK(MPI_Barrier(MPI_COMM_WORLD));
        CHECK(MPI_Gather(&t, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (world_rank == 0) {
            if (why == FAIL_MEMORY) {
                printf("%*ld out-of-mem.; needed X=%8.3f GB; use flag \"-mem X\"\n", OW, size,
                       (1000.0 * used_gb + 1.0) / 1000.0);
            } else if (why == FAIL_INT_OVERFLOW) {
                printf("%*ld int-overflow; The production rank*size caused int overflow; Stopping benchmark\n",
                       OW, size);
            } else if (why == FAIL_TIME_OUT) {
                printf("%*ld time-out.; Time limit (secs_per_sample * msg_sizes_list_len) is over; "
                       "use \"-time X\" to increase time limit.\n", OW, size);
            } else {
                double mn = DBL_MAX, mx = 0.0, sum = 0.0;
                int cnt = 0;
                for (int r = 0; r < np; r++) {
                    if (all[r] < 0)
                        continue;
                    mn = all[r] < mn ? all[r] : mn;
                    mx = all[r] > mx ? all[r] : mx;
                    sum += all[r];
                    cnt++;
                }
                printf("%*ld%*d%*.2f%*.2f%*.2f\n", OW, size, OW, reps, OW, mn, OW, mx, OW,
                       cnt ? sum / cnt : 0.0);
            }
            fflush(stdout);
        }
        if (bf.s)
            CHECK(MPI_Free_mem(bf.s));
        if (bf.r)
            CHECK(MPI_Free_mem(bf.r));
        if (why == FAIL_TIME_OUT)
            break;
    }
    free(all);
    if (active)
        CHECK(MPI_Comm_free(&comm));
}

int main(int argc, char **argv)
{
    int world = 0;
    opts_t o;

    CHECK(MPI_Init(&argc, &argv));
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));

    int pr = parse(argc, argv, &o);
    if (pr != PARSE_OK) {
        if (world_rank == 0) {
            if (pr == PARSE_HELP) {
                usage(stdout);
            } else {
                fprintf(stderr, "probe_coll: ERROR: %s\n", errbuf);
                fprintf(stderr, "Try \"probe_coll -help\" for usage information\n");
            }
        }
        MPI_Finalize();
        return pr == PARSE_HELP ? 0 : 2;
    }

    if (world_rank == 0)
        preamble(argc, argv, &o);
    for (int b = 0; b < o.nbench; b++) {
        /* process counts npmin, 2*npmin, ... and finally all (IMB) */
        int np = o.npmin < world ? o.npmin : world;
        for (;;) {
            run_benchmark(o.bench[b], np, &o, world);
            if (np >= world)
                break;
            np = np * 2 < world ? np * 2 : world;
        }
    }
    if (world_rank == 0) {
        printf("\n\n# All processes entering MPI_Finalize\n\n");
        fflush(stdout);
    }
    CHECK(MPI_Finalize());
    return 0;
}
