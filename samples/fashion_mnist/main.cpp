// fashion_mnist: trains an MLP (or, with --model cnn, a small CNN) on Fashion-MNIST (Debian's dataset-fashion-mnist) and reports
// test accuracy every epoch. The flags map one to one onto TrainerConfig (trainer.h), where the
// defaults are chosen; this file only parses them. Examples:
//   fashion_mnist                                   # 10 epochs, SGD momentum + cosine, CPU
//   fashion_mnist --model cnn                       # the CNN, >= 92% in the same 10 epochs
//   fashion_mnist --checkpoint run.safetensors --metrics run.csv --plot run.png
//   fashion_mnist --resume run.safetensors --checkpoint run.safetensors   # continue that run
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <sstream>

#include "data/mnist.h"
#include "samples/fashion_mnist/trainer.h"

using namespace minidl;
using namespace minidl::fashion_mnist;

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// "256,128" -> {256, 128}; "" or "none" -> {} (a linear model).
std::vector<int64_t> parse_hidden(const std::string& text) {
  std::vector<int64_t> out;
  if (text == "none") return out;
  for (const std::string& item : split_list(text)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MINIDL_CHECK(used == item.size() && v > 0, "fashion_mnist: --hidden expects positive sizes like 256,128; got '",
                 item, "' in '", text, "'");
    out.push_back(v);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minidl: train an MLP or a CNN on Fashion-MNIST, evaluating test accuracy after every epoch"};
  TrainerConfig c;
  std::string hidden = "256,128", devices, progress = "auto";
  app.add_option("--epochs", c.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "examples per batch")->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (the schedule's starting value)")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd (with momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "weight decay (L2 for SGD, decoupled for AdamW)")
      ->capture_default_str();
  app.add_option("--schedule", c.schedule, "lr schedule per epoch: cosine (to 0 at the last epoch), step (x0.1 "
                                           "every epochs/3) or none")
      ->check(CLI::IsMember({"cosine", "step", "none"}))
      ->capture_default_str();
  app.add_option("--hidden", hidden, "hidden layer sizes, comma-separated ('none': no hidden layer)")
      ->capture_default_str();
  app.add_option("--model", c.model, "mlp (--hidden sizes) or cnn (two conv-BN-ReLU-pool blocks; see trainer.h)")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app.add_option("--device", c.device, "cpu, cuda, cuda:N or auto (CUDA when available)")->capture_default_str();
  app.add_option("--devices", devices, "comma-separated devices for data-parallel training, e.g. cuda:0,cuda:1");
  app.add_option("--seed", c.seed, "seed of the initial weights and of the shuffling")->capture_default_str();
  app.add_option("--checkpoint", c.checkpoint, "save a safetensors checkpoint here after every epoch (atomically)");
  app.add_option("--checkpoint-every", c.checkpoint_every, "also save every N batches within an epoch");
  app.add_option("--resume", c.resume, "continue the run saved in this checkpoint (same flags)");
  app.add_option("--metrics", c.metrics, "write epoch,train_loss,test_loss,test_acc,samples_per_s,lr to this CSV");
  app.add_option("--plot", c.plot, "draw the loss and accuracy curves into this PNG (needs gnuplot)");
  app.add_option("--data-dir", c.data_dir, "folder with the four Fashion-MNIST IDX files")
      ->default_str(data::default_fashion_mnist_dir());
  app.add_option("--workers", c.workers, "DataLoader worker threads")->capture_default_str();
  app.add_option("--limit", c.limit, "train on the first N examples only (0: all; for quick runs)")
      ->capture_default_str();
  app.add_option("--test-limit", c.test_limit, "evaluate on the first N test examples only (0: all)")
      ->capture_default_str();
  app.add_option("--stop-after-batches", c.stop_after_batches,
                 "stop after N batches in this process, saving the checkpoint first (continue with --resume)");
  app.add_option("--progress", progress, "auto (a bar on a terminal, else one line per epoch), bar, lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    c.hidden = parse_hidden(hidden);
    c.devices = split_list(devices);
    if (progress == "auto") c.progress = isatty(STDOUT_FILENO) ? ProgressStyle::Bar : ProgressStyle::Lines;
    else if (progress == "bar") c.progress = ProgressStyle::Bar;
    else if (progress == "lines") c.progress = ProgressStyle::Lines;
    else c.progress = ProgressStyle::Quiet;

    const Datasets data = load_datasets(c);
    if (c.progress != ProgressStyle::Quiet) {
      std::cout << "Fashion-MNIST: " << data.train->size() << " training and " << data.test->size()
                << " test examples; " << (c.model == "cnn" ? "CNN " + cnn_architecture_name() : "MLP " + architecture_name(c.hidden)) << ", " << c.optimizer << ", lr " << c.lr
                << ", batch " << c.batch_size << ", schedule " << c.schedule << "\n";
    }
    const TrainingResult result = train(c, data, std::cout);
    if (!result.history.empty() && c.progress != ProgressStyle::Quiet) {
      std::cout << "final test accuracy " << 100 * result.history.back().test_acc << "% after epoch "
                << result.history.back().epoch << "\n";
    }
  } catch (const Error& e) {
    std::cerr << "fashion_mnist: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
