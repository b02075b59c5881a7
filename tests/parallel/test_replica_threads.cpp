// Tests for parallel/replica_threads.*: task 0 on the caller, the others concurrently on
// persistent workers (the same threads every run), fewer tasks than replicas, and the lowest
// failing task's exception rethrown after all finished.
#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/start_thread.h"
#include "parallel/replica_threads.h"
#include "tests/error_message.h"

using namespace minidl::parallel;

TEST_CASE("replica threads run task 0 on the caller and the rest on the same workers every run",
          "[parallel][threads]") {
  ReplicaThreads threads(4);
  std::vector<std::thread::id> first(4), second(4);
  threads.run(4, [&](int r) { first[r] = std::this_thread::get_id(); });
  threads.run(4, [&](int r) { second[r] = std::this_thread::get_id(); });
  CHECK(first[0] == std::this_thread::get_id());
  CHECK(std::set<std::thread::id>(first.begin(), first.end()).size() == 4);
  CHECK(first == second);

  std::atomic<int> ran{0};
  std::vector<int> seen(4, 0);
  threads.run(2, [&](int r) {
    ++seen[r];
    ++ran;
  });
  CHECK(ran == 2);
  CHECK(seen == std::vector<int>{1, 1, 0, 0});
  CHECK_THROWS_WITH(threads.run(5, [](int) {}), Catch::Contains("1 to 4"));
}

TEST_CASE("replica threads finish every task and rethrow the lowest failing one", "[parallel][threads]") {
  ReplicaThreads threads(3);
  std::atomic<int> finished{0};
  auto task = [&](int r) {
    ++finished;
    if (r >= 1) throw std::runtime_error("replica " + std::to_string(r) + " failed");
  };
  CHECK_THROWS_WITH(threads.run(3, task), "replica 1 failed");
  CHECK(finished == 3);
  threads.run(3, [&](int) { ++finished; });  // usable after a failure
  CHECK(finished == 6);
}

TEST_CASE("replica threads: a thread the system refuses is a minidl::Error and the started ones are joined",
          "[parallel][threads]") {
  minidl::testing::fail_thread_starts_after(2);  // the threads of replicas 1 and 2 start, 3 is refused
  const std::string message = minidl::testing::error_message([] { ReplicaThreads threads(5); });
  minidl::testing::fail_thread_starts_after(-1);
  CHECK_THAT(message, Catch::Contains("ReplicaThreads: the thread of replica 3 of 5") &&
                          Catch::Contains("cannot start a thread"));
  ReplicaThreads threads(5);  // nothing left behind: a new set starts and runs
  std::atomic<int> ran{0};
  threads.run(5, [&](int) { ++ran; });
  CHECK(ran.load() == 5);
}
