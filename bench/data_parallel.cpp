// bench_data_parallel (bench/data_parallel.cpp): what DataParallel costs and what its communication achieves.
//   1. Training step time (zero_grad, forward, cross-entropy, backward, SGD step) of the plain
//      model and of DataParallel over 1..N replicas on the same device type, at the same global
//      batch: the seed tutorial's SimpleModel (batch 10) and the Fashion-MNIST MLP
//      784-256-128-10 (--batch, default 4096, the batch of the one-GPU overhead target). Beside each
//      DataParallel step: its communication done alone (the per-forward parameter broadcast plus
//      one all-reduce per gradient bucket, launched and waited one after the other) as a share
//      of the step, and the part backward had to wait for (GradientSyncStats::wait_seconds).
//   2. All-reduce bandwidth of the communicator over 2..N devices, nccl-tests' definitions:
//      algbw = bytes / time, busbw = algbw · 2(n-1)/n.
// Medians over --repeats runs, the configurations timed in turn within each repeat. JSON lines on stdout, a table on stderr. --device cuda replicates
// over every CUDA device (it needs the NCCL communicator); the default is CPU replicas.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/backend.h"
#include "core/host_parallel.h"
#include "core/ops.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "parallel/parallel.h"
#include "samples/common/seed_model.h"

namespace {

using namespace minidl;
using clock_type = std::chrono::steady_clock;
using samples::SimpleModel;

std::shared_ptr<nn::Module> make_mlp() {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 128),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void synchronize(const std::vector<Device>& devices) {
  for (const Device& d : devices)
    if (d.is_cuda()) backend_for(d).synchronize();
}

// Median microseconds per call of `step` over `repeats` runs of `steps` calls (after `warmup`).
double median_us(const std::function<void()>& step, int warmup, int steps, int repeats,
                 const std::vector<Device>& devices) {
  for (int i = 0; i < warmup; ++i) step();
  synchronize(devices);
  std::vector<double> runs;
  for (int r = 0; r < repeats; ++r) {
    const auto start = clock_type::now();
    for (int i = 0; i < steps; ++i) step();
    synchronize(devices);
    runs.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - start).count() / steps);
  }
  return median(runs);
}

// n CPU replicas, or cuda:0 .. cuda:(n-1).
std::vector<Device> replica_devices(Device device, int n) {
  if (device.is_cpu()) return parallel::cpu_replicas(n);
  std::vector<Device> all = parallel::all_cuda_devices();
  all.resize(static_cast<size_t>(n));
  return all;
}

struct Workload {
  std::string name;
  std::function<std::shared_ptr<nn::Module>()> make;
  int64_t batch, features, classes;
};

// One timed configuration: the plain model (dp null) or DataParallel over n replicas.
struct StepConfig {
  int replicas = 1;
  std::vector<Device> devices;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<parallel::DataParallel> dp;
  std::unique_ptr<optim::SGD> opt;
  std::vector<double> runs_us;  // us/step of each timed run
  double wait_s = 0;            // summed GradientSyncStats::wait_seconds
  int64_t timed_steps = 0;
};

