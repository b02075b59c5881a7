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

// The default generator: the one global generator, or, on a thread inside a
// DefaultGeneratorGuard, the generator that guard names.
Generator& default_generator();
// Seeds the default generator (like torch.manual_seed).
void manual_seed(uint64_t seed);

// Makes `g` this thread's default generator for the guard's lifetime. DataParallel gives each
// replica thread its own copy of the caller's generator, so the replicas' draws do not
// interleave in whatever order the threads happen to run (Note [random draws of a batch
// shard] below says how they still draw the whole batch's numbers). Guards nest; each must be
// destroyed on the thread that made it, innermost first (a scope does that).
class DefaultGeneratorGuard {
 public:
  explicit DefaultGeneratorGuard(Generator& g);
  ~DefaultGeneratorGuard();
  DefaultGeneratorGuard(const DefaultGeneratorGuard&) = delete;
  DefaultGeneratorGuard& operator=(const DefaultGeneratorGuard&) = delete;

 private:
  Generator* previous_;
};

// Note [random draws of a batch shard]
// Data-parallel training runs a model on a shard of a batch: a replica on its rows, a process on
// its rows. An op that draws random numbers per row (dropout) must then draw, for each of its
// rows, the numbers one device would draw for that row of the whole batch; otherwise two shards
// seeded alike draw the same mask, and shards of different sizes leave their generators at
// different offsets (a checkpoint holds one generator state for every process).
// So the wrapper that runs the forward on a shard (parallel/batch_shard.h) puts a BatchRowsGuard
// around that forward, on the thread that runs it, saying "this forward computes rows
// [begin, begin + rows) of a batch of `total` rows". reserve_rows() then reserves the counters
// of all `total` rows, as one device does, and hands the op those of its own rows. An op whose
// first dimension is not `rows` is not computing the batch's rows (a tensor reshaped to another
// first dimension, a parameter-shaped draw) and draws as it would without the guard. Without a
// guard every draw is the tensor's own. Guards nest; each must be destroyed on the thread that
// made it, innermost first.
struct BatchRows {
  int64_t begin = 0;
  int64_t rows = 0;
  int64_t total = 0;
};

class BatchRowsGuard {
 public:
  // Throws a minidl::Error unless 0 <= begin, 0 <= rows and begin + rows <= total.
  explicit BatchRowsGuard(BatchRows rows);
  ~BatchRowsGuard();
  BatchRowsGuard(const BatchRowsGuard&) = delete;
  BatchRowsGuard& operator=(const BatchRowsGuard&) = delete;

 private:
  BatchRows previous_;
  bool had_previous_;
};

// The rows set on this thread by a BatchRowsGuard, or nullptr.
const BatchRows* current_batch_rows();

// Counters for a random draw of `per_row` numbers for each of `rows` rows: reserves them from
// `g` and returns the offset of the first one this op uses — for all `total` rows under a
// BatchRowsGuard of `rows` rows (Note [random draws of a batch shard]; also when `rows` is 0, so
// that a shard with no rows stays in step), else for these rows alone.
uint64_t reserve_rows(Generator& g, int64_t rows, uint64_t per_row);

}  // namespace minidl
