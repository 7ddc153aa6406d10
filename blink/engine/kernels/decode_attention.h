// Decode attention of one (sequence, KV head): the per-head math of the eager kernel
// (decode_attention.cpp) and of the fused step (decode_step.cpp), in one place so both round alike
// bit for bit, for bf16 / fp32, fp8 (e4m3) and int8 (row-scaled) caches alike.
//
// The cached positions are cut into chunks of kChunk positions (flash-decoding's split-K). Per
// chunk and query head: scores in fp32, 16 positions at a time (16 dot products summed into one
// vector by a shuffle tree, not one horizontal add each); an fp32 softmax with exp16 (simd_exp.h)
// against the chunk's max; the weighted sum of values accumulated in fp32 in position order. The
// chunks are then merged in order (rescaled to the overall max) with one rounding to the output
// dtype. The chunk length is fixed, not derived from the thread count, so a chunk run on another
// thread (the eager kernel's split of a long context) gives the same bits as the fused step's
// sequential loop over the same chunks.
//
// Scores: bf16 queries on AVX512-BF16 CPUs are vdpbf16ps dot products of the unscaled bf16 query
// and the key (a bf16 cache's as is; an fp8 or int8 key rewritten as bf16, which is exact), each
// product exact in fp32 and the sums in fp32, times the softmax scale (and an int8 row's scale)
// once per score; otherwise (fp32 queries, no AVX512-BF16) the query is widened and pre-scaled in
// fp32 and the keys widened to fp32 (fp32 FMAs). The two differ by fp32 rounding only (and
// vdpbf16ps flushes bf16 subnormals, values below 1e-38 that a score cannot tell from 0).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>

#include <immintrin.h>

#include "simd_exp.h"
#include "simd_reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace blink::attn {

constexpr int64_t kLanes = 16;  // fp32 lanes of one AVX-512 register
// The widest head taken (a widened key tile of kTile x kMaxDim fp32 is scratch); Llama-family
// heads are 64-256.
constexpr int64_t kMaxDim = 512;
// The largest GQA group (query heads per KV head) taken; checked where the shapes are known.
constexpr int64_t kMaxGroup = 64;
// Positions scored together: one vector of 16 scores.
constexpr int64_t kTile = 16;
// Positions per split-K chunk: long enough that the merge (one rescale of dim values per chunk)
// costs nothing beside the chunk's dot products, short enough that a 1,024-position context of
// one sequence splits into 4 tasks per KV head, and its scores (group x 256 fp32) stay in L1.
constexpr int64_t kChunk = 256;

inline int64_t chunks_of(int64_t len) { return (len + kChunk - 1) / kChunk; }

// fp32 scratch one attend_chunk call needs: scores [group, kChunk], scaled queries [group, dim],
// the widened key tile [kTile, dim].
inline int64_t chunk_scratch_floats(int64_t group, int64_t dim) { return group * (kChunk + dim) + kTile * dim; }

// fp32 of one chunk's partial result for `group` heads: max, sum, unnormalised output [dim].
inline int64_t partial_floats(int64_t group, int64_t dim) { return group * (dim + 2); }

inline bool cpu_has_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

// bf16 -> fp32 is the bf16 bits in the high half of an fp32 word (exact).
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// e4m3fn -> fp32 (exact) for an fp8 KV cache (kv_cache_dtype.py). No fp8 instructions on these
// CPUs: each byte S.EEEE.MMM is rebuilt as the fp16 S.0EEEE.MMM0000000, whose value is the e4m3
// value times 2^-8 (fp16's exponent bias is 15, e4m3's 7) for normal and subnormal bytes alike;
// vcvtph2ps widens that exactly and one multiply by 2^8 restores the scale. The NaN bytes (0x7F,
// 0xFF) would read as ±480; the cache never holds them (writes clamp to ±448).
inline __m512 load16(const c10::Float8_e4m3fn* p) {
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0x80)), 8);
  const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(0x7F)), 7);
  const __m512 scaled = _mm512_cvtph_ps(_mm256_or_si256(sign, magnitude));
  return _mm512_mul_ps(scaled, _mm512_set1_ps(256.f));
}

// int8 -> fp32 (exact) for an int8 KV cache; its row scale is applied to the score / weight.
inline __m512 load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Lane p of the result is the sum of a[p]'s 16 lanes: simd_reduce.h's tree, which puts the sum of
// a[r * 4 + m] in lane 4m + r, fed a[] transposed (its input i is a[4 (i % 4) + i / 4]).
inline __m512 sum16(const __m512* a) {
  __m512 transposed[16];
  for (int i = 0; i < 16; ++i) transposed[i] = a[4 * (i % 4) + i / 4];
  return simd::reduce16(transposed);
}

