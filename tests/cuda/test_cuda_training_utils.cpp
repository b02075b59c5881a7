// The CUDA training-loop utilities against the CPU from the same float32 inputs:
//   cross-entropy with ignore_index and label smoothing (kernels/cuda/cross_entropy.cu): loss and
//     dlogits on both gradient paths, every row strategy of the row engine (C = 5, 33 warp per row;
//     1025 block per row, scalar; 2052 float4 cached; 40000 float4 streaming), a mean with every row
//     ignored;
//   clip_grad_norm_ (kernels/cuda/multi_tensor.cu): norms 2, 1, 1.5 and inf over tensors that
//     cross the 4096-element chunks, a parameter without gradient, max_norm above and below;
//   GradScaler's unscale pass (kernels/cuda/multi_tensor.cu): the gradients divided by the scale
//     bit for bit as on the CPU, across the chunks, and an inf or NaN found in any tensor;
//   topk and multinomial (kernels/cuda/sampling.cu): the same indices as the CPU, and the same
//     samples for the same generator state.
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"
#include "nn/nn.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

// Targets in [0, c) with every third row set to ignore_index.
Tensor targets_with_ignored(int64_t rows, int64_t c, int64_t ignore, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> t = randint(0, c, {rows}, DType::Int64, &g).to_vector<int64_t>();
  for (int64_t r = 0; r < rows; r += 3) t[static_cast<size_t>(r)] = ignore;
  return from_vector<int64_t>(t);
}

}  // namespace

TEST_CASE("cross-entropy with ignored rows and label smoothing on the device matches the CPU for every row strategy",
          "[cuda][cross_entropy]") {
  struct Case {
    int64_t rows, cols;
  };
  for (const Case cs : {Case{37, 5}, Case{37, 33}, Case{9, 1025}, Case{9, 2052}, Case{3, 40000}})
    for (double eps : {0.0, 0.2})
      for (auto mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate})
        for (auto reduction : {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None}) {
          INFO("[" << cs.rows << ", " << cs.cols << "], eps " << eps << ", reduction " << static_cast<int>(reduction)
                   << (mode == ops::CrossEntropyGrad::Fused ? ", fused" : ", separate"));
          const Tensor x = random_cpu({cs.rows, cs.cols}, cs.cols + 11, -4.0, 4.0);
          const Tensor t = targets_with_ignored(cs.rows, cs.cols, -100, cs.rows);
          const ops::CrossEntropyOptions o{-100, eps};
          Tensor xg = x.to(kGpu).clone(), xc = x.to(DType::Float64).clone();
          xg.requires_grad_(true);
          xc.requires_grad_(true);
          Tensor lg = ops::softmax_cross_entropy(xg, t.to(kGpu), reduction, mode, o);
          Tensor lc = ops::softmax_cross_entropy(xc, t, reduction, mode, o);
          // The loss is O(log C) <= 11 with float32 statistics: log s and the shifted sum of C terms
          // each a few ulps of their size, 1e-5 absolute + relative.
          check_close(lg, lc, 1e-5, 1e-5, "loss");
          if (reduction == ops::Reduction::None) {
            const Tensor seed = random_cpu({cs.rows}, 5);
            lg.backward(seed.to(kGpu));
            lc.backward(seed.to(DType::Float64));
          } else {
            lg.backward();
            lc.backward();
          }
          // dlogits = (p - q)·scale: p to a few float ulps, the target's cancellation against 1 - ε
          // costs an absolute 1e-6 of the scale (<= 1 here), and the ε/C term is exact to a ulp.
          check_close(xg.grad(), xc.grad(), 2e-6, 1e-5, "dlogits");
        }
}

