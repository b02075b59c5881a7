// The autograd engine: accumulation where a tensor is used twice, retain_graph, NoGradGuard,
// detach, leaf gradient accumulation across backward calls, gradient-ready hooks, the
// callbacks a hook queues for the end of backward, and nodes with several outputs.
#include <catch2/catch.hpp>

#include "core/autograd.h"
#include "core/ops.h"

using namespace minidl;

TEST_CASE("a tensor used twice receives the sum of both gradients", "[core][autograd]") {
  Tensor x = from_vector<double>({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = ops::sum(x * x + x);  // dy/dx = 2x + 1
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 5.0, 7.0});
}

TEST_CASE("gradients accumulate into .grad across backward calls until cleared", "[core][autograd]") {
  Tensor x = from_vector<double>({1.0, -1.0}).requires_grad_();
  ops::sum(x * 3.0).backward();
  ops::sum(x * 3.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6.0, 6.0});
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  CHECK_THROWS_WITH(x.set_grad(ones({3}, DType::Float64)), Catch::Contains("does not match"));
  CHECK_THROWS_WITH(Tensor().set_grad(Tensor()), Catch::Contains("undefined tensor"));
}

TEST_CASE("a second backward without retain_graph is a clear error, with it it works", "[core][autograd]") {
  Tensor x = from_vector<double>({2.0}).requires_grad_();
  Tensor y = ops::sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item() == Approx(8.0));  // 4 + 4, exact in double
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("second time") && Catch::Contains("retain_graph"));
}

TEST_CASE("NoGradGuard records no graph and restores the mode", "[core][autograd]") {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(grad_mode_enabled());
  }
  CHECK(grad_mode_enabled());
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("detach shares storage and cuts the history", "[core][autograd]") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage().data() == y.storage().data());
  CHECK(y.grad_fn()->name() == "MulBackward");
}

TEST_CASE("gradient-ready hooks fire once per accumulation with the leaf's gradient", "[core][autograd]") {
  Tensor w = from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor b = from_vector<double>({0.5}).requires_grad_();
  std::vector<std::string> order;
  w.register_hook([&](const Tensor& g) {
    order.push_back("w");
    CHECK(g.to_vector<double>() == std::vector<double>{1.0, 1.0});
  });
  b.register_hook([&](const Tensor&) { order.push_back("b"); });
  ops::sum(w + b).backward();
  REQUIRE(order.size() == 2);
  CHECK_THROWS_AS((w * 2.0).register_hook([](const Tensor&) {}), Error);
}

TEST_CASE("backward on a non-scalar needs an explicit gradient", "[core][autograd]") {
  Tensor x = ones({2, 2}).requires_grad_();
  Tensor y = x * 2.0;
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("backward") && Catch::Contains("[2, 2]"));
  y.backward(ones({2, 2}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>(4, 2.0f));
  CHECK_THROWS_WITH(ones({2}).backward(), Catch::Contains("does not require grad"));
}

TEST_CASE("only leaves that require grad get gradients, and intermediate nodes are named", "[core][autograd]") {
  Tensor a = ones({2}).requires_grad_();
  Tensor c = ones({2});
  Tensor y = ops::sum(ops::relu(a * c));
  CHECK(y.grad_fn()->name() == "SumBackward");
  y.backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(c.grad().defined());
  CHECK_THROWS_AS(randint(0, 3, {2}).requires_grad_(), Error);
}

TEST_CASE("a callback queued from a hook runs after every leaf got its gradient, before backward returns",
          "[core][autograd]") {
  Tensor w1 = from_vector<double>({1.0, 2.0}).requires_grad_();
  Tensor w2 = from_vector<double>({3.0}).requires_grad_();
  std::vector<std::string> order;
  bool queued = false;
  auto hook = [&](const char* name) {
    return [&, name](const Tensor&) {
      order.push_back(name);
      if (!queued) {
        queued = true;
        autograd::queue_callback([&] {
          order.push_back("callback");
          CHECK(w1.grad().defined());
          CHECK(w2.grad().defined());
          CHECK_FALSE(grad_mode_enabled());  // callbacks run under no-grad like the rest of backward
          autograd::queue_callback([&] { order.push_back("queued by the callback"); });
        });
      }
    };
  };
  w1.register_hook(hook("w1"));
  w2.register_hook(hook("w2"));
  ops::sum(w1 * w2).backward();
  REQUIRE(order.size() == 4);
  CHECK(order[2] == "callback");
  CHECK(order[3] == "queued by the callback");
  CHECK(grad_mode_enabled());

  // The queue belongs to one backward: the next one starts empty.
  order.clear();
  queued = true;
  ops::sum(w1 * w2).backward();
  CHECK(order.size() == 2);
}

