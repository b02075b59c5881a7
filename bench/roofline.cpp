// bench_roofline (bench/roofline.cpp): this machine's two ceilings, against which every CPU kernel
// of minidl is judged: how many floating-point operations a second its cores can do, and how
// many bytes a second they can move to and from memory. A kernel that does F flops on B bytes
// cannot run faster than max(F / peak_flops, B / bandwidth); bench/RESULTS.md's per-op tables
// put each op's achieved rate beside the ceiling that bounds it.
//
// Compute ceilings, per thread count t = 1 .. --threads (each of t threads runs the same loop on
// its own registers, started together; the figure is the sum of their rates):
//   fp32 fma    acc = acc · x + y on kAccumulators independent vectors of the widest width the
//               build targets (16 floats with AVX-512, 8 with AVX2): 2 flops per lane per FMA.
//               Independent chains hide the FMA latency (4 cycles, 2 FMA ports: 8 in flight).
//   bf16 dot    vdpbf16ps on the same number of chains (only where the build has AVX512_BF16):
//               32 multiply-adds, 64 flops per instruction — the bf16 GEMM's instruction.
// Memory ceilings, over arrays of --mib MiB each (far larger than the last-level cache), the
// threads splitting the arrays: STREAM's copy (b = a: 8 bytes per element counted) and triad
// (a = b + s·c: 12 bytes). As in STREAM the bytes counted are those the program reads and writes;
// the write-allocate traffic a store miss adds on most CPUs is not counted, so the hardware moves
// more than the figure says.
// Each figure is the median of --reps timed runs. JSON lines on stdout, a table on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace {

#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif
typedef float VecF __attribute__((vector_size(kVectorBytes)));
constexpr int kLanes = kVectorBytes / 4;
constexpr int kAccumulators = 12;  // independent FMA chains: more than latency × ports
constexpr int64_t kInnerIters = 1 << 14;

using Clock = std::chrono::steady_clock;

// Runs body(thread, threads) on `threads` threads at once; returns the wall time of the slowest.
double run_threads(int threads, const std::function<void(int, int)>& body) {
  std::vector<std::thread> team;
  const auto start = Clock::now();
  for (int t = 1; t < threads; ++t) team.emplace_back(body, t, threads);
  body(0, threads);
  for (auto& th : team) th.join();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// fp32 FMAs: `outer` × kInnerIters × kAccumulators vector FMAs per thread. The result is stored
// through a volatile sink so the compiler keeps the loop.
volatile float g_sink;
void fma_loop(int64_t outer) {
  VecF acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = VecF{} + static_cast<float>(i) * 1e-3f;
  const VecF x = VecF{} + 0.999999f, y = VecF{} + 1e-7f;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t it = 0; it < kInnerIters; ++it)
#pragma GCC unroll 12
      for (int i = 0; i < kAccumulators; ++i) acc[i] = acc[i] * x + y;
  float s = 0;
  for (int i = 0; i < kAccumulators; ++i) s += acc[i][0];
  g_sink = s;
}

#if defined(__AVX512BF16__)
// vdpbf16ps: `outer` × kInnerIters × kAccumulators instructions per thread.
void dpbf16_loop(int64_t outer) {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80);  // 1.0 in bfloat16
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // 2^-24
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t it = 0; it < kInnerIters; ++it)
#pragma GCC unroll 12
      for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  float s = 0;
  for (int i = 0; i < kAccumulators; ++i) {
    float lanes[16];
    _mm512_storeu_ps(lanes, acc[i]);
    s += lanes[0];
  }
  g_sink = s;
}
#endif

void report(const char* what, int threads, double value, const char* unit) {
  std::fprintf(stderr, "%-10s %8d %12.1f %s\n", what, threads, value, unit);
  std::printf("{\"bench\":\"roofline\",\"what\":\"%s\",\"threads\":%d,\"value\":%.3f,\"unit\":\"%s\"}\n", what, threads,
              value, unit);
  std::fflush(stdout);
}

// Flops per second of `loop` on `threads` threads, each doing flops_per_outer · outer flops.
double compute_rate(void (*loop)(int64_t), double flops_per_outer, int threads, int reps) {
  // Size the run to about 0.2 s on one thread.
  int64_t outer = 1;
  for (;;) {
    const auto t0 = Clock::now();
    loop(outer);
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 0.05) break;
    outer *= 2;
  }
  outer *= 4;
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    const double seconds = run_threads(threads, [&](int, int) { loop(outer); });
    rates.push_back(flops_per_outer * static_cast<double>(outer) * threads / seconds);
  }
  return median(rates);
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"This machine's compute and memory ceilings (the roofline the CPU kernels are judged against)"};
  int max_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int reps = 5;
  int64_t mib = 256;
  app.add_option("--threads", max_threads, "measure 1 .. this many threads")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed runs per figure; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--mib", mib, "size of each array of the memory tests, MiB")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::fprintf(stderr, "%-10s %8s %12s\n", "ceiling", "threads", "value");
  const double fma_flops = 2.0 * kLanes * kAccumulators * kInnerIters;
  for (int t = 1; t <= max_threads; ++t) report("fp32-fma", t, compute_rate(fma_loop, fma_flops, t, reps) / 1e9, "GFLOP/s");
#if defined(__AVX512BF16__)
  const double dp_flops = 64.0 * kAccumulators * kInnerIters;
  for (int t = 1; t <= max_threads; ++t)
    report("bf16-dot", t, compute_rate(dpbf16_loop, dp_flops, t, reps) / 1e9, "GFLOP/s");
#else
  std::fprintf(stderr, "bf16-dot: this build has no AVX512_BF16 (build with -march=native on a CPU that has it)\n");
#endif

  const int64_t n = mib * 1024 * 1024 / static_cast<int64_t>(sizeof(float));
  auto alloc = [&] {
    auto p = std::unique_ptr<float, AlignedFree>(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * 4)));
    if (!p) {
      std::fprintf(stderr, "bench_roofline: cannot allocate %lld MiB\n", static_cast<long long>(mib));
      std::exit(1);
    }
    return p;
  };
  auto a = alloc(), b = alloc(), c = alloc();
  float* pa = a.get();
  float* pb = b.get();
  float* pc = c.get();
  for (int64_t i = 0; i < n; ++i) pa[i] = 1.0f, pb[i] = 2.0f, pc[i] = 0.5f;  // touch every page first
  const float s = 3.0f;
  auto slice = [&](int t, int threads, int64_t& begin, int64_t& end) {
    begin = n * t / threads;
    end = n * (t + 1) / threads;
  };
  for (int t = 1; t <= max_threads; ++t) {
    std::vector<double> copy, triad;
    for (int r = 0; r < reps; ++r) {
      copy.push_back(8.0 * static_cast<double>(n) / run_threads(t, [&](int id, int threads) {
        int64_t begin, end;
        slice(id, threads, begin, end);
        std::memcpy(pb + begin, pa + begin, static_cast<size_t>(end - begin) * sizeof(float));
      }));
      triad.push_back(12.0 * static_cast<double>(n) / run_threads(t, [&](int id, int threads) {
        int64_t begin, end;
        slice(id, threads, begin, end);
        for (int64_t i = begin; i < end; ++i) pa[i] = pb[i] + s * pc[i];
      }));
    }
    report("copy", t, median(copy) / 1e9, "GB/s");
    report("triad", t, median(triad) / 1e9, "GB/s");
  }
  g_sink = pa[n / 2];
  return 0;
}