TEST_CASE("cross-entropy on the device with every row ignored gives a NaN mean and zero gradients",
          "[cuda][cross_entropy]") {
  Tensor x = random_cpu({4, 7}, 3).to(kGpu);
  x.requires_grad_(true);
  Tensor loss = ops::softmax_cross_entropy(x, full({4}, -100, TensorOptions(DType::Int64, kGpu)));
  CHECK(std::isnan(loss.item()));
  loss.backward();
  check_equal(x.grad(), zeros({4, 7}, TensorOptions(DType::Float32, kGpu)), "dlogits");
  // An ignore_index inside [0, C) is ignored, other out-of-range targets still fail.
  const Tensor t = from_vector<int64_t>({2, 2, 0, 1}).to(kGpu);
  const double mean = ops::softmax_cross_entropy(x.detach(), t, ops::Reduction::Mean, ops::CrossEntropyGrad::Fused,
                                                 {2, 0.0}).item();
  const double want = ops::softmax_cross_entropy(x.detach().to(Device::cpu()).to(DType::Float64),
                                                 t.to(Device::cpu()), ops::Reduction::Mean,
                                                 ops::CrossEntropyGrad::Fused, {2, 0.0}).item();
  CHECK(mean == Approx(want).margin(1e-5));  // float32 statistics of O(1) logits
}

TEST_CASE("clip_grad_norm_ on the device matches the CPU over tensors that cross its chunks", "[cuda][clip_grad]") {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Shape> shapes = {{4097}, {1}, {3, 1001}, {0}, {9000}, {5, 7}};
  for (double p : {2.0, 1.0, 1.5, inf})
    for (double factor : {0.5, 3.0}) {
      INFO("norm_type " << p << ", max_norm = norm · " << factor);
      std::vector<Tensor> gpu, cpu;
      for (size_t i = 0; i < shapes.size(); ++i) {
        const Tensor grad = random_cpu(shapes[i], 100 + i);
        Tensor a = zeros(shapes[i], TensorOptions(DType::Float32, kGpu)), b = zeros(shapes[i]);
        if (i != 1) {  // shapes[1] has no gradient
          a.set_grad(grad.to(kGpu).clone());
          b.set_grad(grad.clone());
        }
        gpu.push_back(a);
        cpu.push_back(b);
      }
      const Tensor want = nn::clip_grad_norm_(cpu, 1e30, p);  // the norm alone: nothing is clipped
      const double max_norm = want.item() * factor;
      for (size_t i = 0; i < cpu.size(); ++i)
        if (cpu[i].grad().defined()) cpu[i].set_grad(gpu[i].grad().to(Device::cpu()).clone());
      const Tensor got = nn::clip_grad_norm_(gpu, max_norm, p);
      nn::clip_grad_norm_(cpu, max_norm, p);
      REQUIRE(got.device() == kGpu);
      // The device sums ~22000 float terms in a tree of float partials then double: 1e-5 relative.
      check_close(got, want, 0.0, 1e-5, "total norm");
      for (size_t i = 0; i < gpu.size(); ++i) {
        if (i == 1) {
          CHECK_FALSE(gpu[i].grad().defined());
          continue;
        }
        check_close(gpu[i].grad(), cpu[i].grad(), 1e-7, 2e-5, "clipped gradient");  // the coefficient's 1e-5
      }
    }
}

