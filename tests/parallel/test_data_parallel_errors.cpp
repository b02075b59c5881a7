// Tests for the errors of parallel::DataParallel: each names what is wrong and what was expected.
#include <catch2/catch.hpp>

#include <memory>

#include "fixtures.h"
#include "parallel/parallel.h"

using namespace minidl;
using namespace minidl::parallel;
using namespace parallel_fixtures;

namespace {
struct NotClonable : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(2, 2));
  std::string name() const override { return "NotClonable"; }
};
}  // namespace

TEST_CASE("DataParallel rejects an empty, mixed or repeated CUDA device list", "[parallel][dp][errors]") {
  auto model = std::make_shared<Classifier>();
  CHECK_THROWS_WITH(DataParallel(model, std::vector<Device>{}),
                    Catch::Contains("device list is empty") && Catch::Contains("cpu_replicas"));
  CHECK_THROWS_WITH(DataParallel(model, {Device::cpu(), Device::cuda(0)}),
                    Catch::Contains("mixes CPU and CUDA") && Catch::Contains("[cpu, cuda:0]"));
  CHECK_THROWS_WITH(DataParallel(model, {Device::cuda(1), Device::cuda(0), Device::cuda(1)}),
                    Catch::Contains("cuda:1 is listed twice") && Catch::Contains("entries 0 and 2"));
  CHECK_NOTHROW(DataParallel(model, cpu_replicas(2)));  // the CPU may repeat: one replica per entry
  CHECK_THROWS_WITH(DataParallel(nullptr, cpu_replicas(2)), Catch::Contains("null model"));
  CHECK_THROWS_WITH(cpu_replicas(0), Catch::Contains("at least one"));
  if (cuda_device_count() == 0)
    CHECK_THROWS_WITH(DataParallel(model), Catch::Contains("no CUDA device") && Catch::Contains("cpu_replicas"));
}

TEST_CASE("DataParallel rejects a model that is not on the first device", "[parallel][dp][errors]") {
  auto model = std::make_shared<Classifier>();  // on the CPU
  CHECK_THROWS_WITH(DataParallel(model, {Device::cuda(0)}),
                    Catch::Contains("'fc1.weight' is on cpu") && Catch::Contains("first device cuda:0"));
}

TEST_CASE("DataParallel rejects a CUDA index beyond the device count", "[parallel][dp][errors]") {
  // A model without parameters is on every device, so the device check itself is reached.
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>()});
  const int count = cuda_device_count();
  CHECK_THROWS_WITH(DataParallel(model, {Device::cuda(count)}),
                    Catch::Contains("cuda:" + std::to_string(count)) && Catch::Contains("beyond the device count") &&
                        Catch::Contains(std::to_string(count) + " CUDA device(s) visible"));
}

TEST_CASE("DataParallel rejects an empty batch, a model it cannot clone and a mismatched communicator",
          "[parallel][dp][errors]") {
  auto model = std::make_shared<Classifier>();
  DataParallel dp(model, cpu_replicas(2));
  CHECK_THROWS_WITH(dp(zeros({0, 6})), Catch::Contains("batch is empty") && Catch::Contains("[0, 6]"));
  CHECK_THROWS_WITH(dp(scalar_tensor(1.0)), Catch::Contains("batch is empty"));
  CHECK_THROWS_WITH(dp(Tensor()), Catch::Contains("DataParallel"));
  CHECK_THROWS_WITH(dp.replica(2), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(dp.clone(), Catch::Contains("cannot be cloned"));
  CHECK_THROWS_WITH(DataParallel(std::make_shared<NotClonable>(), cpu_replicas(2)),
                    Catch::Contains("NotClonable") && Catch::Contains("clone() is not implemented"));
  CHECK_NOTHROW(DataParallel(std::make_shared<NotClonable>(), cpu_replicas(1)));  // one replica: no clone needed
  DataParallelOptions options;
  options.communicator = std::make_shared<CpuCommunicator>(cpu_replicas(3));
  CHECK_THROWS_WITH(DataParallel(model, cpu_replicas(2), options),
                    Catch::Contains("communicator is over [cpu, cpu, cpu]"));
}
