// The Fashion-MNIST trainer: config checks, the model, optimizer and schedule, and the task the
// shared training loop runs (samples/common/train_loop.h: resume, epochs, evaluation,
// checkpoints, divergence, profiler, progress).
#include "samples/fashion_mnist/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/cuda_graph.h"
#include "core/ops.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/pool.h"
#include "nn/loss.h"
#include "optim/optim.h"
#include "parallel/distributed_data_parallel.h"
#include "samples/fashion_mnist/checkpoint.h"
#include "samples/fashion_mnist/metrics.h"
#include "samples/common/input_files.h"
#include "samples/common/parallel_model.h"
#include "samples/common/precision.h"
#include "samples/common/train_loop.h"

namespace minidl::fashion_mnist {

namespace {

constexpr int64_t kInputs = 784, kClasses = 10;
constexpr int64_t kEvalBatch = 1000;

// "256,128" with sep ',' (appends piecewise: GCC 12 warns falsely on "lit" + std::string).
std::string join_sizes(const std::vector<int64_t>& sizes, char sep) {
  std::string s;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(sizes[i]);
  }
  return s;
}

// `writes`: this process writes the outputs (rank 0 of several, or the only one); only a
// writer checks their folders, so ranks on other machines need not see them.
void check_config(const TrainerConfig& c, bool writes) {
  MINIDL_CHECK(c.epochs > 0, "fashion_mnist: --epochs must be positive, got ", c.epochs);
  MINIDL_CHECK(c.batch_size > 0, "fashion_mnist: --batch-size must be positive, got ", c.batch_size);
  MINIDL_CHECK(std::isfinite(c.lr) && c.lr >= 0, "fashion_mnist: --lr must be a finite number >= 0, got ", c.lr);
  MINIDL_CHECK(c.optimizer == "sgd" || c.optimizer == "adamw", "fashion_mnist: --optimizer must be sgd or adamw, got '",
               c.optimizer, "'");
  MINIDL_CHECK(c.schedule == "cosine" || c.schedule == "step" || c.schedule == "none",
               "fashion_mnist: --schedule must be cosine, step or none, got '", c.schedule, "'");
  for (int64_t h : c.hidden)
    MINIDL_CHECK(h > 0, "fashion_mnist: --hidden sizes must be positive, got ", h, " in ", architecture_name(c.hidden));
  MINIDL_CHECK(c.model == "mlp" || c.model == "cnn", "fashion_mnist: --model must be mlp or cnn, got '", c.model, "'");
  MINIDL_CHECK(c.workers >= 0, "fashion_mnist: --workers must be >= 0, got ", c.workers);
  MINIDL_CHECK(c.limit >= 0 && c.test_limit >= 0, "fashion_mnist: --limit must be >= 0, got ", c.limit);
  MINIDL_CHECK(c.checkpoint_every >= 0, "fashion_mnist: --checkpoint-every must be >= 0, got ", c.checkpoint_every);
  MINIDL_CHECK(c.checkpoint_every == 0 || !c.checkpoint.empty(),
               "fashion_mnist: --checkpoint-every needs --checkpoint PATH to save to");
  MINIDL_CHECK(!c.cuda_graph || (c.model == "mlp" && c.optimizer == "sgd" && c.devices.size() <= 1),
               "fashion_mnist: --cuda-graph captures the MLP's step with SGD on one device (got --model ", c.model,
               ", --optimizer ", c.optimizer, ", ", c.devices.size() > 1 ? "several --devices" : "one device",
               "): the CNN's dropout draws random numbers and AdamW counts its steps on the host, which a replay "
               "would repeat unchanged");
  MINIDL_CHECK(!c.cuda_graph || c.dtype == DType::Float32, "fashion_mnist: --cuda-graph with --dtype ",
               samples::precision_name(c.dtype), ": the captured step is float32's (",
               c.dtype == DType::Float16
                   ? "and with fp16 the loss scaler decides on the host, after each backward, whether the step runs "
                     "(optim/grad_scaler.h), which a replayed graph cannot wait for"
                   : "capturing it under autocast is not done yet",
               "); use --cuda-graph with fp32, or --dtype ", samples::precision_name(c.dtype), " without it");
  MINIDL_CHECK(c.stop_after_batches >= 0, "fashion_mnist: --stop-after-batches must be >= 0, got ",
               c.stop_after_batches);
  if (!writes) return;
  samples::check_output_folder(c.checkpoint, "--checkpoint");
  samples::check_output_folder(c.metrics, "--metrics");
  samples::check_output_folder(c.plot, "--plot");
}

Device resolve_device(const TrainerConfig& c) { return samples::resolve_device(c.devices.empty() ? c.device : c.devices[0]); }

// --devices a,b,...: data-parallel replicas on each (parallel::DataParallel checks the list).
std::vector<Device> parallel_devices(const TrainerConfig& c) {
  std::vector<Device> devices;
  for (const std::string& d : c.devices) devices.push_back(samples::resolve_device(d));
  return devices;
}

// What a checkpoint must agree with to be continued by this config. --epochs is not here: a
// longer run continues a shorter one (Note [a longer run keeps its schedule] in
// samples/common/train_loop.cpp).
std::map<std::string, std::string> hyperparameters_of(const TrainerConfig& c) {
  std::map<std::string, std::string> hp = {
      {"architecture", c.model == "cnn" ? cnn_architecture_name() : architecture_name(c.hidden)},
      {"optimizer", c.optimizer},
      {"lr", io::format_exact(c.lr)},
      {"weight_decay", io::format_exact(c.weight_decay)},
      {"schedule", c.schedule},
      {"batch_size", std::to_string(c.batch_size)},
      {"seed", std::to_string(c.seed)},
      {"limit", std::to_string(c.limit)},
  };
  if (c.optimizer == "sgd") hp["momentum"] = io::format_exact(c.momentum);
  if (c.dtype != DType::Float32) hp["dtype"] = samples::precision_name(c.dtype);  // float32 runs keep their keys
  return hp;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay});
  }
  return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

