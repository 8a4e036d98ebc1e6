#include "cpu_kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "paged decode attention (CPU)");
  m.def("bind_omp_threads", &bind_omp_threads, "bind OpenMP thread i of the caller's team to cpus[i]");
}
