// bench_kernels (bench/kernels/kernel_bench.cpp): the CUDA kernels of minidl, timed on cuda:0.
//   gemm      linear forward (x·Wᵀ + b) and the backward products dX = dY·W and dW = dYᵀ·X at
//             4096³, 8192³ and the Fashion-MNIST MLP's layers (784→256→128→10) at batch 128 and
//             4096: the native kernels' TFLOP/s beside cuBLAS's (minidl::set_gemm_impl) and the ratio.
//   gemm_plan the native kernel on plans given outright (kernels/cuda/gemm/gemm.h, native_sgemm_with_plan)
//             for the weight gradients at batch 4096 (tall thin: K = 4096) and the 4096³ forward:
//             each tile in a range of K slice counts, beside the cuBLAS time of the same product,
//             the heuristic's own plan marked, so that a device where another plan wins shows it
//             (--no-plan-sweep, and --quick, leave it out).
//   relu      forward and backward at 64 MiB and 1 GiB: GB/s beside a device-to-device
//             cudaMemcpyAsync of the same size measured in the same run.
//   ce_fused  softmax-cross-entropy fused forward+backward at [8192, 32768] and [4096, 10]: GB/s
//             on the bytes it must move (read logits and targets, write dlogits and loss)
//             beside the copy of the logits' size.
// Method: the backend methods are called directly on preallocated tensors (no allocation is
// timed). Each case: fresh random inputs (uniform or normal, never zeros) in enough buffer sets
// that their total exceeds 3x the L2 cache and consecutive runs use different sets (no run reads
// what the previous one left in L2); 3 warm-up calls; then >= 20 timed runs queued back to back
// behind a host-held gate (so the host's launch overhead never shows in the device timings),
// each between two CUDA events on the backend's stream; the median is reported.
// Checks: a fast wrong kernel is no result, so each output timed is compared after the timing —
// the GEMM's native result with cuBLAS's (max_rel_diff; a given plan's beyond 1e-3 counts as a
// mismatch, tolerance beside the check), ReLU forward and backward with the CPU
// backend's on the same inputs (bit for bit: both compute max(x, 0) and a select), the fused
// cross-entropy's loss and dlogits on the first rows with a float64 CPU reference (tolerances
// beside the check). A ReLU or cross-entropy output that differs sets "matches_cpu":false in its
// JSON line, says so on stderr, and makes the exit status 3 once every case has run (so does a
// gemm_plan line with "matches_cublas":false).
// Output: one JSON line per case on stdout, a table on stderr (--json-only: JSON only).
// Exit status: 0, 1 on an error, 2 when there is no usable CUDA device, 3 on a mismatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/backend.h"
#include "core/device.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_impl.h"

namespace {

using namespace minidl;

struct Options {
  int runs = 25;
  bool quick = false;
  bool json_only = false;
  bool plan_sweep = true;
  uint64_t seed = 1;
};

// Holds the stream at a host function until the host has queued every timed run, so that
// runs execute back to back on the device. Gives up after a few seconds (a queued call that
// synchronises the stream would otherwise wait forever) and says so.
class StreamGate {
 public:
  void close(cudaStream_t stream) {
    open_.store(false);
    timed_out_.store(false);
    MINIDL_CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamGate::wait, this));
  }
  void open() { open_.store(true); }
  bool timed_out() const { return timed_out_.load(); }

 private:
  static void CUDART_CB wait(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto start = std::chrono::steady_clock::now();
    while (!gate->open_.load()) {
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) {
        gate->timed_out_.store(true);
        return;
      }
      std::this_thread::yield();
    }
  }
  std::atomic<bool> open_{false}, timed_out_{false};
};

class Timer {
 public:
  Timer(cudaStream_t stream, const Options& opt) : stream_(stream), opt_(opt) {}

