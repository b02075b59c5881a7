// bench_gemm --kernel NAME (bench/gemm_cuda.cu): the CUDA GEMM ladder of docs/gemm-ladder.md on
// cuda:0, each rung a kernel one can run and time against the baselines measured in the same run:
//   simt, mma, mma_ldmatrix, mma_pipeline   minidl's kernels (kernels/cuda/gemm/), bfloat16 C = A·B
//                                           (simt: the SIMT kernel on the same bfloat16 matrices)
//   cublas                                  cublasGemmEx, bfloat16 in and out, float32 compute
//   ceiling                                 a register-only mma.sync loop: what mma.sync can issue
//                                           on this GPU with no memory traffic at all (on Hopper
//                                           well below wgmma's peak, which is what the rung aims at)
// Square sizes (--sizes), row-major, random bf16 inputs; each rung's output is checked against
// cuBLAS's (relative to max |C|). Timed with CUDA events: one warm-up, --runs timed calls, the
// median. JSON lines on stdout, a table on stderr. Built in CUDA builds (nvcc) only.
#include "bench/gemm_cuda.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_plan.h"
#include "kernels/cuda/gemm/warp_matrix.cuh"

namespace minidl::bench {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}

// The ceiling: each warp keeps 8 independent accumulator tiles (so no mma waits for the one
// before it) and issues `iters` rounds of 8 mma on register operands. 4096 FLOPs per mma.
constexpr int kCeilingTiles = 8;
__global__ void mma_ceiling_kernel(int iters, float* sink) {
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = 0x3f803f80u ^ (threadIdx.x + i);  // bf16 pairs near 1
  for (int i = 0; i < 2; ++i) b[i] = 0x3f803f80u ^ (threadIdx.x * 3 + i);
  float acc[kCeilingTiles][4] = {};
  for (int it = 0; it < iters; ++it)
#pragma unroll
    for (int t = 0; t < kCeilingTiles; ++t) minidl::cuda::wm::mma_m16n8k16<true>(acc[t], a, b, acc[t]);
  float s = 0;
  for (int t = 0; t < kCeilingTiles; ++t)
    for (int i = 0; i < 4; ++i) s += acc[t][i];
  if (s == 12345.0f) *sink = s;  // keeps the loop; never true for these inputs in practice
}

double median_ms(const std::function<void()>& fn, int runs) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  fn();  // warm-up
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<float> ms(static_cast<size_t>(runs));
  for (float& m : ms) {
    check(cudaEventRecord(start), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&m, start, stop), "cudaEventElapsedTime");
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<float> to_host(const __nv_bfloat16* d, size_t n) {
  std::vector<__nv_bfloat16> h(n);
  check(cudaMemcpy(h.data(), d, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost), "cudaMemcpy");
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

}  // namespace