void bench_steps(const Workload& w, Device device, const std::vector<int>& replica_counts, int warmup, int steps,
                 int repeats) {
  Generator g(1);
  const Tensor x = randn({w.batch, w.features}, {}, &g).to(device);
  const Tensor y = randint(0, w.classes, {w.batch}, DType::Int64, &g).to(device);
  nn::CrossEntropyLoss criterion;

  manual_seed(0);
  std::shared_ptr<nn::Module> init = w.make();
  init->to(device);
  std::vector<StepConfig> configs(replica_counts.size() + 1);  // [0]: the plain model
  for (size_t c = 0; c < configs.size(); ++c) {
    StepConfig& cfg = configs[c];
    cfg.model = init->clone();
    cfg.devices = {device};
    if (c > 0) {
      cfg.replicas = replica_counts[c - 1];
      cfg.devices = replica_devices(device, cfg.replicas);
      cfg.dp = std::make_unique<parallel::DataParallel>(cfg.model, cfg.devices);
    }
    nn::Module& trained = cfg.dp ? static_cast<nn::Module&>(*cfg.dp) : *cfg.model;
    cfg.opt = std::make_unique<optim::SGD>(trained.parameters(), optim::SGDOptions{.lr = 0.01});
  }
  auto run_steps = [&](StepConfig& cfg, int count, bool timed) {
    nn::Module& trained = cfg.dp ? static_cast<nn::Module&>(*cfg.dp) : *cfg.model;
    const auto start = clock_type::now();
    for (int i = 0; i < count; ++i) {
      cfg.opt->zero_grad();
      Tensor loss = criterion(trained(x), y);
      loss.backward();
      cfg.opt->step();
      if (timed && cfg.dp) cfg.wait_s += cfg.dp->last_gradient_sync().wait_seconds;
    }
    synchronize(cfg.devices);
    if (!timed) return;
    cfg.runs_us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - start).count() / count);
    cfg.timed_steps += count;
  };
  for (StepConfig& cfg : configs) run_steps(cfg, warmup, false);
  // Round robin, so that the machine's drifting load falls on every configuration alike.
  for (int r = 0; r < repeats; ++r)
    for (StepConfig& cfg : configs) run_steps(cfg, steps, true);

  const double plain_us = median(configs[0].runs_us);
  std::fprintf(stderr, "%-6s batch %5lld  plain model          %10.1f us/step\n", w.name.c_str(), (long long)w.batch,
               plain_us);
  std::printf("{\"bench\":\"dp_step\",\"model\":\"%s\",\"batch\":%lld,\"device\":\"%s\",\"impl\":\"plain\","
              "\"replicas\":1,\"threads\":%d,\"us_per_step\":%.2f}\n",
              w.name.c_str(), (long long)w.batch, device.str().c_str(), host_threads(), plain_us);

  for (size_t c = 1; c < configs.size(); ++c) {
    StepConfig& cfg = configs[c];
    parallel::DataParallel& dp = *cfg.dp;
    const int n = cfg.replicas;
    const double dp_us = median(cfg.runs_us);
    const double wait_us = 1e6 * cfg.wait_s / static_cast<double>(cfg.timed_steps);

    // The same collectives alone: broadcast of every parameter, then one all-reduce per bucket.
    std::vector<parallel::DeviceTensors> params(cfg.model->parameters().size());
    for (int r = 0; r < n; ++r) {
      auto p = dp.replica(r).parameters();
      for (size_t k = 0; k < p.size(); ++k) params[k].push_back(p[k]);
    }
    std::vector<parallel::DeviceTensors> buckets;
    for (const parallel::GradientBucket& b : dp.buckets()) {
      parallel::DeviceTensors flat;
      for (const Device& d : cfg.devices) flat.push_back(zeros({b.numel}, TensorOptions(b.dtype, d)));
      buckets.push_back(std::move(flat));
    }
    // One replica communicates nothing (Note [one participant] in parallel/gradient_reducer.cpp).
    const double comm_us = n == 1 ? 0.0 : median_us(
        [&] {
          dp.communicator().broadcast_grouped(params, 0)->wait();
          for (const auto& flat : buckets) dp.communicator().all_reduce(flat, parallel::ReduceOp::Sum)->wait();
        },
        warmup, steps, repeats, cfg.devices);
    const double share = comm_us / dp_us;
    std::fprintf(stderr,
                 "%-6s batch %5lld  DataParallel x%-2d     %10.1f us/step  (%+6.1f%% vs plain)  communication alone "
                 "%8.1f us = %5.1f%% of the step, backward waited %7.1f us, %zu bucket(s)\n",
                 w.name.c_str(), (long long)w.batch, n, dp_us, 100.0 * (dp_us / plain_us - 1.0), comm_us,
                 100.0 * share, wait_us, dp.buckets().size());
    std::printf("{\"bench\":\"dp_step\",\"model\":\"%s\",\"batch\":%lld,\"device\":\"%s\",\"impl\":\"data_parallel\","
                "\"replicas\":%d,\"threads\":%d,\"us_per_step\":%.2f,\"overhead_vs_plain\":%.4f,\"comm_us\":%.2f,"
                "\"comm_share\":%.4f,\"backward_wait_us\":%.2f,\"buckets\":%zu}\n",
                w.name.c_str(), (long long)w.batch, device.str().c_str(), n, host_threads(), dp_us,
                dp_us / plain_us - 1.0, comm_us, share, wait_us, dp.buckets().size());
  }
}