// The schedule over `epochs` epochs (--epochs in a new run; a resumed run's own horizon).
std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainerConfig& c, optim::Optimizer& opt, int64_t epochs) {
  if (c.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, epochs);
  if (c.schedule == "step") return std::make_unique<optim::StepLR>(opt, std::max<int64_t>(1, epochs / 3), 0.1);
  return nullptr;
}

struct Evaluation {
  double loss = 0, accuracy = 0;
};

// Mean cross-entropy and accuracy over the whole test set, in batches, without autograd.
Evaluation evaluate_model(nn::Sequential& model, const data::TensorDataset& test, Device device,
                          const samples::MixedPrecision& precision) {
  NoGradGuard no_grad;
  const auto cast = precision.autocast(device);  // evaluated in the precision it trains in
  model.eval();
  nn::CrossEntropyLoss summed(ops::Reduction::Sum);
  const int64_t n = test.size();
  double loss_sum = 0, correct = 0;
  for (int64_t start = 0; start < n; start += kEvalBatch) {
    const int64_t len = std::min(kEvalBatch, n - start);
    const Tensor x = test.features().narrow(0, start, len).to(device);  // [len, 784]
    const Tensor y = test.labels().narrow(0, start, len).to(device);    // [len]
    const Tensor logits = model(x);                                     // [len, 10]
    loss_sum += summed(logits, y).item();
    correct += ops::eq(logits.argmax(1), y).sum().item();
  }
  model.train();
  return {loss_sum / static_cast<double>(n), correct / static_cast<double>(n)};
}

