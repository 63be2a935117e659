/*
 * probe_osc.c - OSU-style one-sided (MPI RMA) latency and bandwidth probe
 * for machines without OSU Micro-Benchmarks (tunedmpi validate/probes,
 * docs/design.md, "Benchmarks and probes").
 *
 * Output is OSU Micro-Benchmarks 7.4's format, header lines included, so one
 * parser reads both; the first line says that this is a probe.
 * Methodology (same as OSU 7.4, written independently):
 *   - exactly 2 ranks; rank 0 is the origin, rank 1 the target (the
 *     fence and pscw latency modes ping-pong: both ranks issue one
 *     operation per iteration and the round trip is halved);
 *   - a fresh window per message size (MPI_Win_allocate by default);
 *   - origin buffers allocated page-aligned for each size and filled before
 *     the window is made, freed with it (OSU's allocate_memory_one_sided);
 *   - `skip` untimed warm-up iterations, then `iters` timed ones; the result
 *     is (t_end - t_start) / iters with t_start read at the first timed
 *     iteration and t_end after the last; above 8192 bytes the large
 *     counts apply (latency 1000/10, bandwidth 20/2 instead of 10000/100
 *     and 100/10); -i / -x set both;
 *   - like OSU 7.4, the origin also reads MPI_Wtime at the start and end of
 *     every timed iteration (OSU keeps these for its -t/-G statistics and
 *     reads them whether or not those are asked for; pscw: after
 *     MPI_Win_start), so those two clock reads are part of every latency,
 *     as in OSU's numbers (about 0.05 us of a 0.07 us put on a 2-core VM);
 *     without them the small-size latencies print as 0.02-0.05 and the
 *     0.01 rounding alone moves them by 20-50 % between runs;
 *   - latency: one operation + synchronisation per iteration, us per
 *     iteration; bandwidth: a window of 64 (-W) back-to-back operations to
 *     consecutive target offsets per synchronisation, MB/s = 1e-6 bytes/s;
 *   - acc: MPI_Accumulate with MPI_SUM; get_acc: MPI_Get_accumulate with
 *     MPI_SUM; fop: MPI_Fetch_and_op MPI_SUM on one element; cas:
 *     MPI_Compare_and_swap on one element (fop/cas print one row whose size
 *     is the element size, 1 byte for the default MPI_CHAR, as OSU 7.4).
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PROBE_VERSION 2
#define OSU_VERSION "7.4"
#define FIELD_WIDTH 18          /* OSU configure.ac value */
#define LARGE_MESSAGE_SIZE 8192
#define DEFAULT_MAX_SIZE (1UL << 22)
#define LIMIT_MAX_SIZE (1UL << 30)
#define DEFAULT_WINDOW 64

typedef enum { OP_PUT, OP_GET, OP_ACC, OP_GET_ACC, OP_FOP, OP_CAS } op_t;

typedef struct {
    const char *name;     /* command-line name (also with an "osu_" prefix) */
    const char *title;    /* OSU's header, between "# OSU " and " v7.4" */
    op_t op;
    int bw;               /* window of -W operations per sync, MB/s */
    int atomic;           /* one element, one row */
    int typed;            /* accepts -T */
    int dtype_line;       /* OSU prints "# Datatype:" (get_acc does not) */
    int excl_passive;     /* exclusive lock in lock/flush modes (get_acc) */
    int excl_lock;        /* exclusive lock in lock mode (cas) */
} bench_t;

static const bench_t BENCHES[] = {
    {"put_latency", "MPI_Put Latency Test", OP_PUT, 0, 0, 0, 1, 0, 0},
    {"get_latency", "MPI_Get latency Test", OP_GET, 0, 0, 0, 1, 0, 0},
    {"acc_latency", "MPI_Accumulate latency Test", OP_ACC, 0, 0, 1, 1, 0, 0},
    {"get_acc_latency", "MPI_Get_accumulate latency Test", OP_GET_ACC, 0, 0, 0, 0, 1, 0},
    {"fop_latency", "MPI_Fetch_and_op latency Test", OP_FOP, 0, 1, 1, 1, 0, 0},
    {"cas_latency", "MPI_Compare_and_swap latency Test", OP_CAS, 0, 1, 1, 1, 0, 1},
    {"put_bw", "MPI_Put Bandwidth Test", OP_PUT, 1, 0, 0, 1, 0, 0},
    {"get_bw", "MPI_Get Bandwidth Test", OP_GET, 1, 0, 0, 1, 0, 0},
};
#define N_BENCH ((int)(sizeof(BENCHES) / sizeof(BENCHES[0])))

