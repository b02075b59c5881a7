// The CUDA half of bench_gemm (bench/gemm_cuda.cu): the GEMM ladder of docs/gemm-ladder.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minidl::bench {

// Times `kernels` (simt, mma, mma_ldmatrix, mma_pipeline; cuBLAS and the register-only mma
// ceiling always) on bf16 squares of `sizes` on cuda:0, `runs` timed calls each; returns the
// process status (1 when a kernel's result differs from cuBLAS's). Throws std::runtime_error on
// a CUDA or cuBLAS failure.
int run_cuda_gemm_ladder(const std::vector<std::string>& kernels, const std::vector<int64_t>& sizes, int runs);

}  // namespace minidl::bench
