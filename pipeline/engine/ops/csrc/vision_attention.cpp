// Flash attention over a packed vision batch for CPUs with AVX512-BF16: each frame (image) attends within itself.
//
// The vision tower spends about half its time here, and torch's CPU SDPA reaches about a third of the bf16 GEMM's
// rate on such a CPU. Here both products run on vdpbf16ps with fp32 accumulation and register tiles that load
// little per multiply, and the softmax is online (one pass over the keys) with a vectorised exp2. K and V of each
// (frame, head) are packed once into the pair-interleaved layouts vdpbf16ps reads; the work is then split over
// (frame, head, block of queries).
#include "cpu_kernels.h"


#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512BF16__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

namespace {

// Query rows per task and keys per softmax step: a multiple of both tiles' row counts, and 48 x 128 scores (24 KiB)
// stay in L1; 72 or 96 rows, or 256 keys, measured slower.
constexpr int64_t kQueryBlock = 48;
constexpr int64_t kKeyBlock = 128;
constexpr int64_t kKeyTile = 64;     // keys per score tile; frames are padded to a multiple of it
constexpr int kScoreRows = 6;        // score tile: 6 rows x 64 keys = 24 accumulators
constexpr int kValueRows = 4;        // value tile: 4 rows x up to 5 x 16 dims = 20 accumulators
constexpr int kValueCols = 5;
constexpr double kLog2e = 1.4426950408889634;

using bf16 = uint16_t;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One 32-bit lane holding a pair of bf16 values, broadcast to all 16 lanes.
inline __m512bh broadcast_pair(const bf16* pair) {
  int32_t bits;
  std::memcpy(&bits, pair, sizeof bits);
  return (__m512bh)_mm512_set1_epi32(bits);
}

inline __m512bh load_pairs(const bf16* p) { return (__m512bh)_mm512_loadu_si512(p); }

// 2^x for x <= 0 (within ~2e-7 relative): x = n + f with |f| <= 1/2, a degree-6 polynomial for 2^f, scaled by 2^n.
// Clamped below so that a masked key's -inf gives 0 instead of NaN.
inline __m512 exp2_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);  // ln2^k / k!, k = 6 .. 0
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// K of one (frame, head) as [D/2][keys][2]: a 64-byte load is one dimension pair of 16 consecutive keys.
// Keys past the frame are zero (their scores are masked). A transpose of 32-bit pairs, 16 keys at a time so that
// both the rows read and the runs written stay in L1.
void pack_keys(const bf16* k, int64_t row_stride, int64_t length, int64_t padded, int64_t pairs, bf16* out) {
  auto* dst = reinterpret_cast<int32_t*>(out);
  for (int64_t t0 = 0; t0 < length; t0 += 16) {
    const int64_t t1 = std::min(t0 + 16, length);
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t t = t0; t < t1; ++t) std::memcpy(dst + p * padded + t, k + t * row_stride + 2 * p, 4);
  }
  for (int64_t p = 0; p < pairs; ++p) std::fill(dst + p * padded + length, dst + (p + 1) * padded, 0);
}

// V of one (frame, head) as [keys/2][Dv][2], Dv = D rounded up to 16: a 64-byte load is 16 dimensions of a key
// pair. Keys and dimensions past the frame's are zero, so they add nothing to the output.
// Each 64-byte run interleaves 16 dimensions of two rows with one permute.
void pack_values(const bf16* v, int64_t row_stride, int64_t length, int64_t padded, int64_t dim, int64_t dim_v,
                 bf16* out) {
  alignas(64) static const int16_t kInterleave[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t t = 0; t < padded; t += 2) {
    const bf16* even = v + t * row_stride;
    const bf16* odd = even + row_stride;
    const __mmask16 rows_even = t < length ? 0xffff : 0, rows_odd = t + 1 < length ? 0xffff : 0;
    for (int64_t d = 0; d < dim_v; d += 16) {
      const __mmask16 dims = d + 16 <= dim ? 0xffff : d < dim ? (1u << (dim - d)) - 1 : 0;
      const __m512i a = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(dims & rows_even, even + d));
      const __m512i b = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(dims & rows_odd, odd + d));
      _mm512_storeu_si512(out + (t * dim_v + 2 * d), _mm512_permutex2var_epi16(a, interleave, b));
    }
  }
}