TEST_CASE("GradScaler on the device unscales as the CPU does and finds an inf or NaN in any tensor",
          "[cuda][grad_scaler]") {
  const std::vector<Shape> shapes = {{4097}, {3, 1001}, {0}, {9000}, {5, 7}};
  // A bad value placed in tensor `bad` (or none: -1), at an element past the first chunk.
  for (int bad : {-1, 0, 3}) {
    for (float value : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      INFO("bad tensor " << bad << ", value " << value);
      std::vector<Tensor> gpu, cpu;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Tensor grad = random_cpu(shapes[i], 200 + i) * 1024.0;
        if (static_cast<int>(i) == bad) {
          std::vector<float> g = grad.to_vector<float>();
          g[g.size() - 2] = value;
          grad = from_vector<float>(g).reshape(shapes[i]);
        }
        Tensor a = zeros(shapes[i], TensorOptions(DType::Float32, kGpu)).requires_grad_(),
               b = zeros(shapes[i]).requires_grad_();
        a.set_grad(grad.to(kGpu).clone());
        b.set_grad(grad.clone());
        gpu.push_back(a);
        cpu.push_back(b);
      }
      optim::SGD opt_gpu(gpu, {.lr = 0.1}), opt_cpu(cpu, {.lr = 0.1});
      optim::GradScaler on_gpu({.init_scale = 1024.0}), on_cpu({.init_scale = 1024.0});
      const bool stepped_gpu = on_gpu.step(opt_gpu), stepped_cpu = on_cpu.step(opt_cpu);
      CHECK(stepped_gpu == (bad < 0));
      CHECK(stepped_gpu == stepped_cpu);
      // x · (1/1024) is exact in float32 on both: the same bits.
      for (size_t i = 0; i < gpu.size(); ++i) {
        const std::vector<float> got = gpu[i].grad().to(Device::cpu()).to_vector<float>();
        const std::vector<float> want = cpu[i].grad().to_vector<float>();
        REQUIRE(got.size() == want.size());
        for (size_t j = 0; j < got.size(); ++j)
          CHECK((got[j] == want[j] || (std::isnan(got[j]) && std::isnan(want[j]))));
      }
      on_gpu.update();
      CHECK(on_gpu.get_scale() == (bad < 0 ? 1024.0 : 512.0));
    }
  }
}

TEST_CASE("topk on the device gives the CPU's values and indices, ties and NaN included", "[cuda][topk]") {
  Generator g(8);
  std::vector<float> v = (randn({5, 1000}, DType::Float32, &g) * 3.0).to_vector<float>();
  for (float& e : v) e = std::round(e);  // many ties
  v[17] = NAN;
  const Tensor x = from_vector<float>(v, Shape{5, 1000});
  for (bool largest : {true, false})
    for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{40}}) {
      INFO("k " << k << (largest ? ", largest" : ", smallest"));
      auto [vg, ig] = ops::topk(x.to(kGpu), k, 1, largest);
      auto [vc, ic] = ops::topk(x, k, 1, largest);
      check_equal(ig, ic, "indices");
      check_close(vg, vc, 0.0, 0.0, "values");
    }
  auto [v0, i0] = ops::topk(x.to(kGpu), 3, 0);
  auto [c0, j0] = ops::topk(x, 3, 0);
  check_equal(i0, j0, "indices along dim 0");
}

TEST_CASE("multinomial on the device draws the CPU's samples from the same generator state", "[cuda][multinomial]") {
  for (int64_t v : {int64_t{3}, int64_t{300}, int64_t{1000}, int64_t{5001}})
    for (bool replacement : {true, false}) {
      const int64_t n = replacement ? 700 : std::min<int64_t>(v / 2, 40);  // at most v/5 + 1 zeros in a row
      INFO("V " << v << ", n " << n << (replacement ? ", with" : ", without") << " replacement");
      Tensor w = random_cpu({4, v}, v, 0.0, 1.0);
      // Some zero weights, which are never drawn.
      std::vector<float> wv = w.to_vector<float>();
      for (size_t i = 0; i < wv.size(); i += 5) wv[i] = 0.0f;
      w = from_vector<float>(wv, Shape{4, v});
      Generator a(31), b(31);
      const Tensor got = ops::multinomial(w.to(kGpu), n, replacement, &a);
      const Tensor want = ops::multinomial(w, n, replacement, &b);
      check_equal(got, want, "samples");
    }
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, -2}).to(kGpu), 1), Catch::Contains("negative"));
  CHECK_THROWS_WITH(ops::multinomial(zeros({2, 3}, TensorOptions(DType::Float32, kGpu)), 1), Catch::Contains("row 0"));
}
