// Paged decode attention for the CPU: one query token per sequence, read straight from the block pools.
//
// The torch path runs a few small ops per sequence and layer; under OpenMP those many short parallel regions
// cost more than the arithmetic. Here one parallel region per layer covers every sequence, and each
// sequence streams its own blocks once: scores, softmax, weighted sum of values, accumulated in fp32.
#include "cpu_kernels.h"


#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

// One sequence, all of its heads: each token's K and V rows (every KV head) are read once, contiguously.
template <typename scalar_t>
void decode_sequence(const scalar_t* q, const scalar_t* k_pool, const scalar_t* v_pool, const int64_t* table,
                     int64_t length, int64_t heads, int64_t kv_heads, int64_t dim, int64_t block_size, float scale,
                     scalar_t* out, std::vector<float>& scores, std::vector<float>& acc, std::vector<float>& query) {
  const int64_t group = heads / kv_heads, row = kv_heads * dim;
  scores.resize(heads * length);
  acc.assign(heads * dim, 0.f);
  query.resize(heads * dim);
  for (int64_t i = 0; i < heads * dim; ++i) query[i] = static_cast<float>(q[i]) * scale;
  for (int64_t t = 0; t < length; ++t) {
    const scalar_t* keys = k_pool + (table[t / block_size] * block_size + t % block_size) * row;
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = query.data() + h * dim;
      const scalar_t* key = keys + (h / group) * dim;
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < dim; ++d) dot += qh[d] * static_cast<float>(key[d]);
      scores[h * length + t] = dot;
    }
  }
  std::vector<float> sums(heads);
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores.data() + h * length;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < length; ++t) top = std::max(top, s[t]);
    float total = 0.f;
    for (int64_t t = 0; t < length; ++t) {
      s[t] = std::exp(s[t] - top);
      total += s[t];
    }
    sums[h] = total;
  }
  for (int64_t t = 0; t < length; ++t) {
    const scalar_t* values = v_pool + (table[t / block_size] * block_size + t % block_size) * row;
    for (int64_t h = 0; h < heads; ++h) {
      const float w = scores[h * length + t];
      const scalar_t* value = values + (h / group) * dim;
      float* a = acc.data() + h * dim;
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) a[d] += w * static_cast<float>(value[d]);
    }
  }
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t d = 0; d < dim; ++d) out[h * dim + d] = static_cast<scalar_t>(acc[h * dim + d] / sums[h]);
}

}  // namespace

// q (B, H, D); k_pool, v_pool (blocks, block_size, KV, D); tables (B, max_blocks) int64; lengths (B,) int64.
at::Tensor paged_decode(at::Tensor q, at::Tensor k_pool, at::Tensor v_pool, at::Tensor tables,
                        at::Tensor lengths, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_pool.dim() == 4 && v_pool.sizes() == k_pool.sizes(), "bad shapes");
  TORCH_CHECK(q.is_contiguous() && k_pool.is_contiguous() && v_pool.is_contiguous(), "inputs must be contiguous");
  TORCH_CHECK(tables.scalar_type() == at::kLong && lengths.scalar_type() == at::kLong, "int64 tables");
  auto tables_c = tables.contiguous();
  auto lengths_c = lengths.contiguous();
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  const int64_t block_size = k_pool.size(1), kv_heads = k_pool.size(2), max_blocks = tables_c.size(1);
  TORCH_CHECK(heads % kv_heads == 0 && k_pool.size(3) == dim, "heads must group onto KV heads");
  auto out = at::empty_like(q);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "paged_decode", [&] {
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k_pool.data_ptr<scalar_t>();
    const scalar_t* vp = v_pool.data_ptr<scalar_t>();
    const int64_t* tp = tables_c.data_ptr<int64_t>();
    const int64_t* lp = lengths_c.data_ptr<int64_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scores, acc, query;
      for (int64_t b = begin; b < end; ++b)
        decode_sequence<scalar_t>(qp + b * heads * dim, kp, vp, tp + b * max_blocks, lp[b], heads, kv_heads, dim,
                                  block_size, static_cast<float>(scale), op + b * heads * dim, scores, acc, query);
    });
  });
  return out;
}