  // Median seconds of run(i) for i = 0 .. runs-1 (run picks buffer set i % sets itself).
  double median_seconds(const std::function<void(int)>& run) {
    for (int i = 0; i < 3; ++i) run(i);  // warm-up: first-call costs (handles, caches) stay out
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<cudaEvent_t> events(static_cast<size_t>(2 * opt_.runs));
    for (cudaEvent_t& e : events) MINIDL_CUDA_CHECK(cudaEventCreate(&e));
    gate_.close(stream_);
    for (int i = 0; i < opt_.runs; ++i) {
      MINIDL_CUDA_CHECK(cudaEventRecord(events[static_cast<size_t>(2 * i)], stream_));
      run(i + 3);
      MINIDL_CUDA_CHECK(cudaEventRecord(events[static_cast<size_t>(2 * i + 1)], stream_));
    }
    gate_.open();
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (gate_.timed_out())
      std::fprintf(stderr, "bench_kernels: warning: the stream gate timed out; these timings include host gaps\n");
    std::vector<double> seconds;
    for (int i = 0; i < opt_.runs; ++i) {
      float ms = 0.0f;
      const size_t e = static_cast<size_t>(2 * i);
      MINIDL_CUDA_CHECK(cudaEventElapsedTime(&ms, events[e], events[e + 1]));
      seconds.push_back(ms * 1e-3);
    }
    for (cudaEvent_t e : events) MINIDL_CUDA_CHECK(cudaEventDestroy(e));
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  }

 private:
  cudaStream_t stream_;
  const Options& opt_;
  StreamGate gate_;
};

// How many buffer sets of `set_bytes` make a rotation whose total exceeds 3x L2 (>= 2 sets).
int sets_for(int64_t set_bytes, int64_t l2_bytes) {
  const int64_t needed = (3 * l2_bytes + set_bytes - 1) / std::max<int64_t>(set_bytes, 1);
  return static_cast<int>(std::clamp<int64_t>(needed, 2, 512));
}

TensorOptions on_gpu(DType t = DType::Float32) { return TensorOptions(t, Device::cuda(0)); }

// Whether some ReLU or cross-entropy output differed from the CPU's (exit status 3).
bool g_mismatch = false;

// Elements of `got` (any device) that differ from `want` (CPU), bit for bit as floats.
int64_t count_different(const Tensor& got, const Tensor& want) {
  const std::vector<float> a = got.to(Device::cpu()).to_vector<float>(), b = want.to_vector<float>();
  int64_t different = 0;
  for (size_t i = 0; i < a.size(); ++i) different += a[i] == b[i] ? 0 : 1;
  return different + static_cast<int64_t>(a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// Elements with |got - want| > atol + rtol·|want| (or a NaN), got from the device, want float64 on the CPU.
int64_t count_outside(const Tensor& got, const Tensor& want, double atol, double rtol) {
  const std::vector<float> a = got.to(Device::cpu()).to_vector<float>();
  const std::vector<double> b = want.to_vector<double>();
  int64_t outside = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    outside += std::fabs(static_cast<double>(a[i]) - b[i]) <= atol + rtol * std::fabs(b[i]) ? 0 : 1;
  return outside;
}

// max |a - b| / max |b| over all elements (both copied to the host).
double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to(Device::cpu()).to_vector<float>(), vb = b.to(Device::cpu()).to_vector<float>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(va[i]) - vb[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(vb[i])));
  }
  return err / std::max(scale, 1e-30);
}

// ---- GEMM: native vs cuBLAS ----

struct GemmShape {
  int64_t n, k, m;  // y[N, M] = x[N, K] · W[M, K]ᵀ
  const char* what;
};

struct GemmSet {
  Tensor x, w, b, y, dy, dx, dw;
};

