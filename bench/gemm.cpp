// bench_gemm (bench/gemm.cpp): GFLOP/s of minidl's CPU GEMM (Backend::matmul, float32, row-major C = A·B) on
// square shapes and the Fashion-MNIST MLP's shapes at batch 128, beside OpenBLAS's cblas_sgemm
// on the same data in the same run when it was found at configure time (MINIDL_HAVE_OPENBLAS).
// --kernel NAME[,NAME...] (CUDA builds) runs the CUDA GEMM ladder instead (bench/gemm_cuda.cu,
// docs/gemm-ladder.md): simt, mma, mma_ldmatrix, mma_pipeline or all, on bf16 squares of --sizes,
// beside cuBLAS's bf16 GEMM and a register-only mma.sync ceiling measured in the same run.
// --char-gpt large|small times instead every GEMM of one char-GPT step (the larger recipe or the
// default one), forward and backward, with the transposes the step uses (A·Bᵀ forward, A·B for
// dX, Aᵀ·B for dW).
// --half adds the same products with bfloat16 and float16 A, B and C (float32 accumulation;
// bfloat16 through the AVX512_BF16 dot-product micro-kernel where the CPU has it) and their
// speed relative to float32.
// --gelu times instead the char-GPT's c_fc layer, gelu(x·Wᵀ + b) with x [rows, C], W [4C, C],
// in float32 and bfloat16: the product alone (x·Wᵀ + b) and with its GELU (Activation::GELU, what
// ops::linear_gelu runs: on the CPU the product, then a GELU pass over it, Note [GELU after the CPU
// GEMM, not in it] in kernels/cpu/linear.cpp), the GELU's share, and its rate in elements per
// nanosecond; the output must be the bits of a separate gelu_forward on the product.
// Each case: fresh random data, one warm-up call, calls batched into samples of >= --min-ms,
// --reps samples, the median reported; all minidl cases run before all OpenBLAS cases (see the
// note in main). Threads: OMP_NUM_THREADS, which the CPU kernels' thread pool reads
// (host_threads() reports the pool's count), and OpenBLAS is told the same count. JSON lines
// on stdout, a table on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/backend.h"
#include "core/host_parallel.h"
#include "core/tensor.h"

#ifdef MINIDL_BENCH_CUDA
#include "bench/gemm_cuda.h"
#endif

#ifdef MINIDL_HAVE_OPENBLAS
#include <cblas.h>
// Declared by OpenBLAS's own cblas.h only (not by the netlib one an alternative may point at).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);
#endif

namespace {

using namespace minidl;

// C[M, N] = op(A)·op(B): A stored [M, K] (or [K, M] when ta), B stored [K, N] (or [N, K] when tb).
struct GemmCase {
  int64_t m, k, n;
  const char* what;
  bool ta = false, tb = false;
  double a_at(const float* a, int64_t i, int64_t p) const { return ta ? a[p * m + i] : a[i * k + p]; }
  double b_at(const float* b, int64_t p, int64_t j) const { return tb ? b[j * k + p] : b[p * n + j]; }
};

// The GEMMs of one char-GPT step: the larger recipe (B 8 × T 256 = 2048 rows, C 256) or the
// default one (B 12 × T 64 = 768 rows, C 128), 4·C in the MLP, vocabulary 73. Each linear layer
// x[rows, in]·Wᵀ forward (W stored [out, in]: B transposed), then its backward dX = dY·W and
// dW = dYᵀ·x (A transposed).
std::vector<GemmCase> char_gpt_cases(const std::string& recipe) {
  struct Layer {
    int64_t in, out;
    const char* fwd;
    const char* dx;
    const char* dw;
  };
  const int64_t rows = recipe == "small" ? 768 : 2048, c = recipe == "small" ? 128 : 256;
  const Layer layers[] = {
      {c, 3 * c, "char-gpt c_attn fwd", "char-gpt c_attn dX", "char-gpt c_attn dW"},
      {c, c, "char-gpt attn.c_proj fwd", "char-gpt attn.c_proj dX", "char-gpt attn.c_proj dW"},
      {c, 4 * c, "char-gpt c_fc fwd", "char-gpt c_fc dX", "char-gpt c_fc dW"},
      {4 * c, c, "char-gpt mlp.c_proj fwd", "char-gpt mlp.c_proj dX", "char-gpt mlp.c_proj dW"},
      {c, 73, "char-gpt lm_head fwd", "char-gpt lm_head dX", "char-gpt lm_head dW"},
  };
  std::vector<GemmCase> cases;
  for (const Layer& l : layers) {
    cases.push_back({rows, l.in, l.out, l.fwd, false, true});
    cases.push_back({rows, l.out, l.in, l.dx, false, false});
    cases.push_back({l.out, rows, l.in, l.dw, true, false});
  }
  return cases;
}

// Median seconds per call of fn: one warm-up call, then `reps` samples, each of enough calls
// to last at least min_seconds (small shapes take microseconds, below the clock's noise).
double median_seconds_per_call(const std::function<void()>& fn, int reps, double min_seconds) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  fn();
  double once = std::chrono::duration<double>(clock::now() - t0).count();
  int64_t calls = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_seconds / std::max(once, 1e-9))));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    auto start = clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    samples.push_back(std::chrono::duration<double>(clock::now() - start).count() / static_cast<double>(calls));
  }
  std::nth_element(samples.begin(), samples.begin() + reps / 2, samples.end());
  return samples[reps / 2];
}

