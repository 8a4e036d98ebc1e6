// Weight-only int8 and int4 linears for the CPU, on fp32 activations.
//
// Decode multiplies a few dozen rows by every weight once per token, so it is bound by the bytes of weight read.
// torch's int kernels want bf16 activations, which an AVX2-only CPU converts slowly, and lose to the fp32 GEMM.
// Here each thread streams its panels of 16 output columns once: a chunk of the panel is dequantized into an
// L1-resident fp32 buffer, and every row of x is multiplied against that buffer before the next chunk is read.
// Each output element is summed over k in one fixed order whatever the row count or the other rows, so a request
// gets the same bits alone and in a batch.
#include "cpu_kernels.h"


#include <algorithm>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define QUIRE_AVX2 1
#endif

namespace {

constexpr int64_t kPanel = 16;   // output columns per panel: two AVX2 registers
constexpr int64_t kChunk = 256;  // k per dequantized chunk: 16 KB of fp32, well inside L1
constexpr int64_t kTileRows = 6; // rows per register tile: 12 accumulators, 2 weight registers, 1 broadcast

float bf16_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

// out[r, 0:16] (+)= x[r, 0:kc] · w[0:kc, 0:16] for `rows` rows; `first` starts the sums at zero.
#ifdef QUIRE_AVX2
template <int R>
void tile(const float* x, int64_t ldx, const float* w, int64_t kc, float* out, int64_t ldo, bool first) {
  __m256 acc[R][2];  // the unroll pragmas keep it in registers: rolled loops left it on the stack
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + r * ldo);
    acc[r][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + r * ldo + 8);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 w0 = _mm256_load_ps(w + k * kPanel), w1 = _mm256_load_ps(w + k * kPanel + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(x + r * ldx + k);
      acc[r][0] = _mm256_fmadd_ps(b, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(b, w1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out + r * ldo, acc[r][0]);
    _mm256_storeu_ps(out + r * ldo + 8, acc[r][1]);
  }
}
#else
template <int R>
void tile(const float* x, int64_t ldx, const float* w, int64_t kc, float* out, int64_t ldo, bool first) {
  float acc[R][kPanel];
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < kPanel; ++c) acc[r][c] = first ? 0.f : out[r * ldo + c];
  for (int64_t k = 0; k < kc; ++k)
    for (int r = 0; r < R; ++r)
      for (int64_t c = 0; c < kPanel; ++c) acc[r][c] += x[r * ldx + k] * w[k * kPanel + c];
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < kPanel; ++c) out[r * ldo + c] = acc[r][c];
}
#endif

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool);
constexpr TileFn kTiles[kTileRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

// Every row of x against one dequantized chunk of a panel.
void rows_times_chunk(const float* x, int64_t m, int64_t k, int64_t k0, const float* w, int64_t kc, float* out,
                      int64_t ldo) {
  for (int64_t r = 0; r < m; r += kTileRows) {
    const int64_t rows = std::min(kTileRows, m - r);
    kTiles[rows](x + r * k + k0, k, w, kc, out + r * ldo, ldo, k0 == 0);
  }
}

// Levels [kc, 16] int8 → fp32 [kc, 16]; the per-column scale is applied once, to the sums.
void dequantize_int8(const int8_t* q, int64_t kc, float* w) {
#ifdef QUIRE_AVX2
  for (int64_t i = 0; i < kc * kPanel; i += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    _mm256_store_ps(w + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)));
  }
#else
  for (int64_t i = 0; i < kc * kPanel; ++i) w[i] = static_cast<float>(q[i]);
#endif
}

// One group of `size` k of an int4 panel → fp32 (q - 8)·scale + zero; byte j holds column j low, j + 8 high.
void dequantize_int4_group(const uint8_t* q, int64_t size, const float* scale, const float* zero, float* w) {
#ifdef QUIRE_AVX2
  const __m256 s0 = _mm256_loadu_ps(scale), s1 = _mm256_loadu_ps(scale + 8);
  const __m256 z0 = _mm256_loadu_ps(zero), z1 = _mm256_loadu_ps(zero + 8);
  const __m256i low = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
  for (int64_t k = 0; k < size; ++k) {
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + k * 8)));
    const __m256i q0 = _mm256_sub_epi32(_mm256_and_si256(bytes, low), eight);
    const __m256i q1 = _mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight);
    _mm256_store_ps(w + k * kPanel, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q0), s0, z0));
    _mm256_store_ps(w + k * kPanel + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q1), s1, z1));
  }
#else
  for (int64_t k = 0; k < size; ++k)
    for (int64_t c = 0; c < kPanel / 2; ++c) {
      const uint8_t byte = q[k * 8 + c];
      w[k * kPanel + c] = static_cast<float>((byte & 15) - 8) * scale[c] + zero[c];
      w[k * kPanel + c + 8] = static_cast<float>((byte >> 4) - 8) * scale[c + 8] + zero[c + 8];
    }
#endif
}