// Over several processes: flags every rank must share (a clear error naming the first that
// differs, on every rank), and batches that every rank gets rows of.
void check_processes(const TrainerConfig& c, parallel::ProcessGroup& group, int64_t train_size) {
  MINIDL_CHECK(c.devices.size() <= 1, "fashion_mnist: --devices (data parallel in one process) and several processes ",
               "(", group.world_size(), ", started by the MPI launcher) do not go together; start one process per device");
  std::vector<std::string> lines;
  for (const auto& [key, value] : hyperparameters_of(c)) lines.push_back(key + " " + value);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"epochs", std::to_string(c.epochs)},         {"batch-size", std::to_string(c.batch_size)},
           {"seed", std::to_string(c.seed)},             {"training examples", std::to_string(train_size)},
           {"resume", c.resume},                         {"stop-after-batches", std::to_string(c.stop_after_batches)},
           {"checkpoint-every", std::to_string(c.checkpoint_every)}})
    lines.push_back(key + " " + value);
  parallel::check_same_on_every_rank(group, "fashion_mnist: the configuration", lines);
  const int64_t world = group.world_size(), last = train_size % c.batch_size;
  MINIDL_CHECK(c.batch_size >= world && (last == 0 || last >= world), "fashion_mnist: a batch of ",
               c.batch_size < world ? c.batch_size : last, " examples (",
               c.batch_size < world ? "--batch-size" : "the last of the epoch", ") cannot be shared by ", world,
               " processes, each needs at least one example; choose --batch-size (and --limit) so that every batch "
               "has at least ", world);
}

std::string epoch_line(const EpochMetrics& m, int64_t epochs, double seconds) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "epoch %lld/%lld  train loss %.4f  test loss %.4f  test acc %.2f%%  %.0f samples/s  %.2f s  lr %.4g",
                static_cast<long long>(m.epoch), static_cast<long long>(epochs), m.train_loss, m.test_loss,
                100 * m.test_acc, m.samples_per_s, seconds, m.lr);
  return buf;
}

}  // namespace

std::string architecture_name(const std::vector<int64_t>& hidden) {
  std::vector<int64_t> sizes = {kInputs};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(kClasses);
  return join_sizes(sizes, '-');
}

std::shared_ptr<nn::Sequential> make_mlp(const std::vector<int64_t>& hidden) {
  auto model = std::make_shared<nn::Sequential>();
  int64_t width = kInputs;
  for (int64_t h : hidden) {
    model->push_back(std::make_shared<nn::Linear>(width, h));
    model->push_back(std::make_shared<nn::ReLU>());
    width = h;
  }
  model->push_back(std::make_shared<nn::Linear>(width, kClasses));
  return model;
}

std::shared_ptr<nn::Sequential> make_cnn() {
  const nn::Conv2dOptions same_size{.padding = {1, 1}};
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Unflatten>(1, std::vector<int64_t>{1, 28, 28}));  // [N, 1, 28, 28]
  model->push_back(std::make_shared<nn::Conv2d>(1, 32, Size2{3, 3}, same_size));           // [N, 32, 28, 28]
  model->push_back(std::make_shared<nn::BatchNorm2d>(32));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(Size2{2, 2}));                           // [N, 32, 14, 14]
  model->push_back(std::make_shared<nn::Conv2d>(32, 64, Size2{3, 3}, same_size));          // [N, 64, 14, 14]
  model->push_back(std::make_shared<nn::BatchNorm2d>(64));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(Size2{2, 2}));                           // [N, 64, 7, 7]
  model->push_back(std::make_shared<nn::Flatten>());                                         // [N, 3136]
  model->push_back(std::make_shared<nn::Dropout>(0.25));
  model->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(128, kClasses));                             // [N, 10]
  return model;
}

std::string cnn_architecture_name() { return "cnn-c32-c64-f128-10"; }

std::shared_ptr<nn::Sequential> make_model(const TrainerConfig& config) {
  return config.model == "cnn" ? make_cnn() : make_mlp(config.hidden);
}

Datasets load_datasets(const TrainerConfig& config) {
  const std::string dir = config.data_dir.empty() ? data::default_fashion_mnist_dir() : config.data_dir;
  data::MnistOptions train_opts, test_opts;
  train_opts.limit = config.limit;
  test_opts.limit = config.test_limit;
  Datasets d;
  d.train = std::make_shared<data::TensorDataset>(data::load_fashion_mnist(data::MnistSplit::Train, train_opts, dir));
  d.test = std::make_shared<data::TensorDataset>(data::load_fashion_mnist(data::MnistSplit::Test, test_opts, dir));
  return d;
}