// The product linear.cu runs for a variant on set d (GemmShape names y[N, M] = x[N, K]·W[M, K]ᵀ):
//   forward      C[N, M] = x[N, K] · W[M, K]ᵀ + b      (GEMM M, N, K = N, M, K)
//   backward_dw  C[M, K] = dy[N, M]ᵀ · x[N, K]          (GEMM M, N, K = M, K, N)
cuda::GemmProblem problem_of(const std::string& variant, const GemmShape& s, GemmSet& d) {
  cuda::GemmProblem p;
  if (variant == "forward") {
    p.m = s.n;
    p.n = s.m;
    p.k = s.k;
    p.a = d.x.data<float>();
    p.lda = s.k;
    p.b = d.w.data<float>();  // W [M, K] read as Wᵀ
    p.ldb = s.k;
    p.trans_b = true;
    p.c = d.y.data<float>();
    p.ldc = s.m;
    p.bias = d.b.data<float>();
  } else {
    MINIDL_CHECK(variant == "backward_dw", "bench_kernels: no plan sweep for ", variant);
    p.m = s.m;
    p.n = s.k;
    p.k = s.n;
    p.a = d.dy.data<float>();  // dy [N, M] read as dyᵀ
    p.lda = s.m;
    p.trans_a = true;
    p.b = d.x.data<float>();
    p.ldb = s.k;
    p.c = d.dw.data<float>();
    p.ldc = s.k;
  }
  return p;
}

// Times the native kernel on candidate plans for one product (problem_of) beside cuBLAS's time
// for it (cublas_seconds) and checks each result against cuBLAS's (cublas_out, from data[0]).
// Candidates: every tile with 1 to `max_splits` K slices (a slice count that rounds to one
// already timed is skipped), plus the heuristic's plan.
void sweep_gemm_plans(cudaStream_t stream, int sm_count, Timer& timer, const Options& opt, const GemmShape& s,
                      const char* variant, std::vector<GemmSet>& data, Tensor GemmSet::*out, double cublas_seconds,
                      const Tensor& cublas_out, int64_t max_splits) {
  const int sets = static_cast<int>(data.size());
  const cuda::GemmProblem shape = problem_of(variant, s, data[0]);
  const cuda::NativeGemmPlan chosen = cuda::native_gemm_plan(shape.m, shape.n, shape.k, sm_count);
  std::vector<cuda::NativeGemmPlan> plans;
  for (cuda::GemmTile tile : cuda::kGemmTiles) {
    std::vector<int64_t> wanted = {1, 2, 3, 4, 6, 8, 12, 16, 18, 24, 32, 48, 64};
    if (tile == chosen.tile) wanted.push_back(chosen.splits);
    for (int64_t splits : wanted) {
      if (splits > max_splits && !(tile == chosen.tile && splits == chosen.splits)) continue;
      const cuda::NativeGemmPlan p = cuda::native_gemm_plan_with(tile, splits, shape.m, shape.n, shape.k);
      const bool seen = std::any_of(plans.begin(), plans.end(), [&](const cuda::NativeGemmPlan& q) {
        return q.tile == p.tile && q.splits == p.splits;
      });
      if (!seen) plans.push_back(p);
    }
  }
  int64_t workspace_floats = 0;
  for (const cuda::NativeGemmPlan& p : plans) workspace_floats = std::max(workspace_floats, p.workspace_floats());
  const Tensor workspace = workspace_floats > 0 ? empty({workspace_floats}, on_gpu()) : Tensor();
  float* ws = workspace_floats > 0 ? workspace.data<float>() : nullptr;
  const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) * static_cast<double>(shape.k);
  const double cublas = flops / cublas_seconds / 1e12;
  for (const cuda::NativeGemmPlan& plan : plans) {
    const double seconds = timer.median_seconds([&](int run) {
      cuda::native_sgemm_with_plan(problem_of(variant, s, data[static_cast<size_t>(run % sets)]), plan, sm_count, ws,
                                   stream);
    });
    cuda::native_sgemm_with_plan(problem_of(variant, s, data[0]), plan, sm_count, ws, stream);
    const double diff = relative_difference(data[0].*out, cublas_out);
    // Both sum K <= 8192 float32 products of inputs in [-1, 1]: rounding differs by a few 1e-6
    // of max|C| (the gemm lines' max_rel_diff); a lost or doubled K slice (1/64 of K or more)
    // moves elements by a few percent of it. 1e-3 lies between.
    const bool matches = diff <= 1e-3;
    if (!matches) g_mismatch = true;
    const cuda::GemmTileShape t = cuda::gemm_tile_shape(plan.tile);
    const int64_t blocks = ((shape.m + t.bm - 1) / t.bm) * ((shape.n + t.bn - 1) / t.bn) * plan.splits;
    const bool heuristic = plan.tile == chosen.tile && plan.splits == chosen.splits;
    const double native = flops / seconds / 1e12;
    if (!opt.json_only)
      std::fprintf(stderr, "gemm plan %-12s %5lld x %5lld x %5lld %-9s x%-3lld (k %5lld, %6lld blocks)%-12s native %7.2f  "
                           "cublas %7.2f TFLOP/s  ratio %.2f  (%.3f ms, max rel diff %.1e)%s\n",
                   variant, (long long)s.n, (long long)s.k, (long long)s.m, cuda::gemm_tile_name(plan.tile),
                   (long long)plan.splits, (long long)plan.k_split, (long long)blocks, heuristic ? " [heuristic]" : "",
                   native, cublas, native / cublas, seconds * 1e3, diff, matches ? "" : "  DIFFERS FROM CUBLAS");
    std::printf("{\"bench\":\"kernel\",\"kernel\":\"gemm_plan\",\"variant\":\"%s\",\"n\":%lld,\"k\":%lld,\"m\":%lld,"
                "\"what\":\"%s\",\"gemm_m\":%lld,\"gemm_n\":%lld,\"gemm_k\":%lld,\"sm_count\":%d,\"tile\":\"%s\","
                "\"splits\":%lld,\"k_split\":%lld,\"blocks\":%lld,\"heuristic\":%s,\"native_tflops\":%.4f,"
                "\"cublas_tflops\":%.4f,\"ratio\":%.4f,\"native_ms\":%.5f,\"cublas_ms\":%.5f,\"max_rel_diff\":%.3e,"
                "\"matches_cublas\":%s,\"runs\":%d,\"buffer_sets\":%d}\n",
                variant, (long long)s.n, (long long)s.k, (long long)s.m, s.what, (long long)shape.m,
                (long long)shape.n, (long long)shape.k, sm_count, cuda::gemm_tile_name(plan.tile),
                (long long)plan.splits, (long long)plan.k_split, (long long)blocks, heuristic ? "true" : "false",
                native, cublas, native / cublas, seconds * 1e3, cublas_seconds * 1e3, diff,
                matches ? "true" : "false", opt.runs, sets);
    std::fflush(stdout);
  }
}

