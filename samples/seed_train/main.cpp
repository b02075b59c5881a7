// seed_train: the seed tutorial end to end, in minidl. Each step names the PyTorch line it
// stands for: check for a GPU, define SimpleModel (Linear 10→5, ReLU, Linear 5→2, in
// samples/common/seed_model.h: the other samples, bench/ and tests/ train the same class), move
// it to the device, build 100 random samples and a shuffled DataLoader (batch 10), SGD lr 0.01 with
// cross-entropy, and a loop that prints the running loss every 10 batches.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "core/ops.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "samples/common/flags.h"
#include "samples/common/seed_model.h"

using namespace minidl;
// PyTorch: class SimpleModel(nn.Module): fc1 = nn.Linear(10, 5); relu; fc2 = nn.Linear(5, 2)
using samples::SimpleModel;

int main(int argc, char** argv) {
  CLI::App app{"minidl seed tutorial: a small classifier on random data"};
  int epochs = 10;
  int64_t batch_size = 10;
  double lr = 0.01;
  std::string device_name = "auto";
  uint64_t seed = 0;
  app.add_option("--epochs", epochs, "passes over the dataset")->check(samples::positive_integer<int>());
  app.add_option("--batch-size", batch_size, "samples per batch")->check(samples::positive_integer<int64_t>());
  app.add_option("--lr", lr, "SGD learning rate")->check(samples::non_negative_real());
  app.add_option("--device", device_name, "cpu, cuda, cuda:N or auto (CUDA when available)");
  app.add_option("--seed", seed, "seed for the weights, the data and the shuffling")->check(samples::seed_value());
  if (const int status = samples::parse_flags(app, argc, argv, "seed_train"); status >= 0) return status;

  try {
    // PyTorch: if torch.cuda.is_available(): print("GPU is available!") else: ...
    std::printf("%s %s\n", cuda_is_available() ? "GPU is available!" : "GPU is not available!",
                cuda_devices_summary().c_str());
    // PyTorch: device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    const Device device = device_name == "auto" ? default_device() : Device(device_name);

    // PyTorch: model = SimpleModel().to(device)   (torch.manual_seed fixes the weights)
    manual_seed(seed);
    SimpleModel model;
    model.to(device);

    // PyTorch: dataset = TensorDataset(torch.randn(100, 10), torch.randint(0, 2, (100,)))
    //          loader = DataLoader(dataset, batch_size=10, shuffle=True)
    auto dataset = data::make_random_classification(100, 10, 2, seed);
    data::DataLoader loader(dataset, data::DataLoaderOptions{.batch_size = batch_size, .shuffle = true, .seed = seed});

    // PyTorch: criterion = nn.CrossEntropyLoss(); optimizer = optim.SGD(model.parameters(), lr=0.01)
    nn::CrossEntropyLoss criterion;
    optim::SGD optimizer(model.parameters(), optim::SGDOptions{.lr = lr});

    // PyTorch: for epoch in range(10): running_loss = 0.0; for i, (inputs, labels) in enumerate(loader):
    for (int epoch = 0; epoch < epochs; ++epoch) {
      double running_loss = 0.0;
      int i = 0;
      for (data::Batch& batch : loader) {
        // PyTorch: inputs, labels = inputs.to(device), labels.to(device)
        Tensor inputs = batch.x.to(device), labels = batch.y.to(device);
        optimizer.zero_grad();                       // optimizer.zero_grad()
        Tensor outputs = model(inputs);              // outputs = model(inputs)
        Tensor loss = criterion(outputs, labels);    // loss = criterion(outputs, labels)
        loss.backward();                             // loss.backward()
        optimizer.step();                            // optimizer.step()
        running_loss += loss.item();                 // running_loss += loss.item()
        if (i % 10 == 9) {                           // if i % 10 == 9: print(...)
          std::printf("[%d, %5d] loss: %.3f\n", epoch + 1, i + 1, running_loss / 10);
          running_loss = 0.0;
        }
        ++i;
      }
    }
    std::printf("Finished Training\n");
  } catch (...) {
    // One line whatever was thrown, exit status 1 (samples/common/flags.h).
    std::cerr << samples::failure_line("seed_train", "training") << "\n";
    return 1;
  }
  return 0;
}
