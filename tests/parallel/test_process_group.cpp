// The process group in one process (no launcher: MPI's singleton start) and its clear errors.
// The collectives over 2 and 3 processes are tested by tests/parallel/mpi/mpi_check under mpiexec.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "nn/nn.h"
#include "parallel/distributed_data_parallel.h"
#include "parallel/process_group.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

TEST_CASE("mpi process group of one process is rank 0 of 1 and its collectives keep the values", "[parallel][mpi]") {
  if (!parallel::mpi_available()) {
    // A build without MPI: a clear error that says what is missing.
    CHECK_THAT(error_message([] { parallel::make_mpi_process_group(); }), Catch::Contains("has no MPI process group"));
    return;
  }
  auto group = parallel::make_mpi_process_group();
  CHECK(group->rank() == 0);
  CHECK(group->world_size() == 1);
  CHECK(group->local_rank() == 0);
  CHECK(group->local_world_size() == 1);
  CHECK(group->device() == Device::cpu());
  CHECK(group->backend_name() == "mpi");
  Tensor t = from_vector(std::vector<double>{1.5, -2.0, 3.25});
  group->all_reduce_(t, parallel::ReduceOp::Average);
  CHECK(t.to_vector<double>() == std::vector<double>{1.5, -2.0, 3.25});
  group->broadcast_(t, 0);
  CHECK(t.to_vector<double>() == std::vector<double>{1.5, -2.0, 3.25});
  const Tensor g = group->all_gather(from_vector(std::vector<int64_t>{4, 5}));
  CHECK(g.shape() == Shape{1, 2});
  CHECK(g.to_vector<int64_t>() == std::vector<int64_t>{4, 5});
  group->barrier_wait();
  // Checked before anything is launched.
  CHECK_THAT(error_message([&] { group->broadcast_(t, 1); }), Catch::Contains("root rank 1 is out of range for 1 rank"));
  Tensor ints = from_vector(std::vector<int64_t>{1, 2});
  CHECK_THAT(error_message([&] { group->all_reduce_(ints, parallel::ReduceOp::Average); }),
             Catch::Contains("average of int64"));
  CHECK_THAT(error_message([&] { group->all_gather(t, zeros(Shape{2, 3}, TensorOptions(DType::Float64))); }),
             Catch::Contains("the output must be [1, 3] float64"));
}

TEST_CASE("DistributedDataParallel over one process is the plain model", "[parallel][mpi]") {
  if (!parallel::mpi_available()) return;  // the error without MPI is the case above
  auto group = parallel::make_mpi_process_group();
  manual_seed(2);
  auto model = std::make_shared<nn::Linear>(4, 3);
  manual_seed(2);
  auto plain = std::make_shared<nn::Linear>(4, 3);
  parallel::DistributedDataParallel ddp(model, group);
  CHECK_THAT(ddp.name(), Catch::Contains("rank 0 of 1 on cpu"));
  Generator gen(1);
  const Tensor x = randn({5, 4}, {}, &gen);
  ops::sum(ddp(x)).backward();
  ops::sum((*plain)(x)).backward();
  CHECK(model->weight.grad().to_vector<float>() == plain->weight.grad().to_vector<float>());
  CHECK_THAT(error_message([&] { ddp.clone(); }), Catch::Contains("cannot be cloned"));
  // One rank always agrees with itself.
  CHECK_NOTHROW(parallel::check_same_on_every_rank(*group, "flags", {"--lr 0.1", "--batch-size 64"}));
}

TEST_CASE("a launch with several processes is recognised from the launchers' environment", "[parallel][mpi]") {
  // What lets a build without MPI refuse an mpirun launch instead of training N times alone.
  const char* names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* name : names) {
    if (const char* v = std::getenv(name)) saved.emplace_back(name, v);
    unsetenv(name);
  }
  CHECK_FALSE(parallel::launched_with_several_processes());
  setenv("PMI_SIZE", "1", 1);  // one process: not several
  CHECK_FALSE(parallel::launched_with_several_processes());
  setenv("PMI_SIZE", "3", 1);
  CHECK(parallel::launched_with_several_processes());
  unsetenv("PMI_SIZE");
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  CHECK(parallel::launched_with_several_processes());
  unsetenv("OMPI_COMM_WORLD_SIZE");
  for (const auto& [name, value] : saved) setenv(name.c_str(), value.c_str(), 1);
}
