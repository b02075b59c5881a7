// kernels/cuda/conv.cu, pool.cu, batch_norm.cu and dropout.cu through the public ops, against
// the CPU backend: forward values and every gradient over the odd geometries of the CPU tests
// (stride 2, padding, dilation 2, groups, non-square kernels, sizes the stride does not
// divide, batch 1), max-pool ties, batch-norm running statistics, the same dropout mask for
// the same seed, and one training step of the Fashion-MNIST CNN's layers.
#include "cuda_test_util.h"

#include "kernels/cuda/cuda_backend.h"
#include "nn/nn.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

struct ConvCase {
  int64_t n, c_in, h, w, c_out, kh, kw;
  Size2 stride, padding, dilation;
  int64_t groups;
};

const ConvCase kConvCases[] = {
    {2, 3, 5, 5, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1},     {1, 2, 7, 6, 3, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1},
    {2, 2, 9, 8, 2, 3, 2, {1, 1}, {2, 1}, {2, 2}, 1},     {2, 4, 6, 5, 6, 3, 1, {2, 1}, {1, 0}, {1, 1}, 2},
    {1, 6, 5, 7, 3, 2, 3, {3, 2}, {1, 1}, {2, 1}, 3},     {3, 1, 4, 4, 2, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1},
    {16, 32, 14, 14, 64, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1},  // the CNN's second layer on 16 samples
};

// Runs f on the CPU tensors and on their GPU copies, then compares the output and the gradient
// of every input (the same weighted sum seeds both backward passes).
template <typename F>
void compare_with_cpu(F f, std::vector<Tensor> cpu_inputs, double atol, double rtol, const std::string& what) {
  std::vector<Tensor> gpu_inputs;
  for (auto& t : cpu_inputs) {
    t.requires_grad_(true);
    gpu_inputs.push_back(t.detach().to(kGpu).requires_grad_(true));
  }
  const Tensor y_cpu = f(cpu_inputs), y_gpu = f(gpu_inputs);
  check_close(y_gpu, y_cpu, atol, rtol, what + ": forward");
  const Tensor seed = random_cpu(y_cpu.shape(), 1234);
  y_cpu.backward(seed);
  y_gpu.backward(seed.to(kGpu));
  for (size_t i = 0; i < cpu_inputs.size(); ++i)
    check_close(gpu_inputs[i].grad(), cpu_inputs[i].grad(), atol, rtol, what + ": gradient of input " + std::to_string(i));
}

}  // namespace

// Tolerances: float32 sums of up to 576 products (and dW sums over N·S = 3136 terms) of values
// in [-1, 1], in a different order on each device: |error| grows like sqrt(terms) · 6e-8 ·
// |terms|, below 1e-3 absolute for these sizes; 1e-3 + 1e-3 relative states that bound.
TEST_CASE("cuda conv2d matches the cpu in forward and backward for odd geometries", "[cuda][conv]") {
  uint64_t seed = 0;
  for (const ConvCase& k : kConvCases) {
    ++seed;
    auto f = [&](const std::vector<Tensor>& v) {
      return ops::conv2d(v[0], v[1], v[2], k.stride, k.padding, k.dilation, k.groups);
    };
    compare_with_cpu(f,
                     {random_cpu({k.n, k.c_in, k.h, k.w}, seed), random_cpu({k.c_out, k.c_in / k.groups, k.kh, k.kw}, seed + 100),
                      random_cpu({k.c_out}, seed + 200)},
                     1e-3, 1e-3, "conv2d case " + std::to_string(seed));
  }
}

// Note [conv chunks on the GPU] in kernels/cuda/conv.cu: a batch of 131 whose col buffer
// (144 rows × 131·899 columns) needs three chunks of that backend's budget, the last of 3 samples,
// with groups, against the CPU, which chunks at its own budget. Tolerance: an output is a sum of
// 72 products, as above; but dW and db sum N·S = 117,769 terms of values in [-1, 1], so their
// entries reach a few hundred, and float32 sums of that many terms in two orders differ by about
// sqrt(terms) · 6e-8 · |sum| ≈ 1e-2 at most: atol 1e-2 plus 1e-3 relative states that bound.
TEST_CASE("cuda conv2d over a batch that spans several column chunks matches the cpu", "[cuda][conv]") {
  const Shape xs{131, 16, 31, 29}, ws{6, 8, 3, 3};
  const Size2 stride{1, 1}, padding{1, 1}, dilation{1, 1};
  const int64_t groups = 2;
  const Conv2dGeometry g = ops::conv2d_geometry(xs, ws, stride, padding, dilation, groups);
  const int64_t chunk = cuda::conv2d_samples_per_chunk(g);
  INFO("samples per chunk: " << chunk);
  REQUIRE(chunk * 2 < g.n);   // at least three chunks
  REQUIRE(g.n % chunk != 0);  // and a last one that is smaller
  auto f = [&](const std::vector<Tensor>& v) { return ops::conv2d(v[0], v[1], v[2], stride, padding, dilation, groups); };
  compare_with_cpu(f, {random_cpu(xs, 901), random_cpu(ws, 902), random_cpu({ws[0]}, 903)}, 1e-2, 1e-3,
                   "conv2d over several chunks");
}

