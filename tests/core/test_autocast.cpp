// Autocast (core/autocast.h): the op table op by op on the CPU (each op's output dtype, and the
// gradients' dtypes on the way back), the CUDA column of
// the table, the parameter cast cache and its lifetime, float64 and int64 left alone, nesting
// and disabling, no autocast inside backward, and a small GPT's gradients under bfloat16
// autocast against float32's.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/nn.h"

using namespace minidl;

namespace {
// A float32 leaf that requires grad: what autocast treats as a parameter.
Tensor param(const Shape& shape, Generator& g) { return randn(shape, DType::Float32, &g).requires_grad_(); }
}  // namespace

TEST_CASE("autocast on the CPU: products in bfloat16, losses and norms in float32, the rest as their inputs",
          "[autocast]") {
  Generator g(21);
  const Tensor x = randn({4, 8}, DType::Float32, &g);
  const Tensor w = param({6, 8}, g), b = param({6}, g);
  AutocastGuard guard(Device::cpu(), DType::BFloat16);
  CHECK(autocast::is_enabled(Device::cpu()));
  CHECK_FALSE(autocast::is_enabled(Device::cuda(0)));
  CHECK(autocast::dtype(Device::cpu()) == DType::BFloat16);
  // LowerPrecision.
  const Tensor y = ops::linear(x, w, b);
  CHECK(y.dtype() == DType::BFloat16);
  CHECK(ops::matmul(x, w.t()).dtype() == DType::BFloat16);
  const Tensor img = randn({1, 2, 5, 5}, DType::Float32, &g), k = param({3, 2, 3, 3}, g);
  CHECK(ops::conv2d(img, k).dtype() == DType::BFloat16);
  const Tensor q = randn({1, 2, 4, 8}, DType::Float32, &g);
  CHECK(ops::scaled_dot_product_attention(q, q, q, true).dtype() == DType::BFloat16);
  // Float32 on the CPU: cross-entropy, mse, layer_norm and batch_norm (minidl's kernels take
  // one dtype, and the weights are float32).
  CHECK(nn::functional::cross_entropy(y, from_vector<int64_t>({0, 1, 2, 3})).dtype() == DType::Float32);
  CHECK(nn::functional::mse_loss(y, zeros({4, 6})).dtype() == DType::Float32);
  CHECK(ops::layer_norm(y, ones({6}), zeros({6})).dtype() == DType::Float32);
  // None on the CPU (PyTorch's CPU list leaves them to their 16-bit kernels): softmax, sum, gelu.
  CHECK(ops::softmax(y, 1).dtype() == DType::BFloat16);
  CHECK(ops::sum(y).dtype() == DType::BFloat16);
  CHECK(ops::gelu(y).dtype() == DType::BFloat16);
  CHECK(ops::dropout(y, 0.1, true, &g).dtype() == DType::BFloat16);
  // Promotion: a bfloat16 with a float32 is float32.
  CHECK((y + ops::linear(x, w, b).to(DType::Float32)).dtype() == DType::Float32);
}

TEST_CASE("autocast's CUDA column follows PyTorch's CUDA lists", "[autocast]") {
  const Device cuda = Device::cuda(0);
  CHECK(autocast::policy_for("linear", cuda) == AutocastPolicy::LowerPrecision);
  CHECK(autocast::policy_for("softmax", cuda) == AutocastPolicy::Float32);
  CHECK(autocast::policy_for("log_softmax", cuda) == AutocastPolicy::Float32);
  CHECK(autocast::policy_for("sum", cuda) == AutocastPolicy::Float32);
  CHECK(autocast::policy_for("softmax", Device::cpu()) == AutocastPolicy::None);
  CHECK(autocast::policy_for("gelu", cuda) == AutocastPolicy::None);
  CHECK(autocast::policy_for("no such op", Device::cpu()) == AutocastPolicy::None);
  for (const autocast::OpPolicy& row : autocast::table()) {
    INFO(row.op);
    CHECK(autocast::policy_for(row.op, Device::cpu()) == row.cpu);
    CHECK(autocast::policy_for(row.op, cuda) == row.cuda);
  }
  // A CPU scope does not cast CUDA-bound ops and the reverse: the state is per device type.
  AutocastGuard guard(cuda, DType::Float16);
  CHECK(autocast::is_enabled(cuda));
  CHECK_FALSE(autocast::is_enabled(Device::cpu()));
  CHECK(ops::linear(ones({2, 3}), ones({4, 3})).dtype() == DType::Float32);
}

