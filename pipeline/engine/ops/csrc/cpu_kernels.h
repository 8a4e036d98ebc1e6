// The functions the engine's CPU extension exports (module.cpp binds them for Python).
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <vector>

torch::Tensor paged_decode(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool, torch::Tensor tables,
                           torch::Tensor lengths, double scale);

torch::Tensor int8_linear(torch::Tensor x, torch::Tensor qweight, torch::Tensor scales, int64_t n);

torch::Tensor int4_linear(torch::Tensor x, torch::Tensor qweight, torch::Tensor scales, torch::Tensor zeros,
                          int64_t group_size, int64_t n);

std::vector<int64_t> bind_omp_threads(const std::vector<int64_t>& cpus);

torch::Tensor vision_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, std::vector<int64_t> lengths,
                               double scale);

bool vision_attention_supported();