TEST_CASE("cuda max_pool2d and avg_pool2d match the cpu, with the same argmax indices", "[cuda][pool]") {
  struct PoolCase {
    Shape x;
    Size2 kernel, stride, padding;
  };
  const PoolCase cases[] = {{{2, 3, 6, 6}, {2, 2}, {2, 2}, {0, 0}},
                            {{1, 2, 7, 5}, {3, 3}, {2, 2}, {1, 1}},
                            {{2, 1, 5, 8}, {2, 3}, {1, 2}, {1, 1}},
                            {{64, 32, 28, 28}, {2, 2}, {2, 2}, {0, 0}}};
  uint64_t seed = 50;
  for (const PoolCase& k : cases) {
    ++seed;
    // Pooling moves values without arithmetic (max) or averages at most 9 (avg): 1e-6 covers the
    // float32 rounding of a 9-term mean in another order.
    compare_with_cpu([&](const std::vector<Tensor>& v) { return ops::max_pool2d(v[0], k.kernel, k.stride, k.padding); },
                     {random_cpu(k.x, seed)}, 1e-6, 1e-6, "max_pool2d");
    for (bool include_pad : {true, false})
      compare_with_cpu(
          [&](const std::vector<Tensor>& v) { return ops::avg_pool2d(v[0], k.kernel, k.stride, k.padding, include_pad); },
          {random_cpu(k.x, seed)}, 1e-6, 1e-6, "avg_pool2d");
  }
  compare_with_cpu([](const std::vector<Tensor>& v) { return ops::adaptive_avg_pool2d(v[0]); },
                   {random_cpu({4, 8, 7, 7}, 9)}, 1e-6, 1e-6, "adaptive_avg_pool2d");
  // Ties: integer-valued inputs make many; the first maximum must win on both devices.
  Generator g(3);
  const Tensor ties = randint(0, 3, {2, 2, 6, 6}, DType::Int64, &g).to(DType::Float32);
  Tensor a = ties.detach().requires_grad_(), b = ties.to(kGpu).requires_grad_();
  ops::max_pool2d(a, {3, 3}, Size2{1, 1}).sum().backward();
  ops::max_pool2d(b, {3, 3}, Size2{1, 1}).sum().backward();
  check_equal(b.grad(), a.grad(), "max_pool2d gradient with ties (exact: sums of small integers)");
}

TEST_CASE("cuda batch_norm matches the cpu in training and evaluation, running statistics included", "[cuda][batch_norm]") {
  for (bool training : {true, false}) {
    Tensor rm_cpu = random_cpu({8}, 7), rv_cpu = random_cpu({8}, 8, 0.5, 2.0);
    Tensor rm_gpu = rm_cpu.to(kGpu), rv_gpu = rv_cpu.to(kGpu);
    auto f = [&](const std::vector<Tensor>& v) {
      const bool gpu = v[0].device().is_cuda();
      return ops::batch_norm(v[0], gpu ? rm_gpu : rm_cpu, gpu ? rv_gpu : rv_cpu, v[1], v[2], training, 0.1, 1e-5);
    };
    // Normalised values of size ~3 from float32 statistics over 3136 elements: 1e-4 covers the
    // different summation orders; gradients carry the same relative error.
    compare_with_cpu(f, {random_cpu({16, 8, 14, 14}, 20, -2.0, 3.0), random_cpu({8}, 21), random_cpu({8}, 22)}, 1e-4,
                     1e-4, training ? "batch_norm training" : "batch_norm eval");
    check_close(rm_gpu, rm_cpu, 1e-5, 1e-5, "running_mean");
    check_close(rv_gpu, rv_cpu, 1e-5, 1e-5, "running_var");
  }
}

TEST_CASE("cuda dropout draws the cpu's mask for the same seed", "[cuda][dropout]") {
  Generator a(5), b(5);
  const Tensor x = random_cpu({64, 3136}, 30);
  check_equal(ops::dropout(x.to(kGpu), 0.25, true, &b), ops::dropout(x, 0.25, true, &a),
              "dropout output (x times the same 0 or 4/3 in float32: exact)");
}

TEST_CASE("cuda trains the Fashion-MNIST CNN's layers like the cpu for one step", "[cuda][conv]") {
  auto build = [] {
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Conv2d>(1, 8, Size2{3, 3}, nn::Conv2dOptions{.padding = {1, 1}}));
    m->push_back(std::make_shared<nn::BatchNorm2d>(8));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(Size2{2, 2}));
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(8 * 14 * 14, 10));
    return m;
  };
  manual_seed(0);
  auto cpu_model = build();
  manual_seed(0);
  auto gpu_model = build();
  gpu_model->to(kGpu);
  const Tensor x = random_cpu({32, 1, 28, 28}, 40);
  Generator g(41);
  const Tensor y = randint(0, 10, {32}, DType::Int64, &g);
  nn::CrossEntropyLoss loss;
  const Tensor l_cpu = loss((*cpu_model)(x), y), l_gpu = loss((*gpu_model)(x.to(kGpu)), y.to(kGpu));
  check_close(l_gpu, l_cpu, 1e-4, 1e-4, "loss");  // a mean of 32 log-probabilities of size ~2
  l_cpu.backward();
  l_gpu.backward();
  const auto pc = cpu_model->named_parameters(), pg = gpu_model->named_parameters();
  for (size_t i = 0; i < pc.size(); ++i) check_close(pg[i].second.grad(), pc[i].second.grad(), 1e-4, 1e-3, pc[i].first);
}
