// Generator: (seed, offset) bookkeeping over Philox counters.
#include "core/generator.h"

#include "core/error.h"
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

namespace {
thread_local Generator* thread_default = nullptr;  // set by DefaultGeneratorGuard
}  // namespace

Generator& default_generator() {
  static Generator g(0);
  return thread_default ? *thread_default : g;
}

DefaultGeneratorGuard::DefaultGeneratorGuard(Generator& g) : previous_(thread_default) { thread_default = &g; }

DefaultGeneratorGuard::~DefaultGeneratorGuard() { thread_default = previous_; }

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
thread_local BatchSlice current_slice;
thread_local bool has_slice = false;
}  // namespace

BatchSliceGuard::BatchSliceGuard(BatchSlice slice) : previous_(current_slice), had_previous_(has_slice) {
  MINIDL_CHECK(slice.begin >= 0 && slice.rows >= 0 && slice.total >= 0 && slice.begin <= slice.total - slice.rows,
               "BatchSliceGuard: rows [", slice.begin, ", ", slice.begin + slice.rows,
               ") are not a slice of a batch of ", slice.total, " rows");
  current_slice = slice;
  has_slice = true;
}

BatchSliceGuard::~BatchSliceGuard() {
  current_slice = previous_;
  has_slice = had_previous_;
}

const BatchSlice* current_batch_slice() { return has_slice ? &current_slice : nullptr; }

uint64_t reserve_rows(Generator& g, int64_t rows, uint64_t per_row) {
  const BatchSlice* slice = current_batch_slice();
  if (slice == nullptr || rows != slice->rows) return g.reserve(per_row * static_cast<uint64_t>(rows));
  const uint64_t first = g.reserve(per_row * static_cast<uint64_t>(slice->total));
  return first + per_row * static_cast<uint64_t>(slice->begin);
}

}  // namespace minidl
