// fashion_mnist: trains an MLP (or, with --model cnn, a small CNN) on Fashion-MNIST (Debian's dataset-fashion-mnist) and reports
// test accuracy every epoch. The flags map one to one onto TrainerConfig (trainer.h), where the
// defaults are chosen; this file only parses them. Examples:
//   fashion_mnist                                   # 10 epochs, SGD momentum + cosine, CPU
//   fashion_mnist --model cnn                       # the CNN, >= 92% in the same 10 epochs
//   fashion_mnist --checkpoint run.safetensors --metrics run.csv --plot run.png
//   fashion_mnist --resume run.safetensors --checkpoint run.safetensors   # continue that run
//   mpirun -n 2 fashion_mnist --checkpoint run.safetensors   # one process per device (docs/distributed.md)
#include <unistd.h>

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <vector>

#include "data/mnist.h"
#include "parallel/process_group.h"
#include "samples/common/flags.h"
#include "samples/common/input_files.h"
#include "samples/common/parallel_model.h"
#include "samples/common/precision.h"
#include "samples/fashion_mnist/trainer.h"

using namespace minidl;
using namespace minidl::fashion_mnist;

namespace {

// The IDX files data::load_fashion_mnist will read from `dir`, each checked as an input
// (samples/common/input_files.h): the plain file when it is a regular file, else the .gz one,
// as the loader picks; a path of either name that exists but is no regular file (a FIFO, a
// folder) is refused here rather than skipped. Files of neither name are left to the loader,
// whose error says how to install the dataset.
std::vector<samples::PathFlag> checked_idx_files(const std::string& dir) {
  constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 30;  // the training images are 47 MB
  std::vector<samples::PathFlag> files;
  for (const char* stem : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    const std::string plain = dir + "/" + stem, gz = plain + ".gz";
    struct stat st {};
    const bool plain_exists = ::stat(plain.c_str(), &st) == 0, plain_regular = plain_exists && S_ISREG(st.st_mode);
    const bool gz_exists = ::stat(gz.c_str(), &st) == 0, gz_regular = gz_exists && S_ISREG(st.st_mode);
    std::string path;
    if (plain_regular || (plain_exists && !gz_regular)) path = plain;
    else if (gz_exists) path = gz;
    if (path.empty()) continue;
    samples::check_input_file(path, "--data-dir", kMaxIdxBytes, "Fashion-MNIST's largest file is 47 MB");
    files.push_back({"--data-dir", path});
  }
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minidl: train an MLP or a CNN on Fashion-MNIST, evaluating test accuracy after every epoch"};
  TrainerConfig c;
  std::string hidden = "256,128", devices, progress = "auto", dtype = "fp32";
  app.add_option("--epochs", c.epochs, "passes over the training set")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "examples per batch (more than the training set: one batch of all)")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate (the schedule's starting value)")
      ->check(samples::non_negative_real())
      ->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd (with momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->check(samples::non_negative_real())->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "weight decay (L2 for SGD, decoupled for AdamW)")
      ->check(samples::non_negative_real())
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
  app.add_option("--dtype", dtype, "fp32, bf16 or fp16: the forward under autocast in that precision, float32 master "
                                   "weights (fp16 with loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--devices", devices, "comma-separated devices for data-parallel training, e.g. cuda:0,cuda:1");
  app.add_option("--seed", c.seed, "seed of the initial weights and of the shuffling")
      ->check(samples::seed_value())
      ->capture_default_str();
  app.add_option("--checkpoint", c.checkpoint, "save a safetensors checkpoint here after every epoch (atomically)");
  app.add_option("--checkpoint-every", c.checkpoint_every, "also save every N batches within an epoch")
      ->check(samples::non_negative_integer<int64_t>());
  app.add_option("--resume", c.resume, "continue the run saved in this checkpoint (same flags)");
  app.add_option("--metrics", c.metrics, "write epoch,train_loss,test_loss,test_acc,samples_per_s,lr to this CSV");
  app.add_option("--plot", c.plot, "draw the loss and accuracy curves into this PNG (needs gnuplot)");
  app.add_option("--data-dir", c.data_dir, "folder with the four Fashion-MNIST IDX files")
      ->default_str(data::default_fashion_mnist_dir());
  app.add_option("--workers", c.workers, "DataLoader worker threads")
      ->check(samples::non_negative_integer<int>())
      ->capture_default_str();
  app.add_option("--limit", c.limit, "train on the first N examples only (0: all; for quick runs)")
      ->check(samples::non_negative_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--test-limit", c.test_limit, "evaluate on the first N test examples only (0: all)")
      ->check(samples::non_negative_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--stop-after-batches", c.stop_after_batches,
                 "stop after N batches in this process, saving the checkpoint first (continue with --resume)")
      ->check(samples::non_negative_integer<int64_t>());
  app.add_option("--profile", c.profile.trace,
                 "profile --profile-steps training steps after 5 warm-up steps: print the per-op table and write a "
                 "Chrome trace (Perfetto, chrome://tracing) to this file");
  app.add_option("--profile-steps", c.profile.steps, "training steps the profiler records")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_flag("--profile-group-by-shape", c.profile.group_by_shape,
               "one table row per op and input shapes (torch.profiler's group_by_input_shape)");
  app.add_flag("--cuda-graph", c.cuda_graph,
               "capture the training step into a CUDA graph after the first and replay it for every full batch "
               "(the MLP with SGD on one CUDA device)");
  app.add_option("--progress", progress, "auto (a bar on a terminal, else one line per epoch), bar, lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  // Note [a diverged run stops] in trainer.cpp: the behaviour this text promises.
  app.footer(
      "A run whose loss becomes NaN or infinite (a diverged run: try a smaller --lr) stops at that batch with an "
      "error naming the epoch and batch, and exits with status 1. Nothing is saved after the divergence: the "
      "--checkpoint file keeps its last save, whose numbers are all finite, and --resume reads it. A checkpoint "
      "holding NaN or Inf weights is refused, naming the tensor. Output folders (--checkpoint, --metrics, --plot) "
      "must exist and be writable; they are checked before training starts, as are the inputs (--resume and the "
      "IDX files of --data-dir must be regular, readable files) and that no output names an input or another output "
      "(--checkpoint X --resume X continues a run in place).");
  if (const int status = samples::parse_flags(app, argc, argv, "fashion_mnist"); status >= 0) return status;

  int world = 1, rank = 0;
  std::string doing = "checking the flags";  // what an out-of-memory error says was under way
  try {
    // The files the flags name, on every process before anything is read or built: inputs are
    // regular readable files (never a FIFO, which would block), an existing output is a regular
    // file, and no output overwrites an input or another output. --checkpoint X --resume X continues a run in place.
    const std::vector<samples::PathFlag> idx =
        checked_idx_files(c.data_dir.empty() ? data::default_fashion_mnist_dir() : c.data_dir);
    if (!c.resume.empty()) {
      const uint64_t available = samples::available_memory_bytes();
      samples::check_input_file(c.resume, "--resume", available > 0 ? available : UINT64_MAX,
                                "the memory available: a checkpoint is read whole");
    }
    const std::vector<samples::PathFlag> outputs{
        {"--checkpoint", c.checkpoint}, {"--metrics", c.metrics}, {"--plot", c.plot}, {"--profile", c.profile.trace}};
    for (const samples::PathFlag& output : outputs) samples::check_output_file(output.path, output.flag);
    samples::check_no_alias(outputs, idx);
    samples::check_no_alias(std::vector<samples::PathFlag>(outputs.begin() + 1, outputs.end()), {{"--resume", c.resume}});

    // Started by an MPI launcher with several processes: one process per device, rank 0 speaks.
    if (parallel::launched_with_several_processes()) {
      c.group = samples::process_group_for(c.device);  // --device honoured: cpu, cuda (cuda:<local rank>) or auto
      world = c.group->world_size();
      rank = c.group->rank();
      if (rank != 0) progress = "none";
    }
    c.hidden = samples::parse_hidden_sizes(hidden);
    c.devices = samples::split_flag_list(devices, "--devices", "cuda:0,cuda:1");
    c.dtype = samples::parse_precision(dtype);
    if (progress == "auto") c.progress = isatty(STDOUT_FILENO) ? ProgressStyle::Bar : ProgressStyle::Lines;
    else if (progress == "bar") c.progress = ProgressStyle::Bar;
    else if (progress == "lines") c.progress = ProgressStyle::Lines;
    else c.progress = ProgressStyle::Quiet;

    doing = "loading Fashion-MNIST";
    const Datasets data = load_datasets(c);
    if (c.progress != ProgressStyle::Quiet) {
      std::cout << "Fashion-MNIST: " << data.train->size() << " training and " << data.test->size()
                << " test examples; " << (c.model == "cnn" ? "CNN " + cnn_architecture_name() : "MLP " + architecture_name(c.hidden)) << ", " << c.optimizer << ", lr " << c.lr
                << ", batch " << c.batch_size << ", schedule " << c.schedule << "\n";
      if (c.device.rfind("cuda", 0) == 0 || (c.device == "auto" && cuda_is_available()))
        std::cout << "CUDA: " << cuda_devices_summary() << "\n";
      if (world > 1)
        std::cout << world << " processes (" << c.group->backend_name() << "), each " << c.group->device()
                  << ", a shard of every batch\n";
    }
    doing = "training";
    const TrainingResult result = train(c, data, std::cout);
    if (!result.history.empty() && c.progress != ProgressStyle::Quiet) {
      std::cout << "final test accuracy " << 100 * result.history.back().test_acc << "% after epoch "
                << result.history.back().epoch << "\n";
    }
  } catch (...) {
    // One line whatever was thrown (samples/common/flags.h), exit status 1. Over several
    // processes an error may be this rank's alone while the others wait in a collective: end
    // the whole job (Note [a failed rank] in parallel/process_group.h). The group's set-up may
    // fail on some ranks only (before world is known): the launcher's word decides, not world.
    const std::string shown = samples::failure_line("fashion_mnist", doing, "lower --batch-size or the layer sizes");
    if (world > 1 || parallel::launched_with_several_processes())
      parallel::abort_job(1, shown + " (rank " + std::to_string(rank) + ")");
    std::cerr << shown << "\n";
    return 1;
  }
  return 0;
}
