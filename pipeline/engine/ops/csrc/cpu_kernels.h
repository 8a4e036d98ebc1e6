// The functions the engine's CPU extension exports (module.cpp binds them for Python).
//
// Only ATen's tensor, allocation and parallel headers: torch/extension.h (all of libtorch's C++ API and pybind) took
// about 30 s to compile per file, so only module.cpp, which binds, includes the pybind part.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <cstdint>
#include <vector>

at::Tensor paged_decode(at::Tensor q, at::Tensor k_pool, at::Tensor v_pool, at::Tensor tables,
                        at::Tensor lengths, double scale);

at::Tensor int8_linear(at::Tensor x, at::Tensor qweight, at::Tensor scales, int64_t n);

at::Tensor int4_linear(at::Tensor x, at::Tensor qweight, at::Tensor scales, at::Tensor zeros,
                       int64_t group_size, int64_t n);

std::vector<int64_t> bind_omp_threads(const std::vector<int64_t>& cpus);

at::Tensor vision_attention(at::Tensor q, at::Tensor k, at::Tensor v, std::vector<int64_t> lengths,
                            double scale);

bool vision_attention_supported();
