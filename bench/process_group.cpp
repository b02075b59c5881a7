// bench/process_group: what the MPI process group and DistributedDataParallel cost, under an MPI
// launcher (`mpirun -n 2 bench_process_group`; docs/distributed.md).
//   1. All-reduce (sum, float32, in place) of 4 KiB to 64 MiB: the process group's
//      all_reduce + wait, launched from the program's thread, against a bare blocking
//      MPI_Allreduce of the same buffer on the MPI thread (the loop runs there, so the bare
//      figure pays no hand-over). nccl-tests' definitions: algbw = bytes / time,
//      busbw = algbw · 2(n-1)/n; ratio = the group's busbw / the bare one's.
//   2. One DistributedDataParallel training step of the Fashion-MNIST MLP 784-256-128-10 with
//      SGD momentum, --batch rows per process: the step time, and the part of it that the end of
//      backward waited for outstanding buckets (GradientSyncStats::wait_seconds): the exposed
//      communication share.
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

  // ---- 2. a DDP step and its exposed communication ----
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 128),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
  parallel::DistributedDataParallel ddp(
      model, group, parallel::DistributedDataParallelOptions{.bucket_cap_bytes = static_cast<size_t>(bucket_kib) << 10});
  optim::SGD opt(ddp.parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  nn::CrossEntropyLoss criterion;
  Generator gen(static_cast<uint64_t>(rank) + 1);
  const Tensor x = randn({batch, 784}, {}, &gen);
  const Tensor y = randint(0, 10, {batch}, DType::Int64, &gen);
  std::vector<double> step_s, wait_s;
  for (int r = 0; r < repeats; ++r) {
    group->barrier_wait();
    double waited = 0;
    const auto start = clock_type::now();
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      criterion(ddp(x), y).backward();
      opt.step();
      waited += ddp.last_gradient_sync().wait_seconds;
    }
    step_s.push_back(seconds_since(start) / steps);
    wait_s.push_back(waited / steps);
  }
  const double st = median(step_s), wt = median(wait_s);
  if (lead) {
    std::printf("{\"bench\":\"ddp_step\",\"processes\":%d,\"batch_per_process\":%lld,\"buckets\":%zu,\"step_ms\":%.3f,"
                "\"exposed_wait_ms\":%.3f,\"exposed_share\":%.3f}\n",
                world, static_cast<long long>(batch), ddp.buckets().size(), st * 1e3, wt * 1e3, wt / st);
    std::fprintf(stderr, "DDP step (MLP 784-256-128-10, %lld rows per process, %zu bucket(s)): %.3f ms, backward "
                 "waited %.3f ms for buckets (%.1f%%)\n",
                 static_cast<long long>(batch), ddp.buckets().size(), st * 1e3, wt * 1e3, 100 * wt / st);
  }
  return 0;
}
