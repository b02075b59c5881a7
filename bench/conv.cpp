// bench_conv (bench/conv.cpp): where a training step of the Fashion-MNIST CNN spends its time on the CPU, and
// how fast its convolutions run against minidl's own GEMM on the same machine.
//   1. conv GFLOP/s: for each conv layer of the CNN (batch --batch), forward
//      (Backend::conv2d_forward) and backward (conv2d_backward: dW, dx, db) against a bare
//      GEMM (Backend::matmul) of the same M, K, N as the layer's forward product. Flops count
//      the GEMM's 2·M·K·N per product (forward one product, backward two); the ratio says what
//      the lowering (im2col, col2im, permutes) costs on top of the GEMM.
//   2. per layer: each layer of the CNN run alone (forward, then backward from a random
//      gradient), in milliseconds per batch.
// Median of --reps samples after a warm-up. Threads: OMP_NUM_THREADS (the kernels' pool).
// JSON lines on stdout, a table on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "nn/nn.h"

namespace {

using namespace minidl;

double median_ms(const std::function<void()>& fn, int reps) {
  using clock = std::chrono::steady_clock;
  fn();  // warm-up: buffers allocated, caches filled
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    const auto start = clock::now();
    fn();
    samples.push_back(std::chrono::duration<double, std::milli>(clock::now() - start).count());
  }
  std::nth_element(samples.begin(), samples.begin() + reps / 2, samples.end());
  return samples[static_cast<size_t>(reps / 2)];
}

struct ConvLayer {
  const char* name;
  int64_t c_in, c_out, hw;  // 3x3 kernel, padding 1, stride 1: the CNN's layers
};

void bench_conv(const ConvLayer& l, int64_t batch, int reps) {
  Backend& be = backend_for(Device::cpu());
  Generator g(1);
  const Tensor x = randn({batch, l.c_in, l.hw, l.hw}, {}, &g), w = randn({l.c_out, l.c_in, 3, 3}, {}, &g);
  const Tensor b = randn({l.c_out}, {}, &g);
  const Conv2dGeometry geo = ops::conv2d_geometry(x.shape(), w.shape(), {1, 1}, {1, 1}, {1, 1}, 1);
  const int64_t M = l.c_out, K = l.c_in * 9, N = batch * geo.spatial_out();
  const double flops = 2.0 * static_cast<double>(M * K * N);
  Tensor y = empty({batch, l.c_out, l.hw, l.hw}), dy = randn(y.shape(), {}, &g);
  Tensor dx = empty(x.shape()), dw = empty(w.shape()), db = empty(b.shape());
  const double fwd = median_ms([&] { be.conv2d_forward(x, w, b, y, geo); }, reps);
  const double bwd = median_ms([&] { be.conv2d_backward(dy, x, w, dx, dw, db, geo); }, reps);
  const Tensor a = randn({M, K}, {}, &g), bm = randn({K, N}, {}, &g);
  Tensor c = empty({M, N});
  const double gemm = median_ms([&] { be.matmul(a, bm, c, false, false); }, reps);
  const double gf_fwd = flops / fwd / 1e6, gf_bwd = 2 * flops / bwd / 1e6, gf_gemm = flops / gemm / 1e6;
  std::printf("{\"bench\":\"conv\",\"layer\":\"%s\",\"batch\":%lld,\"M\":%lld,\"K\":%lld,\"N\":%lld,\"fwd_ms\":%.3f,"
              "\"bwd_ms\":%.3f,\"gemm_ms\":%.3f,\"fwd_gflops\":%.1f,\"bwd_gflops\":%.1f,\"gemm_gflops\":%.1f}\n",
              l.name, static_cast<long long>(batch), static_cast<long long>(M), static_cast<long long>(K),
              static_cast<long long>(N), fwd, bwd, gemm, gf_fwd, gf_bwd, gf_gemm);
  std::fprintf(stderr, "%-6s M=%-3lld K=%-4lld N=%-6lld  fwd %7.2f ms %6.1f GFLOP/s (%3.0f%% of GEMM)  "
               "bwd %7.2f ms %6.1f GFLOP/s (%3.0f%%)  GEMM %7.2f ms %6.1f GFLOP/s\n",
               l.name, static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), fwd, gf_fwd,
               100 * gf_fwd / gf_gemm, bwd, gf_bwd, 100 * gf_bwd / gf_gemm, gemm, gf_gemm);
}

// The CNN of samples/fashion_mnist (make_cnn), layer by layer.
std::shared_ptr<nn::Sequential> make_cnn() {
  const nn::Conv2dOptions same{.padding = {1, 1}};
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Unflatten>(1, std::vector<int64_t>{1, 28, 28}));
  m->push_back(std::make_shared<nn::Conv2d>(1, 32, Size2{3, 3}, same));
  m->push_back(std::make_shared<nn::BatchNorm2d>(32));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(Size2{2, 2}));
  m->push_back(std::make_shared<nn::Conv2d>(32, 64, Size2{3, 3}, same));
  m->push_back(std::make_shared<nn::BatchNorm2d>(64));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(Size2{2, 2}));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Dropout>(0.25));
  m->push_back(std::make_shared<nn::Linear>(3136, 128));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(128, 10));
  return m;
}

void bench_layers(int64_t batch, int reps) {
  auto model = make_cnn();
  Generator g(2);
  Tensor h = randn({batch, 784}, {}, &g);
  double total_fwd = 0, total_bwd = 0;
  for (size_t i = 0; i < model->size(); ++i) {
    nn::Module& layer = *(*model)[i];
    Tensor x = h.detach().contiguous();
    x.requires_grad_(true);
    Tensor y;
    const double fwd = median_ms([&] { y = layer(x); }, reps);
    const Tensor dy = randn(y.shape(), {}, &g);
    const double bwd = median_ms([&] {
      x.set_grad(Tensor());
      Tensor out = layer(x);
      out.backward(dy);
    }, reps) - fwd;  // backward alone: the timed call runs a forward first
    total_fwd += fwd;
    total_bwd += bwd;
    std::printf("{\"bench\":\"cnn_layer\",\"index\":%zu,\"layer\":\"%s\",\"batch\":%lld,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f}\n",
                i, layer.name().c_str(), static_cast<long long>(batch), fwd, bwd);
    std::fprintf(stderr, "%2zu %-70.70s fwd %7.3f ms  bwd %7.3f ms\n", i, layer.name().c_str(), fwd, bwd);
    h = y.detach();
  }
  std::fprintf(stderr, "   %-70s fwd %7.3f ms  bwd %7.3f ms  (sum of the layers alone)\n", "total", total_fwd, total_bwd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minidl: the Fashion-MNIST CNN's conv layers against the GEMM, and its time per layer (CPU)"};
  int64_t batch = 64;
  int reps = 15;
  app.add_option("--batch", batch, "batch size")->capture_default_str();
  app.add_option("--reps", reps, "timed samples per case (median reported)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::fprintf(stderr, "threads: %d, batch %lld, float32\n", cpu::ThreadPool::instance().max_threads(),
               static_cast<long long>(batch));
  bench_conv({"conv1", 1, 32, 28}, batch, reps);
  bench_conv({"conv2", 32, 64, 14}, batch, reps);
  bench_layers(batch, reps);
  return 0;
}
