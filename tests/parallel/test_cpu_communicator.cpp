// Tests for parallel/cpu_communicator.* and parallel/host_collective_work.*: all-reduce (sum,
// average) in the fixed device order, bit for bit, on every device and every run; broadcast
// from each root; grouped collectives with tensors smaller than the worker count; barrier;
// small collectives run inline only when nothing is queued;
// outstanding work completed by the destructor; each argument error; errors rethrown by wait().
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <vector>

#include "core/ops.h"
#include "core/start_thread.h"
#include "parallel/cpu_communicator.h"
#include "parallel/data_parallel.h"
#include "tests/error_message.h"

using namespace minidl;
using namespace minidl::parallel;

namespace {

// Values whose float sum depends on the order: large terms that cancel, small ones that do not
// survive next to them.
std::vector<float> values_for(int device, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float big = (i % 3 == 0) ? 1e8f : 3.0f;
    v[i] = (device % 2 == 0 ? big : -big) + 0.37f * static_cast<float>(device + 1) + 1e-3f * static_cast<float>(i);
  }
  return v;
}

DeviceTensors make_tensors(int devices, int64_t n) {
  DeviceTensors ts;
  for (int d = 0; d < devices; ++d) ts.push_back(from_vector(values_for(d, n), Shape{n}));
  return ts;
}

}  // namespace

TEST_CASE("cpu all_reduce sums in device order, bit for bit, on every device and every run", "[parallel][comm]") {
  for (int devices = 1; devices <= 4; ++devices)
  for (size_t inline_bytes : {size_t{0}, CpuCommunicator::kDefaultInlineBytes}) {  // on the workers, on the caller
    INFO("devices = " << devices << ", inline_bytes = " << inline_bytes);
    CpuCommunicator comm(cpu_replicas(devices), inline_bytes);
    const int64_t n = 1001;  // not a multiple of the worker count
    std::vector<float> expected(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float acc = values_for(0, n)[i];
      for (int d = 1; d < devices; ++d) acc += values_for(d, n)[i];  // ((t0 + t1) + t2) + t3
      expected[i] = acc;
    }
    for (int run = 0; run < 5; ++run) {
      DeviceTensors ts = make_tensors(devices, n);
      std::shared_ptr<CollectiveWork> work = comm.all_reduce(ts, ReduceOp::Sum);
      work->wait();
      CHECK(work->is_completed());
      for (int d = 0; d < devices; ++d) CHECK(ts[d].to_vector<float>() == expected);
    }
  }
}

TEST_CASE("cpu all_reduce average divides the ordered sum by the device count, float64 too", "[parallel][comm]") {
  CpuCommunicator comm(cpu_replicas(3));
  DeviceTensors ts;
  for (int d = 0; d < 3; ++d) ts.push_back(from_vector<double>({1.0 + d, 0.1 * d, -2.0}, Shape{3}, DType::Float64));
  comm.all_reduce(ts, ReduceOp::Average)->wait();
  const std::vector<double> expected{(1.0 + 2.0 + 3.0) / 3.0, ((0.0 + 0.1) + 0.2) / 3.0, (-6.0) / 3.0};
  for (int d = 0; d < 3; ++d) CHECK(ts[d].to_vector<double>() == expected);
}

TEST_CASE("a grouped cpu all_reduce handles tensors with fewer elements than workers, and empty ones",
          "[parallel][comm]") {
  CpuCommunicator comm(cpu_replicas(4));
  std::vector<DeviceTensors> groups(3);
  for (int d = 0; d < 4; ++d) {
    groups[0].push_back(full({1}, d + 1.0));
    groups[1].push_back(full({2, 3}, 0.5 * d));
    groups[2].push_back(zeros({0}));
  }
  comm.all_reduce_grouped(groups, ReduceOp::Sum)->wait();
  for (int d = 0; d < 4; ++d) {
    CHECK(groups[0][d].item() == 10.0);
    CHECK(groups[1][d].to_vector<float>() == std::vector<float>(6, 3.0f));  // 0 + 0.5 + 1 + 1.5
    CHECK(groups[2][d].numel() == 0);
  }
}

