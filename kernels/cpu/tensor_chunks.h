// The tasks of a CPU multi-tensor kernel (multi_tensor.cpp, optimizer.cpp's *_step_many): every
// tensor of a list cut into chunks of kTensorChunk elements (a tensor's last chunk may be
// shorter; a chunk never spans two tensors; an empty tensor has none), in list order. The chunks
// of a whole list are the tasks of one parallel loop, so that a list of many small tensors (the
// biases and LayerNorm weights of a model) costs one parallel region, not one per tensor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace minidl::cpu {

inline constexpr int64_t kTensorChunk = 1 << 14;  // elements per task

struct TensorChunk {
  size_t tensor;         // index in the list
  int64_t begin, end;    // elements [begin, end) of that tensor
};

inline std::vector<TensorChunk> chunks_of(const std::vector<Tensor>& tensors) {
  std::vector<TensorChunk> chunks;
  for (size_t t = 0; t < tensors.size(); ++t)
    for (int64_t b = 0; b < tensors[t].numel(); b += kTensorChunk)
      chunks.push_back({t, b, std::min(b + kTensorChunk, tensors[t].numel())});
  return chunks;
}

inline int64_t total_numel(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  return n;
}

}  // namespace minidl::cpu