// Where one sequence's cached positions live: position j of KV head h is at
// base + (table[j / block_size] * block_size + j % block_size) * slot_stride + h * dim.
struct PagedSeq {
  const int64_t* table;
  int64_t block_size;
  int64_t slot_stride;  // elements between consecutive cache slots (KV heads * dim)
  int64_t len;          // cached positions attended
  int64_t slot_index(int64_t j) const { return table[j / block_size] * block_size + j % block_size; }
};

// One tile's keys: row p of KV head h for p < n; rows past n repeat row 0 (scored, never stored).
template <typename C>
struct KeyTile {
  const C* rows[kTile];
  float scale[kTile];  // an int8 cache's row scales, else unused
  int n;
};

#define BLINK_ATTN_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// s[g * kChunk + p] = scale * (q_g . key_p) (times row_scales[p] for an int8 cache, else
// nullptr) for p < n: vdpbf16ps on the unscaled bf16 query and keys (bf16 products are exact in
// fp32). dim % 16 == 0: a half vector is zero-extended.
BLINK_ATTN_BF16 inline void score_tile_bf16(const c10::BFloat16* q, int64_t group, int64_t dim,
                                            const c10::BFloat16* const* rows, int n, float scale,
                                            const float* row_scales, float* s) {
  const int64_t whole = dim / 32;
  const bool half = dim % 32 != 0;
  const __mmask16 keep = static_cast<__mmask16>((1u << n) - 1);
  const __m512 sv = row_scales ? _mm512_mul_ps(_mm512_loadu_ps(row_scales), _mm512_set1_ps(scale)) : _mm512_set1_ps(scale);
  for (int64_t g = 0; g < group; ++g) {
    const c10::BFloat16* qg = q + g * dim;
    __m512 p[kTile];
    for (int j = 0; j < kTile; ++j) {
      const c10::BFloat16* k = rows[j];
      __m512 a = _mm512_setzero_ps();
      for (int64_t v = 0; v < whole; ++v)
        a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_loadu_si512(qg + v * 32), (__m512bh)_mm512_loadu_si512(k + v * 32));
      if (half) {
        const __m512i qh = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qg + whole * 32)));
        const __m512i kh = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + whole * 32)));
        a = _mm512_dpbf16_ps(a, (__m512bh)qh, (__m512bh)kh);
      }
      p[j] = a;
    }
    _mm512_mask_storeu_ps(s + g * kChunk, keep, _mm512_mul_ps(sum16(p), sv));
  }
}

// 16 fp8 / int8 cache values as bf16, exactly: their fp32 widening has at most 8 significant bits
// (e4m3: 4; int8: 7), so the low 16 bits of each fp32 word are 0.
template <typename C>
inline void store_bf16(const C* p, c10::BFloat16* out) {
  const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(load16(p)), 16);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(bits));
}

// The same scores in fp32 FMAs: qf [group, dim] is the query already times the scale; keys are
// widened into kt [kTile, dim] once for the whole group. An int8 cache's row scales multiply the
// scores (q . (s k) = s (q . k)).
template <typename C>
inline void score_tile_f32(const float* qf, int64_t group, int64_t dim, const KeyTile<C>& tile, float* kt, float* s) {
  constexpr bool kScaled = std::is_same_v<C, int8_t>;
  const int64_t vecs = dim / kLanes;
  const __mmask16 keep = static_cast<__mmask16>((1u << tile.n) - 1);
  const float* keys[kTile];
  for (int j = 0; j < kTile; ++j) {
    if constexpr (std::is_same_v<C, float>) {
      keys[j] = tile.rows[j];
    } else {
      for (int64_t i = 0; i < vecs; ++i) _mm512_storeu_ps(kt + j * dim + i * kLanes, load16(tile.rows[j] + i * kLanes));
      keys[j] = kt + j * dim;
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    const float* qg = qf + g * dim;
    __m512 p[kTile];
    for (int j = 0; j < kTile; ++j) {
      __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qg), _mm512_loadu_ps(keys[j]));
      for (int64_t i = 1; i < vecs; ++i)
        a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + i * kLanes), _mm512_loadu_ps(keys[j] + i * kLanes), a);
      p[j] = a;
    }
    __m512 sv = sum16(p);
    if constexpr (kScaled) sv = _mm512_mul_ps(sv, _mm512_loadu_ps(tile.scale));
    _mm512_mask_storeu_ps(s + g * kChunk, keep, sv);
  }
}

