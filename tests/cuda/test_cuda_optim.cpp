// The fused SGD and Adam/AdamW updates on the device against the CPU's, over several steps, one
// parameter at a time and as lists in one launch (counted by the profiler).
#include "cuda_test_util.h"

#include <memory>
#include <string>
#include <vector>

#include "core/profiler.h"
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

TEST_CASE("SGD and Adam update all parameters in one launch per list, as the CPU does one by one",
          "[cuda][optim][profiler]") {
  // Sizes around the multi-tensor kernels' 4096-element chunks, and one parameter that skips a
  // step (no gradient), so Adam's step counts differ and it needs two lists (two launches).
  const std::vector<int64_t> sizes = {1, 31, 4095, 4096, 4097, 10000};
  std::vector<Tensor> p0;
  for (size_t i = 0; i < sizes.size(); ++i) p0.push_back(random_cpu({sizes[i]}, 300 + i));
  auto run = [&](Device device, bool adam, int64_t* last_step_launches) {
    std::vector<Tensor> params;
    for (const Tensor& p : p0) params.push_back(p.to(device).clone().detach().requires_grad_());
    std::unique_ptr<optim::Optimizer> opt;
    if (adam) opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-2});
    else opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    for (int s = 0; s < 4; ++s) {
      profiler::Profiler prof;
      if (s == 3) prof.start();
      for (size_t i = 0; i < params.size(); ++i) {
        const bool skip = i == 2 && s == 1;  // parameter 2 has no gradient at step 1
        params[i].set_grad(skip ? Tensor() : random_cpu({sizes[i]}, 400 + 10 * s + i).to(device));
      }
      opt->step();
      if (s == 3) {
        const profiler::Profile p = prof.stop();
        for (const profiler::Summary& row : p.key_averages())
          if (row.kind == profiler::Kind::Optimizer && row.name.find(".step") != std::string::npos)
            *last_step_launches = row.launches;
      }
    }
    std::vector<Tensor> out;
    for (const Tensor& p : params) out.push_back(p.detach().to(Device::cpu()));
    return out;
  };
  for (bool adam : {false, true}) {
    INFO((adam ? "AdamW" : "SGD nesterov"));
    int64_t gpu_launches = -1, cpu_launches = -1;
    const std::vector<Tensor> on_gpu = run(kGpu, adam, &gpu_launches);
    const std::vector<Tensor> on_cpu = run(Device::cpu(), adam, &cpu_launches);
    for (size_t i = 0; i < sizes.size(); ++i) check_close(on_gpu[i], on_cpu[i], 1e-6, 1e-5, "parameter " + std::to_string(i));
    // SGD: all six in one list. AdamW: parameter 2 is a step behind the others, a list of its own.
    CHECK(gpu_launches == (adam ? 2 : 1));
    CHECK(cpu_launches == 0);
  }
}
