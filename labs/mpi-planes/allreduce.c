/* The job of lab mpi-planes: time a loop of MPI_Allreduce with MPI_Wtime and print it. Nothing in it
 * knows about the emulator: `emu run` gives its clock fabric time (libfaketime), so the seconds it
 * prints are the fabric's. Usage: allreduce FLOATS ITERATIONS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1 << 19, iters = argc > 2 ? atoi(argv[2]) : 3, rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) in[i] = rank + 1;
  MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up: connections made */
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t1 = MPI_Wtime();
  int ok = out[n - 1] == size * (size + 1) / 2.0f;
  if (rank == 0) printf("allreduce bytes %ld ranks %d iterations %d seconds %.9f ok %d\n",
                        (long)n * (long)sizeof(float), size, iters, (t1 - t0) / iters, ok);
  MPI_Finalize();
  return ok ? 0 : 1;
}