// scores[r][0..64) = q[r] . k for kScoreRows query rows (bf16 pairs, `q_pairs` apart) and kKeyTile packed keys.
void score_tile(const bf16* q, int64_t q_pairs, const bf16* k, int64_t key_stride, int64_t pairs, float* scores,
                int64_t score_stride) {
  __m512 acc[kScoreRows][4];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const bf16* keys = k + p * key_stride * 2;
    const __m512bh k0 = load_pairs(keys), k1 = load_pairs(keys + 32), k2 = load_pairs(keys + 64),
                   k3 = load_pairs(keys + 96);
    for (int r = 0; r < kScoreRows; ++r) {
      const __m512bh a = broadcast_pair(q + (r * q_pairs + p) * 2);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, k0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, k1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], a, k2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], a, k3);
    }
  }
  for (int r = 0; r < kScoreRows; ++r)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(scores + r * score_stride + 16 * c, acc[r][c]);
}

// out[r][0..16C) = out[r] * alpha[r] + probs[r] . v for kValueRows rows over `pairs` packed key pairs.
template <int C>
void value_tile(const bf16* probs, int64_t prob_stride, const bf16* v, int64_t dim_v, int64_t pairs,
                const float* alpha, float* out, int64_t out_stride) {
  __m512 acc[kValueRows][C];
  for (int r = 0; r < kValueRows; ++r) {
    const __m512 scale = _mm512_set1_ps(alpha[r]);
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(out + r * out_stride + 16 * c), scale);
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh values[C];
    for (int c = 0; c < C; ++c) values[c] = load_pairs(v + (p * dim_v + 16 * c) * 2);
    for (int r = 0; r < kValueRows; ++r) {
      const __m512bh a = broadcast_pair(probs + r * prob_stride + 2 * p);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, values[c]);
    }
  }
  for (int r = 0; r < kValueRows; ++r)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + r * out_stride + 16 * c, acc[r][c]);
}

// The value tile over all of Dv, at most kValueCols registers of dimensions at a time.
void value_tiles(const bf16* probs, const bf16* v, int64_t dim_v, int64_t pairs, const float* alpha, float* out) {
  for (int64_t c0 = 0; c0 < dim_v / 16; c0 += kValueCols) {
    const bf16* vc = v + c0 * 32;
    float* oc = out + c0 * 16;
    switch (std::min<int64_t>(kValueCols, dim_v / 16 - c0)) {
      case 1: value_tile<1>(probs, kKeyBlock, vc, dim_v, pairs, alpha, oc, dim_v); break;
      case 2: value_tile<2>(probs, kKeyBlock, vc, dim_v, pairs, alpha, oc, dim_v); break;
      case 3: value_tile<3>(probs, kKeyBlock, vc, dim_v, pairs, alpha, oc, dim_v); break;
      case 4: value_tile<4>(probs, kKeyBlock, vc, dim_v, pairs, alpha, oc, dim_v); break;
      default: value_tile<5>(probs, kKeyBlock, vc, dim_v, pairs, alpha, oc, dim_v); break;
    }
  }
}

// Online softmax for one query row over `width` keys of a block, `valid` of them in the frame: the running max and sum are updated, the row's
// probabilities (relative to the new max) written as bf16, and the factor its output must be rescaled by returned.
// Scores are raw dot products; `c` = scale * log2(e) turns them into exp2 arguments.
float softmax_row(float* scores, int64_t valid, int64_t width, float c, float& max, float& sum, bf16* probs) {
  std::fill(scores + valid, scores + width, -std::numeric_limits<float>::infinity());
  __m512 top = _mm512_loadu_ps(scores);
  for (int64_t i = 16; i < width; i += 16) top = _mm512_max_ps(top, _mm512_loadu_ps(scores + i));
  const float next = std::max(max, _mm512_reduce_max_ps(top));
  const float alpha = std::exp2((max - next) * c);
  const __m512 cc = _mm512_set1_ps(c), shift = _mm512_set1_ps(next * c);
  __m512 total = _mm512_setzero_ps();
  for (int64_t i = 0; i < width; i += 16) {
    const __m512 e = exp2_nonpositive(_mm512_fmsub_ps(_mm512_loadu_ps(scores + i), cc, shift));
    total = _mm512_add_ps(total, e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(probs + i), (__m256i)_mm512_cvtneps_pbh(e));
  }
  sum = sum * alpha + _mm512_reduce_add_ps(total);
  max = next;
  return alpha;
}