/* index order = OSU's win_info[] / sync_info[] */
typedef enum { WIN_CREATE, WIN_ALLOCATE, WIN_DYNAMIC } win_t;
static const char *WIN_OPT[] = {"create", "allocate", "dynamic"};
static const char *WIN_INFO[] = {"MPI_Win_create", "MPI_Win_allocate", "MPI_Win_create_dynamic"};

typedef enum { SYNC_LOCK, SYNC_PSCW, SYNC_FENCE, SYNC_FLUSH, SYNC_FLUSH_LOCAL, SYNC_LOCK_ALL } sync_t;
static const char *SYNC_OPT[] = {"lock", "pscw", "fence", "flush", "flush_local", "lock_all"};
static const char *SYNC_INFO[] = {
    "MPI_Win_lock/unlock", "MPI_Win_post/start/complete/wait", "MPI_Win_fence",
    "MPI_Win_flush", "MPI_Win_flush_local", "MPI_Win_lock_all/unlock_all",
};

typedef struct {
    const bench_t *bench;
    win_t win;
    sync_t sync;
    size_t min_size, max_size;
    int iters, iters_large, skip, skip_large;
    int window;
    MPI_Datatype dtype;
} opts_t;

/* everything one measured size needs */
typedef struct {
    const bench_t *b;
    sync_t sync;
    int peer;
    MPI_Group peer_group;
    MPI_Win win;
    char *win_mem;          /* create/dynamic: our memory behind the window */
    int attached;           /* dynamic: win_mem is attached */
    MPI_Aint disp;          /* target displacement of offset 0 */
    char *origin, *result, *compare;
    MPI_Datatype dtype;
    int count;              /* elements per operation */
    size_t bytes;           /* bytes per operation */
    int ops;                /* operations per synchronisation */
    int pingpong;           /* fence/pscw latency: both ranks issue */
    int lock_type;
} ctx_t;

static int rank;

#define PROBE_NAME "probe_osc"
#define PROBE_RANK rank
#include "probe_common.h"

static int to_count(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int pick(const char *val, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(val, names[i]))
            return i;
    return -1;
}

static int set_bench(opts_t *o, const char *name)
{
    const char *n = strncasecmp(name, "osu_", 4) ? name : name + 4;
    for (int i = 0; i < N_BENCH; i++) {
        if (strcasecmp(n, BENCHES[i].name))
            continue;
        if (o->bench && o->bench != &BENCHES[i])
            return fail("two benchmarks given (%s and %s); run one per call", o->bench->name, name);
        o->bench = &BENCHES[i];
        return 0;
    }
    return fail("unknown benchmark \"%s\" (put_latency, get_latency, acc_latency, get_acc_latency, "
                "fop_latency, cas_latency, put_bw, get_bw)", name);
}

/* OSU's -m: MAX, MIN:MAX or MIN: */
static int set_sizes(opts_t *o, const char *val)
{
    const char *colon = strchr(val, ':');
    long lo = (long)o->min_size, hi = (long)o->max_size;
    if (!colon) {
        if (to_count(val, 1, (long)LIMIT_MAX_SIZE, &hi))
            return -1;
    } else {
        char lo_s[32];
        size_t n = (size_t)(colon - val);
        if (n == 0 || n >= sizeof lo_s)
            return -1;
        memcpy(lo_s, val, n);
        lo_s[n] = '\0';
        if (to_count(lo_s, 1, (long)LIMIT_MAX_SIZE, &lo))
            return -1;
        if (colon[1] && to_count(colon + 1, 1, (long)LIMIT_MAX_SIZE, &hi))
            return -1;
    }
    if (lo > hi)
        return -1;
    o->min_size = (size_t)lo;
    o->max_size = (size_t)hi;
    return 0;
}