// sweep_variants: the variants whose candidate plans are also timed (sweep_gemm_plans), with
// at most sweep_max_splits K slices.
void bench_gemm(Backend& be, cudaStream_t stream, int sm_count, Timer& timer, const Options& opt, int64_t l2,
                const GemmShape& s, const std::vector<std::string>& sweep_variants = {},
                int64_t sweep_max_splits = 64) {
  const int64_t bytes = 4 * (2 * s.n * s.k + 2 * s.m * s.k + 2 * s.n * s.m + s.m);
  const int sets = sets_for(bytes, l2);
  std::vector<GemmSet> data;
  Generator gen(opt.seed);
  for (int i = 0; i < sets; ++i) {
    GemmSet d;
    d.x = uniform({s.n, s.k}, -1.0, 1.0, on_gpu(), &gen);   // [N, K]
    d.w = uniform({s.m, s.k}, -1.0, 1.0, on_gpu(), &gen);   // [M, K]
    d.b = uniform({s.m}, -1.0, 1.0, on_gpu(), &gen);        // [M]
    d.dy = uniform({s.n, s.m}, -1.0, 1.0, on_gpu(), &gen);  // [N, M]
    d.y = empty({s.n, s.m}, on_gpu());
    d.dx = empty({s.n, s.k}, on_gpu());
    d.dw = empty({s.m, s.k}, on_gpu());
    data.push_back(std::move(d));
  }
  const double flops = 2.0 * static_cast<double>(s.n) * static_cast<double>(s.k) * static_cast<double>(s.m);
  struct Variant {
    const char* name;
    std::function<void(GemmSet&)> call;
    Tensor GemmSet::*out;
  };
  const std::vector<Variant> variants = {
      {"forward", [&](GemmSet& d) { be.linear_forward(d.x, d.w, d.b, d.y, Activation::None, nullptr); }, &GemmSet::y},
      {"backward_dx",
       [&](GemmSet& d) {
         Tensor none_dw, none_db;
         be.linear_backward(d.dy, d.x, d.w, d.dx, none_dw, none_db);
       },
       &GemmSet::dx},
      {"backward_dw",
       [&](GemmSet& d) {
         Tensor none_dx, none_db;
         be.linear_backward(d.dy, d.x, d.w, none_dx, d.dw, none_db);
       },
       &GemmSet::dw},
  };
  for (const Variant& v : variants) {
    double seconds[2];
    Tensor result[2];
    const GemmImpl impls[2] = {GemmImpl::Native, GemmImpl::Cublas};
    for (int i = 0; i < 2; ++i) {
      set_gemm_impl(impls[i]);
      seconds[i] = timer.median_seconds([&](int run) { v.call(data[static_cast<size_t>(run % sets)]); });
      v.call(data[0]);
      result[i] = (data[0].*(v.out)).clone();  // compared below: a fast wrong kernel is no result
    }
    set_gemm_impl(GemmImpl::Native);
    const double diff = relative_difference(result[0], result[1]);
    const double native = flops / seconds[0] / 1e12, cublas = flops / seconds[1] / 1e12;
    if (!opt.json_only)
      std::fprintf(stderr, "gemm %-12s %5lld x %5lld x %5lld %-26s native %7.2f  cublas %7.2f TFLOP/s  ratio %.2f  "
                           "(%.3f / %.3f ms, max rel diff %.1e)\n",
                   v.name, (long long)s.n, (long long)s.k, (long long)s.m, s.what, native, cublas, native / cublas,
                   seconds[0] * 1e3, seconds[1] * 1e3, diff);
    std::printf("{\"bench\":\"kernel\",\"kernel\":\"gemm\",\"variant\":\"%s\",\"n\":%lld,\"k\":%lld,\"m\":%lld,"
                "\"what\":\"%s\",\"native_tflops\":%.4f,\"cublas_tflops\":%.4f,\"ratio\":%.4f,\"native_ms\":%.5f,"
                "\"cublas_ms\":%.5f,\"max_rel_diff\":%.3e,\"runs\":%d,\"buffer_sets\":%d}\n",
                v.name, (long long)s.n, (long long)s.k, (long long)s.m, s.what, native, cublas, native / cublas,
                seconds[0] * 1e3, seconds[1] * 1e3, diff, opt.runs, sets);
    std::fflush(stdout);
    if (std::find(sweep_variants.begin(), sweep_variants.end(), v.name) != sweep_variants.end())
      sweep_gemm_plans(stream, sm_count, timer, opt, s, v.name, data, v.out, seconds[1], result[1], sweep_max_splits);
  }
}