// Largest |c - reference| over sampled entries, relative to the largest |reference|; the
// reference is a double-precision dot product.
double sampled_relative_error(const GemmCase& g, const float* a, const float* b, const float* c) {
  double max_err = 0, max_ref = 0;
  for (int s = 0; s < 64; ++s) {
    int64_t i = (s * 7919) % g.m, j = (s * 104729) % g.n;
    double ref = 0;
    for (int64_t p = 0; p < g.k; ++p) ref += g.a_at(a, i, p) * g.b_at(b, p, j);
    max_err = std::max(max_err, std::fabs(ref - c[i * g.n + j]));
    max_ref = std::max(max_ref, std::fabs(ref));
  }
  return max_err / std::max(max_ref, 1e-30);
}

const char* blas_core() {
#ifdef MINIDL_HAVE_OPENBLAS
  return openblas_get_corename();
#else
  return "none";
#endif
}

void report(const GemmCase& g, int threads, const char* impl, double seconds) {
  double gflops = 2.0 * g.m * g.k * g.n / seconds / 1e9;
  std::fprintf(stderr, "%6lld %6lld %6lld %8d  %-9s %9.2f %11.4f  %s\n", (long long)g.m, (long long)g.k,
               (long long)g.n, threads, impl, gflops, seconds * 1e3, g.what);
  const bool blas = std::string_view(impl) == "openblas";
  std::printf("{\"bench\":\"gemm\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"trans_a\":%d,\"trans_b\":%d,\"threads\":%d,"
              "\"impl\":\"%s\",\"gflops\":%.3f,\"ms_per_call\":%.5f%s%s%s}\n",
              (long long)g.m, (long long)g.k, (long long)g.n, g.ta ? 1 : 0, g.tb ? 1 : 0, threads, impl, gflops,
              seconds * 1e3,
              blas ? ",\"openblas_core\":\"" : "", blas ? blas_core() : "", blas ? "\"" : "");
  std::fflush(stdout);
}

