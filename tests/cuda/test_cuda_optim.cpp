// The fused SGD and Adam/AdamW updates on the device against the CPU's, over several steps.
#include "cuda_test_util.h"

#include "optim/optim.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

// Runs the updates of an optimizer built by make() on a copy of p0, one step per gradient, on
// `device`; returns the final parameter. The copy is a clone: `to()` returns p0 itself when it
// is already on `device`, and the optimizer updates its parameter in place.
template <typename Make>
Tensor run_updates(const Tensor& p0, const std::vector<Tensor>& grads, Device device, Make make) {
  Tensor p = p0.to(device).clone().detach().requires_grad_();
  auto opt = make(std::vector<Tensor>{p});
  for (const Tensor& g : grads) {
    p.set_grad(g.to(device));
    opt->step();
  }
  return p.detach();
}

}  // namespace

TEST_CASE("SGD with momentum, nesterov and weight decay on the device matches the CPU", "[cuda][optim]") {
  for (int64_t n : {1, 31, 257, 1000}) {
    Tensor p0 = random_cpu({n}, 1);
    std::vector<Tensor> grads;
    for (int s = 0; s < 5; ++s) grads.push_back(random_cpu({n}, 100 + static_cast<uint64_t>(s)));
    for (bool nesterov : {false, true}) {
      auto make = [&](std::vector<Tensor> params) {
        return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = nesterov});
      };
      // Same float32 formula in the same order; only FMA contraction may differ: 1e-6.
      const Tensor on_gpu = run_updates(p0, grads, kGpu, make);
      const Tensor on_cpu = run_updates(p0, grads, Device::cpu(), make);
      check_close(on_gpu, on_cpu, 1e-6, 1e-5, nesterov ? "nesterov" : "momentum");
    }
  }
}

TEST_CASE("Adam and AdamW on the device match the CPU", "[cuda][optim]") {
  for (int64_t n : {1, 31, 257, 1000}) {
    Tensor p0 = random_cpu({n}, 2);
    std::vector<Tensor> grads;
    for (int s = 0; s < 5; ++s) grads.push_back(random_cpu({n}, 200 + static_cast<uint64_t>(s)));
    auto adam = [&](std::vector<Tensor> params) { return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-2}); };
    auto adamw = [&](std::vector<Tensor> params) { return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-2}); };
    // sqrt and division in float32 on both sides, contraction aside: 1e-5 relative.
    const Tensor adam_gpu = run_updates(p0, grads, kGpu, adam);
    const Tensor adam_cpu = run_updates(p0, grads, Device::cpu(), adam);
    check_close(adam_gpu, adam_cpu, 1e-6, 1e-5, "adam");
    const Tensor adamw_gpu = run_updates(p0, grads, kGpu, adamw);
    const Tensor adamw_cpu = run_updates(p0, grads, Device::cpu(), adamw);
    check_close(adamw_gpu, adamw_cpu, 1e-6, 1e-5, "adamw");
    // p0 itself is untouched by either run: the CPU run updated a copy.
    CHECK(p0.to_vector<float>() == random_cpu({n}, 2).to_vector<float>());
  }
}
