// End to end on the GPU: the seed tutorial's model trained on cuda:0 follows the CPU's loss
// curve, with both GEMM implementations.
#include "cuda_test_util.h"

#include "core/backend.h"
#include "data/data.h"
#include "kernels/cuda/gemm/gemm_impl.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "samples/common/seed_model.h"

using namespace minidl;
using namespace minidl::cuda_test;
using samples::SimpleModel;

namespace {

// The tutorial's loop (100 random samples, batch 10, shuffled, SGD 0.01, cross-entropy) on
// `device`; returns every batch's loss.
std::vector<double> train_seed_model(Device device, int epochs) {
  manual_seed(42);
  SimpleModel model;  // same weights on both devices: drawn on the CPU, then moved
  model.to(device);
  auto ds = data::make_random_classification(100, 10, 2, 7);
  data::DataLoader loader(ds, data::DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = 3});
  optim::SGD opt(model.parameters(), optim::SGDOptions{.lr = 0.01});
  nn::CrossEntropyLoss criterion;
  std::vector<double> losses;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (data::Batch& b : loader) {
      opt.zero_grad();
      Tensor loss = criterion(model(b.x.to(device)), b.y.to(device));
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
    }
  }
  return losses;
}

}  // namespace

TEST_CASE("the seed model trained on cuda:0 gives the CPU's losses within 1e-4", "[cuda][e2e]") {
  const std::vector<double> cpu = train_seed_model(Device::cpu(), 10);
  for (GemmImpl impl : {GemmImpl::Native, GemmImpl::Cublas}) {
    set_gemm_impl(impl);
    const std::vector<double> gpu = train_seed_model(kGpu, 10);
    set_gemm_impl(GemmImpl::Native);
    INFO("GEMM: " << gemm_impl_name(impl));
    REQUIRE(gpu.size() == cpu.size());
    // fp32 on both sides with different summation orders; over 100 small steps the drift
    // stays far below the 1e-4 the tutorial's printout (3 decimals) could show.
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::abs(gpu[i] - cpu[i]));
    CHECK(worst < 1e-4);
  }
}
