// The NCCL communicator on the GPUs of this machine (all of them), against CPU references. On a
// machine with one GPU NCCL runs with one rank, where a sum, an average or a broadcast gives back
// its input: the tests named for that case check the calls, streams, events and errors there,
// and the reduction across devices only where there are several. What one rank can get wrong —
// the order of a collective between the compute stream's earlier and later work, a block freed
// while NCCL may still read it — is tested on its own.
#include "cuda_test_util.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/backend.h"
#include "core/memory.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "parallel/parallel.h"

using namespace minidl;
using namespace minidl::cuda_test;
using namespace minidl::parallel;

namespace {

std::shared_ptr<Communicator> nccl_over_all_gpus() {
  // A GPU build that found no NCCL cannot test its communicator: say so as a failure, since
  // a GPU run must not report it passed.
  REQUIRE(nccl_available());
  std::shared_ptr<Communicator> comm = make_communicator(all_cuda_devices());
  REQUIRE(comm->backend_name() == "nccl");
  return comm;
}

// One tensor per device: device d gets random_cpu(shape, seed + d).
DeviceTensors per_device(const Communicator& comm, const Shape& shape, uint64_t seed) {
  DeviceTensors out;
  for (int d = 0; d < comm.local_size(); ++d) out.push_back(random_cpu(shape, seed + d).to(comm.devices()[d]));
  return out;
}

Tensor cpu_sum(const Communicator& comm, const Shape& shape, uint64_t seed) {
  Tensor sum = zeros(shape);
  for (int d = 0; d < comm.local_size(); ++d) sum = sum + random_cpu(shape, seed + d);
  return sum;
}

}  // namespace

TEST_CASE("nccl all_reduce gives every GPU the sum or mean of float32 tensors of odd sizes, one GPU its input",
          "[cuda][nccl]") {
  std::shared_ptr<Communicator> comm = nccl_over_all_gpus();
  const int n = comm->local_size();
  for (int64_t size : {0, 1, 31, 257, 1000, 1 << 20}) {
    INFO("numel " << size << ", " << n << " device(s)");
    const uint64_t seed = 100 + static_cast<uint64_t>(size);
    DeviceTensors sums = per_device(*comm, Shape{size}, seed);
    DeviceTensors means = per_device(*comm, Shape{size}, seed);
    comm->all_reduce(sums, ReduceOp::Sum)->wait();
    comm->all_reduce(means, ReduceOp::Average)->wait();
    const Tensor want = cpu_sum(*comm, Shape{size}, seed);
    for (int d = 0; d < n; ++d) {
      if (n == 1) {  // one rank: NCCL leaves the input as it is (average divides by 1)
        check_equal(sums[d], want, "sum over one rank");
        check_equal(means[d], want, "average over one rank");
      } else {
        // n values in [-1, 1) summed in NCCL's order instead of the CPU's: the rounding of a
        // few float32 additions, under 1e-6 · n; 1e-5 absolute covers 8 devices.
        check_close(sums[d], want, 1e-5, 0, "sum");
        check_close(means[d], want / static_cast<double>(n), 1e-5, 0, "average");
      }
    }
  }
}

TEST_CASE("nccl grouped all_reduce and broadcast of several tensors and int64 from every root, one GPU its inputs",
          "[cuda][nccl]") {
  std::shared_ptr<Communicator> comm = nccl_over_all_gpus();
  const int n = comm->local_size();
  std::vector<DeviceTensors> groups{per_device(*comm, Shape{17, 3}, 1), per_device(*comm, Shape{0}, 2),
                                    per_device(*comm, Shape{1000}, 3)};
  DeviceTensors labels;
  for (int d = 0; d < n; ++d) labels.push_back(full({5}, d + 1, TensorOptions(DType::Int64, comm->devices()[d])));
  groups.push_back(labels);
  comm->all_reduce_grouped(groups, ReduceOp::Sum)->wait();
  const int64_t label_sum = static_cast<int64_t>(n) * (n + 1) / 2;
  for (int d = 0; d < n; ++d) {
    check_close(groups[0][d], cpu_sum(*comm, Shape{17, 3}, 1), 1e-5, 0, "group 0");
    check_close(groups[2][d], cpu_sum(*comm, Shape{1000}, 3), 1e-5, 0, "group 2");
    CHECK(groups[3][d].to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>(5, label_sum));
  }
  for (int root = 0; root < n; ++root) {
    INFO("root " << root);
    DeviceTensors t = per_device(*comm, Shape{257}, 50);
    comm->broadcast(t, root)->wait();
    for (int d = 0; d < n; ++d) check_equal(t[d], random_cpu(Shape{257}, 50 + root), "broadcast");
  }
}

