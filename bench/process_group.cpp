// bench/process_group: what the MPI process group and DistributedDataParallel cost, under an MPI
// launcher (`mpirun -n 2 bench_process_group`; docs/distributed.md).
//   1. All-reduce (sum, float32, in place) of 4 KiB to 64 MiB: the process group's
//      all_reduce + wait, launched from the program's thread, against a bare blocking
//      MPI_Allreduce of the same buffer on the MPI thread (the loop runs there, so the bare
//      figure pays no hand-over). nccl-tests' definitions: algbw = bytes / time,
//      busbw = algbw · 2(n-1)/n; ratio = the group's busbw / the bare one's.
//   2. One DistributedDataParallel training step of the Fashion-MNIST MLP 784-256-128-10 with
//      SGD momentum, --batch rows per process, against the same step of the bare model, run at
//      the same time in every process (so both see the same machine). The exposed communication
//      is what DDP adds to backward: its backward time minus the bare backward's. The reducer's
//      own end-of-backward wait (GradientSyncStats::wait_seconds) is printed beside it, but it
//      is not the measure: on a machine with no core to spare, the MPI thread woken by a
//      bucket's launch can take the launching thread's core until the all-reduce is over, so the
//      time lands in the launch, not in the wait.
// Medians over --repeats runs. Rank 0 prints JSON lines on stdout and a table on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "parallel/distributed_data_parallel.h"
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/process_group.h"

