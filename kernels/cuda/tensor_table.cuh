// The tensor table behind the multi-tensor kernels (multi_tensor.cu: clip_grad_norm_'s norm and
// scaling; optimizer.cu: the SGD and Adam updates over all parameters): PyTorch's
// multi_tensor_apply, with the table in device memory. The host writes, for n tensors, kLists
// pointer lists (list l, entry t: tensor t of the l-th list, e.g. parameters, gradients, states),
// the element counts (those of list 0, which every list shares) and the first chunk of each
// tensor (chunks of `chunk` elements; a chunk never spans two tensors) into a CPU tensor, and
// copies it to the device in one copy (which has read its pageable source when it returns; the
// device block is freed with `storage`, which the caching allocator reuses only after the
// kernel that reads it; during a graph capture the host side is pinned and kept by the graph).
// One launch then covers any number of tensors: block b walks chunks b, b + grid, ..., finding
// each chunk's tensor by binary search in the table.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

template <int kLists>
struct TensorTable {
  const int64_t* ptr[kLists];  // ptr[l][t]: list l's tensor t, as an integer (0: an undefined tensor)
  const int64_t* numel;        // [n]
  const int64_t* first_chunk;  // [n + 1]: the chunks of tensor t are first_chunk[t] .. first_chunk[t + 1] - 1
  int n;
};

#if defined(__CUDACC__) || defined(MINIDL_CUDA_SIM)
// The tensor holding global chunk c: the last t with first_chunk[t] <= c.
template <int kLists>
__device__ inline int tensor_of(const TensorTable<kLists>& tab, int64_t c) {
  int lo = 0, hi = tab.n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tab.first_chunk[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <int kLists>
__device__ inline float* tensor_data(const TensorTable<kLists>& tab, int list, int t) {
  return reinterpret_cast<float*>(static_cast<uintptr_t>(tab.ptr[list][t]));
}
#endif

// Uploads the table of `lists` (each of the same length, entry t of each with list 0's element
// count or undefined) to be's device; `storage` keeps it alive, `chunks` receives the count.
template <int kLists>
TensorTable<kLists> upload_tensor_table(CudaBackend& be, const std::array<const std::vector<Tensor>*, kLists>& lists,
                                        int64_t chunk, Tensor& storage, int64_t& chunks) {
  const int64_t n = static_cast<int64_t>(lists[0]->size());
  const int64_t words = (kLists + 2) * n + 1;  // [ptr list 0 .. kLists-1][numel][first_chunk n + 1]
  Tensor host = empty(Shape{words}, TensorOptions(DType::Int64, Device::cpu()));
  int64_t* h = host.data<int64_t>();
  chunks = 0;
  for (int64_t t = 0; t < n; ++t) {
    for (int l = 0; l < kLists; ++l) {
      const Tensor& x = (*lists[static_cast<size_t>(l)])[static_cast<size_t>(t)];
      h[l * n + t] = x.defined() ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(x.raw_data())) : 0;
    }
    const int64_t numel = (*lists[0])[static_cast<size_t>(t)].numel();
    h[kLists * n + t] = numel;
    h[(kLists + 1) * n + t] = chunks;
    chunks += ceil_div(numel, chunk);
  }
  h[(kLists + 2) * n] = chunks;
  if (be.capturing()) {
    // A graph replays this copy from the same host address every time (graph.cu): pinned
    // memory that the graph keeps, rather than a pageable buffer freed on return.
    host = pin_memory(host);
    be.keep_for_graph(host);
  }
  storage = empty(host.shape(), TensorOptions(DType::Int64, be.device()));
  MINIDL_CUDA_CHECK(cudaMemcpyAsync(storage.raw_data(), host.raw_data(), static_cast<size_t>(words) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, be.stream()));
  const int64_t* d = storage.data<int64_t>();
  TensorTable<kLists> tab{};
  for (int l = 0; l < kLists; ++l) tab.ptr[l] = d + l * n;
  tab.numel = d + kLists * n;
  tab.first_chunk = d + (kLists + 1) * n;
  tab.n = static_cast<int>(n);
  return tab;
}

}  // namespace minidl::cuda
