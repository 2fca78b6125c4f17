// One allocation for the outputs of a host routine (csrc/schedule.cpp, csrc/batch.cpp).
#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include <algorithm>
#include <cstdint>

namespace gnn_treelstm_native {

using at::Tensor;

// The outputs of one call, carved from one allocation: a schedule returns some thirty
// tensors of a batch's few thousand entries (a batch's gather a dozen), and glibc's malloc
// and free of that many separate buffers of a few kilobytes (its slow path: binning,
// splitting, coalescing) cost more than filling them. Every output is a tensor of its own
// shape and type over a slice of one storage (8-byte aligned), as the caller's views of one
// array would be; `bytes` sizes the storage from the planned outputs, and `take` refuses to
// run past it. (A slice keeps the whole storage alive: the outputs of one batch live and go
// together.)
class Arena {
 public:
  static int64_t bytes(int64_t count, at::ScalarType type) {
    return (count * static_cast<int64_t>(c10::elementSize(type)) + 7) / 8 * 8;
  }
  explicit Arena(int64_t size)
      : buffer_(at::detail::empty_cpu({size}, at::kByte)), size_(size) {}
  Tensor take(at::IntArrayRef shape, at::ScalarType type) {
    const int64_t item = static_cast<int64_t>(c10::elementSize(type));
    const int64_t count = c10::multiply_integers(shape);
    TORCH_CHECK(used_ + bytes(count, type) <= size_,
                "internal error: outputs larger than planned");
    Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(buffer_.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU),
        c10::scalarTypeToTypeMeta(type));
    t.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
    t.unsafeGetTensorImpl()->set_storage_offset(used_ / item);
    used_ += bytes(count, type);
    return t;
  }
  Tensor longs(int64_t n) { return take({n}, at::kLong); }
  Tensor filled(at::IntArrayRef shape, int64_t value) {
    Tensor t = take(shape, at::kLong);
    std::fill_n(t.data_ptr<int64_t>(), t.numel(), value);
    return t;
  }

 private:
  Tensor buffer_;
  int64_t size_;
  int64_t used_ = 0;
};

}  // namespace gnn_treelstm_native