enum { PARSE_OK = 0, PARSE_HELP = 1, PARSE_VERSION = 2, PARSE_ERROR = -1 };

static int parse(int argc, char **argv, opts_t *o)
{
    long v;
    int iters_set = 0, skip_set = 0, window_set = 0, type_set = 0;
    const char *type_name = NULL;

    *o = (opts_t){.win = WIN_ALLOCATE, .sync = SYNC_FLUSH, .min_size = 1,
                  .max_size = DEFAULT_MAX_SIZE, .window = DEFAULT_WINDOW, .dtype = MPI_CHAR};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            if (set_bench(o, a))
                return PARSE_ERROR;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return PARSE_HELP;
        if (!strcmp(a, "-v") || !strcmp(a, "--version"))
            return PARSE_VERSION;

        /* short options take "-m 1:8" or "-m1:8", as getopt does */
        char opt = 0;
        const char *val = NULL;
        static const struct { const char *lng; char opt; } longs[] = {
            {"--benchmark", 'b'}, {"--win-options", 'w'}, {"--sync-option", 's'},
            {"--message-size", 'm'}, {"--iterations", 'i'}, {"--warmup", 'x'},
            {"--window-size", 'W'}, {"--type", 'T'},
        };
        if (a[1] == '-') {
            for (size_t k = 0; k < sizeof longs / sizeof longs[0]; k++)
                if (!strcmp(a, longs[k].lng))
                    opt = longs[k].opt;
        } else if (a[1] && strchr("bwsmixWT", a[1])) {
            opt = a[1];
            if (a[2])
                val = a + 2;
        }
        if (!opt)
            return fail("invalid option [%s]", a);
        if (!val) {
            if (i + 1 >= argc)
                return fail("option [%s] needs an argument", a);
            val = argv[++i];
        }

        int k;
        switch (opt) {
        case 'b':
            if (set_bench(o, val))
                return PARSE_ERROR;
            break;
        case 'w':
            if ((k = pick(val, WIN_OPT, 3)) < 0)
                return fail("invalid option or argument [-w %s] (create, allocate, dynamic)", val);
            o->win = (win_t)k;
            break;
        case 's':
            if ((k = pick(val, SYNC_OPT, 6)) < 0)
                return fail("invalid option or argument [-s %s] (lock, flush, flush_local, lock_all, "
                            "pscw, fence)", val);
            o->sync = (sync_t)k;
            break;
        case 'm':
            if (set_sizes(o, val))
                return fail("invalid option or argument [-m %s] (MAX, MIN:MAX or MIN:, 1 <= MIN <= MAX "
                            "<= %lu)", val, LIMIT_MAX_SIZE);
            break;
        case 'i':
            if (to_count(val, 1, 1000000000L, &v))
                return fail("invalid option or argument [-i %s] (iterations >= 1)", val);
            o->iters = o->iters_large = (int)v;
            iters_set = 1;
            break;
        case 'x':
            if (to_count(val, 0, 1000000000L, &v))
                return fail("invalid option or argument [-x %s] (warm-up iterations >= 0)", val);
            o->skip = o->skip_large = (int)v;
            skip_set = 1;
            break;
        case 'W':
            if (to_count(val, 1, 1 << 20, &v))
                return fail("invalid option or argument [-W %s] (window size >= 1)", val);
            o->window = (int)v;
            window_set = 1;
            break;
        case 'T':
            type_name = val;
            type_set = 1;
            break;
        }
    }
    if (!o->bench)
        return fail("no benchmark given (first argument or -b NAME)");
    if (window_set && !o->bench->bw)
        return fail("-W applies to the bandwidth tests only");
    if (type_set) {
        if (!o->bench->typed)
            return fail("-T applies to acc_latency, fop_latency and cas_latency only");
        if (!strcasecmp(type_name, "mpi_char"))
            o->dtype = MPI_CHAR;
        else if (!strcasecmp(type_name, "mpi_int"))
            o->dtype = MPI_INT;
        else if (!strcasecmp(type_name, "mpi_float") && o->bench->op != OP_CAS)
            o->dtype = MPI_FLOAT;
        else
            return fail("invalid option or argument [-T %s] (mpi_char, mpi_int%s; one type per run)",
                        type_name, o->bench->op == OP_CAS ? "" : ", mpi_float");
    }
    if (!iters_set) {
        o->iters = o->bench->bw ? 100 : 10000;
        o->iters_large = o->bench->bw ? 20 : 1000;
    }
    if (!skip_set) {
        o->skip = o->bench->bw ? 10 : 100;
        o->skip_large = o->bench->bw ? 2 : 10;
    }
    return PARSE_OK;
}