// s[0 .. n) -> exp(s - max) in place; *max gets the max; returns the sum.
inline float exp_chunk(float* s, int64_t n, float* max) {
  __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) mv = _mm512_max_ps(mv, _mm512_loadu_ps(s + j));
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
  if (j < n) mv = _mm512_mask_max_ps(mv, tail, mv, _mm512_maskz_loadu_ps(tail, s + j));
  const float m = _mm512_reduce_max_ps(mv);
  *max = m;
  mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (j = 0; j + kLanes <= n; j += kLanes) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + j), mv));
    _mm512_mask_storeu_ps(s + j, tail, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
  }
  return _mm512_reduce_add_ps(sum);
}

// acc[g * dim + (i + c) * 16 ...] = sum over the chunk's positions j < n, in order, of
// w[g * kChunk + j] * V[slots[j], h, vector i + c], for g < G and c < NI, in registers: accumulating
// all heads of all vectors in memory (load, fma, store per position) made the value loop store-bound.
// An int8 cache's row scales are already in w (attend_chunk).
template <int G, int NI, typename C>
inline void accumulate_values(const C* v_cache, const int64_t* slots, int64_t n, int64_t slot_stride, int64_t h,
                              int64_t dim, int64_t i, const float* w, float* acc) {
  __m512 a[G][NI];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NI; ++c) a[g][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const C* row = v_cache + slots[j] * slot_stride + h * dim + i * kLanes;
    __m512 v[NI];
    for (int c = 0; c < NI; ++c) v[c] = load16(row + c * kLanes);
    for (int g = 0; g < G; ++g) {
      const __m512 pv = _mm512_set1_ps(w[g * kChunk + j]);
      for (int c = 0; c < NI; ++c) a[g][c] = _mm512_fmadd_ps(pv, v[c], a[g][c]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < NI; ++c) _mm512_storeu_ps(acc + g * dim + (i + c) * kLanes, a[g][c]);
}

template <int NI, typename C>
inline void accumulate_values_n(int64_t gn, const C* v_cache, const int64_t* slots, int64_t n, int64_t slot_stride,
                                int64_t h, int64_t dim, int64_t i, const float* w, float* acc) {
  switch (gn) {
    case 1: accumulate_values<1, NI>(v_cache, slots, n, slot_stride, h, dim, i, w, acc); break;
    case 2: accumulate_values<2, NI>(v_cache, slots, n, slot_stride, h, dim, i, w, acc); break;
    case 3: accumulate_values<3, NI>(v_cache, slots, n, slot_stride, h, dim, i, w, acc); break;
    default: accumulate_values<4, NI>(v_cache, slots, n, slot_stride, h, dim, i, w, acc); break;
  }
}

// accumulate_values<G, 4> for a bf16 cache, the same FMAs per element in the same order, with
// cheaper widening: of each 32-value load, the odd values are its 32-bit words masked to their
// high half and the even ones the words shifted up by 16 (one op each, no lane-crossing
// vpmovzxwd), accumulated apart and interleaved back on the store.
template <int G>
inline void accumulate_values_bf16(const c10::BFloat16* v_cache, const int64_t* slots, int64_t n, int64_t slot_stride,
                                   int64_t h, int64_t dim, int64_t i, const float* w, float* acc) {
  __m512 a[G][4];  // per 32 values: even, odd; twice
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < 4; ++c) a[g][c] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t j = 0; j < n; ++j) {
    const c10::BFloat16* row = v_cache + slots[j] * slot_stride + h * dim + i * kLanes;
    __m512 v[4];
    for (int c = 0; c < 2; ++c) {
      const __m512i x = _mm512_loadu_si512(row + c * 32);
      v[2 * c] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      v[2 * c + 1] = _mm512_castsi512_ps(_mm512_and_si512(x, high));
    }
    for (int g = 0; g < G; ++g) {
      const __m512 pv = _mm512_set1_ps(w[g * kChunk + j]);
      for (int c = 0; c < 4; ++c) a[g][c] = _mm512_fmadd_ps(pv, v[c], a[g][c]);
    }
  }
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < 2; ++c) {
      float* out = acc + g * dim + i * kLanes + c * 32;
      _mm512_storeu_ps(out, _mm512_permutex2var_ps(a[g][2 * c], lo, a[g][2 * c + 1]));
      _mm512_storeu_ps(out + kLanes, _mm512_permutex2var_ps(a[g][2 * c], hi, a[g][2 * c + 1]));
    }
}