// The panel's sums land in `out` directly when all 16 of its columns exist, else in a scratch tile copied after.
template <typename Panel>
at::Tensor panels_linear(const at::Tensor& x, int64_t n, int64_t panels, Panel&& panel) {
  const int64_t m = x.size(0);
  auto out = at::empty({m, n}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, panels, 1, [&](int64_t begin, int64_t end) {
    alignas(64) float chunk[kChunk * kPanel];
    std::vector<float> scratch;
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n0 = p * kPanel, cols = std::min(kPanel, n - n0);
      if (cols < kPanel) scratch.assign(m * kPanel, 0.f);
      float* dst = cols < kPanel ? scratch.data() : op + n0;
      const int64_t ldo = cols < kPanel ? kPanel : n;
      panel(p, xp, chunk, dst, ldo);
      for (int64_t r = 0; cols < kPanel && r < m; ++r) std::copy_n(dst + r * kPanel, cols, op + r * n + n0);
    }
  });
  return out;
}

void check_activations(const at::Tensor& x, int64_t k) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be fp32 (M, K)");
  TORCH_CHECK(x.size(1) == k, "x has ", x.size(1), " columns, the weight ", k);
}

}  // namespace

// x (M, K) fp32; qweight (P, K, 16) int8, column p·16 + c of the weight at [p, :, c]; scales (≥ N) bf16.
at::Tensor int8_linear(at::Tensor x, at::Tensor qweight, at::Tensor scales, int64_t n) {
  TORCH_CHECK(qweight.dim() == 3 && qweight.size(2) == kPanel && qweight.scalar_type() == at::kChar &&
                  qweight.is_contiguous() && qweight.size(0) * kPanel >= n, "qweight must be int8 (P, K, 16)");
  TORCH_CHECK(scales.scalar_type() == at::kBFloat16 && scales.is_contiguous() && scales.numel() >= n,
              "scales must be bf16 (N,)");
  const int64_t k = qweight.size(1), m = x.size(0);
  check_activations(x, k);
  const int8_t* q = qweight.data_ptr<int8_t>();
  const uint16_t* s = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>());
  return panels_linear(x, n, qweight.size(0), [&](int64_t p, const float* xp, float* chunk, float* dst, int64_t ldo) {
    for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
      const int64_t kc = std::min(kChunk, k - k0);
      dequantize_int8(q + (p * k + k0) * kPanel, kc, chunk);
      rows_times_chunk(xp, m, k, k0, chunk, kc, dst, ldo);
    }
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < kPanel && p * kPanel + c < n; ++c) dst[r * ldo + c] *= bf16_to_float(s[p * kPanel + c]);
  });
}

// x (M, K) fp32; qweight (P, K, 8) uint8, byte [p, k, j] = level of column p·16 + j | that of p·16 + j + 8 << 4;
// scales, zeros (P, K / group_size, 16) bf16.
at::Tensor int4_linear(at::Tensor x, at::Tensor qweight, at::Tensor scales, at::Tensor zeros,
                       int64_t group_size, int64_t n) {
  TORCH_CHECK(qweight.dim() == 3 && qweight.size(2) == kPanel / 2 && qweight.scalar_type() == at::kByte &&
                  qweight.is_contiguous() && qweight.size(0) * kPanel >= n, "qweight must be uint8 (P, K, 8)");
  const int64_t panels = qweight.size(0), k = qweight.size(1), m = x.size(0);
  TORCH_CHECK(group_size > 0 && kChunk % group_size == 0 && k % group_size == 0, "group size must divide 256 and K");
  const int64_t groups = k / group_size;
  for (const auto& t : {scales, zeros})
    TORCH_CHECK(t.scalar_type() == at::kBFloat16 && t.is_contiguous() &&
                    t.sizes() == at::IntArrayRef({panels, groups, kPanel}), "scales, zeros must be bf16 (P, G, 16)");
  check_activations(x, k);
  const uint8_t* q = qweight.data_ptr<uint8_t>();
  const uint16_t* s = reinterpret_cast<const uint16_t*>(scales.data_ptr<at::BFloat16>());
  const uint16_t* z = reinterpret_cast<const uint16_t*>(zeros.data_ptr<at::BFloat16>());
  return panels_linear(x, n, panels, [&](int64_t p, const float* xp, float* chunk, float* dst, int64_t ldo) {
    float scale[kPanel], zero[kPanel];
    for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
      const int64_t kc = std::min(kChunk, k - k0);
      for (int64_t g0 = 0; g0 < kc; g0 += group_size) {
        const int64_t g = (p * groups + (k0 + g0) / group_size) * kPanel;
        for (int64_t c = 0; c < kPanel; ++c) scale[c] = bf16_to_float(s[g + c]), zero[c] = bf16_to_float(z[g + c]);
        dequantize_int4_group(q + (p * k + k0 + g0) * (kPanel / 2), group_size, scale, zero, chunk + g0 * kPanel);
      }
      rows_times_chunk(xp, m, k, k0, chunk, kc, dst, ldo);
    }
  });
}
