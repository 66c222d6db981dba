// Indexing kernels on the CPU: index_select / index_add (embedding forward and backward), gather /
// scatter_add, one_hot. The CUDA versions are in core/cuda/indexing.cu. The front end
// (core/native/indexing.cpp) checks every index value before calling either, so these kernels never
// see one out of range.
//
// The adding kernels add in the tensor's own dtype, in index order (f16 / bf16: each addition rounds
// once); CUDA's atomics take f32 / f64 only (backend_accumulate_dtype in core/native/backend.h).
#include <cstring>

#include "core/kernels.h"

namespace ringgrad::cpu {
namespace {

// dst[i] += src[i] for n elements of a floating type.
void add_elements(DType t, void* dst, const void* src, int64_t n) {
  dispatch_floating(t, [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst);
    const T* s = static_cast<const T*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = store_as<T>(load(d[i]) + load(s[i]));
  });
}

// Calls fn(position in index, element offset in `a`) for every position of the dense index tensor (See
// GatherGeometry in core/kernels.h).
template <class Fn>
void for_each_gather_position(const int64_t* index, int64_t count, const GatherGeometry& g, Fn&& fn) {
  for (int64_t p = 0; p < count; ++p) {
    int64_t rest = p, offset = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t coord = rest % g.index_shape[d];
      rest /= g.index_shape[d];
      offset += (d == g.dim ? index[p] : coord) * g.a_strides[d];
    }
    fn(p, offset);
  }
}

}  // namespace

void index_select(size_t element_size, const void* src, const int64_t* index, void* out, int64_t outer, int64_t mid,
                  int64_t count, int64_t inner) {
  const size_t row_bytes = static_cast<size_t>(inner) * element_size;
  const char* sp = static_cast<const char*>(src);
  char* op = static_cast<char*>(out);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k)
      std::memcpy(op + (o * count + k) * row_bytes, sp + (o * mid + index[k]) * row_bytes, row_bytes);
}

void index_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t outer, int64_t mid, int64_t count,
               int64_t inner) {
  const size_t esize = dtype_size(dtype);
  char* op = static_cast<char*>(out);
  const char* sp = static_cast<const char*>(src);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k)
      add_elements(dtype, op + ((o * mid + index[k]) * inner) * esize, sp + ((o * count + k) * inner) * esize, inner);
}

void gather(size_t element_size, const void* a, const int64_t* index, void* out, int64_t count,
            const GatherGeometry& geometry) {
  const char* ap = static_cast<const char*>(a);
  char* op = static_cast<char*>(out);
  for_each_gather_position(index, count, geometry, [&](int64_t p, int64_t off) {
    std::memcpy(op + p * element_size, ap + off * static_cast<int64_t>(element_size), element_size);
  });
}

void scatter_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t count,
                 const GatherGeometry& geometry) {
  const size_t esize = dtype_size(dtype);
  char* op = static_cast<char*>(out);
  const char* sp = static_cast<const char*>(src);
  for_each_gather_position(index, count, geometry, [&](int64_t p, int64_t off) {
    add_elements(dtype, op + off * static_cast<int64_t>(esize), sp + p * esize, 1);
  });
}

void one_hot(const int64_t* index, double* out, int64_t count, int64_t classes) {
  for (int64_t i = 0; i < count; ++i) out[i * classes + index[i]] = 1.0;
}

}  // namespace ringgrad::cpu
