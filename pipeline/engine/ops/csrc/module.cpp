#include "cpu_kernels.h"

#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

// Every kernel runs without the GIL: the engine loop shares the process with HTTP and Celery threads.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  const auto no_gil = py::call_guard<py::gil_scoped_release>();
  m.def("paged_decode", &paged_decode, no_gil, "paged decode attention (CPU)");
  m.def("int8_linear", &int8_linear, no_gil, "x @ W.T for an int8 weight in 16-column panels (CPU, fp32 x)");
  m.def("int4_linear", &int4_linear, no_gil, "x @ W.T for a grouped int4 weight in 16-column panels (CPU, fp32 x)");
  m.def("bind_omp_threads", &bind_omp_threads, no_gil, "bind OpenMP thread i of the caller's team to cpus[i]");
  m.def("vision_attention", &vision_attention, no_gil,
        "attention within each frame of a packed vision batch (CPU, bf16)");
  m.def("vision_attention_supported", &vision_attention_supported,
        "whether this build has the vision attention kernel (AVX512-BF16)");
}