// --gelu: the c_fc layer of the char-GPT recipes, the product alone and with its GELU.
int run_gelu_layer(int reps, double min_seconds, uint64_t seed) {
  struct Layer {
    int64_t rows, c;
    const char* what;
  };
  const std::vector<Layer> layers = {{768, 128, "c_fc, default recipe (B 12, T 64, C 128)"},
                                     {2048, 256, "c_fc, larger recipe (B 8, T 256, C 256)"}};
  Backend& cpu = backend_for(Device::cpu());
  const int threads = host_threads();
  std::fprintf(stderr, "%6s %6s %6s %8s  %-9s %11s %13s %10s %12s  %s\n", "rows", "C", "4C", "threads", "dtype",
               "product ms", "with GELU ms", "GELU share", "GELU elem/ns", "layer");
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& l = layers[li];
    Generator gen(seed + li);
    const Tensor x32 = uniform({l.rows, l.c}, -2.0, 2.0, {}, &gen);
    const Tensor w32 = uniform({4 * l.c, l.c}, -0.1, 0.1, {}, &gen);
    const Tensor b32 = uniform({4 * l.c}, -0.5, 0.5, {}, &gen);
    for (DType dt : {DType::Float32, DType::BFloat16}) {
      const Tensor x = x32.to(dt), w = w32.to(dt), b = b32.to(dt);
      const TensorOptions opt(dt);
      Tensor z = empty({l.rows, 4 * l.c}, opt), y = empty({l.rows, 4 * l.c}, opt), y2 = empty({l.rows, 4 * l.c}, opt);
      const double product = median_seconds_per_call(
          [&] { cpu.linear_forward(x, w, b, z, Activation::None, nullptr); }, reps, min_seconds);
      const double with_gelu = median_seconds_per_call(
          [&] { cpu.linear_forward(x, w, b, y, Activation::GELU, &z); }, reps, min_seconds);
      cpu.gelu_forward(z, y2, GeluApproximate::None);
      // Activation::GELU promises the bits of gelu on the stored pre-activation (core/backend.h).
      const std::vector<float> a = y.to(DType::Float32).to_vector<float>(), c = y2.to(DType::Float32).to_vector<float>();
      if (std::memcmp(a.data(), c.data(), a.size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "bench_gemm: linear_forward's GELU differs from gelu_forward for %s (%s)\n", l.what,
                     dtype_name(dt));
        return 1;
      }
      const double gelu_seconds = std::max(with_gelu - product, 1e-12);
      const double per_ns = static_cast<double>(y.numel()) / (gelu_seconds * 1e9);
      std::fprintf(stderr, "%6lld %6lld %6lld %8d  %-9s %11.3f %13.3f %9.0f%% %12.2f  %s\n", (long long)l.rows,
                   (long long)l.c, (long long)(4 * l.c), threads, dtype_name(dt), product * 1e3, with_gelu * 1e3,
                   100.0 * (with_gelu - product) / with_gelu, per_ns, l.what);
      std::printf("{\"bench\":\"gemm_gelu\",\"rows\":%lld,\"c\":%lld,\"threads\":%d,\"dtype\":\"%s\","
                  "\"product_ms\":%.4f,\"with_gelu_ms\":%.4f}\n",
                  (long long)l.rows, (long long)l.c, threads, dtype_name(dt), product * 1e3, with_gelu * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GFLOP/s of minidl's CPU GEMM (and OpenBLAS sgemm when available); threads from OMP_NUM_THREADS"};
  int reps = 7;
  double min_ms = 20.0;
  uint64_t seed = 1;
  app.add_option("--reps", reps, "timed samples per case; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--min-ms", min_ms, "minimum length of one timed sample, in milliseconds")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the random inputs");
  bool half = false;
  app.add_flag("--half", half, "also time bfloat16 and float16 operands (minidl only)");
  std::string char_gpt;
  app.add_option("--char-gpt", char_gpt,
                 "time the GEMMs of one char-GPT step, forward and backward, instead of the default shapes: "
                 "large (256 wide, context 256, batch 8) or small (the default recipe)")
      ->check(CLI::IsMember({"large", "small"}));
  bool gelu = false;
  app.add_flag("--gelu", gelu, "time the char-GPT's c_fc layer: the product alone and with its GELU");
  std::vector<std::string> kernels;
  std::vector<int64_t> sizes = {4096, 8192};
  int runs = 20;
  app.add_option("--kernel", kernels, "CUDA GEMM ladder: simt, mma, mma_ldmatrix, mma_pipeline, all (CUDA builds)")
      ->delimiter(',');
  app.add_option("--sizes", sizes, "square sizes of the CUDA ladder")->delimiter(',');
  app.add_option("--runs", runs, "timed calls per CUDA ladder case; the median is reported")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (!kernels.empty()) {
#ifdef MINIDL_BENCH_CUDA
    if (std::find(kernels.begin(), kernels.end(), "all") != kernels.end())
      kernels = {"simt", "mma", "mma_ldmatrix", "mma_pipeline"};
    try {
      return minidl::bench::run_cuda_gemm_ladder(kernels, sizes, runs);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_gemm: %s\n", e.what());
      return 1;
    }
#else
    std::fprintf(stderr, "bench_gemm: --kernel runs the CUDA GEMM ladder; this build has no CUDA (nvcc) backend\n");
    return 2;
#endif
  }

  if (gelu) {
    try {
      return run_gelu_layer(reps, min_ms / 1e3, seed);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_gemm: %s\n", e.what());
      return 1;
    }
  }

  std::vector<GemmCase> cases = {
      {256, 256, 256, "square"},
      {512, 512, 512, "square"},
      {1024, 1024, 1024, "square"},
      {128, 784, 256, "fashion-mnist fc1 (batch 128)"},
      {128, 256, 128, "fashion-mnist fc2 (batch 128)"},
      {128, 128, 10, "fashion-mnist fc3 (batch 128)"},
  };
  if (!char_gpt.empty()) cases = char_gpt_cases(char_gpt);
  const int threads = host_threads();
#ifdef MINIDL_HAVE_OPENBLAS
  // OpenBLAS picks its kernels for this CPU unless OPENBLAS_CORETYPE forces older ones (an
  // AVX2-only "Haswell" on an AVX-512 machine makes the baseline look slower than it is).
  std::fprintf(stderr, "OpenBLAS kernels: %s%s\n", openblas_get_corename(),
               std::getenv("OPENBLAS_CORETYPE") ? " (forced by OPENBLAS_CORETYPE)" : "");
#endif

  // Note [one library's threads at a time]: minidl's thread pool (kernels/cpu/thread_pool.h)
  // and OpenBLAS's pthread pool both spin for a while after work (OpenBLAS's also after
  // openblas_set_num_threads). On a machine with no spare core, one library's waits then
  // stall on the other's spinning threads (when minidl's loops were OpenMP regions, 2-thread
  // figures came out 10-100x too low), so all minidl cases run first, with OpenBLAS's pool
  // untouched; a pause lets minidl's threads fall asleep; then OpenBLAS gets its threads.
  try {
    Backend& cpu = backend_for(Device::cpu());
    struct CaseData {
      Tensor a, b, c;
      double minidl_seconds = 0;
    };
    std::vector<CaseData> data;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const GemmCase& g = cases[ci];
      Generator gen(seed + ci);
      Tensor a = uniform(g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, -1.0, 1.0, {}, &gen);  // row-major
      Tensor b = uniform(g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, -1.0, 1.0, {}, &gen);
      data.push_back({a, b, zeros({g.m, g.n})});            // C [M, N] row-major
    }
    std::fprintf(stderr, "%6s %6s %6s %8s  %-9s %9s %11s\n", "M", "K", "N", "threads", "impl", "GFLOP/s", "ms/call");
    // Half a second of the first case before any timing: on the 2-core VM the first case timed
    // in a process ran at about half speed on two threads (256³: 74–99 GFLOP/s, against 170–200
    // when it came later), a start-up transient of the machine rather than of the kernel.
    {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      const GemmCase& g = cases[0];
      while (std::chrono::steady_clock::now() < until) cpu.matmul(data[0].a, data[0].b, data[0].c, g.ta, g.tb);
    }
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const GemmCase& g = cases[ci];
      CaseData& d = data[ci];
      d.minidl_seconds = median_seconds_per_call([&] { cpu.matmul(d.a, d.b, d.c, g.ta, g.tb); }, reps, min_ms / 1e3);
      // float32 sums of K <= 1024 products of magnitude <= 1, in any blocking order, stay
      // within ~1e-5 of the double result relative to the output's scale; 1e-3 flags a wrong kernel.
      const double err = sampled_relative_error(g, d.a.data<float>(), d.b.data<float>(), d.c.data<float>());
      if (err > 1e-3) {
        std::fprintf(stderr, "bench_gemm: minidl result is wrong for %lldx%lldx%lld (relative error %.3g)\n",
                     (long long)g.m, (long long)g.k, (long long)g.n, err);
        return 1;
      }
      report(g, threads, "minidl", d.minidl_seconds);
      for (DType dt : {DType::BFloat16, DType::Float16}) {
        if (!half) break;
        const Tensor a16 = d.a.to(dt), b16 = d.b.to(dt);
        Tensor c16 = zeros({g.m, g.n}, TensorOptions(dt));
        const double seconds = median_seconds_per_call([&] { cpu.matmul(a16, b16, c16, g.ta, g.tb); }, reps, min_ms / 1e3);
        // Against the double product of the rounded inputs: the one rounding of C to 16 bits
        // (2^-9 relative for bfloat16) dominates; 1e-2 flags a wrong kernel.
        const Tensor a_ref = a16.to(DType::Float32), b_ref = b16.to(DType::Float32), c_ref = c16.to(DType::Float32);
        const double err = sampled_relative_error(g, a_ref.data<float>(), b_ref.data<float>(), c_ref.data<float>());
        const char* name = dt == DType::BFloat16 ? "minidl-bf16" : "minidl-fp16";
        if (err > 1e-2) {
          std::fprintf(stderr, "bench_gemm: %s result is wrong for %lldx%lldx%lld (relative error %.3g)\n", name,
                       (long long)g.m, (long long)g.k, (long long)g.n, err);
          return 1;
        }
        report(g, threads, name, seconds);
        std::fprintf(stderr, "%38s %s at %.2fx minidl float32\n", "", name, d.minidl_seconds / seconds);
      }
    }
#ifdef MINIDL_HAVE_OPENBLAS
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    openblas_set_num_threads(threads);  // wakes its pool, so only now (see the note above)
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const GemmCase& g = cases[ci];
      CaseData& d = data[ci];
      std::vector<float> c_blas(static_cast<size_t>(g.m * g.n));  // [M, N] row-major
      const double blas_seconds = median_seconds_per_call(
          [&] {
            cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, (int)g.m,
                        (int)g.n, (int)g.k, 1.0f, d.a.data<float>(), (int)(g.ta ? g.m : g.k), d.b.data<float>(),
                        (int)(g.tb ? g.k : g.n), 0.0f, c_blas.data(), (int)g.n);
          },
          reps, min_ms / 1e3);
      report(g, threads, "openblas", blas_seconds);
      std::fprintf(stderr, "%38s minidl at %.0f%% of OpenBLAS\n", "", 100.0 * blas_seconds / d.minidl_seconds);
    }
#endif
  } catch (const std::bad_alloc&) {  // one line and status 1 whatever was thrown
    std::fprintf(stderr, "bench_gemm: out of memory while building the benchmark's tensors (std::bad_alloc)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "bench_gemm: unexpected error (an exception of unknown type)\n");
    return 1;
  }
  return 0;
}
