// optim::GradScaler against torch.amp.GradScaler's documented behaviour: the default scale 2^16,
// the loss multiplied by it, gradients divided by it in one pass that spots inf/NaN, the step
// skipped on an overflow with the scale backed off and the growth count restarted, growth after
// growth_interval good steps in a row (never to Inf), the call-order errors, float16 gradients
// refused, disabled scalers transparent, and the state through a checkpoint.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"
#include "io/checkpoint.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "tests/temp_dir.h"

using namespace minidl;

namespace {
// A parameter whose gradient is set by hand: the scaler only ever reads .grad().
struct Fixture {
  Tensor w = from_vector<float>({1.0f, 2.0f, 3.0f}).requires_grad_();
  optim::SGD opt{{w}, {.lr = 0.5}};
  void set_grad(std::vector<float> g) { w.set_grad(from_vector<float>(std::move(g))); }
};
}  // namespace

TEST_CASE("GradScaler scales the loss, unscales the gradients and steps", "[optim][grad_scaler]") {
  Fixture f;
  optim::GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  const Tensor loss = from_vector<float>({0.25f}).reshape({});
  CHECK(scaler.scale(loss).item() == 0.25 * 65536.0);
  f.set_grad({65536.0f, -131072.0f, 0.0f});  // the gradients of the scaled loss
  CHECK(scaler.step(f.opt));
  CHECK(f.w.grad().to_vector<float>() == std::vector<float>{1.0f, -2.0f, 0.0f});
  CHECK(f.w.to_vector<float>() == std::vector<float>{0.5f, 3.0f, 3.0f});
  scaler.update();
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.growth_tracker() == 1);
}

TEST_CASE("GradScaler skips the step on inf or NaN, backs off, and grows after growth_interval good steps",
          "[optim][grad_scaler]") {
  Fixture f;
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3});
  const std::vector<float> before = f.w.to_vector<float>();
  // Two good steps, then an overflow: skipped, scale halved, tracker back to 0.
  for (int i = 0; i < 2; ++i) {
    f.set_grad({1024.0f, 1024.0f, 1024.0f});
    CHECK(scaler.step(f.opt));
    scaler.update();
  }
  CHECK(scaler.growth_tracker() == 2);
  const std::vector<float> stepped = f.w.to_vector<float>();
  CHECK(stepped != before);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    f.set_grad({1.0f, bad, 1.0f});
    CHECK_FALSE(scaler.step(f.opt));
    CHECK(f.w.to_vector<float>() == stepped);  // the optimizer did not run
    scaler.update();
    CHECK(scaler.growth_tracker() == 0);
  }
  CHECK(scaler.get_scale() == 256.0);  // 1024 · 0.5 · 0.5
  // Three good steps in a row: the third update doubles the scale and restarts the count.
  for (int i = 0; i < 3; ++i) {
    f.set_grad({256.0f, 256.0f, 256.0f});
    CHECK(scaler.step(f.opt));
    scaler.update();
  }
  CHECK(scaler.get_scale() == 512.0);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("GradScaler never grows to Inf, checks the order of calls and refuses float16 gradients",
          "[optim][grad_scaler]") {
  Fixture f;
  optim::GradScaler scaler({.init_scale = 3.0e38, .growth_interval = 1});
  f.set_grad({1.0f, 1.0f, 1.0f});
  scaler.step(f.opt);
  scaler.update();
  CHECK(std::isfinite(scaler.get_scale()));
  CHECK(scaler.get_scale() == static_cast<double>(3.0e38f));
  f.set_grad({1.0f, 1.0f, 1.0f});
  scaler.unscale_(f.opt);
  CHECK_THROWS_WITH(scaler.unscale_(f.opt), Catch::Contains("unscale_ twice"));
  scaler.step(f.opt);
  CHECK_THROWS_WITH(scaler.step(f.opt), Catch::Contains("step() called twice"));
  scaler.update();
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("no unscale_() or step()"));
  Tensor h = from_vector<float>({1.0f}).to(DType::Float16).requires_grad_();
  h.set_grad(ones({1}, DType::Float16));
  optim::SGD opt16({h}, {.lr = 0.1});
  CHECK_THROWS_WITH(optim::GradScaler().step(opt16), Catch::Contains("float16 gradient"));
  CHECK_THROWS_WITH(optim::GradScaler({.backoff_factor = 1.5}), Catch::Contains("backoff_factor"));
  CHECK_THROWS_WITH(optim::GradScaler({.growth_factor = 1.0}), Catch::Contains("growth_factor"));
}

TEST_CASE("a disabled GradScaler changes nothing", "[optim][grad_scaler]") {
  Fixture f;
  optim::GradScaler scaler({.enabled = false});
  const Tensor loss = from_vector<float>({0.25f}).reshape({});
  CHECK(scaler.scale(loss).same(loss));
  f.set_grad({1.0f, std::numeric_limits<float>::infinity(), 1.0f});
  CHECK(scaler.step(f.opt));  // no check when disabled: the optimizer steps, as PyTorch's does
  scaler.update();
  CHECK(scaler.get_scale() == 1.0);
}

TEST_CASE("GradScaler's state goes through a checkpoint and comes back", "[optim][grad_scaler][io]") {
  minidl::testing::TempDir dir;
  Fixture f;
  optim::GradScaler scaler({.init_scale = 4096.0, .growth_interval = 5});
  f.set_grad({1.0f, 1.0f, 1.0f});
  scaler.step(f.opt);
  scaler.update();
  io::Checkpoint c;
  c.program = "test";
  c.grad_scaler = scaler.state();
  c.generators["default"] = GeneratorState{1, 2};
  const std::string path = dir.file("scaler.safetensors");
  io::save_checkpoint(c, path);
  const io::Checkpoint back = io::load_checkpoint(path, "test");
  REQUIRE(back.grad_scaler.has_value());
  CHECK(back.grad_scaler->scale == 4096.0);
  CHECK(back.grad_scaler->growth_tracker == 1);
  optim::GradScaler resumed({.init_scale = 4096.0, .growth_interval = 5});
  resumed.load_state(*back.grad_scaler);
  CHECK(resumed.growth_tracker() == 1);
  optim::GradScaler other({.growth_interval = 7});
  CHECK_THROWS_WITH(other.load_state(*back.grad_scaler), Catch::Contains("growth_interval 5"));
}

TEST_CASE("GradScaler scales a float16 loss in float32: 65536 is Inf in float16", "[optim][grad_scaler][half]") {
  optim::GradScaler scaler;
  const Tensor loss = full(Shape{}, 0.5, DType::Float16);
  const Tensor scaled = scaler.scale(loss);
  CHECK(scaled.dtype() == DType::Float32);
  CHECK(scaled.item() == 32768.0);
}
