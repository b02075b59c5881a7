// Dataset batching and TensorDataset.
#include "data/dataset.h"

#include "core/autograd.h"
#include "core/ops/view.h"

namespace minidl::data {

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  MINIDL_CHECK(!indices.empty(), "Dataset::get_batch: empty list of indices");
  NoGradGuard no_grad;
  std::vector<Tensor> xs, ys;
  xs.reserve(indices.size());
  ys.reserve(indices.size());
  for (int64_t i : indices) {
    MINIDL_CHECK(i >= 0 && i < size(), "Dataset::get_batch: index ", i, " out of range for a dataset of ", size());
    Example e = get(i);
    xs.push_back(e.x.unsqueeze(0));
    ys.push_back(e.y.unsqueeze(0));
  }
  return Batch{ops::cat(xs, 0), ops::cat(ys, 0)};
}

TensorDataset::TensorDataset(Tensor x, Tensor y) : x_(std::move(x)), y_(std::move(y)) {
  check_defined(x_, "TensorDataset", "x");
  check_defined(y_, "TensorDataset", "y");
  MINIDL_CHECK(x_.dim() >= 1 && y_.dim() >= 1, "TensorDataset: x and y need a leading example dim, got ", x_.shape(),
               " and ", y_.shape());
  MINIDL_CHECK(x_.shape()[0] == y_.shape()[0], "TensorDataset: x has ", x_.shape()[0], " examples (shape ", x_.shape(),
               ") but y has ", y_.shape()[0], " (shape ", y_.shape(), ")");
  x_ = x_.detach().contiguous();
  y_ = y_.detach().contiguous();
}

Example TensorDataset::get(int64_t index) const {
  MINIDL_CHECK(index >= 0 && index < size(), "TensorDataset::get: index ", index, " out of range for ", size(),
               " examples");
  return Example{x_.narrow(0, index, 1).squeeze(0), y_.narrow(0, index, 1).squeeze(0)};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  MINIDL_CHECK(!indices.empty(), "TensorDataset::get_batch: empty list of indices");
  return Batch{ops::index_rows(x_, indices), ops::index_rows(y_, indices)};
}

}  // namespace minidl::data