// Per-thread buffers, sized once per call.
struct Scratch {
  std::vector<bf16> query, probs;
  std::vector<float> scores, out, max, sum, alpha;
  Scratch(int64_t pairs, int64_t dim_v)
      : query(kQueryBlock * pairs * 2), probs(kQueryBlock * kKeyBlock), scores(kQueryBlock * kKeyBlock),
        out(kQueryBlock * dim_v), max(kQueryBlock), sum(kQueryBlock), alpha(kQueryBlock) {}
};

struct Frame {
  int64_t start, length, padded, packed;  // first row in the batch, rows, rows padded to kKeyTile, packed offset
};

struct Problem {
  const bf16 *q, *k, *v;
  int64_t q_row, q_head, k_row, k_head, v_row, v_head;  // strides, in elements
  int64_t heads, dim, pairs, dim_v;
  float c;
  bf16 *keys, *values;  // packed K and V of every (frame, head)
  bf16* out;
};

struct Task {
  int64_t frame, head, first;  // queries [first, first + kQueryBlock) of one frame and head
};

// Every task, a longer frame's (which cost more each) first: threads take the next task as they finish one, so the
// last ones to run are short and the threads finish together. A head's blocks are consecutive and share its K and V.
std::vector<Task> longest_first(const std::vector<Frame>& frames, int64_t heads) {
  std::vector<int64_t> order(frames.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return frames[a].length > frames[b].length; });
  std::vector<Task> tasks;
  for (int64_t f : order)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t first = 0; first < frames[f].length; first += kQueryBlock) tasks.push_back({f, h, first});
  return tasks;
}

// One task: queries [q0, q0 + rows) of a frame against all of its keys, for one head.
void attend_block(const Problem& pb, const Frame& f, int64_t head, int64_t q0, Scratch& s) {
  const int64_t rows = std::min(kQueryBlock, f.length - q0);
  const int64_t dim_v = pb.dim_v, pairs = pb.pairs;
  std::fill(s.query.begin(), s.query.end(), 0);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(s.query.data() + r * pairs * 2, pb.q + (f.start + q0 + r) * pb.q_row + head * pb.q_head,
                pb.dim * sizeof(bf16));
  std::fill(s.out.begin(), s.out.end(), 0.f);
  std::fill(s.max.begin(), s.max.end(), -std::numeric_limits<float>::infinity());
  std::fill(s.sum.begin(), s.sum.end(), 0.f);
  const bf16* keys = pb.keys + (f.packed * pb.heads + head * f.padded) * pairs * 2;
  const bf16* values = pb.values + (f.packed * pb.heads + head * f.padded) * dim_v;
  for (int64_t k0 = 0; k0 < f.length; k0 += kKeyBlock) {
    const int64_t width = std::min(kKeyBlock, f.padded - k0);  // the last block may be one tile short
    for (int64_t r = 0; r < kQueryBlock; r += kScoreRows)
      for (int64_t j = 0; j < width; j += kKeyTile)
        score_tile(s.query.data() + r * pairs * 2, pairs, keys + (k0 + j) * 2, f.padded, pairs,
                   s.scores.data() + r * kKeyBlock + j, kKeyBlock);
    const int64_t valid = std::min(kKeyBlock, f.length - k0);
    for (int64_t r = 0; r < kQueryBlock; ++r)
      s.alpha[r] = softmax_row(s.scores.data() + r * kKeyBlock, valid, width, pb.c, s.max[r], s.sum[r],
                               s.probs.data() + r * kKeyBlock);
    for (int64_t r = 0; r < kQueryBlock; r += kValueRows)
      value_tiles(s.probs.data() + r * kKeyBlock, values + k0 * dim_v, dim_v, width / 2, s.alpha.data() + r,
                  s.out.data() + r * dim_v);
  }
  for (int64_t r = 0; r < rows; ++r) {
    bf16* dst = pb.out + ((f.start + q0 + r) * pb.heads + head) * pb.dim;
    const float inv = 1.f / s.sum[r];
    for (int64_t d = 0; d < pb.dim; ++d) dst[d] = c10::BFloat16(s.out[r * dim_v + d] * inv).x;
  }
}

}  // namespace

