// bench_attention (bench/attention.cpp): forward + backward of ops::scaled_dot_product_attention
// (one fused op) against the same attention composed of minidl's unfused ops (per head: matmul,
// scale, causal mask, softmax, matmul, each keeping its [T, T] result for backward), on the
// CPU in float32 at a GPT's shapes (T = 64..256, head size 32 and 64, causal), and the fused op
// on cuda:0 when there is one, in float32 and in bfloat16 (whose forward runs on tensor cores,
// kernels/cuda/attention/flash_mma.cu); --gpu-only times only those, at --gpu-T (1024 by
// default) beside the GPT shapes, the figures bench/torch_attention.py gives for PyTorch's
// scaled_dot_product_attention on the same GPU. Each case: fresh random inputs, one warm-up, samples of at least
// --min-ms, the median of --reps samples. Threads: OMP_NUM_THREADS (the CPU kernels' pool). JSON
// lines on stdout, a table on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/backend.h"
#include "core/host_parallel.h"
#include "core/ops.h"

namespace {

using namespace minidl;

double median_seconds_per_call(const std::function<void()>& fn, int reps, double min_seconds) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  fn();
  const double once = std::chrono::duration<double>(clock::now() - t0).count();
  const int64_t calls = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_seconds / std::max(once, 1e-9))));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    const auto start = clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    samples.push_back(std::chrono::duration<double>(clock::now() - start).count() / static_cast<double>(calls));
  }
  std::nth_element(samples.begin(), samples.begin() + reps / 2, samples.end());
  return samples[static_cast<size_t>(reps / 2)];
}

struct Case {
  int64_t B, H, T, hs;
};

// The unfused composition, head by head (minidl's matmul is 2-D): softmax(q·kᵀ·scale + mask)·v.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale) {
  const int64_t B = q.shape()[0], H = q.shape()[1];
  Tensor total;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const Tensor qh = q.narrow(0, b, 1).narrow(1, h, 1).reshape(Shape{q.shape()[2], q.shape()[3]});
      const Tensor kh = k.narrow(0, b, 1).narrow(1, h, 1).reshape(Shape{k.shape()[2], k.shape()[3]});
      const Tensor vh = v.narrow(0, b, 1).narrow(1, h, 1).reshape(Shape{v.shape()[2], v.shape()[3]});
      const Tensor s = ops::add(ops::matmul(qh, kh.t().contiguous()) * scale, mask);  // [T, T]
      const Tensor out = ops::matmul(ops::softmax(s, -1), vh);                        // [T, hs]
      const Tensor part = ops::sum(out);
      total = total.defined() ? ops::add(total, part) : part;
    }
  return total;
}

void report(const char* device, const char* impl, const Case& c, int threads, double seconds) {
  std::fprintf(stderr, "%-6s %-8s %3lld %3lld %5lld %4lld %8d %10.3f\n", device, impl, (long long)c.B, (long long)c.H,
               (long long)c.T, (long long)c.hs, threads, seconds * 1e3);
  std::printf("{\"bench\":\"attention\",\"device\":\"%s\",\"impl\":\"%s\",\"B\":%lld,\"H\":%lld,\"T\":%lld,\"hs\":%lld,"
              "\"causal\":true,\"threads\":%d,\"ms_fwd_bwd\":%.4f}\n",
              device, impl, (long long)c.B, (long long)c.H, (long long)c.T, (long long)c.hs, threads, seconds * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Forward + backward of fused scaled_dot_product_attention vs an unfused composition"};
  int reps = 5;
  double min_ms = 200;
  int64_t batch = 8;
  app.add_option("--reps", reps, "timed samples per case; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--min-ms", min_ms, "minimum length of one timed sample, in milliseconds")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "B of the [B, H, T, hs] inputs")->check(CLI::PositiveNumber);
  bool gpu_only = false;
  int64_t gpu_t = 1024;
  app.add_flag("--gpu-only", gpu_only, "only the cuda:0 cases (float32 and bfloat16), with T = --gpu-T added");
  app.add_option("--gpu-T", gpu_t, "the longer sequence of the --gpu-only cases (head size 64, 12 heads)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (gpu_only && !cuda_is_available()) {
    std::fprintf(stderr, "bench_attention: --gpu-only needs a CUDA device\n");
    return 2;
  }
  const int threads = host_threads();
  std::fprintf(stderr, "%-6s %-8s %3s %3s %5s %4s %8s %10s\n", "device", "impl", "B", "H", "T", "hs", "threads",
               "ms/call");
  std::vector<Case> cases = {Case{batch, 4, 64, 32}, Case{batch, 6, 128, 64}, Case{batch, 4, 256, 32},
                             Case{batch, 6, 256, 64}};
  if (gpu_only) cases.push_back(Case{batch, 12, gpu_t, 64});
  for (const Case& c : cases) {
    Generator g(1);
    const TensorOptions f32(DType::Float32, Device::cpu());
    Tensor q = randn({c.B, c.H, c.T, c.hs}, f32, &g).requires_grad_();
    Tensor k = randn({c.B, c.H, c.T, c.hs}, f32, &g).requires_grad_();
    Tensor v = randn({c.B, c.H, c.T, c.hs}, f32, &g).requires_grad_();
    const Tensor dout = randn({c.B, c.H, c.T, c.hs}, f32, &g);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.hs));
    if (!gpu_only) {
      const double fused = median_seconds_per_call(
          [&] { ops::scaled_dot_product_attention(q, k, v, true).backward(dout); }, reps, min_ms / 1e3);
      report("cpu", "fused", c, threads, fused);
      std::vector<float> m(static_cast<size_t>(c.T * c.T), 0.0f);
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t j = i + 1; j < c.T; ++j) m[static_cast<size_t>(i * c.T + j)] = -std::numeric_limits<float>::infinity();
      const Tensor mask = from_vector(m, {c.T, c.T});
      const double composed =
          median_seconds_per_call([&] { composed_attention(q, k, v, mask, scale).backward(); }, reps, min_ms / 1e3);
      report("cpu", "unfused", c, threads, composed);
    }
    if (cuda_is_available()) {
      const Device gpu = Device::cuda(0);
      Backend& backend = backend_for(gpu);
      for (DType dt : {DType::Float32, DType::BFloat16}) {
        Tensor qg = q.detach().to(gpu).to(dt).requires_grad_(), kg = k.detach().to(gpu).to(dt).requires_grad_();
        Tensor vg = v.detach().to(gpu).to(dt).requires_grad_();
        const Tensor dg = dout.to(gpu).to(dt);
        const double cuda = median_seconds_per_call(
            [&] {
              ops::scaled_dot_product_attention(qg, kg, vg, true).backward(dg);
              backend.synchronize();
            },
            reps, min_ms / 1e3);
        report("cuda", dt == DType::Float32 ? "fused" : "fused-bf16", c, threads, cuda);
      }
    }
  }
  return 0;
}