static void usage(FILE *f)
{
    fprintf(f,
        "probe_osc %d (tunedmpi): OSU-compatible one-sided probe, not OSU Micro-Benchmarks\n"
        "Usage: mpirun -np 2 probe_osc BENCHMARK [options]   (or -b BENCHMARK)\n"
        "  BENCHMARK  put_latency get_latency acc_latency get_acc_latency fop_latency\n"
        "             cas_latency put_bw get_bw  (an osu_ prefix is accepted)\n"
        "  -w create|allocate|dynamic      window creation (default allocate)\n"
        "  -s lock|flush|flush_local|lock_all|pscw|fence   synchronisation (default flush)\n"
        "  -m [MIN:]MAX | MIN:             message sizes in bytes (default 1:%lu)\n"
        "  -i ITER    timed iterations (default latency 10000, > %d B 1000; bw 100, > %d B 20)\n"
        "  -x ITER    warm-up iterations (default latency 100, > %d B 10; bw 10, > %d B 2)\n"
        "  -W SIZE    bw: operations per synchronisation (default %d)\n"
        "  -T TYPE    acc/fop/cas: mpi_char (default), mpi_int, mpi_float (not cas)\n"
        "  -v         version, -h this help\n"
        "Exit: 0 ok, 2 usage error or not exactly 2 processes, 3 MPI error.\n",
        PROBE_VERSION, DEFAULT_MAX_SIZE, LARGE_MESSAGE_SIZE, LARGE_MESSAGE_SIZE,
        LARGE_MESSAGE_SIZE, LARGE_MESSAGE_SIZE, DEFAULT_WINDOW);
}

/* ------------------------------------------------------------------- RMA */

static void fill(char *p, size_t bytes, MPI_Datatype dt)
{
    /* value 1 in every element: sums stay small for every type */
    if (dt == MPI_FLOAT) {
        float one = 1.0f;
        for (size_t i = 0; i + sizeof one <= bytes; i += sizeof one)
            memcpy(p + i, &one, sizeof one);
    } else if (dt == MPI_INT) {
        int one = 1;
        for (size_t i = 0; i + sizeof one <= bytes; i += sizeof one)
            memcpy(p + i, &one, sizeof one);
    } else {
        memset(p, 1, bytes);
    }
}

