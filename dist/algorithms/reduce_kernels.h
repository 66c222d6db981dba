// The elementwise pieces of a reduction, shared by the backends (internal).
//
// T is a tensor's storage type; Acc = compute_t<T> is what it is summed in (f32 for f16 / bf16,
// T itself otherwise). See Note [Half-precision accumulation] in dist/process_group.h.
#pragma once

#include <mpi.h>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "dist/process_group.h"

namespace ringgrad::dist::detail {

// dst[i] = dst[i] (op) src[i]; avg sums (it divides once at the end, Note [Where AVG divides]).
template <class Acc>
void reduce_into(Acc* dst, const Acc* src, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      break;
    case ReduceOp::max:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
      break;
    case ReduceOp::min:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
      break;
  }
}

// dst[i] = load(mine[i]) (op) load(theirs[i]), in Acc; dst may be mine itself. With theirs null,
// dst[i] = load(mine[i]). Note [Each chunk is reduced once] in dist/algorithms/ring_pipeline.cpp.
template <class Acc, class Mine, class Theirs>
void combine_into(Acc* dst, const Mine* mine, const Theirs* theirs, int64_t n, ReduceOp op) {
  if (theirs == nullptr) {
    for (int64_t i = 0; i < n; ++i) dst[i] = load(mine[i]);
    return;
  }
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      for (int64_t i = 0; i < n; ++i) dst[i] = load(mine[i]) + load(theirs[i]);
      break;
    case ReduceOp::max:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::max<Acc>(load(mine[i]), load(theirs[i]));
      break;
    case ReduceOp::min:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::min<Acc>(load(mine[i]), load(theirs[i]));
      break;
  }
}

// dst[i] = store_as<T>(src[i] / N when avg, else src[i]): the single rounding.
template <class T, class Acc>
void finish_into(T* dst, const Acc* src, int64_t n, ReduceOp op, int world_size) {
  if (op == ReduceOp::avg) {
    for (int64_t i = 0; i < n; ++i) dst[i] = store_as<T>(static_cast<Acc>(src[i] / static_cast<Acc>(world_size)));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = store_as<T>(src[i]);
  }
}

template <class T>
void widen(compute_t<T>* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}

#if defined(__F16C__) && defined(__AVX__)
// f16 <-> f32 eight at a time with the F16C instructions (x86-64-v3, the default RINGGRAD_ISA_FLAGS).
// The scalar conversions (core/dtype.h) branch per element and kept the f16 AllReduce at ~0.7 GB/s,
// a fifth of f32's (docs/dist.md). Both round to nearest even and treat subnormals and infinities
// alike, so results are bit-identical, except a NaN's payload (still a NaN of the same sign).
template <>
inline void widen<Half>(float* dst, const Half* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = load(src[i]);
}

inline __m256 load_f32x8(const Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load_f32x8(const float* p) { return _mm256_loadu_ps(p); }

// combine_into for an f16 input (Note [Each chunk is reduced once]); theirs is f16 at the ring's
// step 0, an f32 partial sum after it.
template <class Theirs>
void combine_half_into(float* dst, const Half* mine, const Theirs* theirs, int64_t n, ReduceOp op) {
  if (theirs == nullptr) return widen(dst, mine, n);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = load_f32x8(mine + i), b = load_f32x8(theirs + i);
    // As std::max(a, b) / std::min(a, b): a unless b is larger / smaller, so a NaN a stays.
    const __m256 v = op == ReduceOp::max   ? _mm256_blendv_ps(a, b, _mm256_cmp_ps(a, b, _CMP_LT_OQ))
                     : op == ReduceOp::min ? _mm256_blendv_ps(a, b, _mm256_cmp_ps(b, a, _CMP_LT_OQ))
                                           : _mm256_add_ps(a, b);
    _mm256_storeu_ps(dst + i, v);
  }
  for (; i < n; ++i) {
    const float a = load(mine[i]), b = load(theirs[i]);
    dst[i] = op == ReduceOp::max ? std::max(a, b) : op == ReduceOp::min ? std::min(a, b) : a + b;
  }
}
template <>
inline void combine_into<float, Half, Half>(float* dst, const Half* mine, const Half* theirs, int64_t n, ReduceOp op) {
  combine_half_into(dst, mine, theirs, n, op);
}
template <>
inline void combine_into<float, Half, float>(float* dst, const Half* mine, const float* theirs, int64_t n,
                                             ReduceOp op) {
  combine_half_into(dst, mine, theirs, n, op);
}

template <>
inline void finish_into<Half, float>(Half* dst, const float* src, int64_t n, ReduceOp op, int world_size) {
  const bool average = op == ReduceOp::avg;
  const float divisor = static_cast<float>(world_size);
  const __m256 vdivisor = _mm256_set1_ps(divisor);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    if (average) v = _mm256_div_ps(v, vdivisor);  // the same single f32 division as the scalar loop
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) dst[i] = store_as<Half>(average ? src[i] / divisor : src[i]);
}
#endif

// The MPI datatype of an accumulation type.
template <class Acc>
MPI_Datatype mpi_type();
template <>
inline MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
inline MPI_Datatype mpi_type<int32_t>() {
  return MPI_INT32_T;
}
template <>
inline MPI_Datatype mpi_type<int64_t>() {
  return MPI_INT64_T;
}

inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
    default: return MPI_SUM;
  }
}

// Rank-independent split of n elements into `parts` chunks: the first n % parts get one more.
inline int64_t chunk_begin(int64_t n, int parts, int i) {
  const int64_t base = n / parts, extra = n % parts;
  return i * base + std::min<int64_t>(i, extra);
}
inline int64_t chunk_size(int64_t n, int parts, int i) { return n / parts + (i < n % parts ? 1 : 0); }

}  // namespace ringgrad::dist::detail
