// kernels/cuda/mask.cu through ops::tril, ops::triu and ops::masked_fill against the CPU: the
// same float32 inputs give the same bits (the kernels copy or replace elements, no arithmetic),
// on odd sizes across several blocks, every diagonal offset, broadcast and int64 masks, -inf
// fills, and the gradients.
#include "cuda_test_util.h"

#include <limits>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/memory.h"

using namespace minidl;
using namespace minidl::cuda_test;

TEST_CASE("cuda tril and triu give the cpu's bits on every diagonal, forward and backward", "[cuda][mask]") {
  const Tensor x = random_cpu({3, 5, 37, 29}, 1);  // 16095 elements: several blocks of 256
  const Tensor dy = random_cpu(x.shape(), 2);
  for (int64_t diagonal : {-40, -3, 0, 1, 7, 30}) {
    for (bool upper : {false, true}) {
      auto run = [&](Device d) {
        Tensor xd = x.clone().to(d);
        xd.requires_grad_(true);
        const Tensor y = upper ? ops::triu(xd, diagonal) : ops::tril(xd, diagonal);
        y.backward(dy.to(d));
        return std::vector<Tensor>{y.to(Device::cpu()), xd.grad().to(Device::cpu())};
      };
      const std::vector<Tensor> want = run(Device::cpu());
      const std::vector<Tensor> got = run(kGpu);
      const std::string what = std::string(upper ? "triu" : "tril") + " diagonal " + std::to_string(diagonal);
      check_equal(got[0], want[0], what);
      check_equal(got[1], want[1], what + " gradient");
    }
  }
}

TEST_CASE("cuda masked_fill gives the cpu's bits for broadcast, float and int64 masks, forward and backward",
          "[cuda][mask]") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = random_cpu({2, 3, 33, 33}, 3);
  const Tensor causal = ops::triu(full({33, 33}, 1.0, TensorOptions(DType::Float32, Device::cpu())), 1);
  std::vector<int64_t> pattern(3 * 33);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<int64_t>(i % 3) - 1;  // -1, 0, 1, ...
  const Tensor int_mask = from_vector(pattern, {3, 1, 33});
  const Tensor coin = ops::eq(ops::relu(random_cpu({2, 1, 33, 33}, 5)), full({1}, 0.0, TensorOptions(DType::Float32, Device::cpu())));
  const Tensor dy = random_cpu(x.shape(), 6);
  const std::vector<std::pair<Tensor, std::string>> masks = {
      {causal, "causal [T, T]"}, {int_mask, "int64 [H, 1, T]"}, {coin, "eq's float [B, 1, T, T]"}};
  for (const auto& entry : masks) {
    // Named copies, not structured bindings: clang 14 (the TSan build) cannot capture those.
    const Tensor& mask = entry.first;
    const std::string& name = entry.second;
    auto run = [&](Device d) {
      Tensor xd = x.clone().to(d);
      xd.requires_grad_(true);
      const Tensor y = ops::masked_fill(xd, mask.to(d), -inf);
      y.backward(dy.to(d));
      return std::vector<Tensor>{y.to(Device::cpu()), xd.grad().to(Device::cpu())};
    };
    const std::vector<Tensor> want = run(Device::cpu());
    const std::vector<Tensor> got = run(kGpu);
    check_equal(got[0], want[0], name);
    check_equal(got[1], want[1], name + " gradient");
  }
}

TEST_CASE("cuda masked_fill reads a broadcast mask in place, allocating only its result", "[cuda][mask]") {
  // A causal [T, T] mask over [B, H, T, T]: expanding it in memory would cost as much as x.
  const Tensor x = random_cpu({2, 3, 40, 40}, 7).to(kGpu);
  const Tensor causal = ops::triu(full({40, 40}, 1.0, TensorOptions(DType::Float32, kGpu)), 1);
  backend_for(kGpu).synchronize();
  const int64_t before = memory_stats(kGpu).allocated_bytes;
  reset_peak_memory_stats(kGpu);
  const Tensor y = ops::masked_fill(x, causal, -1.0);
  backend_for(kGpu).synchronize();
  const int64_t result_bytes = x.numel() * 4;
  const int64_t grew = memory_stats(kGpu).peak_allocated_bytes - before;
  INFO("peak grew by " << grew << " bytes; the result is " << result_bytes);
  CHECK(grew >= result_bytes);
  CHECK(grew < result_bytes + result_bytes / 2);  // size-class rounding is far below an expanded mask
  const Tensor want = ops::masked_fill(x.to(Device::cpu()), causal.to(Device::cpu()), -1.0);
  check_equal(y.to(Device::cpu()), want, "causal mask read in place");
}