namespace {

// Holds a device's compute stream at a host function until release() (or the end of scope,
// so a failing test does not leave the stream blocked), so that what is queued behind it
// stays pending for as long as the test needs.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : stream_(stream) {
    MINIDL_CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamGate::hold, this));
  }
  // The host function reads the flags: it must have returned before the gate is freed.
  ~StreamGate() {
    release();
    (void)cudaStreamSynchronize(stream_);
  }
  void release() { open_.store(true); }

 private:
  cudaStream_t stream_;
  static void hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    const auto start = std::chrono::steady_clock::now();
    while (!gate->open_.load() && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    }
  }
  std::atomic<bool> open_{false};
};

// Tells when a device's compute stream has reached the point where it was queued (a host
// function that only sets a flag: it never holds the stream, so markers on several devices
// cannot wait for each other on the thread that runs host functions).
class StreamMarker {
 public:
  explicit StreamMarker(cudaStream_t stream) : stream_(stream) {
    MINIDL_CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamMarker::mark, &reached_));
  }
  ~StreamMarker() { (void)cudaStreamSynchronize(stream_); }  // the host function has run
  bool reached() const { return reached_.load(); }

 private:
  cudaStream_t stream_;
  static void mark(void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); }
  std::atomic<bool> reached_{false};
};

cudaStream_t compute_stream(const Device& d) { return static_cast<cudaStream_t>(backend_for(d).stream_handle()); }

}  // namespace

TEST_CASE("nccl: a tensor freed while its collective is pending is not handed out again until it is done",
          "[cuda][nccl]") {
  std::shared_ptr<Communicator> comm = nccl_over_all_gpus();
  const Shape shape{123457};  // an odd size; the cache is emptied first so no other block fits
  const Device gpu0 = comm->devices()[0];
  for (const Device& d : comm->devices()) backend_for(d).synchronize();
  empty_cache(gpu0);
  // Everything that needs a stream or cudaMalloc comes before the gates: the copies of the
  // inputs, and a spare block of the same size for `second` below, so that nothing behind
  // the gates can wait for them.
  DeviceTensors t = per_device(*comm, shape, 7);
  void* first = t[0].storage().data();
  { Tensor spare = empty(shape, TensorOptions(DType::Float32, gpu0)); }  // cached: the free list is [spare]
  {
    // The comm streams wait for the compute streams, which wait at the gates: the collective,
    // and the free recorded on its comm stream (record_stream), stay pending.
    std::vector<std::unique_ptr<StreamGate>> gates;
    for (const Device& d : comm->devices())
      gates.push_back(std::make_unique<StreamGate>(compute_stream(d)));
    {
      std::shared_ptr<CollectiveWork> work = comm->all_reduce(t, ReduceOp::Sum);
      CHECK_FALSE(work->is_completed());
      CHECK(cudaPeekAtLastError() == cudaSuccess);  // the pending query left no error behind
      t.clear();
    }  // the tensors and the work are dropped with the collective still pending
    Tensor second = empty(shape, TensorOptions(DType::Float32, gpu0));
    // With record_stream, `first` is pending and `second` gets the spare; without it the free
    // list would be [spare, first] and the last freed block, `first`, would be handed out.
    CHECK(second.storage().data() != first);
    for (auto& g : gates) g->release();
    // The barrier's events come after the free's event on every comm stream.
    comm->barrier()->wait();
    for (const Device& d : comm->devices()) backend_for(d).synchronize();
    Tensor third = empty(shape, TensorOptions(DType::Float32, gpu0));
    CHECK(third.storage().data() == first);  // done now: the block is handed out again
  }
}