static void win_open(ctx_t *c, win_t kind, size_t bytes)
{
    void *base = NULL;
    c->win_mem = NULL;
    c->attached = 0;
    c->disp = 0;
    switch (kind) {
    case WIN_ALLOCATE:
        CHECK(MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &c->win));
        /* local stores before any epoch are fine: no RMA can target it yet */
        fill(base, bytes, c->dtype);
        break;
    case WIN_CREATE:
        c->win_mem = xmalloc_pages(bytes);
        fill(c->win_mem, bytes, c->dtype);
        CHECK(MPI_Win_create(c->win_mem, (MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &c->win));
        break;
    case WIN_DYNAMIC: {
        MPI_Aint mine;
        c->win_mem = xmalloc_pages(bytes);
        fill(c->win_mem, bytes, c->dtype);
        CHECK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &c->win));
        CHECK(MPI_Win_attach(c->win, c->win_mem, (MPI_Aint)bytes));
        c->attached = 1;
        CHECK(MPI_Get_address(c->win_mem, &mine));
        /* dynamic windows are addressed by the target's absolute address */
        CHECK(MPI_Sendrecv(&mine, 1, MPI_AINT, c->peer, 0, &c->disp, 1, MPI_AINT, c->peer, 0,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        break;
    }
    }
    CHECK(MPI_Win_set_errhandler(c->win, MPI_ERRORS_RETURN));
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

static void win_close(ctx_t *c)
{
    if (c->attached)
        CHECK(MPI_Win_detach(c->win, c->win_mem));
    CHECK(MPI_Win_free(&c->win));
    free(c->win_mem);
    c->win_mem = NULL;
}

/* the one operation all benchmarks differ in; j-th of a bandwidth window */
static void issue(const ctx_t *c, int j)
{
    const size_t off = (size_t)j * c->bytes;
    const MPI_Aint td = c->disp + (MPI_Aint)off;
    int rc = MPI_SUCCESS;
    switch (c->b->op) {
    case OP_PUT:
        rc = MPI_Put(c->origin + off, c->count, c->dtype, c->peer, td, c->count, c->dtype, c->win);
        break;
    case OP_GET:
        rc = MPI_Get(c->origin + off, c->count, c->dtype, c->peer, td, c->count, c->dtype, c->win);
        break;
    case OP_ACC:
        rc = MPI_Accumulate(c->origin + off, c->count, c->dtype, c->peer, td, c->count, c->dtype,
                            MPI_SUM, c->win);
        break;
    case OP_GET_ACC:
        rc = MPI_Get_accumulate(c->origin + off, c->count, c->dtype, c->result + off, c->count,
                                c->dtype, c->peer, td, c->count, c->dtype, MPI_SUM, c->win);
        break;
    case OP_FOP:
        rc = MPI_Fetch_and_op(c->origin, c->result, c->dtype, c->peer, td, MPI_SUM, c->win);
        break;
    case OP_CAS:
        rc = MPI_Compare_and_swap(c->origin, c->compare, c->result, c->dtype, c->peer, td, c->win);
        break;
    }
    if (rc != MPI_SUCCESS)
        die(c->b->title, rc);
}

static void issue_all(const ctx_t *c)
{
    for (int j = 0; j < c->ops; j++)
        issue(c, j);
}

/* The origin's clock reads, at the places OSU 7.4 makes them (see the top of this file). */
typedef struct {
    int timed;        /* this iteration is timed on this rank (the origin, after the warm-up) */
    int first;        /* the first timed iteration: t_start is read here */
    double t_start;   /* OSU's t_start */
    double t_iter[2]; /* OSU's t_graph_start and t_graph_end: read, as OSU reads them, not printed */
} clock_reads_t;

static void iteration_begins(clock_reads_t *k)
{
    if (!k->timed)
        return;
    if (k->first)
        k->t_start = MPI_Wtime();
    k->t_iter[0] = MPI_Wtime();
}

static void iteration_ends(clock_reads_t *k)
{
    if (k->timed)
        k->t_iter[1] = MPI_Wtime();
}

/* one iteration; passive modes: only rank 0 takes part */
static void epoch(const ctx_t *c, clock_reads_t *k)
{
    const int origin = rank == 0;
    if (c->sync != SYNC_PSCW)
        iteration_begins(k);
    switch (c->sync) {
    case SYNC_LOCK:
        CHECK(MPI_Win_lock(c->lock_type, c->peer, 0, c->win));
        issue_all(c);
        CHECK(MPI_Win_unlock(c->peer, c->win));
        break;
    case SYNC_LOCK_ALL:
        CHECK(MPI_Win_lock_all(0, c->win));
        issue_all(c);
        CHECK(MPI_Win_unlock_all(c->win));
        break;
    case SYNC_FLUSH:
        issue_all(c);
        CHECK(MPI_Win_flush(c->peer, c->win));
        break;
    case SYNC_FLUSH_LOCAL:
        issue_all(c);
        CHECK(MPI_Win_flush_local(c->peer, c->win));
        break;
    case SYNC_FENCE:
        CHECK(MPI_Win_fence(0, c->win));
        if (origin || c->pingpong) {
            if (!origin)        /* rank 1 answers in the second epoch */
                CHECK(MPI_Win_fence(0, c->win));
            issue_all(c);
            CHECK(MPI_Win_fence(0, c->win));
            if (origin && c->pingpong)
                CHECK(MPI_Win_fence(0, c->win));
        } else {
            CHECK(MPI_Win_fence(0, c->win));
        }
        break;
    case SYNC_PSCW:
        if (origin) {
            CHECK(MPI_Win_start(c->peer_group, 0, c->win));
            iteration_begins(k);     /* OSU starts its clocks once the access epoch is open */
            issue_all(c);
            CHECK(MPI_Win_complete(c->win));
        }
        if (!origin || c->pingpong) {
            CHECK(MPI_Win_post(c->peer_group, 0, c->win));
            CHECK(MPI_Win_wait(c->win));
        }
        if (!origin && c->pingpong) {
            CHECK(MPI_Win_start(c->peer_group, 0, c->win));
            issue_all(c);
            CHECK(MPI_Win_complete(c->win));
        }
        break;
    }
    iteration_ends(k);
}

/* the single timing loop: seconds for `iters` iterations after `skip` (on rank 0, the origin) */
static double measure(const ctx_t *c, int skip, int iters)
{
    const int passive = c->sync == SYNC_LOCK || c->sync == SYNC_LOCK_ALL ||
                        c->sync == SYNC_FLUSH || c->sync == SYNC_FLUSH_LOCAL;
    const int held = c->sync == SYNC_FLUSH || c->sync == SYNC_FLUSH_LOCAL;
    double t = 0.0;

    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0 || !passive) {
        clock_reads_t k = {0, 0, 0.0, {0.0, 0.0}};
        if (held)       /* flush modes: one lock around all iterations */
            CHECK(MPI_Win_lock(c->lock_type, c->peer, 0, c->win));
        for (int i = 0; i < skip + iters; i++) {
            k.timed = rank == 0 && i >= skip;
            k.first = i == skip;
            epoch(c, &k);
        }
        t = rank == 0 ? MPI_Wtime() - k.t_start : 0.0;
        if (held)
            CHECK(MPI_Win_unlock(c->peer, c->win));
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD));
    return t;
}

