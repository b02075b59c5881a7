// kernels/cuda/embedding.cu through ops::embedding, against the CPU in float32 from the same
// values: the forward gather and the sorted, deterministic backward for D = 1 to 4097, V = 1 to
// 50304, N from 0 (an empty index tensor) past 65536 (every stage of the sort: shared-memory
// tiles and global steps), heavily repeated indices and a single index at every position; the
// backward gives the same bits on a second run, and an index out of range is the op's error
// (deferred to the next host wait) with a NaN row in the meantime and the device still usable.
#include "cuda_test_util.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/ops/embedding.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

// got and want (float32, any devices) hold the same bits at every element (so also the same
// NaNs); reports how many differ and the first, without printing whole tensors.
void check_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ", shape " << got.shape());
  REQUIRE(got.shape() == want.shape());
  const std::vector<float> a = got.to(Device::cpu()).to_vector<float>();
  const std::vector<float> b = want.to(Device::cpu()).to_vector<float>();
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && differ++ == 0) first = i;
  }
  INFO(differ << " element(s) differ; the first, " << first << ": got " << (a.empty() ? 0.f : a[first]) << ", want "
              << (b.empty() ? 0.f : b[first]));
  CHECK(differ == 0);
}

Tensor random_indices(const Shape& shape, int64_t V, uint64_t seed) {
  Generator g(seed);
  return randint(0, V, shape, DType::Int64, &g);
}

// Forward and backward on cuda:0 and on the CPU, both float32, from separate copies of the
// same weight, indices and output gradient. Forward is a copy of rows, so the two agree exactly.
// Backward adds each row's gradient rows in position order on both backends (the contract of
// Backend::embedding_backward): the same float32 additions in the same order, so equal bits
// too — a tolerance would hide a row summed in another order, which is what the kernel avoids.
void check_embedding(const Tensor& indices, int64_t V, int64_t D, uint64_t seed) {
  INFO("indices " << indices.shape() << ", weight [" << V << ", " << D << "]");
  const Tensor w = random_cpu({V, D}, seed);
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  const Tensor dy = random_cpu(out_shape, seed + 1);

  Tensor w_cpu = w.clone().requires_grad_();
  const Tensor out_cpu = ops::embedding(indices, w_cpu);
  out_cpu.backward(dy);

  Tensor w_gpu = w.to(kGpu).requires_grad_();
  const Tensor out_gpu = ops::embedding(indices.to(kGpu), w_gpu);
  out_gpu.backward(dy.to(kGpu));

  check_same_bits(out_gpu, out_cpu.detach(), "forward");
  check_same_bits(w_gpu.grad(), w_cpu.grad(), "dweight");
}

}  // namespace

TEST_CASE("embedding on the device matches the CPU exactly for odd D, V and N, forward and backward",
          "[cuda][embedding]") {
  uint64_t seed = 1200;
  // (V, N): a one-row table, few rows with repeats, a table larger than the batch.
  const std::pair<int64_t, int64_t> tables[] = {{1, 1}, {1, 37}, {5, 2}, {5, 300}, {1000, 3}, {1000, 300}};
  for (int64_t D : {1, 3, 31, 33, 1023, 1025, 4097}) {
    for (const auto& [V, n] : tables) {
      seed += 7;
      check_embedding(random_indices({n}, V, seed), V, D, seed + 1);
    }
  }
}

TEST_CASE("embedding on the device matches the CPU for GPT-sized tables and batches past every sort stage",
          "[cuda][embedding]") {
  // [4, 1024] tokens of a 50304-row table (many indices repeat); 5000 and 70001 positions over
  // few rows (padded to 8192 and 131072 keys: global sort steps of 2048 to 65536 between the
  // shared-memory tiles); a batch that is one index at every position.
  check_embedding(random_indices({4, 1024}, 50304, 1300), 50304, 64, 1301);
  check_embedding(random_indices({5000}, 7, 1310), 7, 33, 1311);
  check_embedding(random_indices({70001}, 50, 1320), 50, 3, 1321);
  check_embedding(full({70001}, 3.0, DType::Int64), 5, 3, 1330);
  check_embedding(random_indices({3, 5, 7}, 4, 1340), 4, 31, 1341);
  // More rows than a grid's y dimension holds (65535): the backward's rows loop strides.
  check_embedding(random_indices({500}, 70000, 1350), 70000, 2, 1351);
}

