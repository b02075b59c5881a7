// kernels/cpu/thread_pool: every part runs exactly once per run, back to back and with parts
// below the thread count; a call from inside a part or from a second thread runs alone, with
// the same parts; an exception in a part reaches the caller and the pool keeps working.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/start_thread.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/error_message.h"

using minidl::cpu::ThreadPool;

TEST_CASE("thread pool runs every part exactly once, run after run", "[kernels][thread-pool]") {
  ThreadPool& pool = ThreadPool::instance();
  const int threads = pool.max_threads();
  std::vector<std::atomic<int>> hits(static_cast<size_t>(threads));
  std::atomic<int> wrong_count{0};  // Catch2 assertions are not thread-safe: count, check after
  for (int run = 0; run < 20000; ++run) {
    const int parts = 1 + run % threads;  // also fewer parts than threads
    pool.run(parts, [&](int part, int count) {
      if (count != parts) wrong_count.fetch_add(1);
      hits[static_cast<size_t>(part)].fetch_add(1, std::memory_order_relaxed);
    });
  }
  CHECK(wrong_count.load() == 0);
  int total = 0;
  for (auto& h : hits) total += h.load();
  CHECK(total == [&] {
    int t = 0;
    for (int run = 0; run < 20000; ++run) t += 1 + run % threads;
    return t;
  }());
}

TEST_CASE("thread pool: nested and concurrent calls run all their parts on their own thread", "[kernels][thread-pool]") {
  ThreadPool& pool = ThreadPool::instance();
  const int parts = pool.max_threads();
  std::atomic<int> inner{0}, elsewhere{0};
  pool.run(parts, [&](int, int) {
    const std::thread::id me = std::this_thread::get_id();
    pool.run(parts, [&](int, int count) {
      if (std::this_thread::get_id() != me || count != parts) elsewhere.fetch_add(1);
      inner.fetch_add(1);
    });
  });
  CHECK(inner.load() == parts * parts);
  CHECK(elsewhere.load() == 0);

  std::atomic<int> sum{0};
  auto hammer = [&] {
    for (int i = 0; i < 2000; ++i) pool.run(parts, [&](int part, int) { sum.fetch_add(part + 1); });
  };
  std::thread other(hammer);
  hammer();
  other.join();
  CHECK(sum.load() == 2 * 2000 * parts * (parts + 1) / 2);
}

TEST_CASE("thread pool rethrows a part's exception on the caller and stays usable", "[kernels][thread-pool]") {
  ThreadPool& pool = ThreadPool::instance();
  const int parts = pool.max_threads();
  CHECK_THROWS_WITH(pool.run(parts, [&](int part, int count) {
                      if (part == count - 1) throw std::runtime_error("part failed");
                    }),
                    "part failed");
  std::atomic<int> ran{0};
  pool.run(parts, [&](int, int) { ran.fetch_add(1); });
  CHECK(ran.load() == parts);
}

TEST_CASE("thread pool: a worker the system refuses is a minidl::Error, and a later run starts the team", "[kernels][thread-pool]") {
  ThreadPool pool(4);  // a team of its own, not started yet
  std::atomic<int> ran{0};
  auto count = [&](int, int) { ran.fetch_add(1); };
  minidl::testing::fail_thread_starts_after(1);  // worker 1 starts, worker 2 is refused
  const std::string message = minidl::testing::error_message([&] { pool.run(4, count); });
  minidl::testing::fail_thread_starts_after(-1);
  CHECK_THAT(message, Catch::Contains("cpu::ThreadPool: worker 2 of 3") && Catch::Contains("cannot start a thread"));
  CHECK(ran.load() == 0);  // no part ran in the failed run
  pool.run(4, count);      // the team starts now; worker 1 of the failed start was joined
  CHECK(ran.load() == 4);
}
