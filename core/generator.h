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
// interleave in whatever order the threads happen to run (Note [random draws of a sliced
// batch] below says how they still draw the whole batch's numbers). Guards nest; each must be
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

// Note [random draws of a sliced batch]
// A process of a data-parallel job may train on rows [begin, begin + rows) of a batch of
// `total` rows that every process builds alike (the Fashion-MNIST trainer over processes, Note
// [a slice of every batch] in samples/fashion_mnist/trainer.cpp), and a DataParallel replica
// runs on such a slice (its shard). With a BatchSliceGuard around its forward, an op that draws
// per row (dropout) reserves the counters of all `total` rows and uses those of its own rows,
// the ones a single process would use for them. So:
//   - every process's (every replica's) generator advances alike, even when the rows split
//     unevenly, and one saved generator state resumes them all (the checkpoint holds rank 0's);
//   - two processes never draw the same mask (each seeded alike, they would otherwise draw
//     the same numbers for their first rows);
//   - the masks are those of a single process training on the whole batch, whatever the
//     number of processes or replicas.
// An op whose first dimension is not `rows` draws as it would without the guard. The guard is
// per thread: set it on the thread that runs the forward. Guards nest (the inner one holds until
// it ends); each must be destroyed on the thread that made it, innermost first.
struct BatchSlice {
  int64_t begin = 0;
  int64_t rows = 0;
  int64_t total = 0;
};

class BatchSliceGuard {
 public:
  // Throws a minidl::Error unless 0 <= begin, 0 <= rows and begin + rows <= total.
  explicit BatchSliceGuard(BatchSlice slice);
  ~BatchSliceGuard();
  BatchSliceGuard(const BatchSliceGuard&) = delete;
  BatchSliceGuard& operator=(const BatchSliceGuard&) = delete;

 private:
  BatchSlice previous_;
  bool had_previous_;
};

// The slice set on this thread, or nullptr.
const BatchSlice* current_batch_slice();

// Counters for a random draw of `per_row` numbers for each of `rows` rows: reserves them from
// `g` and returns the offset of the first one this thread uses, for all `total` rows under a
// BatchSliceGuard of `rows` rows (Note [random draws of a sliced batch]; also when `rows` is 0,
// so that a process with no rows of a batch stays in step), else for these rows alone.
uint64_t reserve_rows(Generator& g, int64_t rows, uint64_t per_row);

}  // namespace minidl