TEST_CASE("embedding on the device of no index gives an empty output and a zero gradient", "[cuda][embedding]") {
  for (const Shape& shape : {Shape{0}, Shape{2, 0}}) {
    INFO("indices " << shape);
    Tensor w = random_cpu({6, 5}, 1400).to(kGpu).requires_grad_();
    const Tensor out = ops::embedding(zeros(shape, TensorOptions(DType::Int64, kGpu)), w);
    Shape want = shape;
    want.push_back(5);
    CHECK(out.shape() == want);
    out.sum().backward();
    CHECK(w.grad().to(Device::cpu()).to_vector<float>() == std::vector<float>(30, 0.0f));
  }
}

TEST_CASE("embedding backward on the device gives the same bits on every run", "[cuda][embedding]") {
  // Many repeats per row (3000 positions over 11 rows): an atomicAdd scatter would add them in
  // a different order from run to run; the sorted sum cannot.
  const Tensor idx = random_indices({3000}, 11, 1500).to(kGpu);
  const Tensor dy = random_cpu({3000, 129}, 1501).to(kGpu);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 3; ++run) {
    Tensor w = zeros({11, 129}, TensorOptions(DType::Float32, kGpu)).requires_grad_();
    ops::embedding(idx, w).backward(dy);
    runs.push_back(w.grad().to(Device::cpu()).to_vector<float>());
  }
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
  CHECK(std::memcmp(runs[0].data(), runs[2].data(), runs[0].size() * sizeof(float)) == 0);
}

TEST_CASE("an embedding index out of range on the device is an Error naming it and V, with a NaN row meanwhile",
          "[cuda][embedding]") {
  const Tensor w_cpu = random_cpu({5, 4}, 1600);
  Tensor w = w_cpu.to(kGpu).requires_grad_();
  const Tensor bad = from_vector(std::vector<int64_t>{0, 4, 9, 1}, {4}, DType::Int64).to(kGpu);
  // Note [deferred target errors]: the device checks without a host wait; the error comes at the
  // next wait (here the copy to the CPU), once.
  const Tensor out = ops::embedding(bad, w);
  out.backward(ones_like(out));  // the bad position adds nothing, and nothing is written out of bounds
  CHECK_THROWS_WITH(out.to(Device::cpu()),
                    Catch::Contains("embedding: index 9 at flat position 2 of indices [4]") &&
                        Catch::Contains("out of range [0, 5) for weight [5, 4]"));
  CHECK_NOTHROW(backend_for(kGpu).synchronize());
  // The error was raised; the results of that call are now readable: the bad row is NaN, the
  // others are the weight's rows, and the gradient holds the valid positions only.
  const std::vector<float> got = out.to(Device::cpu()).to_vector<float>();
  const std::vector<float> wv = w_cpu.to_vector<float>();
  for (size_t j = 0; j < 4; ++j) {
    CHECK(got[j] == wv[j]);
    CHECK(got[4 + j] == wv[16 + j]);
    CHECK(std::isnan(got[8 + j]));
    CHECK(got[12 + j] == wv[4 + j]);
  }
  const std::vector<float> grad = w.grad().to(Device::cpu()).to_vector<float>();
  for (size_t j = 0; j < 4; ++j) {
    CHECK(grad[j] == 1.0f);       // row 0: position 0
    CHECK(grad[4 + j] == 1.0f);   // row 1: position 3
    CHECK(grad[16 + j] == 1.0f);  // row 4: position 1
  }
  const Tensor negative = from_vector(std::vector<int64_t>{-1, 2}, {2, 1}, DType::Int64).to(kGpu);
  CHECK_THROWS_WITH(ops::embedding(negative, w).to(Device::cpu()),
                    Catch::Contains("index -1 at flat position 0 of indices [2, 1]"));
  // The device is intact: a valid lookup right after matches the CPU.
  const Tensor good = from_vector(std::vector<int64_t>{3, 3, 0}, {3}, DType::Int64);
  const Tensor want = ops::embedding(good, w_cpu);
  check_same_bits(ops::embedding(good.to(kGpu), w.detach()), want, "after the error");
}

TEST_CASE("embedding with indices and weight on different devices is an error naming both", "[cuda][embedding]") {
  const Tensor w = zeros({5, 3}, TensorOptions(DType::Float32, kGpu));
  CHECK_THROWS_WITH(ops::embedding(zeros({2}, DType::Int64), w),
                    Catch::Contains("embedding") && Catch::Contains("different devices") &&
                        Catch::Contains("cuda:0") && Catch::Contains("cpu"));
}