TEST_CASE("autocast leaves float64 and int64 alone, nests, and can be switched off inside a scope", "[autocast]") {
  const Tensor x64 = ones({2, 3}, DType::Float64), w64 = ones({4, 3}, DType::Float64);
  const Tensor x = ones({2, 3}), w = ones({4, 3});
  AutocastGuard outer(Device::cpu(), DType::BFloat16);
  CHECK(ops::linear(x64, w64).dtype() == DType::Float64);
  CHECK(ops::embedding(from_vector<int64_t>({1, 0}), ones({3, 5})).dtype() == DType::Float32);
  {
    AutocastGuard inner(Device::cpu(), DType::Float16);
    CHECK(ops::linear(x, w).dtype() == DType::Float16);
    {
      AutocastGuard off(Device::cpu(), DType::BFloat16, /*enabled=*/false);
      CHECK(ops::linear(x, w).dtype() == DType::Float32);
    }
    CHECK(ops::linear(x, w).dtype() == DType::Float16);
  }
  CHECK(ops::linear(x, w).dtype() == DType::BFloat16);
  CHECK_THROWS_WITH(AutocastGuard(Device::cpu(), DType::Float32),
                    Catch::Contains("AutocastGuard") && Catch::Contains("bfloat16 or float16"));
}

TEST_CASE("autocast caches the 16-bit casts of parameters for the scope, and only those", "[autocast]") {
  Generator g(22);
  const Tensor w = param({5, 4}, g), x = randn({3, 4}, DType::Float32, &g);
  {
    AutocastGuard guard(Device::cpu(), DType::BFloat16);
    const Tensor y1 = ops::linear(x, w), y2 = ops::linear(x * 2.0, w);
    CHECK(autocast::cache_size() == 1);  // w, cast once; x is not a parameter
    // The cached cast is one tensor: both products read it, and its gradient reaches w once per use.
    (y1.sum() + y2.sum()).to(DType::Float32).backward();
    CHECK(w.grad().dtype() == DType::Float32);
    // dW = Σ_rows x + Σ_rows 2x = 3·Σ_rows x, through bf16 rounding of x and of the products.
    const std::vector<float> gw = w.grad().to_vector<float>();
    const std::vector<float> xs = ops::sum(x.to(DType::BFloat16).to(DType::Float32), 0).to_vector<float>();
    for (int j = 0; j < 4; ++j) CHECK(gw[j] == Approx(3 * xs[j]).epsilon(0.02));
  }
  CHECK(autocast::cache_size() == 0);  // dropped with the outermost scope
  {
    AutocastGuard guard(Device::cpu(), DType::BFloat16, true, /*cache_enabled=*/false);
    (void)ops::linear(x, w);
    CHECK(autocast::cache_size() == 0);
  }
}

TEST_CASE("backward does not autocast, even when called inside the scope", "[autocast]") {
  Generator g(23);
  const Tensor w = param({3, 4}, g);
  AutocastGuard guard(Device::cpu(), DType::BFloat16);
  const Tensor y = ops::linear(randn({2, 4}, DType::Float32, &g), w);  // bf16
  const Tensor loss = ops::sum(y * y);  // bf16 (sum is not cast on the CPU)
  // No CPU backward node calls an op of the table, so the gradients' dtypes alone could not tell
  // whether backward autocasts: w's gradient hook runs inside backward, looks, and runs a linear.
  bool enabled_in_backward = true;
  DType linear_in_backward = DType::BFloat16;
  w.register_hook([&](const Tensor&) {  // fires inside backward, when w's gradient is ready
    enabled_in_backward = autocast::is_enabled(Device::cpu());
    linear_in_backward = ops::linear(ones({2, 4}), ones({3, 4})).dtype();
  });
  loss.backward();
  CHECK_FALSE(enabled_in_backward);
  CHECK(linear_in_backward == DType::Float32);
  CHECK(autocast::is_enabled(Device::cpu()));  // and the scope is back after it
  CHECK(w.grad().dtype() == DType::Float32);
}

