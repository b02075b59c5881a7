// Tests for parallel/gradient_bucket.* and parallel/scatter_gather.*: buckets fill in reverse
// registration order under a byte cap, one dtype each, an oversized parameter alone; shard
// sizes differ by at most one and never exceed the batch; gather concatenates in replica order.
#include <catch2/catch.hpp>

#include <vector>

#include "core/ops.h"
#include "parallel/gradient_bucket.h"
#include "parallel/scatter_gather.h"

using namespace minidl;
using namespace minidl::parallel;

TEST_CASE("gradient buckets fill in reverse registration order up to the byte cap", "[parallel][bucket]") {
  // 4-byte floats: 10, 20, 30, 40 elements = 40, 80, 120, 160 bytes.
  std::vector<Tensor> params{zeros({10}), zeros({4, 5}), zeros({30}), zeros({40})};
  std::vector<GradientBucket> b = assign_buckets(params, 300);
  REQUIRE(b.size() == 2);
  CHECK(b[0].params == std::vector<size_t>{3, 2});  // 160 + 120 = 280 <= 300
  CHECK(b[0].offsets == std::vector<int64_t>{0, 40});
  CHECK(b[0].numel == 70);
  CHECK(b[0].bytes() == 280);
  CHECK(b[1].params == std::vector<size_t>{1, 0});

  std::vector<GradientBucket> one_each = assign_buckets(params, 1);  // every parameter exceeds the cap
  REQUIRE(one_each.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(one_each[i].params == std::vector<size_t>{3 - i});
  CHECK(assign_buckets(params, size_t{1} << 30).size() == 1);
  CHECK_THROWS_WITH(assign_buckets(params, 0), Catch::Contains("positive"));
}

TEST_CASE("gradient buckets hold one dtype each", "[parallel][bucket]") {
  std::vector<Tensor> params{zeros({2}), zeros({2}, DType::Float64), zeros({2}), zeros({2}, DType::Float64)};
  std::vector<GradientBucket> b = assign_buckets(params, 1024);
  REQUIRE(b.size() == 2);
  CHECK(b[0].dtype == DType::Float64);
  CHECK(b[0].params == std::vector<size_t>{3, 1});
  CHECK(b[1].dtype == DType::Float32);
  CHECK(b[1].params == std::vector<size_t>{2, 0});
  CHECK(b[0].bytes() == 32);
}

TEST_CASE("shard sizes differ by at most one, larger first, and a small batch uses fewer replicas",
          "[parallel][scatter]") {
  CHECK(shard_sizes(10, 3) == std::vector<int64_t>{4, 3, 3});
  CHECK(shard_sizes(12, 4) == std::vector<int64_t>{3, 3, 3, 3});
  CHECK(shard_sizes(11, 4) == std::vector<int64_t>{3, 3, 3, 2});
  CHECK(shard_sizes(2, 4) == std::vector<int64_t>{1, 1});
  CHECK(shard_sizes(1, 3) == std::vector<int64_t>{1});
  CHECK(shard_sizes(7, 1) == std::vector<int64_t>{7});
  CHECK_THROWS_WITH(shard_sizes(0, 2), Catch::Contains("empty"));
}

TEST_CASE("scatter then gather returns the batch, and the gradient flows back to every row", "[parallel][scatter]") {
  Tensor x = arange(0.0, 20.0, 1.0, DType::Float64).reshape({10, 2}).detach().requires_grad_();
  std::vector<Tensor> shards = scatter(x, {4, 3, 3}, {Device::cpu(), Device::cpu(), Device::cpu()});
  REQUIRE(shards.size() == 3);
  CHECK(shards[1].shape() == Shape{3, 2});
  CHECK(shards[1].at({0, 0}) == 8.0);
  CHECK(shards[0].storage().data() == x.storage().data());  // same device: a view
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < shards.size(); ++i) scaled.push_back(shards[i] * static_cast<double>(i + 1));
  Tensor y = gather(scaled, Device::cpu());
  CHECK(y.shape() == Shape{10, 2});
  ops::sum(y).backward();
  CHECK(x.grad().at({3, 1}) == 1.0);
  CHECK(x.grad().at({4, 0}) == 2.0);
  CHECK(x.grad().at({9, 1}) == 3.0);
  CHECK_THROWS_WITH(gather({scalar_tensor(1.0)}, Device::cpu()), Catch::Contains("scalar"));
}
