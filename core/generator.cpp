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
thread_local BatchRows current_rows;  // Note [random draws of a batch shard]
thread_local bool has_rows = false;
}  // namespace

BatchRowsGuard::BatchRowsGuard(BatchRows rows) : previous_(current_rows), had_previous_(has_rows) {
  MINIDL_CHECK(rows.begin >= 0 && rows.rows >= 0 && rows.total >= 0 && rows.begin <= rows.total - rows.rows,
               "BatchRowsGuard: rows [", rows.begin, ", ", rows.begin + rows.rows, ") are not rows of a batch of ",
               rows.total, " rows");
  current_rows = rows;
  has_rows = true;
}

BatchRowsGuard::~BatchRowsGuard() {
  current_rows = previous_;
  has_rows = had_previous_;
}

const BatchRows* current_batch_rows() { return has_rows ? &current_rows : nullptr; }

uint64_t reserve_rows(Generator& g, int64_t rows, uint64_t per_row) {
  const BatchRows* shard = current_batch_rows();
  if (shard == nullptr || rows != shard->rows) return g.reserve(per_row * static_cast<uint64_t>(rows));
  const uint64_t first = g.reserve(per_row * static_cast<uint64_t>(shard->total));
  return first + per_row * static_cast<uint64_t>(shard->begin);
}

}  // namespace minidl