namespace {

// Note [a shard of every batch]: over several processes every rank builds the same batches
// (the loader's order is a function of (seed, epoch)) and trains on its shard of each
// (samples/common/parallel_model.h, parallel/batch_shard.h), so the loader position, hence the
// checkpoint, is the same on every rank, and so is the generator's state (Note [random draws of
// a batch shard] in core/generator.h).
//
// Note [what a bit-identical resume needs]: on the CPU every kernel sums in a fixed order, so
// a step depends only on the parameters, the optimizer state, the lr and the batch. The
// checkpoint holds the first three exactly; the batch is fixed by the loader position, since an
// epoch's order is a function of (seed, epoch). The default generator draws the initial weights
// and the CNN's dropout masks; its state is saved too. The interrupted epoch's running loss sum
// travels along (the training loop's), so its train_loss is the same number.
class FashionTask final : public samples::TrainingTask {
 public:
  FashionTask(const TrainerConfig& config, const Datasets& data) : config_(config), data_(data) {
    check_config(config_, !config_.group || config_.group->rank() == 0);
    MINIDL_CHECK(data_.train && data_.test, "fashion_mnist: train: the datasets are not loaded");
    const int world = config_.group ? config_.group->world_size() : 1;
    if (world > 1) check_processes(config_, *config_.group, data_.train->size());
    device_ = world > 1 ? config_.group->device() : resolve_device(config_);
    MINIDL_CHECK(!config_.cuda_graph || (world == 1 && device_.is_cuda()), "fashion_mnist: --cuda-graph needs one ",
                 "process on a CUDA device; this run has ", world, " process(es) on ", device_);

    manual_seed(config_.seed);
    model_ = make_model(config_);
    model_->to(device_);
    parallel_ = std::make_unique<samples::ParallelModel>(model_, parallel_devices(config_),
                                                         world > 1 ? config_.group : nullptr,
                                                         samples::RankBatches::ShardOfGlobalBatch);
    names_ = model_->named_parameters();
    optimizer_ = make_optimizer(config_, model_->parameters());
    scheduler_ = make_scheduler(config_, *optimizer_, config_.epochs);
    loader_ = std::make_unique<data::DataLoader>(data_.train, data::DataLoaderOptions{.batch_size = config_.batch_size,
                                                                                     .shuffle = true,
                                                                                     .num_workers = config_.workers,
                                                                                     .seed = config_.seed,
                                                                                     .pin_memory = device_.is_cuda()});
  }

  int64_t batches_per_epoch() const { return loader_->size(); }
  bool lead() const { return parallel_->lead(); }
  std::shared_ptr<nn::Sequential> model() const { return model_; }
  const std::vector<EpochMetrics>& history() const { return history_; }

  io::TrainingState training_state() override {
    return {*model_, *optimizer_, names_, scheduler_.get(), &precision_.scaler()};
  }
  std::map<std::string, std::string> hyperparameters() const override { return hyperparameters_of(config_); }

  // The next batch of the loader (a new epoch's begin() after the last one ended), one step on it.
  samples::StepResult train_step() override {
    if (!batch_.has_value()) batch_ = loader_->begin();
    else ++*batch_;
    const data::Batch& b = **batch_;
    const double loss = step(b);
    if (loader_->state().batch == 0) batch_.reset();  // the epoch's last batch: the next step begins the next epoch
    return {loss, b.y.size(0)};
  }

  void end_epoch(int64_t) override {
    if (scheduler_) scheduler_->step();
  }

  samples::NamedValues evaluate(const samples::EvalAt&) override {
    const Evaluation e = evaluate_model(*model_, *data_.test, device_, precision_);
    return {{"test loss", e.loss}, {"test accuracy", e.accuracy}};
  }