bool vision_attention_supported() { return true; }

// q, k, v (N, H, D) bf16, rows of each a multiple of D apart (views of the qkv projection are fine); lengths: the
// frames packed along N. Returns (N, H, D) bf16.
at::Tensor vision_attention(at::Tensor q, at::Tensor k, at::Tensor v, std::vector<int64_t> lengths,
                            double scale) {
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes(), "q, k, v must be (N, H, D) alike");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
                  v.scalar_type() == at::kBFloat16, "vision_attention takes bf16");
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), "vision_attention runs on CPU");
  const int64_t n = q.size(0), heads = q.size(1), dim = q.size(2);
  TORCH_CHECK(dim % 2 == 0, "head dim must be even");
  if (q.stride(2) != 1) q = q.contiguous();
  if (k.stride(2) != 1) k = k.contiguous();
  if (v.stride(2) != 1) v = v.contiguous();
  std::vector<Frame> frames;
  int64_t start = 0, packed = 0;
  for (int64_t length : lengths) {
    TORCH_CHECK(length > 0, "frames must be non-empty");
    frames.push_back({start, length, round_up(length, kKeyTile), packed});
    start += length;
    packed += frames.back().padded;
  }
  TORCH_CHECK(start == n, "lengths must sum to N");
  const int64_t pairs = dim / 2, dim_v = round_up(dim, 16);
  auto options = q.options();
  auto keys = at::empty({packed * heads * pairs * 2}, options);
  auto values = at::empty({packed * heads * dim_v}, options);
  auto out = at::empty({n, heads, dim}, options);
  Problem pb{reinterpret_cast<const bf16*>(q.data_ptr()), reinterpret_cast<const bf16*>(k.data_ptr()),
             reinterpret_cast<const bf16*>(v.data_ptr()), q.stride(0), q.stride(1), k.stride(0), k.stride(1),
             v.stride(0), v.stride(1), heads, dim, pairs, dim_v, static_cast<float>(scale * kLog2e),
             reinterpret_cast<bf16*>(keys.data_ptr()), reinterpret_cast<bf16*>(values.data_ptr()),
             reinterpret_cast<bf16*>(out.data_ptr())};
  const int64_t frame_heads = static_cast<int64_t>(frames.size()) * heads;
  at::parallel_for(0, frame_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t fh = begin; fh < end; ++fh) {
      const Frame& f = frames[fh / heads];
      const int64_t h = fh % heads, offset = f.packed * heads + h * f.padded;
      pack_keys(pb.k + f.start * pb.k_row + h * pb.k_head, pb.k_row, f.length, f.padded, pairs,
                pb.keys + offset * pairs * 2);
      pack_values(pb.v + f.start * pb.v_row + h * pb.v_head, pb.v_row, f.length, f.padded, dim, dim_v,
                  pb.values + offset * dim_v);
    }
  });
  const std::vector<Task> tasks = longest_first(frames, heads);
  std::atomic<int64_t> next{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    Scratch scratch(pairs, dim_v);
    for (int64_t t = next++; t < static_cast<int64_t>(tasks.size()); t = next++)
      attend_block(pb, frames[tasks[t].frame], tasks[t].head, tasks[t].first, scratch);
  });
  return out;
}

#else

bool vision_attention_supported() { return false; }

at::Tensor vision_attention(at::Tensor, at::Tensor, at::Tensor, std::vector<int64_t>, double) {
  TORCH_CHECK(false, "vision_attention needs AVX512-BF16; this build has no such kernel");
}

#endif