int run_cuda_gemm_ladder(const std::vector<std::string>& kernels, const std::vector<int64_t>& sizes, int runs) {
  int device = 0;
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::fprintf(stderr, "GEMM ladder on %s (compute capability %d.%d, %d SMs), bf16 in and out, float32 sums\n",
               prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");
  float* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(float)), "cudaMalloc");

  // The register-only ceiling, once: 4 blocks of 8 warps per SM.
  const int iters = 4096, blocks = prop.multiProcessorCount * 4, threads = 256;
  const double ceiling_ms = median_ms([&] { mma_ceiling_kernel<<<blocks, threads>>>(iters, sink); }, runs);
  check(cudaGetLastError(), "mma_ceiling_kernel");
  const double ceiling_tflops =
      4096.0 * kCeilingTiles * iters * (static_cast<double>(blocks) * threads / 32) / (ceiling_ms * 1e-3) / 1e12;
  std::fprintf(stderr, "%-14s %38s %8.1f TFLOP/s\n", "ceiling", "register-only mma.sync bf16 loop", ceiling_tflops);
  std::printf("{\"bench\":\"gemm_ladder\",\"kernel\":\"ceiling\",\"tflops\":%.3f,\"gpu\":\"%s\"}\n", ceiling_tflops, prop.name);

  for (int64_t n : sizes) {
    const size_t count = static_cast<size_t>(n * n);
    std::vector<__nv_bfloat16> host(count);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    __nv_bfloat16 *a, *b, *c, *ref;
    check(cudaMalloc(&a, count * 2), "cudaMalloc");
    check(cudaMalloc(&b, count * 2), "cudaMalloc");
    check(cudaMalloc(&c, count * 2), "cudaMalloc");
    check(cudaMalloc(&ref, count * 2), "cudaMalloc");
    for (auto& v : host) v = __float2bfloat16(dist(rng));
    check(cudaMemcpy(a, host.data(), count * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    for (auto& v : host) v = __float2bfloat16(dist(rng));
    check(cudaMemcpy(b, host.data(), count * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    const double flops = 2.0 * n * n * n;
    // cuBLAS, row-major C = A·B as column-major Cᵀ = Bᵀ·Aᵀ.
    const float one = 1.0f, zero = 0.0f;
    auto cublas = [&] {
      check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, b, CUDA_R_16BF, (int)n, a,
                         CUDA_R_16BF, (int)n, &zero, ref, CUDA_R_16BF, (int)n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    };
    const double cublas_ms = median_ms(cublas, runs);
    const double cublas_tflops = flops / (cublas_ms * 1e-3) / 1e12;
    const std::vector<float> want = to_host(ref, count);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    std::fprintf(stderr, "%-14s %6lld^3 %28s %8.1f TFLOP/s  %8.3f ms\n", "cublas", (long long)n, "", cublas_tflops,
                 cublas_ms);
    std::printf("{\"bench\":\"gemm_ladder\",\"kernel\":\"cublas\",\"n\":%lld,\"tflops\":%.3f,\"ms\":%.5f}\n",
                (long long)n, cublas_tflops, cublas_ms);
    for (const std::string& name : kernels) {
      if (name == "cublas" || name == "ceiling") continue;
      cuda::GemmProblem p;
      p.dtype = DType::BFloat16;
      p.m = p.n = p.k = n;
      p.a = a;
      p.lda = n;
      p.b = b;
      p.ldb = n;
      p.c = c;
      p.ldc = n;
      std::function<void()> fn;
      if (name == "simt") {
        const cuda::NativeGemmPlan plan = cuda::native_gemm_plan(n, n, n, prop.multiProcessorCount);
        if (plan.splits > 1) continue;  // the square sizes here keep K whole
        fn = [&, plan] { cuda::native_sgemm_with_plan(p, plan, prop.multiProcessorCount, nullptr, nullptr); };
      } else {
        cuda::GemmKernel k = cuda::GemmKernel::MmaPipeline;
        if (name == "mma") k = cuda::GemmKernel::Mma;
        else if (name == "mma_ldmatrix") k = cuda::GemmKernel::MmaLdmatrix;
        else if (name != "mma_pipeline") throw std::runtime_error("--kernel " + name + ": unknown");
        const cuda::GemmKernelChoice choice =
            cuda::choose_gemm_kernel(DType::BFloat16, prop.major, prop.minor, 1, n, n, prop.multiProcessorCount);
        fn = [&, k, choice] { cuda::mma_gemm(p, k, choice.mma_tile, nullptr); };
      }
      const double ms = median_ms(fn, runs);
      check(cudaGetLastError(), name.c_str());
      const std::vector<float> got = to_host(c, count);
      double diff = 0;
      for (size_t i = 0; i < count; ++i) diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
      diff /= scale;
      const double tflops = flops / (ms * 1e-3) / 1e12;
      std::fprintf(stderr, "%-14s %6lld^3 %8.1f TFLOP/s  %5.1f%% of cuBLAS  %5.1f%% of ceiling  %8.3f ms  max diff %.1e\n",
                   name.c_str(), (long long)n, tflops, 100 * tflops / cublas_tflops, 100 * tflops / ceiling_tflops, ms,
                   diff);
      std::printf("{\"bench\":\"gemm_ladder\",\"kernel\":\"%s\",\"n\":%lld,\"tflops\":%.3f,\"ms\":%.5f,"
                  "\"of_cublas\":%.4f,\"of_ceiling\":%.4f,\"max_rel_diff\":%.3e}\n",
                  name.c_str(), (long long)n, tflops, ms, tflops / cublas_tflops, tflops / ceiling_tflops, diff);
      // bf16 outputs of K-long float32 sums: cuBLAS and minidl round the same sums differently
      // (order), at most a couple of bf16 ulps of max |C| (2^-7); 2e-2 flags a wrong kernel.
      if (diff > 2e-2) {
        std::fprintf(stderr, "bench_gemm: %s differs from cuBLAS at %lld^3 (%.3g of max |C|)\n", name.c_str(),
                     (long long)n, diff);
        return 1;
      }
    }
    (void)cudaFree(a);
    (void)cudaFree(b);
    (void)cudaFree(c);
    (void)cudaFree(ref);
  }
  (void)cudaFree(sink);
  (void)cublasDestroy(handle);
  return 0;
}

}  // namespace minidl::bench