static void header(const opts_t *o)
{
    const bench_t *b = o->bench;
    char tname[MPI_MAX_OBJECT_NAME];
    int len = 0;

    CHECK(MPI_Type_get_name(o->dtype, tname, &len));
    printf("# tunedmpi-probe %d: OSU-compatible output, not OSU Micro-Benchmarks\n", PROBE_VERSION);
    /* self-describing run: everything that shaped the numbers */
    printf("# tunedmpi-probe settings: %s -w %s -s %s", b->name, WIN_OPT[o->win], SYNC_OPT[o->sync]);
    if (b->atomic) {
        printf(" -i %d -x %d (one %s element)", o->iters, o->skip, tname);
    } else {
        printf(" -m %zu:%zu -i %d -x %d", o->min_size, o->max_size, o->iters, o->skip);
        if (o->iters_large != o->iters || o->skip_large != o->skip)
            printf(" (-i %d -x %d above %d bytes)", o->iters_large, o->skip_large, LARGE_MESSAGE_SIZE);
    }
    if (b->bw)
        printf(" -W %d", o->window);
    if (b->typed && !b->atomic)
        printf(" (%s elements)", tname);
    printf("\n");
    printf("# OSU %s v%s\n", b->title, OSU_VERSION);
    printf("# Window creation: %s\n", WIN_INFO[o->win]);
    printf("# Synchronization: %s\n", SYNC_INFO[o->sync]);
    if (b->dtype_line)
        printf("# Datatype: %s.\n", tname);
    printf("%-*s%*s\n", 10, "# Size", FIELD_WIDTH, b->bw ? "Bandwidth (MB/s)" : "Latency (us)");
    fflush(stdout);
}