namespace {

using namespace minidl;
using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minidl: the MPI process group's all-reduce against bare MPI_Allreduce, and a DDP step"};
  int repeats = 5;
  int64_t batch = 32;
  int steps = 50;
  int64_t bucket_kib = 25 * 1024;
  app.add_option("--repeats", repeats, "runs per figure (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "rows per process in the DDP step")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "DDP steps per run")->check(CLI::PositiveNumber);
  app.add_option("--bucket-kib", bucket_kib, "DDP gradient bucket cap in KiB (default PyTorch's 25 MiB: the MLP is "
                 "one bucket, launched at the end of backward)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<parallel::ProcessGroup> group = parallel::make_mpi_process_group();
  const int world = group->world_size(), rank = group->rank();
  const bool lead = rank == 0;
  if (lead) std::fprintf(stderr, "%d process(es), mpi process group\n%10s %12s %12s %8s\n", world, "bytes",
                         "group busbw", "bare busbw", "ratio");

  // ---- 1. all-reduce bandwidth ----
  for (size_t bytes = size_t{4} << 10; bytes <= size_t{64} << 20; bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    Tensor t = ones({n});
    // Enough calls for ~0.1 s at 1 GB/s, at least 5.
    const int iters = static_cast<int>(std::max<size_t>(5, std::min<size_t>(2000, (size_t{100} << 20) / bytes)));
    std::vector<double> group_s, bare_s;
    for (int r = 0; r < repeats; ++r) {
      group->barrier_wait();
      auto start = clock_type::now();
      for (int i = 0; i < iters; ++i) group->all_reduce_(t, parallel::ReduceOp::Sum);
      group_s.push_back(seconds_since(start) / iters);
      group->barrier_wait();
      double bare = 0;
      void* data = t.raw_data();
      parallel::mpi::run([&] {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto s = clock_type::now();
        for (int i = 0; i < iters; ++i)
          MINIDL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        bare = seconds_since(s) / iters;
      });
      bare_s.push_back(bare);
    }
    const double factor = world > 1 ? 2.0 * (world - 1) / world : 1.0;
    const double g = median(group_s), b = median(bare_s);
    const double group_busbw = factor * static_cast<double>(bytes) / g / 1e9;
    const double bare_busbw = factor * static_cast<double>(bytes) / b / 1e9;
    if (lead) {
      std::printf("{\"bench\":\"allreduce\",\"processes\":%d,\"bytes\":%zu,\"group_us\":%.1f,\"bare_us\":%.1f,"
                  "\"group_busbw_GBps\":%.3f,\"bare_busbw_GBps\":%.3f,\"ratio\":%.3f}\n",
                  world, bytes, g * 1e6, b * 1e6, group_busbw, bare_busbw, group_busbw / bare_busbw);
      std::fprintf(stderr, "%10zu %9.3f GB/s %9.3f GB/s %7.1f%%\n", bytes, group_busbw, bare_busbw,
                   100 * group_busbw / bare_busbw);
    }
  }

  // ---- 2. a DDP step against the bare model's step, and the exposed communication ----
  auto make_model = [] {
    manual_seed(0);
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 128),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
  };
  auto bare_model = make_model();
  auto model = make_model();
  parallel::DistributedDataParallel ddp(
      model, group, parallel::DistributedDataParallelOptions{.bucket_cap_bytes = static_cast<size_t>(bucket_kib) << 10});
  optim::SGD bare_opt(bare_model->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  optim::SGD opt(ddp.parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  nn::CrossEntropyLoss criterion;
  Generator gen(static_cast<uint64_t>(rank) + 1);
  const Tensor x = randn({batch, 784}, {}, &gen);
  const Tensor y = randint(0, 10, {batch}, DType::Int64, &gen);
  struct StepTimes {
    std::vector<double> step, backward, wait;  // seconds per step, one entry per run
  };
  // `steps` steps of `forward`, timed as a whole and in their backward; every process together.
  auto time_steps = [&](const std::function<Tensor(const Tensor&)>& forward, optim::SGD& optimizer, StepTimes& out,
                        bool with_ddp) {
    group->barrier_wait();
    double backward = 0, waited = 0;
    const auto start = clock_type::now();
    for (int s = 0; s < steps; ++s) {
      optimizer.zero_grad();
      const Tensor loss = criterion(forward(x), y);
      const auto b = clock_type::now();
      loss.backward();
      backward += seconds_since(b);
      optimizer.step();
      if (with_ddp) waited += ddp.last_gradient_sync().wait_seconds;
    }
    out.step.push_back(seconds_since(start) / steps);
    out.backward.push_back(backward / steps);
    out.wait.push_back(waited / steps);
  };
  StepTimes bare, dist;
  for (int r = 0; r < repeats; ++r) {  // interleaved, so that a change in the machine's load hits both
    time_steps([&](const Tensor& in) { return (*bare_model)(in); }, bare_opt, bare, false);
    time_steps([&](const Tensor& in) { return ddp(in); }, opt, dist, true);
  }
  const double bare_step = median(bare.step), bare_bwd = median(bare.backward);
  const double st = median(dist.step), bwd = median(dist.backward), wt = median(dist.wait);
  const double exposed = std::max(0.0, bwd - bare_bwd);
  if (lead) {
    std::printf("{\"bench\":\"ddp_step\",\"processes\":%d,\"batch_per_process\":%lld,\"buckets\":%zu,"
                "\"bare_step_ms\":%.3f,\"bare_backward_ms\":%.3f,\"step_ms\":%.3f,\"backward_ms\":%.3f,"
                "\"exposed_ms\":%.3f,\"exposed_share\":%.3f,\"end_wait_ms\":%.3f}\n",
                world, static_cast<long long>(batch), ddp.buckets().size(), bare_step * 1e3, bare_bwd * 1e3, st * 1e3,
                bwd * 1e3, exposed * 1e3, exposed / st, wt * 1e3);
    std::fprintf(stderr,
                 "step of the MLP 784-256-128-10, %lld rows per process, %zu bucket(s):\n"
                 "  bare model   %.3f ms, backward %.3f ms\n"
                 "  DDP          %.3f ms, backward %.3f ms (end-of-backward wait %.3f ms)\n"
                 "  exposed communication %.3f ms = %.1f%% of the DDP step\n",
                 static_cast<long long>(batch), ddp.buckets().size(), bare_step * 1e3, bare_bwd * 1e3, st * 1e3,
                 bwd * 1e3, wt * 1e3, exposed * 1e3, 100 * exposed / st);
  }
  return 0;
}