// ---- bandwidth: copy, ReLU, fused cross-entropy ----

// GB/s of a device-to-device copy of `bytes` (read + write counted: 2 · bytes moved).
double bench_copy(cudaStream_t stream, Timer& timer, const Options& opt, int64_t l2, int64_t bytes) {
  const int sets = sets_for(2 * bytes, l2);
  std::vector<Tensor> src, dst;
  Generator gen(opt.seed + 1);
  for (int i = 0; i < sets; ++i) {
    src.push_back(uniform({bytes / 4}, -1.0, 1.0, on_gpu(), &gen));
    dst.push_back(empty({bytes / 4}, on_gpu()));
  }
  const double seconds = timer.median_seconds([&](int run) {
    const size_t i = static_cast<size_t>(run % sets);
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst[i].raw_data(), src[i].raw_data(), static_cast<size_t>(bytes),
                                      cudaMemcpyDeviceToDevice, stream));
  });
  const double gbps = 2.0 * static_cast<double>(bytes) / seconds / 1e9;
  if (!opt.json_only)
    std::fprintf(stderr, "copy  d2d          %10.1f MiB                           %8.1f GB/s  (%.4f ms)\n",
                 static_cast<double>(bytes) / (1 << 20), gbps, seconds * 1e3);
  std::printf("{\"bench\":\"kernel\",\"kernel\":\"copy_d2d\",\"bytes\":%lld,\"gbps\":%.3f,\"ms\":%.5f,\"runs\":%d,"
              "\"buffer_sets\":%d}\n",
              (long long)bytes, gbps, seconds * 1e3, opt.runs, sets);
  std::fflush(stdout);
  return gbps;
}

