// bench_train_step (bench/train_step.cpp): microseconds per training step, on the CPU or a GPU (--device cuda:0).
//   --model seed (default): the seed tutorial — one DataLoader batch (100×10 random dataset,
//     2 classes, batch 10, shuffled), SimpleModel forward (Linear 10→5, ReLU, Linear 5→2),
//     CrossEntropyLoss, backward, SGD step (lr 0.01), zero_grad — what bench/torch_seed_step.py
//     times in PyTorch.
//   --model mlp: the Fashion-MNIST MLP 784→256→128→10 (ReLU), cross-entropy, backward, SGD with
//     momentum 0.9, zero_grad, on a batch already on the device, for each of --batch-sizes
//     (a sweep) — what bench/torch_mlp_step.py times in PyTorch eager.
//   --model char-gpt-adamw: optimizer.step() alone — AdamW in char_gpt's two groups (weight decay
//     on the parameters of rank >= 2) over the parameters of the char-GPT of --n-layer, --n-head,
//     --n-embd (vocabulary 65, block 64), with fixed random gradients: the optimizer's share of a
//     char_gpt step.
// A warm-up, then --repeats runs of --steps steps; the median is one JSON line per case:
//   {"bench":"seed_step","impl":"minidl","device":"cpu","threads":1,"steps":10000,"us_per_step":X}
// --profile FILE: then --profile-steps more steps under the profiler (core/profiler.h): its
//   table on stderr, the Chrome trace in FILE (FILE-b<batch>.json per batch size of a sweep).
// --profile-group-by-shape: the --profile table has a row per op and input shapes.
// --profile-overhead: the timed runs again with the profiler recording each; the JSON line gains
//   us_per_step_profiled and the ratio of the two medians.
// --graph (CUDA): after the warm-up, one step is captured into a CUDA graph (core/cuda_graph.h)
//   and each timed step is a replay (the seed model first copies its DataLoader batch into the
//   graph's static inputs); the JSON line says "graph":true.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/backend.h"
#include "core/cuda_graph.h"
#include "core/host_parallel.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "data/data.h"
#include "kernels/cuda/gemm/gemm_impl.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "samples/char_gpt/model.h"
#include "samples/common/seed_model.h"

