// BatchShard (parallel/batch_shard.h) and the per-step gradient weight of GradientReducer
// (Note [a shard's gradient weight] in parallel/gradient_reducer.cpp). The shards of
// DistributedDataParallel over real processes, its global_mean and its weighted gradients are
// tested under mpiexec (tests/parallel/mpi/mpi_check.cpp, scenario ddp).
#include <catch2/catch.hpp>

#include <functional>

#include "core/autograd.h"
#include "core/ops.h"
#include "parallel/batch_shard.h"
#include "parallel/cpu_communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/gradient_reducer.h"
#include "tests/parallel/fixtures.h"

using namespace minidl;
using namespace minidl::parallel;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("a batch split over processes gives each its rows, sizes differing by at most one", "[parallel][shard]") {
  // 13 rows over 3: [0, 4), [4, 8), [8, 13); over 2: [0, 6), [6, 13).
  const std::vector<std::pair<int64_t, int64_t>> three = {{0, 4}, {4, 4}, {8, 5}};
  for (int r = 0; r < 3; ++r) {
    const BatchShard s = BatchShard::part_of(13, r, 3);
    CHECK(s.begin == three[r].first);
    CHECK(s.rows == three[r].second);
    CHECK(s.total == 13);
  }
  CHECK(BatchShard::part_of(13, 1, 2).begin == 6);
  CHECK(BatchShard::part_of(13, 1, 2).rows == 7);
  CHECK(BatchShard::whole(5).is_whole());
  CHECK_FALSE(BatchShard::part_of(13, 0, 2).is_whole());
  // of(): a view of the shard's rows of the global batch.
  const Tensor x = arange(0, 26, 1, TensorOptions(DType::Float32)).reshape(Shape{13, 2});
  const Tensor mine = BatchShard::part_of(13, 1, 2).of(x);
  CHECK(mine.shape() == Shape{7, 2});
  CHECK(mine.to_vector<float>().front() == 12.0f);
}

TEST_CASE("a shard that cannot exist, or of another batch, is an error naming it", "[parallel][shard][errors]") {
  CHECK_THAT(error_of([] { BatchShard::part_of(2, 0, 3); }),
             Catch::Contains("2 rows") && Catch::Contains("3 parts"));
  CHECK_THAT(error_of([] { BatchShard::part_of(8, 3, 3); }), Catch::Contains("part 3 of 3"));
  CHECK_THAT(error_of([] { BatchShard::part_of(13, 0, 2).of(zeros({12, 2})); }),
             Catch::Contains("[0, 6)") && Catch::Contains("13 rows") && Catch::Contains("[12, 2]"));
}

// Two CPU replicas of one parameter, both in one graph as under DataParallel: the reduced
// gradient is weight * (g0 + g1), written into replica 0's .grad.
TEST_CASE("the reducer's per-step gradient weight multiplies this process's gradients before the sum",
          "[parallel][shard]") {
  const auto devices = cpu_replicas(2);
  Tensor w0 = from_vector(std::vector<float>{1, 2, 3}), w1 = from_vector(std::vector<float>{1, 2, 3});
  w0.requires_grad_();
  w1.requires_grad_();
  auto reducer = GradientReducer::create({{w0}, {w1}}, std::make_shared<CpuCommunicator>(devices), 1 << 20,
                                         "TestWrapper");
  const Tensor a = from_vector(std::vector<float>{1, 1, 1}), b = from_vector(std::vector<float>{2, 4, 8});
  for (const double weight : {1.0, 0.75}) {
    INFO("weight " << weight);
    w0.set_grad(Tensor());  // a fresh .grad each pass
    reducer->prepare_for_forward(2, true, weight);
    ((w0 * a).sum() + (w1 * b).sum()).backward();  // g0 = a, g1 = b
    const std::vector<float> got = w0.grad().to_vector<float>();
    for (size_t i = 0; i < 3; ++i)
      CHECK(got[i] == static_cast<float>(weight * (a.to_vector<float>()[i] + b.to_vector<float>()[i])));
  }
  // Forwards whose gradients one backward reduces must share the batch size and the weight: a
  // clear error naming the caller. An evaluation forward (no grad mode) in between changes nothing.
  reducer->prepare_for_forward(2, false, 1.0, 12);
  {
    NoGradGuard evaluation;
    CHECK_NOTHROW(reducer->prepare_for_forward(2, true, 0.5, 1000));
  }
  CHECK_NOTHROW(reducer->prepare_for_forward(2, false, 1.0, 12));
  CHECK_THAT(error_of([&] { reducer->prepare_for_forward(2, false, 1.0, 13); }),
             Catch::Contains("TestWrapper") && Catch::Contains("split differently") && Catch::Contains("12 and 13"));
  CHECK_THAT(error_of([&] { reducer->prepare_for_forward(2, false, 0.5, 12); }),
             Catch::Contains("TestWrapper") && Catch::Contains("split differently"));
}
