// Runs a launched grid on the CPU: its blocks on a pool of host threads in a shuffled order,
// the threads of each block as fibers (block_runner.cpp explains the model).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cudasim {

struct GridOutcome {
  cudaError_t code = cudaSuccess;  // cudaSuccess, or the fault that stopped the grid
  std::string message;             // what went wrong, where (block, thread, launch site)
};

// The cp.async copies one simulated thread has issued and not yet waited for (warp_matrix.cpp:
// the copy lands at cp.async.wait_group, not at the issue). `group` is the commit group the copy
// belongs to: the number of cp.async.commit_group calls the thread had made when it issued it.
struct PendingCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  int src_bytes = 0;  // copied; the rest of the 16 bytes is zero-filled
  long group = 0;
};
struct AsyncCopies {
  std::vector<PendingCopy> pending;
  long committed = 0;  // commit groups closed so far
};

// The calling simulated thread's copies; `what` names the instruction in the fault raised when
// no simulated thread is running.
AsyncCopies& current_async_copies(const char* what);

// Runs every block of `spec` and returns when all are done, or when one faulted and the blocks
// already started have stopped. `sequence` numbers the launch (it seeds the block order).
GridOutcome run_grid(const LaunchSpec& spec, uint64_t sequence);

}  // namespace cudasim