namespace {

using namespace minidl;
using samples::SimpleModel;  // the tutorial's model: fc1 -> relu -> fc2

// The seed tutorial's step on inputs already on the device.
void seed_step(const Tensor& inputs, const Tensor& labels, SimpleModel& model, optim::SGD& optimizer,
               const nn::CrossEntropyLoss& criterion) {
  optimizer.zero_grad();
  Tensor outputs = model(inputs);  // [10, 2]
  Tensor loss = criterion(outputs, labels);
  loss.backward();
  optimizer.step();
}

// Runs `steps` steps, one per DataLoader batch, crossing epochs as needed (each begin() is a new
// epoch).
void train_steps(int64_t steps, data::DataLoader& loader, const std::function<void(const data::Batch&)>& step) {
  int64_t done = 0;
  while (done < steps) {
    for (const data::Batch& batch : loader) {
      step(batch);
      profiler::step();
      if (++done == steps) return;
    }
  }
}

// The Fashion-MNIST MLP: 784 -> 256 -> ReLU -> 128 -> ReLU -> 10 (Sequential fuses Linear+ReLU).
std::shared_ptr<nn::Sequential> make_mlp() {
  auto mlp = std::make_shared<nn::Sequential>();
  mlp->push_back(std::make_shared<nn::Linear>(784, 256));
  mlp->push_back(std::make_shared<nn::ReLU>());
  mlp->push_back(std::make_shared<nn::Linear>(256, 128));
  mlp->push_back(std::make_shared<nn::ReLU>());
  mlp->push_back(std::make_shared<nn::Linear>(128, 10));
  return mlp;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct BenchFlags {
  std::string trace;            // --profile
  int64_t steps = 20;           // --profile-steps
  bool group_by_shape = false;  // --profile-group-by-shape
  bool overhead = false;        // --profile-overhead
  bool graph = false;           // --graph
};

struct Timing {
  double us = 0;           // median µs per step, profiler off
  double us_profiled = 0;  // with the profiler recording (--profile-overhead), else 0
};

// Median µs per step of `repeats` runs of run(steps) (each run ends with the device idle); with
// flags.overhead, then `repeats` runs under the profiler. Not alternated: the memory a
// recording frees when it is dropped slows the next run for a while (the seed step took 8.9 µs
// instead of 5.0 right after a recording of 5000 steps), which would be charged to the runs
// without the profiler.
Timing time_runs(const std::function<void(int64_t)>& run, int64_t steps, int repeats, const BenchFlags& flags) {
  std::vector<double> off, on;
  for (int profiled = 0; profiled <= (flags.overhead ? 1 : 0); ++profiled) {
    for (int r = 0; r < repeats; ++r) {
      profiler::Profiler prof;
      if (profiled) prof.start();
      const auto start = std::chrono::steady_clock::now();
      run(steps);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                        static_cast<double>(steps);
      if (profiled) (void)prof.stop();
      (profiled ? on : off).push_back(us);
    }
  }
  return {median_of(off), on.empty() ? 0.0 : median_of(on)};
}

// --profile: flags.steps steps under the profiler, the table on stderr, the trace to `path`.
void profile_steps(const std::function<void(int64_t)>& run, const BenchFlags& flags, const std::string& path,
                   const std::string& what) {
  profiler::Profiler prof;
  prof.start();
  run(flags.steps);
  const profiler::Profile p = prof.stop();
  std::fprintf(stderr, "profile of %s, %lld steps:\n%s", what.c_str(), static_cast<long long>(flags.steps),
               p.table(30, flags.group_by_shape).c_str());
  p.write_chrome_trace(path);
  std::fprintf(stderr, "trace: %s\n", path.c_str());
}

// FILE-b<batch>.json for one batch size of a sweep (FILE itself when there is one size).
std::string trace_path_for(const std::string& path, int64_t batch, size_t sizes) {
  if (sizes <= 1) return path;
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const std::string stem = has_ext ? path.substr(0, dot) : path, ext = has_ext ? path.substr(dot) : ".json";
  return stem + "-b" + std::to_string(batch) + ext;
}

// Median microseconds per MLP step at one batch size; inputs and labels live on the device.
Timing time_mlp_step(Device device, int64_t batch, int64_t steps, int64_t warmup, int repeats, uint64_t seed,
                     const BenchFlags& flags, const std::string& trace_path) {
  manual_seed(seed);
  auto model = make_mlp();
  model->to(device);
  Generator g(seed + 1);
  Tensor x = randn({batch, 784}, {}, &g).to(device);                   // [B, 784]
  Tensor y = randint(0, 10, {batch}, DType::Int64, &g).to(device);      // [B]
  optim::SGDOptions sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  optim::SGD optimizer(model->parameters(), sgd);
  nn::CrossEntropyLoss criterion;
  auto step = [&] {
    optimizer.zero_grad();
    Tensor loss = criterion((*model)(x), y);
    loss.backward();
    optimizer.step();
  };
  CUDAGraph graph;
  auto run = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if (graph.captured()) graph.replay();
      else step();
      profiler::step();
    }
    if (device.is_cuda()) backend_for(device).synchronize();
  };
  run(std::max<int64_t>(warmup, flags.graph ? 1 : 0));  // SGD's first step must come before a capture
  if (flags.graph) graph.capture(device, step);
  const Timing t = time_runs(run, steps, repeats, flags);
  if (!flags.trace.empty())
    profile_steps(run, flags, trace_path, "the mlp step on " + device.str() + ", batch " + std::to_string(batch));
  return t;
}