TEST_CASE("queue_callback outside a backward pass is a clear error, and a throwing callback surfaces from backward",
          "[core][autograd]") {
  CHECK_THROWS_WITH(autograd::queue_callback([] {}), Catch::Contains("no backward pass is running"));
  Tensor w = from_vector<double>({1.0}).requires_grad_();
  w.register_hook([](const Tensor&) { autograd::queue_callback([] { throw Error("callback failed"); }); });
  CHECK_THROWS_WITH(ops::sum(w * 2.0).backward(), Catch::Contains("callback failed"));
  // The failed pass left no queue behind.
  CHECK_THROWS_WITH(autograd::queue_callback([] {}), Catch::Contains("no backward pass is running"));
}

TEST_CASE("a gradient accumulates in place into a strided .grad the user set", "[core][autograd]") {
  Tensor x = zeros({2, 3}, DType::Float64).requires_grad_();
  const Tensor base = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor strided = base.t();  // [2, 3] with strides [1, 2]: not contiguous
  REQUIRE_FALSE(strided.is_contiguous());
  x.set_grad(strided);
  ops::sum(x * from_vector<double>({10, 20, 30, 40, 50, 60}, {2, 3})).backward();
  CHECK(x.grad().same(strided));
  // x.grad() = base.t() + [[10, 20, 30], [40, 50, 60]], written through the view into base.
  CHECK(base.to_vector<double>() == std::vector<double>{11, 42, 23, 54, 35, 66});
}

namespace {
// A node with two outputs (two views of its input) that records the gradients each call
// received and passes the sum of the defined ones to its input.
struct TwoOutputRecorder final : MultiOutputNode {
  std::vector<std::vector<Tensor>> calls;
  TwoOutputRecorder() : MultiOutputNode(2) {}
  std::vector<Tensor> apply_outputs(const std::vector<Tensor>& grads) override {
    calls.push_back(grads);
    Tensor sum;
    for (const Tensor& g : grads)
      if (g.defined()) sum = sum.defined() ? sum + g : g;
    return {sum};
  }
  std::string name() const override { return "TwoOutputRecorder"; }
};

// Two views of x that share one TwoOutputRecorder as their grad_fn (outputs 0 and 1).
std::vector<Tensor> two_outputs(const Tensor& x, const std::shared_ptr<TwoOutputRecorder>& node) {
  std::vector<Tensor> outputs{make_view(x, x.shape(), x.strides(), x.offset()),
                              make_view(x, x.shape(), x.strides(), x.offset())};
  autograd::attach_outputs(node, {&x}, outputs);
  return outputs;
}
}  // namespace

TEST_CASE("a node with several outputs runs once, each output's gradients summed in its own slot",
          "[core][autograd]") {
  Tensor x = from_vector<double>({1.0, 2.0}).requires_grad_();
  auto node = std::make_shared<TwoOutputRecorder>();
  const std::vector<Tensor> out = two_outputs(x, node);
  CHECK(out[0].grad_fn() == out[1].grad_fn());
  // Output 0 used twice, output 1 once: one call, with 2 + 3 in slot 0 and 10 in slot 1.
  ops::sum(out[0] * 2.0 + out[0] * 3.0 + out[1] * 10.0).backward();
  REQUIRE(node->calls.size() == 1);
  REQUIRE(node->calls[0].size() == 2);
  CHECK(node->calls[0][0].to_vector<double>() == std::vector<double>{5.0, 5.0});
  CHECK(node->calls[0][1].to_vector<double>() == std::vector<double>{10.0, 10.0});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{15.0, 15.0});

  // Only output 1 reached: slot 0 stays undefined. The node saved nothing it frees, yet is
  // single-use by default, so a second backward through it is the usual error.
  auto second = std::make_shared<TwoOutputRecorder>();
  const std::vector<Tensor> out2 = two_outputs(x, second);
  ops::sum(out2[1] * 4.0).backward();
  REQUIRE(second->calls.size() == 1);
  CHECK_FALSE(second->calls[0][0].defined());
  CHECK(second->calls[0][1].to_vector<double>() == std::vector<double>{4.0, 4.0});
  CHECK_THROWS_WITH(ops::sum(out2[0]).backward(), Catch::Contains("second time"));

  // An output may be the root of backward, seeded with ones in its slot.
  auto third = std::make_shared<TwoOutputRecorder>();
  Tensor y = from_vector<double>({7.0}).requires_grad_();
  const std::vector<Tensor> out3 = two_outputs(y, third);
  out3[1].backward();
  REQUIRE(third->calls.size() == 1);
  CHECK_FALSE(third->calls[0][0].defined());
  CHECK(third->calls[0][1].to_vector<double>() == std::vector<double>{1.0});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{1.0});
}
