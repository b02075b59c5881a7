// io/atomic_file: the temporaries a killed writer leaves behind are removed by the next write of
// the same file, and nothing else is (a live writer's, another machine's, another file's).
// The killed writer is a forked child whose write() runs into RLIMIT_FSIZE with SIGXFSZ at its
// default action, so the kernel kills it mid-write, as kill -9 would: no destructor runs.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "temp_dir.h"

using minidl::io::write_file_atomically;
using minidl::testing::TempDir;

namespace {

// Forks a writer of `path` that the kernel kills in the middle of writing; returns its pid.
pid_t killed_writer(const std::string& path) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_DFL);
    struct rlimit small = {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &small);
    try {
      write_file_atomically(path, std::string(100000, 'x'));
    } catch (...) {
    }
    ::_exit(0);  // not reached: SIGXFSZ ends the child inside write()
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGXFSZ);
  return pid;
}

}  // namespace

TEST_CASE("a write removes the temporaries its killed earlier writers left, and nothing else", "[io][atomic]") {
  TempDir dir;
  const std::string path = dir.file("c.safetensors");
  write_file_atomically(path, "old");
  const pid_t dead = killed_writer(path);

  // The litter: one temporary beside the intact old file, named after its writer's pid.
  std::vector<std::string> entries = dir.entries();
  REQUIRE(entries.size() == 2);
  CHECK(minidl::testing::read_bytes(path) == "old");
  const std::string litter = entries[0] == "c.safetensors" ? entries[1] : entries[0];
  const std::string tag = "-" + std::to_string(dead) + ".";
  const size_t at = litter.rfind(tag);
  REQUIRE(litter.rfind(".c.safetensors.tmp.", 0) == 0);
  REQUIRE(at != std::string::npos);
  CHECK(litter.size() == at + tag.size() + 6);  // mkstemp's six characters end the name

  // Files a write must leave alone: this live process's temporary, pid 1's (alive), a dead
  // pid's from another machine, an old-style name without a pid, another file's temporary.
  const std::string host_stem = litter.substr(0, at);  // ".c.safetensors.tmp.<host>"
  const std::vector<std::string> others = {
      host_stem + "-" + std::to_string(::getpid()) + ".aaaaaa",
      host_stem + "-1.bbbbbb",
      ".c.safetensors.tmp.another-machine" + tag + "cccccc",
      ".c.safetensors.tmp.dddddd",
      ".d.safetensors" + litter.substr(std::string(".c.safetensors").size()),
  };
  for (const std::string& name : others) minidl::testing::write_bytes(dir.file(name), "keep");

  write_file_atomically(path, "new");
  std::vector<std::string> expected = others;
  expected.push_back("c.safetensors");
  std::sort(expected.begin(), expected.end());
  CHECK(dir.entries() == expected);
  CHECK(minidl::testing::read_bytes(path) == "new");
}
