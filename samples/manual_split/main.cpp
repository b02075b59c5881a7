// manual_split: the tutorial's second multi-GPU example — split each batch into chunks with
// split(), forward and backward per chunk, one optimizer.step() per batch — done correctly:
// each chunk's loss is scaled by its share of the batch, so the accumulated gradient is the
// full-batch gradient (Note [scaling each chunk's loss] in split_step.h). The model, data and
// SGD are the seed tutorial's; given the same --seed it prints the loss lines samples/seed_train
// prints, because every step is mathematically the same.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "core/ops.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "samples/common/flags.h"
#include "samples/common/seed_model.h"
#include "samples/manual_split/split_step.h"

using namespace minidl;
using samples::SimpleModel;  // the seed tutorial's model: Linear 10→5, ReLU, Linear 5→2

int main(int argc, char** argv) {
  CLI::App app{"minidl tutorial example 2: each batch split into chunks, gradients accumulated, one step"};
  int epochs = 10;
  int64_t batch_size = 10;
  int64_t chunks = std::max(2, cuda_device_count());
  double lr = 0.01;
  std::string device_name = "auto";
  uint64_t seed = 0;
  app.add_option("--epochs", epochs, "passes over the dataset")->check(samples::positive_integer<int>());
  app.add_option("--batch-size", batch_size, "samples per batch")->check(samples::positive_integer<int64_t>());
  app.add_option("--chunks", chunks, "chunks per batch (default: one per CUDA device, at least 2)")
      ->check(samples::positive_integer<int64_t>());
  app.add_option("--lr", lr, "SGD learning rate")->check(samples::non_negative_real());
  app.add_option("--device", device_name, "cpu, cuda, cuda:N or auto (CUDA when available)");
  app.add_option("--seed", seed, "seed for the weights, the data and the shuffling")->check(samples::seed_value());
  if (const int status = samples::parse_flags(app, argc, argv, "manual_split"); status >= 0) return status;

  try {
    std::printf("%s %s\n", cuda_is_available() ? "GPU is available!" : "GPU is not available!",
                cuda_devices_summary().c_str());
    const Device device = device_name == "auto" ? default_device() : Device(device_name);

    manual_seed(seed);
    SimpleModel model;
    model.to(device);
    auto dataset = data::make_random_classification(100, 10, 2, seed);
    data::DataLoader loader(dataset, data::DataLoaderOptions{.batch_size = batch_size, .shuffle = true, .seed = seed});
    nn::CrossEntropyLoss criterion;
    optim::SGD optimizer(model.parameters(), optim::SGDOptions{.lr = lr});

    for (int epoch = 0; epoch < epochs; ++epoch) {
      double running_loss = 0.0;
      int i = 0;
      for (data::Batch& batch : loader) {
        Tensor inputs = batch.x.to(device), labels = batch.y.to(device);
        optimizer.zero_grad();
        // PyTorch (tutorial): split_size = len(inputs) // torch.cuda.device_count()
        //   — zero without GPUs (ZeroDivisionError in split), one extra chunk when B % k != 0.
        const int64_t rows = manual_split::chunk_rows(inputs.size(0), chunks);
        // PyTorch (tutorial): for each chunk: loss = criterion(model(chunk), label_chunk); loss.backward()
        //   — unscaled, that sums the chunk means: k times the batch gradient. Scaled here.
        const double loss = manual_split::backward_in_chunks(model, criterion, inputs, labels, rows);
        optimizer.step();
        running_loss += loss;
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
    std::cerr << samples::failure_line("manual_split", "training") << "\n";
    return 1;
  }
  return 0;
}
