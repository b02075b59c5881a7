// Runs a launched grid on the CPU: its blocks on a pool of host threads in a shuffled order,
// the threads of each block as fibers (block_runner.cpp explains the model).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace cudasim {

struct GridOutcome {
  cudaError_t code = cudaSuccess;  // cudaSuccess, or the fault that stopped the grid
  std::string message;             // what went wrong, where (block, thread, launch site)
};

// Runs every block of `spec` and returns when all are done, or when one faulted and the blocks
// already started have stopped. `sequence` numbers the launch (it seeds the block order).
GridOutcome run_grid(const LaunchSpec& spec, uint64_t sequence);

}  // namespace cudasim
