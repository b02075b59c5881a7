// Generator: (seed, offset) bookkeeping over Philox counters.
#include "core/generator.h"

#include "core/philox.h"

namespace minidl {

Generator& Generator::operator=(const Generator& other) {
  if (this != &other) {
    const GeneratorState s = other.state();
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = s.seed;
    offset_ = s.offset;
  }
  return *this;
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {seed_, offset_};
}

void Generator::set_state(GeneratorState s) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = s.seed;
  offset_ = s.offset;
}

uint64_t Generator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t first = offset_;
  offset_ += n;
  return first;
}

uint64_t Generator::next_u64() {
  uint64_t seed, off;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seed = seed_;
    off = offset_++;
  }
  return philox::bits64(philox::block_for(seed, off, 0));
}

uint64_t Generator::next_below(uint64_t bound) {
  // Rejection sampling: draw until the value falls below the largest multiple of bound.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  for (;;) {
    const uint64_t r = next_u64();
    if (r < limit) return r % bound;
  }
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace minidl