// Chunk [j0, j1) of KV head h for its `group` query heads q [group, dim] (unscaled, Q = the
// model's bf16 or fp32): part gets, per head g, max m at part[g], sum l at part[group + g] and the
// unnormalised output at part[2 group + g dim ...] (partial_floats). scratch: chunk_scratch_floats.
// With an int8 cache, ks / vs are the [slots, KV heads] fp32 row scales, else nullptr.
template <typename Q, typename C>
inline void attend_chunk(const Q* q, float scale, int64_t group, int64_t dim, const C* k_cache, const C* v_cache,
                         const PagedSeq& seq, int64_t h, int64_t j0, int64_t j1, float* scratch, float* part,
                         const float* ks = nullptr, const float* vs = nullptr) {
  constexpr bool kScaled = std::is_same_v<C, int8_t>;
  constexpr bool kBf16Query = std::is_same_v<Q, c10::BFloat16>;
  const int64_t kv_heads = seq.slot_stride / dim, vecs = dim / kLanes;
  float* scores = scratch;
  float* qf = scratch + group * kChunk;
  float* kt = qf + group * dim;
  const bool dp = kBf16Query && cpu_has_bf16();
  if (!dp) {
    for (int64_t i = 0; i < group * vecs; ++i)
      _mm512_storeu_ps(qf + i * kLanes, _mm512_mul_ps(load16(q + i * kLanes), _mm512_set1_ps(scale)));
  }
  // The chunk's cache slots, walked block by block (no division per position).
  const int64_t n = j1 - j0;
  int64_t slots[kChunk];
  for (int64_t j = 0, block = j0 / seq.block_size, off = j0 % seq.block_size; j < n; ++j) {
    slots[j] = seq.table[block] * seq.block_size + off;
    if (++off == seq.block_size) off = 0, ++block;
  }
  KeyTile<C> tile;
  const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(C));
  for (int64_t t = 0; t < n; t += kTile) {
    tile.n = static_cast<int>(std::min<int64_t>(kTile, n - t));
    for (int p = 0; p < kTile; ++p) {
      const int64_t slot = slots[p < tile.n ? t + p : t];
      tile.rows[p] = k_cache + slot * seq.slot_stride + h * dim;
      if constexpr (kScaled) tile.scale[p] = ks[slot * kv_heads + h];
    }
    // Blocks sit anywhere in the pool, so the hardware prefetcher loses the stream at every block
    // edge: ask for the next tile's keys (into L1) and this tile's values (into L2, read by the
    // value pass after the chunk's scores) while this tile is scored.
    for (int64_t p = 0; p < tile.n; ++p) {
      const char* v = reinterpret_cast<const char*>(v_cache + slots[t + p] * seq.slot_stride + h * dim);
      for (int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch(v + b, _MM_HINT_T1);
      if (t + kTile + p < n) {
        const char* k = reinterpret_cast<const char*>(k_cache + slots[t + kTile + p] * seq.slot_stride + h * dim);
        for (int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch(k + b, _MM_HINT_T0);
      }
    }
    if constexpr (kBf16Query) {
      if (dp) {
        const float* row_scales = nullptr;
        if constexpr (kScaled) row_scales = tile.scale;
        if constexpr (std::is_same_v<C, c10::BFloat16>) {
          score_tile_bf16(q, group, dim, tile.rows, tile.n, scale, row_scales, scores + t);
        } else {
          // fp8 / int8 keys rewritten as bf16 once for the group (exact), then the same dot products.
          auto* kb = reinterpret_cast<c10::BFloat16*>(kt);
          const c10::BFloat16* rows[kTile];
          for (int p = 0; p < kTile; ++p) {
            for (int64_t i = 0; i < vecs; ++i) store_bf16(tile.rows[p] + i * kLanes, kb + p * dim + i * kLanes);
            rows[p] = kb + p * dim;
          }
          score_tile_bf16(q, group, dim, rows, tile.n, scale, row_scales, scores + t);
        }
        continue;
      }
    }
    score_tile_f32(qf, group, dim, tile, kt, scores + t);
  }
  for (int64_t g = 0; g < group; ++g) part[group + g] = exp_chunk(scores + g * kChunk, n, part + g);
  if constexpr (kScaled) {
    // p (s v) = (p s) v: each weight times its row's value scale once, for the whole group, before
    // the value pass (the sums above stay the softmax's).
    float row_scale[kChunk];
    for (int64_t j = 0; j < n; ++j) row_scale[j] = vs[slots[j] * kv_heads + h];
    for (int64_t g = 0; g < group; ++g)
      for (int64_t j = 0; j < n; ++j) scores[g * kChunk + j] *= row_scale[j];
  }
  float* acc = part + 2 * group;
  const int64_t chunk = vecs % 4 == 0 ? 4 : 1;
  for (int64_t i = 0; i < vecs; i += chunk)
    for (int64_t g = 0; g < group; g += 4) {
      const int64_t gn = std::min<int64_t>(4, group - g);
      if constexpr (std::is_same_v<C, c10::BFloat16>) {
        if (chunk == 4) {
          const float* w = scores + g * kChunk;
          float* a = acc + g * dim;
          switch (gn) {
            case 1: accumulate_values_bf16<1>(v_cache, slots, n, seq.slot_stride, h, dim, i, w, a); break;
            case 2: accumulate_values_bf16<2>(v_cache, slots, n, seq.slot_stride, h, dim, i, w, a); break;
            case 3: accumulate_values_bf16<3>(v_cache, slots, n, seq.slot_stride, h, dim, i, w, a); break;
            default: accumulate_values_bf16<4>(v_cache, slots, n, seq.slot_stride, h, dim, i, w, a); break;
          }
          continue;
        }
      }
      if (chunk == 4) accumulate_values_n<4>(gn, v_cache, slots, n, seq.slot_stride, h, dim, i, scores + g * kChunk, acc + g * dim);
      else accumulate_values_n<1>(gn, v_cache, slots, n, seq.slot_stride, h, dim, i, scores + g * kChunk, acc + g * dim);
    }
}

// out [group, dim] from `chunks` partials (`stride` floats apart), merged in chunk order: each
// rescaled by exp(its max - the overall max). One chunk: acc / l, as a single-pass softmax gives.
template <typename T>
inline void merge_chunks(const float* parts, int64_t chunks, int64_t stride, int64_t group, int64_t dim, T* out) {
  const int64_t vecs = dim / kLanes;
  for (int64_t g = 0; g < group; ++g) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < chunks; ++c) m = std::max(m, parts[c * stride + g]);
    float l = 0.f;
    float o[kMaxDim];
    for (int64_t c = 0; c < chunks; ++c) {
      const float* part = parts + c * stride;
      const float w = std::exp(part[g] - m);
      l += w * part[group + g];
      const float* acc = part + 2 * group + g * dim;
      const __m512 wv = _mm512_set1_ps(w);
      for (int64_t i = 0; i < vecs; ++i) {
        const __m512 x = _mm512_mul_ps(wv, _mm512_loadu_ps(acc + i * kLanes));
        _mm512_storeu_ps(o + i * kLanes, c == 0 ? x : _mm512_add_ps(_mm512_loadu_ps(o + i * kLanes), x));
      }
    }
    const float inv = 1.f / l;
    for (int64_t d = 0; d < dim; ++d) out[g * dim + d] = static_cast<T>(o[d] * inv);
  }
}

// The `group` query heads q [group, dim] of KV head h over all of seq's positions, chunk after
// chunk on this thread, then merged: the same bits as the eager kernel's chunks spread over
// threads. scratch: chunk_scratch_floats; parts: chunks_of(len) * partial_floats.
template <typename Q, typename T, typename C>
inline void attend_kv_head(const Q* q, float scale, int64_t group, int64_t dim, const C* k_cache, const C* v_cache,
                           const PagedSeq& seq, int64_t h, float* scratch, float* parts, T* out,
                           const float* ks = nullptr, const float* vs = nullptr) {
  const int64_t chunks = chunks_of(seq.len), stride = partial_floats(group, dim);
  for (int64_t c = 0; c < chunks; ++c)
    attend_chunk<Q, C>(q, scale, group, dim, k_cache, v_cache, seq, h, c * kChunk,
                       std::min(seq.len, (c + 1) * kChunk), scratch, parts + c * stride, ks, vs);
  merge_chunks<T>(parts, chunks, stride, group, dim, out);
}

}  // namespace blink::attn