static void run(const opts_t *o)
{
    const bench_t *b = o->bench;
    int tsize;
    ctx_t c = {0};

    CHECK(MPI_Type_size(o->dtype, &tsize));
    c.b = b;
    c.sync = o->sync;
    c.peer = 1 - rank;
    c.dtype = o->dtype;
    c.ops = b->bw ? o->window : 1;
    c.pingpong = !b->bw && (o->sync == SYNC_FENCE || o->sync == SYNC_PSCW);
    if ((b->excl_passive && o->sync != SYNC_LOCK_ALL) || (b->excl_lock && o->sync == SYNC_LOCK))
        c.lock_type = MPI_LOCK_EXCLUSIVE;
    else
        c.lock_type = MPI_LOCK_SHARED;
    {
        MPI_Group world_group;
        CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
        CHECK(MPI_Group_incl(world_group, 1, &c.peer, &c.peer_group));
        CHECK(MPI_Group_free(&world_group));
    }

    /* atomics: one element; others: the size sweep */
    const size_t first = b->atomic ? (size_t)tsize : o->min_size;
    const size_t last = b->atomic ? (size_t)tsize : o->max_size;

    for (size_t size = first; size <= last; size *= 2) {
        const int large = size > LARGE_MESSAGE_SIZE;
        const int iters = large ? o->iters_large : o->iters;
        const int skip = large ? o->skip_large : o->skip;
        if (size % (size_t)tsize)
            continue;       /* not a whole number of elements */
        c.bytes = size;
        c.count = (int)(size / (size_t)tsize);

        /* fresh page-aligned origin buffers for each size, written before the window is made
           (OSU 7.4 allocates and fills them per size, and frees them with the window) */
        const size_t span = size * (size_t)c.ops;
        const size_t rspan = (b->op == OP_GET_ACC || b->atomic) ? span : 1;  /* fetched data */
        c.origin = xmalloc_pages(span);
        c.result = xmalloc_pages(rspan);
        c.compare = xmalloc_pages((size_t)tsize);
        fill(c.origin, span, o->dtype);
        memset(c.result, 0, rspan);
        /* unlike the window's contents (fill): every compare-and-swap compares and leaves the
           target alone, as OSU's, whose compare value 'a' never matches its window */
        memset(c.compare, 0, (size_t)tsize);

        win_open(&c, o->win, span);
        const double t = measure(&c, skip, iters);
        win_close(&c);
        free(c.origin);
        free(c.result);
        free(c.compare);

        if (rank == 0) {
            double v = b->bw ? (double)size / 1e6 * iters * c.ops / t
                             : t * 1e6 / iters * (c.pingpong ? 0.5 : 1.0);
            printf("%-*zu%*.*f\n", 10, size, FIELD_WIDTH, 2, v);
            fflush(stdout);
        }
        if (size > last / 2)
            break;          /* no overflow past the last size */
    }
    CHECK(MPI_Group_free(&c.peer_group));
}

int main(int argc, char **argv)
{
    int nprocs = 0;
    opts_t o;

    CHECK(MPI_Init(&argc, &argv));
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK(MPI_Comm_size(MPI_COMM_WORLD, &nprocs));

    int pr = parse(argc, argv, &o);
    if (pr != PARSE_OK) {
        if (rank == 0) {
            if (pr == PARSE_HELP)
                usage(stdout);
            else if (pr == PARSE_VERSION)
                printf("# tunedmpi probe_osc %d (OSU %s-compatible output)\n", PROBE_VERSION, OSU_VERSION);
            else
                fprintf(stderr, "probe_osc: ERROR: %s\nTry \"probe_osc -h\" for usage information\n", errbuf);
        }
        MPI_Finalize();
        return pr == PARSE_ERROR ? 2 : 0;
    }
    if (nprocs != 2) {
        if (rank == 0)
            fprintf(stderr, "This test requires exactly two processes (probe_osc %s was started on %d)\n",
                    o.bench->name, nprocs);
        MPI_Finalize();
        return 2;
    }

    if (rank == 0)
        header(&o);
    run(&o);
    CHECK(MPI_Finalize());
    return 0;
}