  std::string record(const samples::EvalAt& at, const samples::NamedValues& values) override {
    EpochMetrics m;
    m.epoch = at.epoch + 1;
    m.train_loss = at.train_loss;
    m.test_loss = values.empty() ? 0.0 : values[0].second;
    m.test_acc = values.empty() ? 0.0 : values[1].second;
    m.samples_per_s = at.seconds > 0 ? static_cast<double>(at.examples) / at.seconds : 0.0;
    m.lr = at.lr;
    history_.push_back(m);
    if (lead() && !config_.metrics.empty()) write_metrics_csv(config_.metrics, history_);
    return epoch_line(m, config_.epochs, at.seconds);
  }

  std::string where(int64_t step) const override {
    const int64_t per_epoch = std::max<int64_t>(batches_per_epoch(), 1);
    const int64_t epoch = step > 0 && step % per_epoch == 0 ? step / per_epoch : step / per_epoch + 1;
    const int64_t batch = step > 0 && step % per_epoch == 0 ? per_epoch : step % per_epoch;
    return "epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch);
  }
  double lr() const override { return optimizer_->param_groups()[0].lr; }

  void save_state(io::Checkpoint& ck) const override { write_run_entries({loader_->state(), history_}, ck.metadata); }

  // Note [a longer run keeps its schedule]: the schedule is rebuilt with the checkpoint's own
  // horizon (t_max or step_size), so a run resumed with a larger --epochs continues the curve it
  // started on.
  void prepare_resume(io::Checkpoint& ck) override {
    if (!scheduler_ || !ck.scheduler) return;  // a mismatch is refused by restore_training_state
    const auto& hp = ck.scheduler->hyperparameters;
    auto stored = [&](const char* key) {
      auto it = hp.find(key);
      MINIDL_CHECK(it != hp.end() && it->second >= 1 && it->second <= 1e15, "checkpoint ", config_.resume,
                   ": the schedule's ", key, " is missing or out of range");
      return static_cast<int64_t>(it->second);
    };
    if (config_.schedule == "cosine" && ck.scheduler->scheduler == "CosineAnnealingLR")
      scheduler_ = std::make_unique<optim::CosineAnnealingLR>(*optimizer_, stored("t_max"));
    else if (config_.schedule == "step" && ck.scheduler->scheduler == "StepLR")
      scheduler_ = std::make_unique<optim::StepLR>(*optimizer_, stored("step_size"), 0.1);
  }

  void load_state(const io::Checkpoint& ck) override {
    RunEntries e = read_run_entries(ck.metadata, config_.resume);
    loader_->load_state(e.loader);
    history_ = std::move(e.history);
    int64_t position = 0;  // the loader's position in steps, which must be the checkpoint's step
    const bool overflow = __builtin_mul_overflow(e.loader.epoch, batches_per_epoch(), &position) ||
                          __builtin_add_overflow(position, e.loader.batch, &position);
    MINIDL_CHECK(!overflow && position == ck.step, "checkpoint ", config_.resume, ": its step ", ck.step,
                 " does not match its loader position (epoch ", e.loader.epoch, ", batch ", e.loader.batch, ")");
  }

 private:
  // One training step on a global batch; returns the global batch's mean loss.
  double step(const data::Batch& batch) {
    if (config_.cuda_graph && eager_steps_ > 0 && batch.y.size(0) == config_.batch_size) return graph_step(batch);
    ++eager_steps_;
    const Tensor x = batch.x.to(device_), y = batch.y.to(device_);    // the global batch [n, 784], [n]
    const parallel::BatchShard shard = parallel_->shard(y.size(0));  // this process's rows of it
    optimizer_->zero_grad();
    Tensor loss;
    {
      const auto cast = precision_.autocast(device_);  // --dtype bf16/fp16: the forward only
      loss = criterion_(parallel_->forward(x, shard), shard.of(y));
    }
    // Over replicas or processes: the global batch's gradient when it returns (times the loss
    // scale for fp16; the scaler divides it out and skips a step whose gradients overflowed).
    precision_.scaler().scale(loss).backward();
    precision_.scaler().step(*optimizer_);
    precision_.scaler().update();
    return parallel_->global_mean(loss);
  }