TEST_CASE("nccl collectives run after the compute stream's earlier work and before its later work, on one GPU too",
          "[cuda][nccl]") {
  std::shared_ptr<Communicator> comm = nccl_over_all_gpus();
  const int n = comm->local_size();
  // 256 MiB per device: an average this size keeps NCCL busy long enough to be seen running (one
  // rank still multiplies by 1/1 in a kernel of its own).
  const Shape shape{int64_t{1} << 26};
  DeviceTensors t;
  for (const Device& d : comm->devices()) t.push_back(zeros(shape, TensorOptions(DType::Float32, d)));
  for (const Device& d : comm->devices()) backend_for(d).synchronize();

  // After the earlier work: behind held compute streams, each device's tensor is filled with
  // d + 1 and then summed. The collective cannot complete while the streams are held (its comm
  // stream waits for the fill), and then it sums the filled values.
  std::vector<std::unique_ptr<StreamGate>> gates;
  for (const Device& d : comm->devices()) gates.push_back(std::make_unique<StreamGate>(compute_stream(d)));
  for (int d = 0; d < n; ++d) t[static_cast<size_t>(d)].fill_(d + 1);
  std::shared_ptr<CollectiveWork> sum = comm->all_reduce(t, ReduceOp::Sum);
  bool completed_early = false;
  const auto watch_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < watch_until) completed_early = completed_early || sum->is_completed();
  CHECK_FALSE(completed_early);
  for (auto& g : gates) g->release();
  sum->wait();
  const float total = static_cast<float>(n * (n + 1) / 2);
  for (int d = 0; d < n; ++d) {
    const std::vector<float> v = t[static_cast<size_t>(d)].to(Device::cpu()).to_vector<float>();
    CHECK(std::all_of(v.begin(), v.end(), [&](float x) { return x == total; }));  // small integers: exact
  }
  gates.clear();

  // Before the later work: the compute streams are held again, so the average's comm streams
  // wait; wait() queues the compute streams' wait for it, and behind that a marker. Once the
  // gates open, a marker the stream has reached means everything before it is done — the
  // average included, if wait() ordered it. Without that order the marker is reached beside
  // the running average, and the check right after catches the average unfinished.
  for (const Device& d : comm->devices()) gates.push_back(std::make_unique<StreamGate>(compute_stream(d)));
  std::shared_ptr<CollectiveWork> average = comm->all_reduce(t, ReduceOp::Average);
  average->wait();
  std::vector<std::unique_ptr<StreamMarker>> markers;
  for (const Device& d : comm->devices()) markers.push_back(std::make_unique<StreamMarker>(compute_stream(d)));
  for (auto& g : gates) g->release();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto all_reached = [&] {
    return std::all_of(markers.begin(), markers.end(), [](const auto& m) { return m->reached(); });
  };
  while (!all_reached() && std::chrono::steady_clock::now() < give_up) {
  }
  REQUIRE(all_reached());
  CHECK(average->is_completed());
  markers.clear();
  gates.clear();
  // The mean of n copies of `total`: NCCL multiplies each by 1/n and sums, a few ulps of total.
  for (int d = 0; d < n; ++d) {
    const std::vector<float> v = t[static_cast<size_t>(d)].to(Device::cpu()).to_vector<float>();
    CHECK(std::all_of(v.begin(), v.end(), [&](float x) { return std::abs(x - total) <= 1e-6f * total * n; }));
  }
}

TEST_CASE("nccl works and a barrier complete, the barrier after every collective before it, one GPU too",
          "[cuda][nccl]") {
  std::shared_ptr<Communicator> comm = nccl_over_all_gpus();
  std::vector<DeviceTensors> inputs;
  std::vector<std::shared_ptr<CollectiveWork>> works;
  for (int i = 0; i < 8; ++i) {
    inputs.push_back(per_device(*comm, Shape{1 << 18}, 20 + i));
    works.push_back(comm->all_reduce(inputs.back(), ReduceOp::Average));
  }
  std::shared_ptr<CollectiveWork> barrier = comm->barrier();
  barrier->wait();
  for (const Device& d : comm->devices()) backend_for(d).synchronize();
  CHECK(barrier->is_completed());
  for (int i = 0; i < 8; ++i) {
    CHECK(works[i]->is_completed());
    CHECK_NOTHROW(works[i]->wait());
    const Tensor want = cpu_sum(*comm, Shape{1 << 18}, 20 + i) / static_cast<double>(comm->local_size());
    for (int d = 0; d < comm->local_size(); ++d) check_close(inputs[i][d], want, 1e-5, 0, "average");
  }
  // Kernels launch and run after all that.
  Tensor x = ones({1000}, TensorOptions(DType::Float32, comm->devices()[0]));
  CHECK_NOTHROW((x + x).to(Device::cpu()));
}

