// kernels/cuda/attention/attention.cu through ops::scaled_dot_product_attention, against the CPU kernels in
// float64 from the same float32 inputs: out, dq, dk and dv for query counts that cut the
// 16-row query tiles and 32-key tiles unevenly, L > S and L < S, head sizes 1, 64 and 128 (and
// E != Ev), one head, causal and not; strided head views; dropout masks identical to the CPU's;
// the same bits on a second run; and the head-size limit's error. Sizes stay small: the
// simulated device runs each CUDA thread as a fiber.
#include "cuda_test_util.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/ops/attention.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

// Float32 on the device vs float64 on the CPU from the same (float32) inputs, forward and backward.
void check_attention(int64_t B, int64_t H, int64_t L, int64_t S, int64_t E, int64_t Ev, bool causal, uint64_t seed,
                     double p = 0) {
  INFO("B " << B << ", H " << H << ", L " << L << ", S " << S << ", E " << E << ", Ev " << Ev << ", causal "
            << causal << ", p " << p);
  const Tensor q = random_cpu({B, H, L, E}, seed, -2, 2), k = random_cpu({B, H, S, E}, seed + 1, -2, 2);
  const Tensor v = random_cpu({B, H, S, Ev}, seed + 2), dout = random_cpu({B, H, L, Ev}, seed + 3);
  Tensor q64 = q.to(DType::Float64).requires_grad_(), k64 = k.to(DType::Float64).requires_grad_();
  Tensor v64 = v.to(DType::Float64).requires_grad_();
  Tensor qg = q.to(kGpu).requires_grad_(), kg = k.to(kGpu).requires_grad_(), vg = v.to(kGpu).requires_grad_();
  Generator g_cpu(seed), g_gpu(seed);  // the same state: the same mask
  const Tensor want = ops::scaled_dot_product_attention(q64, k64, v64, causal, p, &g_cpu);
  const Tensor got = ops::scaled_dot_product_attention(qg, kg, vg, causal, p, &g_gpu);
  want.backward(dout.to(DType::Float64));
  got.backward(dout.to(kGpu));
  // Inputs of size <= 2 and E <= 128: scores up to ~45, probabilities and outputs O(1). The device
  // sums up to 128 products per score and up to S terms per output in float32, and its __expf
  // is within a few ulp of exp for |x| of this size: a few hundred ulps of O(1) values, so 2e-4
  // absolute + relative, far below what a wrong term or a wrong mask element (O(1e-2)) gives.
  check_close(got, want, 2e-4, 2e-4, "out");
  check_close(qg.grad(), q64.grad(), 2e-4, 2e-4, "dq");
  check_close(kg.grad(), k64.grad(), 2e-4, 2e-4, "dk");
  check_close(vg.grad(), v64.grad(), 2e-4, 2e-4, "dv");
}

}  // namespace

TEST_CASE("scaled_dot_product_attention on the device matches the CPU on odd shapes, forward and backward",
          "[cuda][attention]") {
  uint64_t seed = 100;
  for (bool causal : {false, true}) {
    check_attention(1, 1, 37, 37, 1, 1, causal, seed += 10);    // head size 1, one head
    check_attention(2, 3, 17, 45, 64, 64, causal, seed += 10);  // tiles cut unevenly, L < S
    check_attention(1, 2, 50, 33, 24, 7, causal, seed += 10);   // L > S, E != Ev
    check_attention(1, 1, 21, 40, 128, 128, causal, seed += 10);  // head size 128
  }
}

TEST_CASE("scaled_dot_product_attention on the device draws the CPU's dropout mask", "[cuda][attention][dropout]") {
  check_attention(2, 1, 35, 41, 16, 8, false, 300, 0.3);
  check_attention(1, 2, 35, 41, 16, 8, true, 310, 0.5);
  // The mask itself: q = 0 and v = the identity make out = Pd, whose zeros are the mask.
  const int64_t S = 40;
  Tensor eye = zeros({S, S});
  for (int64_t j = 0; j < S; ++j) eye.data<float>()[j * S + j] = 1;
  const Tensor q = zeros({2, 2, 33, 4}), k = random_cpu({2, 2, S, 4}, 320);
  const Tensor v = eye.reshape(Shape{1, 1, S, S}).expand(Shape{2, 2, S, S}).contiguous();
  Generator g_cpu(5), g_gpu(5);
  const Tensor want = ops::scaled_dot_product_attention(q, k, v, false, 0.4, &g_cpu);
  const Tensor got = ops::scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), false, 0.4, &g_gpu);
  const std::vector<float> a = got.to(Device::cpu()).to_vector<float>(), b = want.to_vector<float>();
  REQUIRE(a.size() == b.size());
  size_t differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += (a[i] == 0) != (b[i] == 0);
  CHECK(differing == 0);
  CHECK(g_gpu.state() == g_cpu.state());
}

TEST_CASE("scaled_dot_product_attention on the device takes head views of a fused qkv projection",
          "[cuda][attention]") {
  const int64_t B = 2, T = 19, H = 2, hs = 8, C = H * hs;
  const Tensor qkv = random_cpu({B, T, 3 * C}, 400), dout = random_cpu({B, H, T, hs}, 401);
  std::vector<Tensor> results;
  for (Device device : {Device::cpu(), kGpu}) {
    Tensor fused = qkv.to(device).clone().requires_grad_();
    std::vector<Tensor> heads;
    for (const Tensor& t : fused.split(C, 2)) heads.push_back(t.reshape(Shape{B, T, H, hs}).transpose(1, 2));
    const Tensor out = ops::scaled_dot_product_attention(heads[0], heads[1], heads[2], true);
    out.backward(dout.to(device));
    results.push_back(out);
    results.push_back(fused.grad());
  }
  // float32 on both sides, different summation orders: a few ulps of O(1) values.
  check_close(results[2], results[0], 1e-5, 1e-5, "out");
  check_close(results[3], results[1], 1e-5, 1e-5, "dqkv");
}

TEST_CASE("scaled_dot_product_attention on the device gives the same bits on a second run and refuses heads over 128",
          "[cuda][attention]") {
  const Tensor q = random_cpu({2, 2, 29, 32}, 500), k = random_cpu({2, 2, 29, 32}, 501);
  const Tensor v = random_cpu({2, 2, 29, 32}, 502), dout = random_cpu({2, 2, 29, 32}, 503);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor qg = q.to(kGpu).requires_grad_(), kg = k.to(kGpu).requires_grad_(), vg = v.to(kGpu).requires_grad_();
    Generator g(7);
    const Tensor out = ops::scaled_dot_product_attention(qg, kg, vg, true, 0.2, &g);
    out.backward(dout.to(kGpu));
    std::vector<float> all = out.to(Device::cpu()).to_vector<float>();
    for (const Tensor& t : {qg.grad(), kg.grad(), vg.grad()}) {
      const std::vector<float> x = t.to(Device::cpu()).to_vector<float>();
      all.insert(all.end(), x.begin(), x.end());
    }
    runs.push_back(all);
  }
  REQUIRE(runs[0].size() == runs[1].size());
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
  const Tensor big = zeros({1, 4, 129}, TensorOptions(DType::Float32, kGpu));
  CHECK_THROWS_WITH(ops::scaled_dot_product_attention(big, big, big),
                    Catch::Contains("scaled_dot_product_attention") && Catch::Contains("up to 128") &&
                        Catch::Contains("E = 129"));
  CHECK_THROWS_WITH(ops::scaled_dot_product_attention(big, zeros({1, 4, 129}), big),
                    Catch::Contains("different devices"));
}