TEST_CASE("cpu broadcast copies the root's tensors to every other device, any dtype", "[parallel][comm]") {
  CpuCommunicator comm(cpu_replicas(3));
  for (int root = 0; root < 3; ++root) {
    INFO("root = " << root);
    std::vector<DeviceTensors> groups(2);
    for (int d = 0; d < 3; ++d) {
      groups[0].push_back(full({5, 7}, d * 10.0 + 1.0));
      groups[1].push_back(full({3}, d, DType::Int64));
    }
    comm.broadcast_grouped(groups, root)->wait();
    for (int d = 0; d < 3; ++d) {
      CHECK(groups[0][d].to_vector<float>() == std::vector<float>(35, root * 10.0f + 1.0f));
      CHECK(groups[1][d].to_vector<int64_t>() == std::vector<int64_t>(3, root));
    }
  }
}

TEST_CASE("a cpu barrier completes after every collective launched before it", "[parallel][comm]") {
  CpuCommunicator comm(cpu_replicas(2));
  std::vector<DeviceTensors> pending;
  std::vector<std::shared_ptr<CollectiveWork>> works;
  for (int i = 0; i < 8; ++i) {
    pending.push_back({full({200000}, 1.0), full({200000}, 2.0)});
    works.push_back(comm.all_reduce(pending.back(), ReduceOp::Sum));  // not waited
  }
  comm.barrier()->wait();
  for (size_t i = 0; i < works.size(); ++i) {
    CHECK(works[i]->is_completed());
    CHECK(pending[i][1].at({199999}) == 3.0);
  }
}

TEST_CASE("a small cpu collective runs on the caller when nothing is queued, else after what is",
          "[parallel][comm]") {
  CpuCommunicator comm(cpu_replicas(2));
  DeviceTensors small{full({16}, 1.0), full({16}, 2.0)};
  CHECK(comm.all_reduce(small, ReduceOp::Sum)->is_completed());  // Note [small CPU collectives run inline]
  CHECK(small[1].at({15}) == 3.0);
  DeviceTensors big{full({400000}, 1.0), full({400000}, 2.0)};
  std::shared_ptr<CollectiveWork> first = comm.all_reduce(big, ReduceOp::Sum);
  std::shared_ptr<CollectiveWork> second = comm.all_reduce(small, ReduceOp::Sum);
  second->wait();
  CHECK(first->is_completed());  // launched earlier, so completed earlier
  CHECK(big[0].at({399999}) == 3.0);
  CHECK(small[0].at({0}) == 6.0);
}

TEST_CASE("destroying a cpu communicator completes its outstanding collectives first", "[parallel][comm]") {
  DeviceTensors ts{full({300000}, 1.5), full({300000}, 2.5), full({300000}, 4.0)};
  std::shared_ptr<CollectiveWork> work;
  {
    CpuCommunicator comm(cpu_replicas(3));
    work = comm.all_reduce(ts, ReduceOp::Sum);
  }
  work->wait();
  CHECK(ts[2].at({0}) == 8.0);
  CHECK(ts[0].at({299999}) == 8.0);
}