  // Note [a captured step]: with --cuda-graph the step — zero_grad, forward, loss, backward, the
  // SGD update — is captured once into a CUDA graph on static inputs, and each batch is copied
  // into those inputs and the graph replayed: one launch instead of dozens. What a replay repeats
  // unchanged is fixed at capture, so: the first step is eager (SGD's first step with momentum
  // starts its buffers); a batch of another size (the epoch's last) is an eager step; and the
  // graph is captured again when the schedule has changed the learning rate, a kernel argument
  // frozen in the graph. The loss is read back after each replay, as after each eager step.
  double graph_step(const data::Batch& batch) {
    const double lr = optimizer_->param_groups()[0].lr;
    if (!graph_.captured() || lr != graph_lr_) {
      if (!static_x_.defined()) {
        static_x_ = empty(batch.x.shape(), TensorOptions(batch.x.dtype(), device_));
        static_y_ = empty(batch.y.shape(), TensorOptions(batch.y.dtype(), device_));
      }
      // A new capture replaces the old graph, whose memory goes back first.
      graph_.capture(device_, [&] {
        optimizer_->zero_grad();
        static_loss_ = criterion_((*model_)(static_x_), static_y_);
        static_loss_.backward();
        optimizer_->step();
      });
      graph_lr_ = lr;
    }
    static_x_.copy_(batch.x);
    static_y_.copy_(batch.y);
    graph_.replay();
    return static_loss_.item();
  }

  const TrainerConfig& config_;  // the caller's, which must outlive the task (train() keeps them)
  const Datasets& data_;
  Device device_ = Device::cpu();
  std::shared_ptr<nn::Sequential> model_;
  std::unique_ptr<samples::ParallelModel> parallel_;  // the model, or DataParallel / DDP over it
  optim::NamedParameters names_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LRScheduler> scheduler_;
  samples::MixedPrecision precision_{config_.dtype};
  std::unique_ptr<data::DataLoader> loader_;
  std::optional<data::DataLoader::Iterator> batch_;  // the epoch in progress
  nn::CrossEntropyLoss criterion_;
  std::vector<EpochMetrics> history_;
  // --cuda-graph: the graph, its static inputs and loss, the lr it was captured with, and the
  // eager steps taken so far (SGD's first step comes before any capture).
  CUDAGraph graph_;
  Tensor static_x_, static_y_, static_loss_;
  double graph_lr_ = 0;
  int64_t eager_steps_ = 0;
};

}  // namespace

TrainingResult train(const TrainerConfig& config, const Datasets& data, std::ostream& out) {
  FashionTask task(config, data);
  const int64_t per_epoch = task.batches_per_epoch();
  MINIDL_CHECK(per_epoch > 0, "fashion_mnist: the training set has no batch (", data.train->size(), " examples)");
  MINIDL_CHECK(config.epochs <= INT64_MAX / per_epoch, "fashion_mnist: --epochs ", config.epochs, " of ", per_epoch,
               " batches overflows the step count");
  samples::LoopOptions options{
      .program = "fashion_mnist",
      .steps = config.epochs * per_epoch,
      .steps_flag = "--epochs",
      .steps_per_epoch = per_epoch,
      .checkpoint_every = config.checkpoint_every,
      .stop_after = config.stop_after_batches,
      .checkpoint = config.checkpoint,
      .resume = config.resume,
      .lead = task.lead(),
      .progress = config.progress,
      .profile = config.profile};
  const samples::LoopResult r = samples::run_training(std::move(options), task, out);
  TrainingResult result;
  result.history = task.history();
  result.finished = r.finished;
  result.model = task.model();
  if (task.lead() && !config.plot.empty()) {
    const std::string why = plot_metrics(config.plot, result.history);
    if (config.progress != ProgressStyle::Quiet) out << "plot: " << (why.empty() ? config.plot : why) << "\n";
  }
  return result;
}

}  // namespace minidl::fashion_mnist
