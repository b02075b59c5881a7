// Generator: the seeded source of randomness. It holds (seed, offset) for the counter-based
// Philox generator (core/philox.h): each random tensor of n elements takes counters
// [offset, offset + n) and advances the offset by n, so the same seed gives the same numbers,
// whatever the device. `default_generator()` is the one global generator (seed 0 at start).
#pragma once

#include <cstdint>
#include <mutex>

namespace minidl {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator& other) : seed_(other.seed_), offset_(other.offset_) {}
  Generator& operator=(const Generator& other);

  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  GeneratorState state() const;
  void set_state(GeneratorState s);

  // Reserves `n` counters; returns the offset of the first one.
  uint64_t reserve(uint64_t n);
  // One uniformly distributed 64-bit integer (uses one counter); used by samplers.
  uint64_t next_u64();
  // A uniform integer in [0, bound) without modulo bias (bound > 0).
  uint64_t next_below(uint64_t bound);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

Generator& default_generator();
// Seeds the default generator (like torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace minidl
