// Dataset: indexable examples, PyTorch-style. get(i) returns one Example; get_batch stacks
// several (a dataset may override it with a faster gather, as TensorDataset does).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace minidl::data {

struct Example {
  Tensor x, y;
};

struct Batch {
  Tensor x, y;  // x [B, ...], y [B, ...]
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual Example get(int64_t index) const = 0;
  virtual int64_t size() const = 0;
  // Stacks get(i) for each index along a new dim 0.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// Rows of x and y as examples; x [N, ...] and y [N, ...] share N.
class TensorDataset final : public Dataset {
 public:
  TensorDataset(Tensor x, Tensor y);
  Example get(int64_t index) const override;
  int64_t size() const override { return x_.shape()[0]; }
  // One row gather per tensor, no per-example tensors.
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& features() const { return x_; }
  const Tensor& labels() const { return y_; }

 private:
  Tensor x_, y_;
};

}  // namespace minidl::data