TEST_CASE("cpu collectives reject bad arguments with messages that name them", "[parallel][comm]") {
  CpuCommunicator comm(cpu_replicas(2));
  CHECK_THROWS_WITH(comm.all_reduce({ones({3})}, ReduceOp::Sum),
                    Catch::Contains("1 tensor(s)") && Catch::Contains("[cpu, cpu]"));
  CHECK_THROWS_WITH(comm.all_reduce({ones({3}), ones({4})}, ReduceOp::Sum),
                    Catch::Contains("[4]") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(comm.all_reduce({ones({3}), ones({3}, DType::Float64)}, ReduceOp::Sum),
                    Catch::Contains("float64") && Catch::Contains("same shape and dtype"));
  CHECK_THROWS_WITH(comm.all_reduce({ones({2, 3}).t(), ones({3, 2})}, ReduceOp::Sum),
                    Catch::Contains("not contiguous"));
  CHECK_THROWS_WITH(comm.all_reduce({ones({2}, DType::Int64), ones({2}, DType::Int64)}, ReduceOp::Sum),
                    Catch::Contains("float32 and float64") && Catch::Contains("int64"));
  CHECK_THROWS_WITH(comm.all_reduce({Tensor(), ones({2})}, ReduceOp::Sum), Catch::Contains("undefined"));
  CHECK_THROWS_WITH(comm.broadcast({ones({2}), ones({2})}, 2), Catch::Contains("root 2"));
  CHECK_THROWS_WITH(comm.all_reduce_grouped({}, ReduceOp::Sum), Catch::Contains("no tensors"));
  CHECK_THROWS_WITH(CpuCommunicator({Device::cpu(), Device::cuda(0)}), Catch::Contains("must be the CPU"));
}

TEST_CASE("a collective's error is rethrown by every wait as a minidl::Error naming the collective",
          "[parallel][comm]") {
  HostCollectiveWork work("cpu all_reduce(sum) of 1 tensor(s) over 2 device(s)");
  CHECK_FALSE(work.is_completed());
  work.complete(std::make_exception_ptr(std::runtime_error("the buffer vanished")));
  CHECK(work.is_completed());
  for (int i = 0; i < 2; ++i)
    CHECK_THROWS_WITH(work.wait(), Catch::Contains("all_reduce(sum)") && Catch::Contains("the buffer vanished"));
  HostCollectiveWork fine("cpu barrier");
  fine.complete();
  CHECK_NOTHROW(fine.wait());
  CHECK_THROWS_WITH(fine.complete(), Catch::Contains("completed twice"));
}

TEST_CASE("make_communicator picks the cpu backend for CPU devices and checks the list", "[parallel][comm]") {
  std::shared_ptr<Communicator> comm = make_communicator(cpu_replicas(2));
  CHECK(comm->backend_name() == "cpu");
  CHECK(comm->world_size() == 2);
  CHECK_THROWS_WITH(make_communicator({}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(make_communicator({Device::cpu(), Device::cuda(0)}), Catch::Contains("mixes CPU and CUDA"));
  CHECK_THROWS_WITH(make_communicator({Device::cuda(0), Device::cuda(0)}), Catch::Contains("listed twice"));
  if (cuda_device_count() == 0)
    CHECK_THROWS_WITH(make_communicator({Device::cuda(0)}), Catch::Contains("beyond the device count"));
}

// A build without NCCL says so; a build with it checks the devices before NCCL sees them (the
// NCCL collectives themselves are tested on a GPU, in tests/cuda/test_nccl.cpp).
TEST_CASE("the CUDA communicator is NCCL's where the build has it, else a clear error naming the devices",
          "[parallel][comm]") {
  const int count = cuda_device_count();
  const std::vector<Device> missing{Device::cuda(count), Device::cuda(count + 1)};
  const std::string listed = device_list_str(missing);
  if (nccl_available())
    CHECK_THROWS_WITH(make_cuda_communicator(missing), Catch::Contains("beyond the device count") &&
                                                           Catch::Contains(listed));
  else
    CHECK_THROWS_WITH(make_cuda_communicator(missing), Catch::Contains("no NCCL communicator") &&
                                                           Catch::Contains(listed));
}

TEST_CASE("cpu communicator: a worker thread the system refuses is a minidl::Error and the started ones are joined",
          "[parallel][threads]") {
  minidl::testing::fail_thread_starts_after(1);  // worker 1 starts, worker 2 is refused
  const std::string message = minidl::testing::error_message(
      [] { CpuCommunicator comm({Device::cpu(), Device::cpu(), Device::cpu()}); });
  minidl::testing::fail_thread_starts_after(-1);
  CHECK_THAT(message, Catch::Contains("CpuCommunicator: worker 2 of 3") && Catch::Contains("cannot start a thread"));
  CpuCommunicator comm({Device::cpu(), Device::cpu()});  // nothing left behind: a new one starts
  CHECK(comm.devices().size() == 2);
}
