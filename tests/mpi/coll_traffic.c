/* One collective call per phase, each phase's point-to-point traffic written by Open MPI's pml
 * monitoring component (run with --mca pml_monitoring_enable 2) to its own file:
 * PREFIX.<phase>.<rank>.prof. Used by tests/test_rulesfile_real_mpi.py to see which coll_tuned
 * algorithm ran: every algorithm leaves its own pattern of per-peer message counts and sizes.
 *
 *   coll_traffic PREFIX COLL:BYTES[:NPROCS] ...
 *
 * BYTES means what IMB's #bytes column means for that collective: the block each rank sends to
 * each peer (alltoall, alltoallv), contributes (allgather, allgatherv, gather) or receives
 * (scatter); the whole buffer for bcast; the float vector for allreduce, reduce, scan and
 * exscan; each rank's share of the result for reduce_scatter and reduce_scatter_block (IMB 2019
 * and later). NPROCS runs the call on a communicator of ranks 0..NPROCS-1 instead of all ranks
 * (made before the first phase; the other ranks sit the phase out).
 *
 * Phases are cut with the pml_monitoring_flush MPI_T variable: allocating its handle resets the
 * counters, stopping it writes the file. Nothing else sends between the cuts, so each file holds
 * exactly one collective's traffic. Exit status 0 only if every call returned MPI_SUCCESS. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run(const char *coll, long bytes, MPI_Comm comm, int rank, int size)
{
    long nf = bytes / (long)sizeof(float);          /* float items for the reductions */
    long big = (bytes > 0 ? bytes : 1) * (long)size * 2 + 64;
    char *s = calloc(big, 1), *r = calloc(big, 1);
    int *counts = calloc(size, sizeof(int)), *displs = calloc(size, sizeof(int));
    int rc = MPI_ERR_OTHER, i;

    for (i = 0; i < size; i++) { counts[i] = (int)bytes; displs[i] = (int)(i * bytes); }
    if (!strcmp(coll, "allgather"))
        rc = MPI_Allgather(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, comm);
    else if (!strcmp(coll, "allgatherv"))
        rc = MPI_Allgatherv(s, (int)bytes, MPI_BYTE, r, counts, displs, MPI_BYTE, comm);
    else if (!strcmp(coll, "allreduce"))
        rc = MPI_Allreduce(s, r, (int)nf, MPI_FLOAT, MPI_SUM, comm);
    else if (!strcmp(coll, "alltoall"))
        rc = MPI_Alltoall(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, comm);
    else if (!strcmp(coll, "alltoallv"))
        rc = MPI_Alltoallv(s, counts, displs, MPI_BYTE, r, counts, displs, MPI_BYTE, comm);
    else if (!strcmp(coll, "barrier"))
        rc = MPI_Barrier(comm);
    else if (!strcmp(coll, "bcast"))
        rc = MPI_Bcast(s, (int)bytes, MPI_BYTE, 0, comm);
    else if (!strcmp(coll, "exscan"))
        rc = MPI_Exscan(s, r, (int)nf, MPI_FLOAT, MPI_SUM, comm);
    else if (!strcmp(coll, "scan"))
        rc = MPI_Scan(s, r, (int)nf, MPI_FLOAT, MPI_SUM, comm);
    else if (!strcmp(coll, "gather"))
        rc = MPI_Gather(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, 0, comm);
    else if (!strcmp(coll, "scatter"))
        rc = MPI_Scatter(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, 0, comm);
    else if (!strcmp(coll, "reduce"))
        rc = MPI_Reduce(s, r, (int)nf, MPI_FLOAT, MPI_SUM, 0, comm);
    else if (!strcmp(coll, "reduce_scatter")) {
        for (i = 0; i < size; i++) counts[i] = (int)nf;
        rc = MPI_Reduce_scatter(s, r, counts, MPI_FLOAT, MPI_SUM, comm);
    } else if (!strcmp(coll, "reduce_scatter_block"))
        rc = MPI_Reduce_scatter_block(s, r, (int)nf, MPI_FLOAT, MPI_SUM, comm);
    else if (rank == 0)
        fprintf(stderr, "coll_traffic: unknown collective %s\n", coll);
    free(s); free(r); free(counts); free(displs);
    return rc;
}

#define MAXSUB 8

int main(int argc, char **argv)
{
    int rank, size, provided, idx, count, i, j, nsub = 0, nprocs, failed = 0;
    int subsize[MAXSUB];
    MPI_Comm sub[MAXSUB], comm;
    MPI_T_pvar_session session;
    MPI_T_pvar_handle flush;
    char name[4096], coll[64];
    long bytes;

    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: coll_traffic PREFIX COLL:BYTES...\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS
        || MPI_T_pvar_get_index("pml_monitoring_flush", MPI_T_PVAR_CLASS_GENERIC, &idx) != MPI_SUCCESS
        || MPI_T_pvar_session_create(&session) != MPI_SUCCESS) {
        if (rank == 0) fprintf(stderr, "coll_traffic: no pml_monitoring_flush (run with --mca pml_monitoring_enable 2)\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    /* Sub-communicators first: their creation sends messages, which must fall outside every phase. */
    for (i = 2; i < argc; i++) {
        nprocs = size;
        if (sscanf(argv[i], "%63[^:]:%ld:%d", coll, &bytes, &nprocs) < 2 || bytes < 0
            || nprocs < 1 || nprocs > size) {
            if (rank == 0) fprintf(stderr, "coll_traffic: bad phase '%s' (want COLL:BYTES[:NPROCS])\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        for (j = 0; j < nsub && subsize[j] != nprocs; j++) ;
        if (j == nsub && nprocs < size && nsub < MAXSUB) {
            subsize[nsub] = nprocs;
            MPI_Comm_split(MPI_COMM_WORLD, rank < nprocs ? 0 : MPI_UNDEFINED, rank, &sub[nsub]);
            nsub++;
        }
    }
    for (i = 2; i < argc; i++) {
        nprocs = size;
        sscanf(argv[i], "%63[^:]:%ld:%d", coll, &bytes, &nprocs);
        comm = MPI_COMM_WORLD;
        for (j = 0; j < nsub; j++)
            if (subsize[j] == nprocs) comm = sub[j];
        snprintf(name, sizeof name, "%s.%d", argv[1], i - 2);
        /* Allocating the handle resets the counters; stopping it writes NAME.<rank>.prof. */
        if (MPI_T_pvar_handle_alloc(session, idx, NULL, &flush, &count) != MPI_SUCCESS
            || MPI_T_pvar_start(session, flush) != MPI_SUCCESS
            || MPI_T_pvar_write(session, flush, name) != MPI_SUCCESS) {
            fprintf(stderr, "coll_traffic: rank %d cannot start monitoring phase %d\n", rank, i - 2);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        if (comm != MPI_COMM_NULL && run(coll, bytes, comm, rank, nprocs) != MPI_SUCCESS) {
            fprintf(stderr, "coll_traffic: rank %d: %s of %ld bytes failed\n", rank, coll, bytes);
            failed = 1;
        }
        MPI_T_pvar_stop(session, flush);
        MPI_T_pvar_handle_free(session, &flush);
    }
    for (j = 0; j < nsub; j++)
        if (sub[j] != MPI_COMM_NULL) MPI_Comm_free(&sub[j]);
    MPI_T_pvar_session_free(&session);
    MPI_T_finalize();
    MPI_Finalize();
    return failed;
}
