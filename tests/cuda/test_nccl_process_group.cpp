// The NCCL process group with one rank on cuda:0 (no launcher: MPI's singleton start), as
// scripts/gpu/gpu-check runs it: ncclCommInitRank with the unique id broadcast over MPI, each
// collective on the comm stream ordered against the compute stream, and DistributedDataParallel
// over it. Multi-rank NCCL needs several GPUs; the multi-process logic is tested on the CPU
// (tests/parallel/mpi). Without a GPU this binary reports skipped.
#include "cuda_test_util.h"

#include "nn/nn.h"
#include "tests/error_message.h"
#include "parallel/parallel.h"

using namespace minidl;
using namespace minidl::cuda_test;

TEST_CASE("nccl process group of one rank runs its collectives on cuda:0", "[cuda][nccl][mpi]") {
  if (!parallel::mpi_available() || !parallel::nccl_available()) {
    // A GPU build without MPI (scripts/gpu/gpu-deps carries no Open MPI) has no NCCL process
    // group: what it can check is the clear error, and it says that the group itself did not run.
    CHECK_THAT(minidl::testing::error_message([] { parallel::make_nccl_process_group(Device::cuda(0)); }),
               Catch::Contains("has no NCCL process group"));
    WARN("the NCCL process group is not in this build (MPI " << parallel::mpi_available() << ", NCCL "
         << parallel::nccl_available() << "): only its error was checked");
    return;
  }
  auto group = parallel::make_process_group();  // on a machine with a GPU: NCCL on cuda:<local rank>
  REQUIRE(group->backend_name() == "nccl");
  CHECK(group->device() == Device::cuda(0));
  CHECK(group->rank() == 0);
  CHECK(group->world_size() == 1);
  // CUDA tensors are float32 or int64 (float64 stays on the CPU by design), so those two cross
  // the group; a float64 tensor is refused before it reaches the device.
  CHECK_THROWS_WITH(random_cpu(Shape{3}, 3).to(DType::Float64).to(group->device()), Catch::Contains("float64"));
  for (DType dtype : {DType::Float32, DType::Int64}) {
    const Tensor cpu = random_cpu(Shape{1031}, 3, -100.0, 100.0).to(dtype);  // integers survive the int64 cast
    Tensor t = cpu.to(group->device());
    group->all_reduce_(t, parallel::ReduceOp::Sum);
    CHECK(t.to(Device::cpu()).to(DType::Float64).to_vector<double>() == cpu.to(DType::Float64).to_vector<double>());
    group->broadcast_(t, 0);
    const Tensor g = group->all_gather(t);
    CHECK(g.shape() == Shape{1, 1031});
    CHECK(g.to(Device::cpu()).to(DType::Float64).to_vector<double>() == cpu.to(DType::Float64).to_vector<double>());
  }
  group->barrier_wait();

  manual_seed(4);
  auto model = std::make_shared<nn::Linear>(8, 3);
  manual_seed(4);
  auto plain = std::make_shared<nn::Linear>(8, 3);
  model->to(group->device());
  plain->to(group->device());
  parallel::DistributedDataParallel ddp(model, group);
  const Tensor x = random_cpu(Shape{5, 8}, 9).to(group->device());
  ops::sum(ddp(x)).backward();
  ops::sum((*plain)(x)).backward();
  CHECK(model->weight.grad().to(Device::cpu()).to_vector<float>() ==
        plain->weight.grad().to(Device::cpu()).to_vector<float>());
}