// `wrong`: how many output elements differ from the CPU reference (0: the output matches).
void report_bandwidth(const Options& opt, const char* kernel, const std::string& shape, int64_t bytes_moved,
                      double seconds, double copy_gbps, int sets, int64_t wrong) {
  const double gbps = static_cast<double>(bytes_moved) / seconds / 1e9;
  if (!opt.json_only)
    std::fprintf(stderr, "%-18s %-28s %8.1f GB/s  copy %8.1f GB/s  ratio %.2f  (%.4f ms)%s\n", kernel, shape.c_str(),
                 gbps, copy_gbps, gbps / copy_gbps, seconds * 1e3, wrong == 0 ? "" : "  OUTPUT DIFFERS FROM THE CPU");
  if (wrong != 0) {
    std::fprintf(stderr, "bench_kernels: %s %s: %lld output element(s) differ from the CPU's\n", kernel,
                 shape.c_str(), (long long)wrong);
    g_mismatch = true;
  }
  std::printf("{\"bench\":\"kernel\",\"kernel\":\"%s\",\"shape\":\"%s\",\"bytes_moved\":%lld,\"gbps\":%.3f,"
              "\"copy_gbps\":%.3f,\"ratio\":%.4f,\"ms\":%.5f,\"runs\":%d,\"buffer_sets\":%d,"
              "\"matches_cpu\":%s,\"elements_off\":%lld}\n",
              kernel, shape.c_str(), (long long)bytes_moved, gbps, copy_gbps, gbps / copy_gbps, seconds * 1e3,
              opt.runs, sets, wrong == 0 ? "true" : "false", (long long)wrong);
  std::fflush(stdout);
}

void bench_relu(Backend& be, Timer& timer, const Options& opt, int64_t l2, int64_t bytes, double copy_gbps) {
  const int64_t n = bytes / 4;
  const std::string shape = "[" + std::to_string(n) + "] (" + std::to_string(bytes >> 20) + " MiB)";
  {
    const int sets = sets_for(2 * bytes, l2);
    std::vector<Tensor> x, y;
    Generator gen(opt.seed + 2);
    for (int i = 0; i < sets; ++i) {
      x.push_back(uniform({n}, -1.0, 1.0, on_gpu(), &gen));
      y.push_back(empty({n}, on_gpu()));
    }
    const double s = timer.median_seconds([&](int run) {
      const size_t i = static_cast<size_t>(run % sets);
      be.relu_forward(x[i], y[i]);
    });
    be.relu_forward(x[0], y[0]);
    const Tensor x_cpu = x[0].to(Device::cpu());
    Tensor want = empty({n}, TensorOptions(DType::Float32, Device::cpu()));
    cpu_backend().relu_forward(x_cpu, want);
    report_bandwidth(opt, "relu_forward", shape, 2 * bytes, s, copy_gbps, sets, count_different(y[0], want));
  }
  {
    const int sets = sets_for(3 * bytes, l2);
    std::vector<Tensor> dy, y, dx;
    Generator gen(opt.seed + 3);
    for (int i = 0; i < sets; ++i) {
      dy.push_back(uniform({n}, -1.0, 1.0, on_gpu(), &gen));
      y.push_back(uniform({n}, -1.0, 1.0, on_gpu(), &gen));  // about half positive: a real mask
      dx.push_back(empty({n}, on_gpu()));
    }
    const double s = timer.median_seconds([&](int run) {
      const size_t i = static_cast<size_t>(run % sets);
      be.relu_backward(dy[i], y[i], dx[i]);
    });
    be.relu_backward(dy[0], y[0], dx[0]);
    Tensor want = empty({n}, TensorOptions(DType::Float32, Device::cpu()));
    cpu_backend().relu_backward(dy[0].to(Device::cpu()), y[0].to(Device::cpu()), want);
    report_bandwidth(opt, "relu_backward", shape, 3 * bytes, s, copy_gbps, sets, count_different(dx[0], want));
  }
}