TEST_CASE("a small GPT's gradients under bfloat16 autocast stay within a stated tolerance of float32's",
          "[autocast]") {
  // One transformer block with the GPT's ops: embedding, layer norm, a fused qkv projection,
  // causal attention, GELU MLP, residuals, the tied-free head and cross-entropy.
  const int64_t V = 17, T = 8, D = 32, H = 2, B = 3;
  Generator g(24);
  auto p = [&](const Shape& s, double scale) { return (randn(s, DType::Float32, &g) * scale).detach().requires_grad_(); };
  std::vector<Tensor> params = {p({V, D}, 0.5), p({T, D}, 0.5), p({3 * D, D}, 0.15), p({D, D}, 0.15),
                                p({4 * D, D}, 0.15), p({D, 4 * D}, 0.1), p({V, D}, 0.15)};
  const Tensor tokens = randint(0, V, {B, T}, DType::Int64, &g), targets = randint(0, V, {B * T}, DType::Int64, &g);
  auto loss_of = [&](const std::vector<Tensor>& w) {
    Tensor x = ops::embedding(tokens.reshape({B * T}), w[0]).reshape({B, T, D}) + w[1];
    const Tensor h = ops::layer_norm(x, Tensor(), Tensor());
    const std::vector<Tensor> qkv = ops::linear(h, w[2]).split(D, 2);
    auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D / H}).transpose(1, 2); };
    const Tensor att = ops::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true);
    x = x + ops::linear(att.transpose(1, 2).reshape({B, T, D}), w[3]);
    x = x + ops::linear(ops::gelu(ops::linear(ops::layer_norm(x, Tensor(), Tensor()), w[4])), w[5]);
    const Tensor logits = ops::linear(ops::layer_norm(x, Tensor(), Tensor()), w[6]);
    return nn::functional::cross_entropy(logits.reshape({B * T, V}), targets);
  };
  const Tensor loss32 = loss_of(params);
  loss32.backward();
  std::vector<std::vector<float>> g32;
  for (Tensor& w : params) {
    g32.push_back(w.grad().to_vector<float>());
    w.set_grad(Tensor());
  }
  Tensor loss16;
  {
    AutocastGuard guard(Device::cpu(), DType::BFloat16);
    loss16 = loss_of(params);
  }
  CHECK(loss16.dtype() == DType::Float32);
  loss16.backward();
  // bfloat16 keeps 8 significant bits (unit roundoff 2^-8 ≈ 0.4%); each product rounds its
  // operands and its result once, and a gradient passes through about six of them between the
  // loss and the first layer. A relative error of 6 · 2^-8 ≈ 2.3% per element would be the
  // worst case if every rounding pushed the same way; measured over the whole tensor (the norm
  // of the difference over the norm of the gradient) the errors partly cancel. 5% of the
  // gradient's norm bounds it with room, and a float32 product run in bfloat16 by mistake
  // somewhere it must not be (a loss in 16 bits) fails it.
  CHECK(loss16.item() == Approx(loss32.item()).epsilon(0.01));
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i << " " << params[i].shape());
    REQUIRE(params[i].grad().dtype() == DType::Float32);
    const std::vector<float> g16 = params[i].grad().to_vector<float>();
    double diff = 0, norm = 0;
    for (size_t j = 0; j < g16.size(); ++j) {
      diff += (g16[j] - g32[i][j]) * static_cast<double>(g16[j] - g32[i][j]);
      norm += g32[i][j] * static_cast<double>(g32[i][j]);
    }
    CHECK(std::sqrt(diff) <= 0.05 * std::sqrt(norm));
  }
}
