/* Each collective the tables tune, once per size given on the command line, so that a component
 * check (coll_ucc_verbose, pml monitoring) can tell which component ran which call:
 *
 *   coll_sizes COLL:BYTES ...        e.g. coll_sizes allreduce:8 allreduce:1048576 bcast:8
 *
 * BYTES is what IMB's #bytes column means: the block each rank sends to each peer (alltoall),
 * contributes (allgather), the whole buffer (bcast), the byte size of the float vector
 * (allreduce). Rank 0 prints "call COLL BYTES" before each call, on stdout, flushed. Exit 0 only if
 * every call returned MPI_SUCCESS. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, i, rc = MPI_SUCCESS;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (i = 1; i < argc && rc == MPI_SUCCESS; i++) {
        char coll[32];
        long bytes;
        if (sscanf(argv[i], "%31[a-z]:%ld", coll, &bytes) != 2 || bytes < 0) {
            if (rank == 0)
                fprintf(stderr, "coll_sizes: bad argument %s (write COLL:BYTES)\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long big = (bytes > 0 ? bytes : 1) * (long)size + 64;
        char *s = calloc(big, 1), *r = calloc(big, 1);
        if (rank == 0) {
            printf("call %s %ld\n", coll, bytes);
            fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (!strcmp(coll, "allreduce"))
            rc = MPI_Allreduce(s, r, (int)(bytes / sizeof(float)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(coll, "bcast"))
            rc = MPI_Bcast(s, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        else if (!strcmp(coll, "allgather"))
            rc = MPI_Allgather(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        else if (!strcmp(coll, "alltoall"))
            rc = MPI_Alltoall(s, (int)bytes, MPI_BYTE, r, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        else {
            if (rank == 0)
                fprintf(stderr, "coll_sizes: unknown collective %s\n", coll);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        free(s);
        free(r);
    }
    MPI_Finalize();
    return rc == MPI_SUCCESS ? 0 : 1;
}