TEST_CASE("nccl communicator errors name the op, the tensors and the devices", "[cuda][nccl]") {
  std::shared_ptr<Communicator> comm = nccl_over_all_gpus();
  const int n = comm->local_size();
  DeviceTensors on_cpu;
  for (int d = 0; d < n; ++d) on_cpu.push_back(zeros({4}));
  CHECK_THROWS_WITH(comm->all_reduce(on_cpu, ReduceOp::Sum), Catch::Contains("nccl all_reduce") &&
                                                                  Catch::Contains("is on cpu, expected cuda:0"));
  DeviceTensors labels;
  for (int d = 0; d < n; ++d) labels.push_back(zeros({4}, TensorOptions(DType::Int64, comm->devices()[d])));
  CHECK_THROWS_WITH(comm->all_reduce(labels, ReduceOp::Average), Catch::Contains("average of int64"));
  CHECK_THROWS_WITH(comm->broadcast(per_device(*comm, Shape{4}, 1), n), Catch::Contains("root"));
  CHECK_THROWS_WITH(comm->all_reduce(DeviceTensors{}, ReduceOp::Sum), Catch::Contains("one per device"));
  // The communicator still works after refusing bad input.
  DeviceTensors ok = per_device(*comm, Shape{4}, 1);
  CHECK_NOTHROW(comm->all_reduce(ok, ReduceOp::Sum)->wait());
}

// On one GPU no collective runs (one participant: no hooks, no broadcast), so this checks
// DataParallel's own path there; with several GPUs the NCCL all-reduce too.
TEST_CASE("DataParallel over every GPU trains like the plain model on cuda:0, on one GPU without a collective",
          "[cuda][nccl][dp]") {
  REQUIRE(nccl_available());
  struct Mlp : nn::Cloneable<Mlp> {
    std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(20, 32));
    std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 4));
    Tensor forward(const Tensor& x) override { return (*fc2)(ops::relu((*fc1)(x))); }
  };
  manual_seed(11);
  auto reference = std::make_shared<Mlp>();
  std::shared_ptr<nn::Module> model = reference->clone();
  reference->to(kGpu);
  model->to(kGpu);
  DataParallel dp(model, all_cuda_devices(), DataParallelOptions{.bucket_cap_bytes = 1024});  // several buckets
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  optim::SGD dp_opt(dp.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  nn::CrossEntropyLoss criterion;
  Generator g(5);
  double worst = 0;
  for (int step = 0; step < 20; ++step) {
    const int64_t batch = step % 5 == 4 ? 1 : 37;  // uneven over several GPUs, and a batch of one
    Tensor x = randn({batch, 20}, {}, &g).to(kGpu);
    Tensor y = randint(0, 4, {batch}, DType::Int64, &g).to(kGpu);
    ref_opt.zero_grad();
    Tensor ref_loss = criterion((*reference)(x), y);
    ref_loss.backward();
    ref_opt.step();
    dp_opt.zero_grad();
    Tensor loss = criterion(dp(x), y);
    loss.backward();
    dp_opt.step();
    worst = std::max(worst, std::abs(ref_loss.item() - loss.item()));
  }
  // The same sums in other groupings (per shard, then across GPUs) in float32, as in the CPU
  // replica test: the bound that test uses. One GPU does the same arithmetic as the plain model.
  CHECK(worst < 1e-5);
  auto pa = reference->parameters(), pb = model->parameters();
  for (size_t p = 0; p < pa.size(); ++p) check_close(pb[p], pa[p], 1e-5, 0, "parameter after 20 steps");
}
