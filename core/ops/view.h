// View and copy ops: reshape, narrow, split, chunk, unbind, transpose, expand, (un)squeeze,
// contiguous, clone and device/dtype conversion. Views share storage; every op here is
// differentiable.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace minidl::ops {

Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// The windows of split_size along dim (the last one shorter), like torch.split; chunk cuts
// `chunks` windows of ceil(size / chunks). Their backward is one node for all the parts (Note
// [one node for several outputs], core/autograd.h), so prefer them to a narrow per part.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);
// The x.size(dim) slices along dim with dim removed, like torch.unbind (q, k, v of a fused
// [B, T, 3, H, hs] projection: qkv.unbind(2)).
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, Device device, DType dtype);
// Concatenates along dim (negative counts from the end): every part has the first one's rank,
// dtype, device and sizes except along dim. Differentiable.
Tensor cat(const std::vector<Tensor>& parts, int64_t dim = 0);
// Rows of x (any rank, along dim 0) picked by int64 indices; not differentiable (data path).
Tensor index_rows(const Tensor& x, const std::vector<int64_t>& indices);

}  // namespace minidl::ops