void bench_all_reduce(Device device, const std::vector<int>& replica_counts, int repeats) {
  for (int n : replica_counts) {
    // Nothing moves between one CPU replica. One GPU still calls NCCL (world size 1, which does
    // nothing for an in-place sum): its time is the cost of a call and its events; busbw is 0
    // by nccl-tests' definition.
    if (n < 2 && device.is_cpu()) continue;
    const std::vector<Device> devices = replica_devices(device, n);
    std::shared_ptr<parallel::Communicator> comm = parallel::make_communicator(devices);
    for (int64_t bytes : {int64_t{4} << 10, int64_t{256} << 10, int64_t{4} << 20, int64_t{64} << 20}) {
      parallel::DeviceTensors ts;
      for (const Device& d : devices) ts.push_back(ones({bytes / 4}, d));
      const int calls = bytes >= (int64_t{4} << 20) ? 5 : 200;
      const double us = median_us([&] { comm->all_reduce(ts, parallel::ReduceOp::Sum)->wait(); }, 2, calls, repeats,
                                  devices);
      const double algbw = static_cast<double>(bytes) / (us * 1e-6) / 1e9;  // GB/s
      const double busbw = algbw * 2.0 * (n - 1) / n;
      std::fprintf(stderr, "all_reduce %s x%d %9lld bytes: %10.1f us  algbw %6.2f GB/s  busbw %6.2f GB/s\n",
                   comm->backend_name().c_str(), n, (long long)bytes, us, algbw, busbw);
      std::printf("{\"bench\":\"all_reduce\",\"backend\":\"%s\",\"devices\":%d,\"bytes\":%lld,\"us\":%.2f,"
                  "\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f}\n",
                  comm->backend_name().c_str(), n, (long long)bytes, us, algbw, busbw);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DataParallel step time vs the plain model, communication share, all-reduce bus bandwidth"};
  std::string device_name = "cpu";
  std::vector<int> replicas{1, 2, 4};
  int64_t batch = 4096;
  int steps = 10, warmup = 3, repeats = 5, seed_steps = 2000;
  bool skip_all_reduce = false;
  app.add_option("--device", device_name, "cpu (CPU replicas) or cuda (CUDA devices, NCCL)");
  app.add_option("--replicas", replicas, "replica counts to time, e.g. 1 2 4")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "global batch of the MLP")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "MLP steps per timed run")->check(CLI::PositiveNumber);
  app.add_option("--seed-steps", seed_steps, "seed-model steps per timed run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "timed runs; the median is reported")->check(CLI::PositiveNumber);
  app.add_flag("--skip-all-reduce", skip_all_reduce, "only the step times");
  CLI11_PARSE(app, argc, argv);

  try {
    const Device device = device_name == "cuda" ? Device::cuda(0) : Device(device_name);
    if (device.is_cuda()) {
      for (int n : replicas)
        MINIDL_CHECK(n <= cuda_device_count(), "--replicas ", n, " exceeds the ", cuda_device_count(),
                     " CUDA device(s)");
    }
    double load = -1;  // the machine's 1-minute load average: other work skews every figure
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf", &load) != 1) load = -1;
      std::fclose(f);
    }
    std::fprintf(stderr, "DataParallel benchmark on %s, %d CPU kernel thread(s), medians of %d runs, load average %.2f\n",
                 device.str().c_str(), host_threads(), repeats, load);
    bench_steps(Workload{"seed", [] { return std::make_shared<SimpleModel>(); }, 10, 10, 2}, device, replicas,
                warmup * 100, seed_steps, repeats);
    bench_steps(Workload{"mlp", make_mlp, batch, 784, 10}, device, replicas, warmup, steps, repeats);
    if (!skip_all_reduce) bench_all_reduce(device, replicas, repeats);
  } catch (const std::bad_alloc&) {  // one line and status 1 whatever was thrown
    std::fprintf(stderr, "bench_data_parallel: out of memory while building the benchmark's tensors (std::bad_alloc)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data_parallel: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "bench_data_parallel: unexpected error (an exception of unknown type)\n");
    return 1;
  }
  return 0;
}
