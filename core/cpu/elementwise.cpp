// CPU launchers for the elementwise functors of core/elementwise.h.
#include <type_traits>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "core/cpu/loops.h"
#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/kernels.h"

namespace ringgrad::cpu {
namespace {

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<compute_t<T>>;

// Note [GELU sixteen lanes wide]
// GELU and its backward in f32 are bound by arithmetic, not memory: an exp_of (a polynomial) and a
// division per element ran at ~10 GB/s in AVX2, a third of a core's memcpy, 8% of a W3 step. With
// AVX-512 selected their dense rows run through the same loop compiled a second time for AVX-512F,
// sixteen lanes instead of eight: the same operations on each element.
template <class F>
constexpr bool kSixteenLanes = std::is_same_v<F, GeluOp> || std::is_same_v<F, GeluBackwardOp>;

template <class F>
__attribute__((target("avx512f"))) void dense_unary_avx512(float* out, const float* x, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(x[i]);
}

template <class F>
__attribute__((target("avx512f"))) void dense_binary_avx512(float* out, const float* a, const float* b, int64_t n,
                                                            F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <class T, class F>
void unary_loop(const ElementwiseArgs& args, F f) {
  T* out = static_cast<T*>(args.data[0]);
  const T* in = static_cast<const T*>(args.data[1]);
  for_each_row<2>(args, [&](const int64_t* off, int64_t n, const int64_t* st) {
    T* o = out + off[0];
    const T* x = in + off[1];
    if (st[0] == 1 && st[1] == 1) {
      if constexpr (std::is_same_v<T, float> && kSixteenLanes<F>) {
        if (cpu_isa() == CpuIsa::avx512) return dense_unary_avx512(o, x, n, f);
      }
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<T>(f(load(x[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = store_as<T>(f(load(x[i * st[1]])));
    }
  });
}

template <class T, class Out, class F>
void binary_loop(const ElementwiseArgs& args, F f) {
  Out* out = static_cast<Out*>(args.data[0]);
  const T* a = static_cast<const T*>(args.data[1]);
  const T* b = static_cast<const T*>(args.data[2]);
  for_each_row<3>(args, [&](const int64_t* off, int64_t n, const int64_t* st) {
    Out* o = out + off[0];
    const T* x = a + off[1];
    const T* y = b + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      if constexpr (std::is_same_v<T, float> && std::is_same_v<Out, float> && kSixteenLanes<F>) {
        if (cpu_isa() == CpuIsa::avx512) return dense_binary_avx512(o, x, y, n, f);
      }
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<Out>(f(load(x[i]), load(y[i])));
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {  // tensor op scalar-like row (bias add)
      const auto yv = load(y[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<Out>(f(load(x[i]), yv));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = store_as<Out>(f(load(x[i * st[1]]), load(y[i * st[2]])));
    }
  });
}

// f16 -> f32 over a dense row. With F16C (part of x86-64-v3) eight values per VCVTPH2PS, ~10x the
// branch-free loop (Note [Branch-free f16 conversions] in core/dtype.h): the conversion that CPU f16
// products make of every operand strip (Note [Half-precision products in f32 blocks],
// core/native/matmul.cpp). Exact, as the loop: every f16 value, subnormals included, is an f32 value
// (a signalling NaN comes back quiet, the one difference).
void half_row_to_float(const Half* x, float* out, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
  for (; i < n; ++i) out[i] = half_bits_to_float(x[i].bits);
}

// f32 -> f16 over a dense row, rounded to nearest even: with F16C eight values per VCVTPS2PH, the
// bits of float_to_half_bits (core/dtype.h) for every value but NaNs with a payload (the instruction
// keeps the payload's top bits, the loop makes every NaN the default one).
void float_row_to_half(const float* x, Half* out, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) out[i] = Half{float_to_half_bits(x[i])};
}

// out[i] = in[i] converted, one rounding, over a dense row: F16C for f16 <-> f32, else the loop.
template <class Out, class In>
void convert_dense_row(const In* x, Out* out, int64_t n) {
  if constexpr (std::is_same_v<In, Half> && std::is_same_v<Out, float>) return half_row_to_float(x, out, n);
  if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, Half>) return float_row_to_half(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = store_as<Out>(static_cast<cast_compute_t<Out, In>>(load(x[i])));
}

}  // namespace

void unary(UnaryOp op, ScalarArgs s, DType dtype, const ElementwiseArgs& args) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    visit_unary_op(op, s, [&](auto f) {
      if constexpr (kIsFloat<T>) {
        unary_loop<T>(args, f);
      } else {
        // Integer tensors: only the ops the front end allows for them reach here.
        unary_loop<T>(args, [f](compute_t<T> x) { return static_cast<compute_t<T>>(f(x)); });
      }
    });
  });
}

void binary(BinaryOp op, DType dtype, const ElementwiseArgs& args) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op)) {
      visit_compare_op(op, [&](auto f) { binary_loop<T, uint8_t>(args, f); });
    } else {
      visit_arith_op(op, [&](auto f) { binary_loop<T, T>(args, f); });
    }
  });
}

void where(DType dtype, const ElementwiseArgs& args) {
  dispatch_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(args.data[0]);
    const uint8_t* cond = static_cast<const uint8_t*>(args.data[1]);
    const T* a = static_cast<const T*>(args.data[2]);
    const T* b = static_cast<const T*>(args.data[3]);
    for_each_row<4>(args, [&](const int64_t* off, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i)
        out[off[0] + i * st[0]] = cond[off[1] + i * st[1]] ? a[off[2] + i * st[2]] : b[off[3] + i * st[3]];
    });
  });
}

void cast_copy(DType out_dtype, DType in_dtype, const ElementwiseArgs& args) {
  dispatch_dtype(out_dtype, [&](auto out_tag) {
    dispatch_dtype(in_dtype, [&](auto in_tag) {
      using Out = decltype(out_tag);
      using In = decltype(in_tag);
      Out* out = static_cast<Out*>(args.data[0]);
      const In* in = static_cast<const In*>(args.data[1]);
      for_each_row<2>(args, [&](const int64_t* off, int64_t n, const int64_t* st) {
        // dense rows (contiguous(), permuted copies): vectorises
        if (st[0] == 1 && st[1] == 1) return convert_dense_row(in + off[1], out + off[0], n);
        for (int64_t i = 0; i < n; ++i) {
          const auto v = load(in[off[1] + i * st[1]]);
          out[off[0] + i * st[0]] = store_as<Out>(static_cast<cast_compute_t<Out, In>>(v));
        }
      });
    });
  });
}

void convert_rows(DType out_dtype, DType in_dtype, const void* in, int64_t in_ld, void* out, int64_t out_ld,
                  int64_t rows, int64_t cols) {
  RG_CHECK(is_floating(out_dtype) && is_floating(in_dtype), "convert_rows", "converts floating dtypes, got ",
           dtype_name(in_dtype), " to ", dtype_name(out_dtype));
  dispatch_dtype(out_dtype, [&](auto out_tag) {
    dispatch_dtype(in_dtype, [&](auto in_tag) {
      using Out = decltype(out_tag);
      using In = decltype(in_tag);
      if constexpr (kIsFloat<Out> && kIsFloat<In>) {
        for (int64_t r = 0; r < rows; ++r)
          convert_dense_row(static_cast<const In*>(in) + r * in_ld, static_cast<Out*>(out) + r * out_ld, cols);
      }
    });
  });
}

}  // namespace ringgrad::cpu
