// data_parallel: the tutorial's first multi-GPU example — the seed tutorial with one more line,
// model = DataParallel(model) — over every CUDA device, or over --replicas CPU replicas on a
// machine without one. Model, data, SGD (lr 0.01) and cross-entropy are seed_train's; given the
// same --seed it prints seed_train's loss lines, because DataParallel's step is mathematically
// the one-device step (parallel/data_parallel.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "core/ops.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "parallel/parallel.h"
#include "samples/common/flags.h"
#include "samples/common/seed_model.h"

using namespace minidl;
// PyTorch: class SimpleModel(nn.Module) — nn::Cloneable, so that DataParallel can replicate it.
using samples::SimpleModel;

int main(int argc, char** argv) {
  CLI::App app{"minidl tutorial example 1: the seed trainer with its model wrapped in DataParallel"};
  int epochs = 10;
  int64_t batch_size = 10;
  double lr = 0.01;
  int replicas = 2;
  std::string device_name = "auto";
  uint64_t seed = 0;
  app.add_option("--epochs", epochs, "passes over the dataset")->check(samples::positive_integer<int>());
  app.add_option("--batch-size", batch_size, "samples per batch")->check(samples::positive_integer<int64_t>());
  app.add_option("--lr", lr, "SGD learning rate")->check(samples::non_negative_real());
  app.add_option("--device", device_name, "auto (every CUDA device, else CPU replicas), cuda (every CUDA device) or cpu");
  app.add_option("--replicas", replicas, "CPU replicas, when running on the CPU")
      ->check(samples::positive_integer<int>());
  app.add_option("--seed", seed, "seed for the weights, the data and the shuffling")->check(samples::seed_value());
  if (const int status = samples::parse_flags(app, argc, argv, "data_parallel"); status >= 0) return status;

  try {
    std::printf("%s %s\n", cuda_is_available() ? "GPU is available!" : "GPU is not available!",
                cuda_devices_summary().c_str());
    MINIDL_CHECK(device_name == "auto" || device_name == "cpu" || device_name == "cuda", "--device must be auto, cpu "
                 "or cuda, got '", device_name, "'");
    const bool on_cuda = device_name == "cuda" || (device_name == "auto" && cuda_is_available());
    const std::vector<Device> devices = on_cuda ? parallel::all_cuda_devices() : parallel::cpu_replicas(replicas);

    manual_seed(seed);
    auto model = std::make_shared<SimpleModel>();
    if (!devices.empty()) model->to(devices[0]);
    // PyTorch: model = nn.DataParallel(model)   (replica 0 is the model; the others are clones)
    auto dp = std::make_shared<parallel::DataParallel>(model, devices);
    std::printf("%s\n", dp->name().c_str());
    const Device device = dp->devices()[0];  // inputs go to the first device; DataParallel scatters them

    auto dataset = data::make_random_classification(100, 10, 2, seed);
    data::DataLoader loader(dataset, data::DataLoaderOptions{.batch_size = batch_size, .shuffle = true, .seed = seed});
    nn::CrossEntropyLoss criterion;
    optim::SGD optimizer(dp->parameters(), optim::SGDOptions{.lr = lr});

    for (int epoch = 0; epoch < epochs; ++epoch) {
      double running_loss = 0.0;
      int i = 0;
      for (data::Batch& batch : loader) {
        Tensor inputs = batch.x.to(device), labels = batch.y.to(device);
        optimizer.zero_grad();
        Tensor outputs = (*dp)(inputs);            // scatter, parallel forward, gather on devices[0]
        Tensor loss = criterion(outputs, labels);  // the loss of the whole batch, on the first device
        loss.backward();                           // every replica's backward; gradients summed in buckets
        optimizer.step();
        running_loss += loss.item();
        if (i % 10 == 9) {
          std::printf("[%d, %5d] loss: %.3f\n", epoch + 1, i + 1, running_loss / 10);
          running_loss = 0.0;
        }
        ++i;
      }
    }
    std::printf("Finished Training\n");
  } catch (...) {
    // One line whatever was thrown, exit status 1 (samples/common/flags.h).
    std::cerr << samples::failure_line("data_parallel", "training") << "\n";
    return 1;
  }
  return 0;
}
