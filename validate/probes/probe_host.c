/* probe_host: the host's state just before and after a benchmark run, in ~0.1 s.
 *
 * Two threads, pinned to the first two CPUs this process may use (the cores the ranks of a
 * one-node job run on), bounce one cache line and time the round trip. On the 2-vCPU machines
 * of this project that round trip is ~100 ns in some spells of seconds to minutes and ~320 ns
 * in others, and a benchmark run that meets the slow spell runs latency-bound sizes 2-3x slower
 * under either module (results-archive/notes/2026-11-23-host-slow-state.md). validate and sweep
 * run this before and after every run and record the figure, so runs can be compared in like
 * states (docs/design.md, "Statistics").
 *
 * Usage: probe_host [milliseconds]   (default 100)
 * Output, one line:
 *   # tunedmpi-host-probe round_trip_ns=<median> min=<..> max=<..> blocks=<n> cpus=<a>,<b>
 * or, with fewer than two CPUs to pin to:
 *   # tunedmpi-host-probe unavailable: <why>
 * Built by the same mpicc as the other probes (it uses no MPI).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUND_TRIPS_PER_BLOCK 1000
#define MAX_BLOCKS 100000

static volatile long line[16] __attribute__((aligned(64)));   /* the bounced value, alone in its cache line */
static volatile int stop;
static int cpu_b;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *pong(void *unused) {
    (void)unused;
    pin(cpu_b);
    long v = 1;
    while (!stop) {
        while (line[0] != v && !stop)
            ;
        line[0] = v + 1;
        v += 2;
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 100.0;
    if (!(ms > 0 && ms <= 10000)) {
        fprintf(stderr, "probe_host: milliseconds must be in (0, 10000], not %s\n", argv[1]);
        return 2;
    }
    cpu_set_t mask;
    int cpus[2], found = 0;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
        printf("# tunedmpi-host-probe unavailable: sched_getaffinity failed\n");
        return 0;
    }
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
        if (CPU_ISSET(c, &mask))
            cpus[found++] = c;
    if (found < 2) {
        printf("# tunedmpi-host-probe unavailable: this process may use one CPU only\n");
        return 0;
    }
    cpu_b = cpus[1];
    if (pin(cpus[0]) != 0) {
        printf("# tunedmpi-host-probe unavailable: cannot pin to CPU %d\n", cpus[0]);
        return 0;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, pong, NULL) != 0) {
        printf("# tunedmpi-host-probe unavailable: cannot start a thread\n");
        return 0;
    }
    static double block[MAX_BLOCKS];
    int n = 0;
    long v = 0;
    double start = now(), t0 = start;
    while (n < MAX_BLOCKS) {
        for (int i = 0; i < ROUND_TRIPS_PER_BLOCK; i++) {
            line[0] = v + 1;
            while (line[0] != v + 2)
                ;
            v += 2;
        }
        double t = now();
        block[n++] = (t - t0) / ROUND_TRIPS_PER_BLOCK * 1e9;
        t0 = t;
        if ((t - start) * 1e3 >= ms)
            break;
    }
    stop = 1;
    line[0] = -1;
    pthread_join(th, NULL);
    qsort(block, n, sizeof block[0], by_value);
    double median = n % 2 ? block[n / 2] : (block[n / 2 - 1] + block[n / 2]) / 2;
    printf("# tunedmpi-host-probe round_trip_ns=%.1f min=%.1f max=%.1f blocks=%d cpus=%d,%d\n",
           median, block[0], block[n - 1], n, cpus[0], cpus[1]);
    return 0;
}