// Median microseconds per AdamW step over the char-GPT's parameters (char_gpt's make_optimizer:
// two groups, weight decay on rank >= 2), with fixed random gradients on the device.
Timing time_adamw_step(Device device, const char_gpt::GPTConfig& config, int64_t steps, int64_t warmup, int repeats,
                       uint64_t seed, const BenchFlags& flags) {
  manual_seed(seed);
  char_gpt::GPT model(config);
  model.to(device);
  Generator g(seed + 1);
  std::vector<Tensor> decay, no_decay;
  for (Tensor p : model.parameters()) {
    p.set_grad(randn(p.shape(), {}, &g).to(device));
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  optim::AdamW optimizer(std::vector<optim::ParamGroup>{{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                         optim::AdamWOptions{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  auto run = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      optimizer.step();
      profiler::step();
    }
    if (device.is_cuda()) backend_for(device).synchronize();
  };
  run(warmup);
  const Timing t = time_runs(run, steps, repeats, flags);
  if (!flags.trace.empty()) profile_steps(run, flags, flags.trace, "AdamW's step on " + device.str());
  return t;
}

std::vector<int64_t> parse_sizes(const std::string& list) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = list.find(',', pos);
    const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const long long v = std::stoll(item);
    if (v <= 0) throw Error("--batch-sizes must be positive integers, got '" + item + "'");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times the seed tutorial's training step (one JSON line on stdout)"};
  std::string device_name = "cpu";
  int64_t steps = 10000, warmup = 1000;
  int repeats = 5;
  uint64_t seed = 0;
  std::string model_name = "seed", batch_sizes = "128,512,1024,4096";
  app.add_option("--device", device_name, "cpu, cuda or cuda:N");
  app.add_option("--model", model_name,
                 "seed (the tutorial), mlp (784-256-128-10) or char-gpt-adamw (AdamW's step over a char-GPT)")
      ->check(CLI::IsMember({"seed", "mlp", "char-gpt-adamw"}));
  char_gpt::GPTConfig gpt;  // --model char-gpt-adamw
  app.add_option("--n-layer", gpt.n_layer, "char-gpt-adamw: transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--n-head", gpt.n_head, "char-gpt-adamw: attention heads")->check(CLI::PositiveNumber);
  app.add_option("--n-embd", gpt.n_embd, "char-gpt-adamw: embedding width (a multiple of --n-head)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-sizes", batch_sizes, "comma-separated batch sizes of the mlp sweep");
  app.add_option("--steps", steps, "steps per timed run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps before the first run")->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "timed runs; the median is reported")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the dataset, the model and the shuffle");
  BenchFlags profile;
  app.add_option("--profile", profile.trace,
                 "after the timing, profile --profile-steps steps: the table on stderr, a Chrome trace to this file");
  app.add_option("--profile-steps", profile.steps, "steps the profiler records")->check(CLI::PositiveNumber);
  app.add_flag("--profile-group-by-shape", profile.group_by_shape,
               "the --profile table: a row per op and input shapes, with a column of the shapes");
  app.add_flag("--profile-overhead", profile.overhead,
               "time the runs again with the profiler recording; report both medians and their ratio");
  app.add_flag("--graph", profile.graph, "CUDA: capture one step after the warm-up into a CUDA graph and replay it");
  CLI11_PARSE(app, argc, argv);

  try {
    const Device device(device_name);
    if (model_name == "char-gpt-adamw") {
      char_gpt::check_config(gpt);
      const Timing t = time_adamw_step(device, gpt, steps, warmup, repeats, seed, profile);
      std::fprintf(stderr, "AdamW step over the char-GPT (%lld layers, %lld heads, width %lld) on %s: median %.2f us/step "
                   "(%d runs of %lld steps)\n",
                   (long long)gpt.n_layer, (long long)gpt.n_head, (long long)gpt.n_embd, device.str().c_str(), t.us,
                   repeats, (long long)steps);
      std::printf("{\"bench\":\"char_gpt_adamw_step\",\"impl\":\"minidl\",\"device\":\"%s\",\"threads\":%d,"
                  "\"n_layer\":%lld,\"n_head\":%lld,\"n_embd\":%lld,\"steps\":%lld,\"us_per_step\":%.3f",
                  device.str().c_str(), host_threads(), (long long)gpt.n_layer, (long long)gpt.n_head,
                  (long long)gpt.n_embd, (long long)steps, t.us);
      if (profile.overhead)
        std::printf(",\"us_per_step_profiled\":%.3f,\"profiled_ratio\":%.4f", t.us_profiled, t.us_profiled / t.us);
      std::printf("}\n");
      return 0;
    }
    if (model_name == "mlp") {
      const std::vector<int64_t> sizes = parse_sizes(batch_sizes);
      for (int64_t batch : sizes) {
        const Timing t = time_mlp_step(device, batch, steps, warmup, repeats, seed, profile,
                                       trace_path_for(profile.trace, batch, sizes.size()));
        std::fprintf(stderr, "mlp step on %s, batch %lld: median %.2f us/step (%d runs of %lld steps)\n",
                     device.str().c_str(), (long long)batch, t.us, repeats, (long long)steps);
        std::printf("{\"bench\":\"mlp_step\",\"impl\":\"minidl\",\"device\":\"%s\",\"gemm\":\"%s\","
                    "\"threads\":%d,\"batch\":%lld,\"steps\":%lld,\"us_per_step\":%.3f",
                    device.str().c_str(), gemm_impl_name(gemm_impl()), host_threads(), (long long)batch,
                    (long long)steps, t.us);
        if (profile.graph) std::printf(",\"graph\":true");
        if (profile.overhead)
          std::printf(",\"us_per_step_profiled\":%.3f,\"profiled_ratio\":%.4f", t.us_profiled, t.us_profiled / t.us);
        std::printf("}\n");
      }
      return 0;
    }
    manual_seed(seed);  // the Linear initialisations draw from the default generator
    auto model = std::make_shared<SimpleModel>();
    model->to(device);
    auto dataset = data::make_random_classification(100, 10, 2, seed);  // x [100, 10], y [100] in {0, 1}
    data::DataLoaderOptions loader_options;
    loader_options.batch_size = 10;
    loader_options.shuffle = true;
    loader_options.seed = seed;
    data::DataLoader loader(dataset, loader_options);
    optim::SGDOptions sgd;
    sgd.lr = 0.01;
    optim::SGD optimizer(model->parameters(), sgd);
    nn::CrossEntropyLoss criterion;

    // With --graph: the batch is copied into the graph's static inputs, then the graph replays.
    Tensor static_x = empty(Shape{10, 10}, TensorOptions(DType::Float32, device));
    Tensor static_y = empty(Shape{10}, TensorOptions(DType::Int64, device));
    CUDAGraph graph;
    auto step = [&](const data::Batch& batch) {
      if (graph.captured()) {
        static_x.copy_(batch.x);
        static_y.copy_(batch.y);
        graph.replay();
      } else {
        seed_step(batch.x.to(device), batch.y.to(device), *model, optimizer, criterion);  // [10, 10], [10]
      }
    };
    auto run = [&](int64_t n) {
      train_steps(n, loader, step);
      if (device.is_cuda()) backend_for(device).synchronize();
    };
    run(std::max<int64_t>(warmup, profile.graph ? 1 : 0));
    if (profile.graph) graph.capture(device, [&] { seed_step(static_x, static_y, *model, optimizer, criterion); });
    const Timing t = time_runs(run, steps, repeats, profile);
    std::fprintf(stderr, "seed step on %s: median %.3f us/step over %d runs of %lld steps\n", device.str().c_str(),
                 t.us, repeats, (long long)steps);
    std::printf("{\"bench\":\"seed_step\",\"impl\":\"minidl\",\"device\":\"%s\",\"threads\":%d,\"steps\":%lld,"
                "\"us_per_step\":%.3f",
                device.str().c_str(), host_threads(), (long long)steps, t.us);
    if (profile.graph) std::printf(",\"graph\":true");
    if (profile.overhead)
      std::printf(",\"us_per_step_profiled\":%.3f,\"profiled_ratio\":%.4f", t.us_profiled, t.us_profiled / t.us);
    std::printf("}\n");
    if (!profile.trace.empty()) profile_steps(run, profile, profile.trace, "the seed step on " + device.str());
  } catch (const std::bad_alloc&) {  // one line and status 1 whatever was thrown
    std::fprintf(stderr, "bench_train_step: out of memory while building the benchmark's tensors (std::bad_alloc)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "bench_train_step: unexpected error (an exception of unknown type)\n");
    return 1;
  }
  return 0;
}
