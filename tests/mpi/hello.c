/* The smallest program that makes Open MPI and UCX read what a tuned module sets: the
 * collectives the tables tune, and a one-sided put (pml/osc choices). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, sum = 0, all[64], one = 1, *base;
    MPI_Win win;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Alltoall(all, 1, MPI_INT, all + 32, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock_all(0, win);
    MPI_Put(&rank, 1, MPI_INT, (rank + 1) % size, 0, 1, MPI_INT, win);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    printf("hello rank %d of %d sum %d\n", rank, size, sum);
    MPI_Finalize();
    return sum == size ? 0 : 1;
}
