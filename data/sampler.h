// Samplers: the order in which a DataLoader visits a dataset, one list of indices per epoch.
// RandomSampler's order depends only on (seed, epoch): the same seed gives the same orders
// on every run, and each epoch gets a different one.
#pragma once

#include <cstdint>
#include <vector>

namespace minidl::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

class RandomSampler final : public Sampler {
 public:
  // Epochs 0 .. kMaxEpochs - 1 each have their own random stream; indices() refuses others.
  static constexpr int64_t kMaxEpochs = int64_t{1} << 24;

  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;  // a Fisher–Yates permutation

 private:
  int64_t n_;
  uint64_t seed_;
};

}  // namespace minidl::data