void bench_cross_entropy(Backend& be, cudaStream_t stream, Timer& timer, const Options& opt, int64_t l2, int64_t rows,
                         int64_t cols) {
  const int64_t logits_bytes = 4 * rows * cols;
  // What the fused kernel must move: logits and targets in, dlogits and per-row losses out.
  const int64_t moved = 2 * logits_bytes + 8 * rows + 4 * rows;
  const double copy_gbps = bench_copy(stream, timer, opt, l2, logits_bytes);
  const int sets = sets_for(moved, l2);
  std::vector<Tensor> logits, targets, loss, dlogits;
  Generator gen(opt.seed + 4);
  for (int i = 0; i < sets; ++i) {
    logits.push_back(randn({rows, cols}, on_gpu(), &gen) * 2.0);
    targets.push_back(randint(0, cols, {rows}, on_gpu(DType::Int64), &gen));
    loss.push_back(empty({rows}, on_gpu()));
    dlogits.push_back(empty({rows, cols}, on_gpu()));
  }
  const double scale = 1.0 / static_cast<double>(rows);
  const Tensor scale_gpu = full({}, scale, on_gpu()), scale_cpu = full({}, scale, TensorOptions(DType::Float64, Device::cpu()));
  const ops::CrossEntropyOptions ce;  // no ignored rows, no smoothing: the training default
  const double s = timer.median_seconds([&](int run) {
    const size_t i = static_cast<size_t>(run % sets);
    be.softmax_cross_entropy_fused(logits[i], targets[i], scale_gpu, loss[i], dlogits[i], ce);
  });
  // The check: the first rows (each row is computed on its own, so a prefix is a fair sample and
  // keeps the float64 CPU reference short) of set 0, recomputed, against float64 on the CPU.
  be.softmax_cross_entropy_fused(logits[0], targets[0], scale_gpu, loss[0], dlogits[0], ce);
  const int64_t check_rows = std::min<int64_t>(rows, 256);
  const Tensor x64 = logits[0].narrow(0, 0, check_rows).to(Device::cpu()).to(DType::Float64);
  const Tensor t_cpu = targets[0].narrow(0, 0, check_rows).to(Device::cpu());
  const TensorOptions f64(DType::Float64, Device::cpu());
  Tensor want_loss = empty({check_rows}, f64), want_dlogits = empty({check_rows, cols}, f64);
  cpu_backend().softmax_cross_entropy_fused(x64, t_cpu, scale_cpu, want_loss, want_dlogits, ce);
  // Tolerances as in tests/cuda/test_cuda_softmax.cpp: loss = log s - (x_t - m) carries a few ulp
  // of its own size (~1e-6 for these logits): 1e-5 absolute and relative; dlogits = (p - onehot)·scale with p
  // off by a few 1e-6 relative: 1e-6·scale absolute (the cancellation at the target) + 1e-5 relative.
  const int64_t wrong = count_outside(loss[0].narrow(0, 0, check_rows), want_loss, 1e-5, 1e-5) +
                        count_outside(dlogits[0].narrow(0, 0, check_rows), want_dlogits, 1e-6 * scale, 1e-5);
  const std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  report_bandwidth(opt, "ce_fused_fwd_bwd", shape, moved, s, copy_gbps, sets, wrong);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times minidl's CUDA kernels on cuda:0: GEMM vs cuBLAS, ReLU and fused cross-entropy vs copy"};
  Options opt;
  app.add_flag("--quick", opt.quick, "fewer and smaller cases (no 8192^3, no batch 4096, no 1 GiB)");
  app.add_flag("--json-only", opt.json_only, "no table on stderr");
  bool no_plan_sweep = false;
  app.add_flag("--no-plan-sweep", no_plan_sweep, "no gemm_plan lines (native GEMM plans given outright)");
  app.add_option("--runs", opt.runs, "timed runs per case (>= 20); the median is reported")
      ->check(CLI::Range(20, 1000));
  app.add_option("--seed", opt.seed, "seed of the random inputs");
  CLI11_PARSE(app, argc, argv);
  opt.plan_sweep = !no_plan_sweep && !opt.quick;

  if (!cuda_is_available()) {
    std::fprintf(stderr, "bench_kernels: no usable CUDA device (%s); nothing to measure\n",
                 cuda_device_count() == 0 ? "no GPU, no driver, or a build without CUDA" : "cuda:0 unavailable");
    return 2;
  }
  try {
    const Device gpu = Device::cuda(0);
    Backend& be = backend_for(gpu);
    // The backend's one compute stream: events and the baseline copy go on it, in order with the kernels.
    cudaStream_t stream = static_cast<cudaStream_t>(be.stream_handle());
    int l2 = 0;
    MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    cudaDeviceProp prop{};
    MINIDL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (!opt.json_only)
      std::fprintf(stderr, "bench_kernels on %s: %d SMs, L2 %d MiB; median of %d runs per case\n", prop.name,
                   prop.multiProcessorCount, l2 >> 20, opt.runs);
    Timer timer(stream, opt);

    std::vector<GemmShape> gemms = {{4096, 4096, 4096, "square"}};
    if (!opt.quick) gemms.push_back({8192, 8192, 8192, "square"});
    for (int64_t batch : {int64_t{128}, int64_t{4096}}) {
      if (opt.quick && batch != 128) continue;
      const char* names[3] = {batch == 128 ? "mlp fc1 (batch 128)" : "mlp fc1 (batch 4096)",
                              batch == 128 ? "mlp fc2 (batch 128)" : "mlp fc2 (batch 4096)",
                              batch == 128 ? "mlp fc3 (batch 128)" : "mlp fc3 (batch 4096)"};
      gemms.push_back({batch, 784, 256, names[0]});
      gemms.push_back({batch, 256, 128, names[1]});
      gemms.push_back({batch, 128, 10, names[2]});
    }
    for (const GemmShape& s : gemms) {
      // The plan sweep: the weight gradients at batch 4096 (tall thin, K = 4096) in up to 64 K
      // slices, and the 4096³ forward whole or in 2 slices (each run takes milliseconds there).
      std::vector<std::string> sweep;
      int64_t sweep_max_splits = 64;
      if (opt.plan_sweep && s.n == 4096 && s.k != 4096) sweep = {"backward_dw"};
      if (opt.plan_sweep && s.n == 4096 && s.k == 4096 && s.m == 4096) {
        sweep = {"forward"};
        sweep_max_splits = 2;
      }
      bench_gemm(be, stream, prop.multiProcessorCount, timer, opt, l2, s, sweep, sweep_max_splits);
      empty_cache(gpu);  // each case's buffers go back before the next case allocates its own
    }

    std::vector<int64_t> relu_bytes = {int64_t{64} << 20};
    if (!opt.quick) relu_bytes.push_back(int64_t{1} << 30);
    for (int64_t bytes : relu_bytes) {
      const double copy_gbps = bench_copy(stream, timer, opt, l2, bytes);
      bench_relu(be, timer, opt, l2, bytes, copy_gbps);
      empty_cache(gpu);
    }

    bench_cross_entropy(be, stream, timer, opt, l2, 8192, 32768);
    empty_cache(gpu);
    bench_cross_entropy(be, stream, timer, opt, l2, 4096, 10);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
  return g_mismatch ? 3 : 0;
}
