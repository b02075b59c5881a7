// Sequential and random samplers.
#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/generator.h"

namespace minidl::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  MINIDL_CHECK(n >= 0, "SequentialSampler: negative size ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  MINIDL_CHECK(n >= 0, "RandomSampler: negative size ", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  MINIDL_CHECK(epoch >= 0 && epoch < kMaxEpochs, "RandomSampler: epoch ", epoch, " is out of range: epochs 0 to ",
               kMaxEpochs - 1, " have random streams of their own (a later one would repeat an earlier order)");
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  // One Philox stream per epoch: key = seed, counters start at epoch << 40 (an epoch uses n
  // counters, far fewer than 2^40), so epochs below 2^24 never share random numbers.
  Generator gen;
  gen.set_state(GeneratorState{seed_, static_cast<uint64_t>(epoch) << 40});
  for (int64_t i = n_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace minidl::data
