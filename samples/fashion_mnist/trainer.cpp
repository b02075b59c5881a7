// The Fashion-MNIST trainer: config checks, the model, optimizer and schedule, the epoch loop
// with its evaluation, and the checkpoint round trip that makes --resume continue the same run.
//
// Note [what a bit-identical resume needs]: on the CPU every kernel sums in a fixed order, so
// a step depends only on the parameters, the optimizer state, the lr and the batch. The
// checkpoint holds the first three exactly; the batch is fixed by the loader position, since an
// epoch's order is a function of (seed, epoch). The default generator only draws the initial
// weights, but its state is saved too so that anything drawing later stays reproducible. The
// interrupted epoch's running loss sum travels along, so its train_loss is the same number.
#include "samples/fashion_mnist/trainer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
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
#include "samples/fashion_mnist/progress.h"

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

// An output file the run will write (--checkpoint, --metrics, --plot) must have an existing,
// writable folder and must not be a folder itself: checked before training, not found out at
// the end of the first epoch.
void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  MINIDL_CHECK(!p.filename().empty() && !std::filesystem::is_directory(p, ec), "fashion_mnist: ", flag, " ", path,
               " names a folder; expected a file path");
  MINIDL_CHECK(std::filesystem::is_directory(dir, ec), "fashion_mnist: ", flag, " ", path, ": the folder ",
               dir.string(), " does not exist (create it first)");
  MINIDL_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "fashion_mnist: ", flag, " ", path, ": the folder ",
               dir.string(), " is not writable: ", std::strerror(errno));
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
  MINIDL_CHECK(c.stop_after_batches >= 0, "fashion_mnist: --stop-after-batches must be >= 0, got ",
               c.stop_after_batches);
  if (!writes) return;
  check_output_path(c.checkpoint, "--checkpoint");
  check_output_path(c.metrics, "--metrics");
  check_output_path(c.plot, "--plot");
}

Device resolve_device(const TrainerConfig& c) {
  const std::string& name = c.devices.empty() ? c.device : c.devices[0];
  return name == "auto" ? default_device() : Device(name);
}

// --devices a,b,...: data-parallel replicas on each (parallel::DataParallel checks the list).
std::vector<Device> parallel_devices(const TrainerConfig& c) {
  std::vector<Device> devices;
  for (const std::string& d : c.devices) devices.push_back(d == "auto" ? default_device() : Device(d));
  return devices;
}

// What a checkpoint must agree with to be continued by this config.
std::map<std::string, std::string> hyperparameters_of(const TrainerConfig& c) {
  std::map<std::string, std::string> hp = {
      {"architecture", c.model == "cnn" ? cnn_architecture_name() : architecture_name(c.hidden)},
      {"optimizer", c.optimizer},
      {"lr", format_exact(c.lr)},
      {"weight_decay", format_exact(c.weight_decay)},
      {"schedule", c.schedule},
      {"epochs", std::to_string(c.epochs)},
      {"batch_size", std::to_string(c.batch_size)},
      {"seed", std::to_string(c.seed)},
      {"limit", std::to_string(c.limit)},
  };
  if (c.optimizer == "sgd") hp["momentum"] = format_exact(c.momentum);
  return hp;
}

// Refuses a checkpoint of another model, or one trained with other hyperparameters (the run
// would not be the one it claims to continue). Without a schedule, --epochs may grow.
void check_resumable(const Checkpoint& ck, const TrainerConfig& c) {
  const auto own = hyperparameters_of(c);
  auto saved = [&](const std::string& key) {
    auto it = ck.hyperparameters.find(key);
    return it == ck.hyperparameters.end() ? std::string("(none)") : it->second;
  };
  MINIDL_CHECK(saved("architecture") == own.at("architecture"), "fashion_mnist: refusing to resume from ", c.resume,
               ": it holds a model ", saved("architecture"), " and this run builds ", own.at("architecture"),
               " (--model ", c.model, ", --hidden ", c.hidden.empty() ? std::string("none") : join_sizes(c.hidden, ','),
               "); pass the checkpoint's --model and --hidden or start without --resume");
  std::vector<std::string> differ;
  for (const auto& [key, value] : own) {
    if (key == "architecture" || (key == "epochs" && c.schedule == "none")) continue;
    if (saved(key) != value) differ.push_back(key + " " + saved(key) + " in the checkpoint, " + value + " here");
  }
  if (!differ.empty()) {
    std::ostringstream os;
    os << "fashion_mnist: refusing to resume from " << c.resume << ": it was trained with other hyperparameters (";
    for (size_t i = 0; i < differ.size(); ++i) os << (i ? "; " : "") << differ[i];
    os << "); resume with the flags it was started with, or start without --resume";
    throw Error(os.str());
  }
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainerConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay});
  }
  return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainerConfig& c, optim::Optimizer& opt) {
  if (c.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, c.epochs);
  if (c.schedule == "step") return std::make_unique<optim::StepLR>(opt, std::max<int64_t>(1, c.epochs / 3), 0.1);
  return nullptr;
}

struct Evaluation {
  double loss = 0, accuracy = 0;
};

// Mean cross-entropy and accuracy over the whole test set, in batches, without autograd.
Evaluation evaluate(nn::Sequential& model, const data::TensorDataset& test, Device device) {
  NoGradGuard no_grad;
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

// Note [a shard of every batch]: over several processes every rank builds the same batches
// (the loader's order is a function of (seed, epoch)) and trains on its shard of each
// (samples/common/parallel_model.h, parallel/batch_shard.h), so the loader position, hence the
// checkpoint, is the same on every rank, and so is the generator's state (Note [random draws of
// a batch shard] in core/generator.h).
Trainer::Trainer(const TrainerConfig& config, const Datasets& data, std::ostream& out)
    : config_(config), data_(data), out_(out) {
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
                                                       world > 1 ? config_.group : nullptr);
  names_ = model_->named_parameters();
  optimizer_ = make_optimizer(config_, model_->parameters());
  scheduler_ = make_scheduler(config_, *optimizer_);
  loader_ = std::make_unique<data::DataLoader>(data_.train, data::DataLoaderOptions{.batch_size = config_.batch_size,
                                                                                   .shuffle = true,
                                                                                   .num_workers = config_.workers,
                                                                                   .seed = config_.seed,
                                                                                   .pin_memory = device_.is_cuda()});
  result_.model = model_;
}

Trainer::~Trainer() = default;

void Trainer::resume() {
  Checkpoint ck = load_checkpoint(config_.resume);
  check_resumable(ck, config_);
  MINIDL_CHECK(ck.scheduler.has_value() == (scheduler_ != nullptr), "fashion_mnist: checkpoint ", config_.resume,
               " has scheduler '", ck.scheduler ? ck.scheduler->scheduler : "none", "', this run --schedule ",
               config_.schedule);
  // Each load checks before it changes anything; the model's comes first, and a failure
  // after it leaves only this trainer's fresh objects touched.
  model_->load_state_dict(ck.model);
  optimizer_->load_state_dict(ck.optimizer, names_);
  if (scheduler_) scheduler_->load_state(*ck.scheduler);
  loader_->load_state(ck.loader);
  default_generator().set_state(ck.generator);
  result_.history = ck.history;
  loss_sum_ = ck.epoch_loss_sum;
  samples_ = ck.epoch_samples;
  if (config_.progress != ProgressStyle::Quiet) {
    out_ << "resumed from " << config_.resume << " at epoch " << ck.loader.epoch + 1 << ", batch " << ck.loader.batch
         << " of " << loader_->size() << "\n";
    if (ck.loader.epoch >= config_.epochs) out_ << "nothing to train: the checkpoint finished all " << config_.epochs << " epochs\n";
  }
}

double Trainer::step(const data::Batch& batch) {
  if (config_.cuda_graph && eager_steps_ > 0 && batch.y.size(0) == config_.batch_size) return graph_step(batch);
  ++eager_steps_;
  const Tensor x = batch.x.to(device_), y = batch.y.to(device_);       // the global batch [n, 784], [n]
  const parallel::BatchShard shard = parallel_->shard(y.size(0));     // this process's rows of it
  optimizer_->zero_grad();
  const Tensor loss = criterion_(parallel_->forward(x, shard), shard.of(y));
  loss.backward();  // over replicas or processes: the global batch's gradient when it returns
  optimizer_->step();
  return parallel_->global_mean(loss);
}

// Note [a captured step]: with --cuda-graph the step — zero_grad, forward, loss, backward, the
// SGD update — is captured once into a CUDA graph on static inputs, and each batch is copied
// into those inputs and the graph replayed: one launch instead of dozens. What a replay repeats
// unchanged is fixed at capture, so: the first step is eager (SGD's first step with momentum
// starts its buffers); a batch of another size (the epoch's last) is an eager step; and the
// graph is captured again when the schedule has changed the learning rate, a kernel argument
// frozen in the graph. The loss is read back after each replay, as after each eager step.
double Trainer::graph_step(const data::Batch& batch) {
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

Checkpoint Trainer::checkpoint() const {
  Checkpoint ck;
  ck.hyperparameters = hyperparameters_of(config_);
  ck.model = model_->state_dict();
  ck.optimizer = optimizer_->state_dict(names_);
  if (scheduler_) ck.scheduler = scheduler_->state();
  ck.generator = default_generator().state();
  ck.loader = loader_->state();
  ck.epoch_loss_sum = loss_sum_;
  ck.epoch_samples = samples_;
  ck.history = result_.history;
  return ck;
}

void Trainer::save(int64_t epoch, int64_t batch) {
  // Every rank records where the last save was (for the divergence message); the lead writes it.
  if (parallel_->lead()) save_checkpoint(checkpoint(), config_.checkpoint);
  last_save_ = "epoch " + std::to_string(epoch + 1) + ", batch " + std::to_string(batch);
}

// Note [a diverged run stops]: the first NaN or infinite loss (training or test) ends the run
// with an error naming where, before anything else is saved, so the checkpoint keeps its last
// save, taken while every number was finite; save_checkpoint also refuses non-finite weights.
// Going on would only overwrite it with NaN weights that no resume can use.
Error Trainer::diverged(const std::string& which, double value, const std::string& where) const {
  std::ostringstream os;
  const char* shown = std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf";
  os << "fashion_mnist: the " << which << " is " << shown << " " << where << " (lr " << optimizer_->param_groups()[0].lr
     << "): the run diverged and stops here. ";
  if (config_.checkpoint.empty()) os << "No checkpoint was asked for";
  else if (last_save_.empty()) os << config_.checkpoint << " was not written by this run";
  else os << config_.checkpoint << " keeps the state saved at " << last_save_ << ", before the divergence";
  os << "; a smaller --lr may train.";
  return Error(os.str());
}

void Trainer::end_epoch(int64_t epoch, double lr, double seconds, int64_t samples_here, EpochProgress& progress) {
  if (scheduler_) scheduler_->step();
  const bool lead = parallel_->lead();
  const Evaluation eval = lead ? evaluate(*model_, *data_.test, device_) : Evaluation{};
  if (lead && !std::isfinite(eval.loss)) throw diverged("test loss", eval.loss, "after epoch " + std::to_string(epoch + 1));
  EpochMetrics m;
  m.epoch = epoch + 1;
  m.train_loss = loss_sum_ / static_cast<double>(samples_);
  m.test_loss = eval.loss;
  m.test_acc = eval.accuracy;
  m.samples_per_s = seconds > 0 ? static_cast<double>(samples_here) / seconds : 0.0;
  m.lr = lr;
  result_.history.push_back(m);
  loss_sum_ = 0;
  samples_ = 0;
  progress.finish(epoch_line(m, config_.epochs, seconds));
  if (lead && !config_.metrics.empty()) write_metrics_csv(config_.metrics, result_.history);
  if (!config_.checkpoint.empty()) save(epoch, loader_->size());
}

TrainingResult Trainer::run() {
  int64_t batches_run = 0;  // in this process, for stop_after_batches
  bool stopped = false;
  samples::ProfileWindow profile(parallel_->lead() ? config_.profile : samples::ProfileOptions{}, out_);
  for (int64_t epoch = loader_->state().epoch; epoch < config_.epochs && !stopped; ++epoch) {
    const double lr = optimizer_->param_groups()[0].lr;
    EpochProgress progress(out_, config_.progress, epoch + 1, config_.epochs, loader_->state().batch, loader_->size());
    int64_t samples_here = 0;  // trained in this process this epoch
    const auto start = std::chrono::steady_clock::now();

    for (auto it = loader_->begin(); it != loader_->end(); ++it) {
      const double batch_loss = step(*it);
      profile.step_done();
      const int64_t n = it->y.shape()[0];
      const data::DataLoaderState pos = loader_->state();
      const bool last = pos.batch == 0;  // the position rolled over to the next epoch
      const int64_t done = last ? loader_->size() : pos.batch;
      if (!std::isfinite(batch_loss)) {  // Note [a diverged run stops]
        throw diverged("training loss", batch_loss,
                       "at epoch " + std::to_string(epoch + 1) + ", batch " + std::to_string(done) + " of " +
                           std::to_string(loader_->size()));
      }
      loss_sum_ += batch_loss * static_cast<double>(n);
      samples_ += n;
      samples_here += n;
      ++batches_run;
      progress.update(done, loss_sum_ / static_cast<double>(samples_), samples_here);
      stopped = config_.stop_after_batches > 0 && batches_run >= config_.stop_after_batches;
      if (last) break;  // the epoch's end is handled below (evaluation, then the checkpoint)
      const bool due = config_.checkpoint_every > 0 && done % config_.checkpoint_every == 0;
      if (!config_.checkpoint.empty() && (due || stopped)) save(epoch, done);
      if (stopped) break;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (stopped && loader_->state().batch != 0) {
      progress.finish("stopped in epoch " + std::to_string(epoch + 1) + " after " + std::to_string(batches_run) +
                      " batches" + (config_.checkpoint.empty() ? "" : "; checkpoint " + config_.checkpoint));
      break;
    }
    end_epoch(epoch, lr, seconds, samples_here, progress);
  }
  result_.finished = loader_->state().epoch >= config_.epochs;
  profile.finish();

  if (parallel_->lead() && !config_.plot.empty()) {
    const std::string why = plot_metrics(config_.plot, result_.history);
    if (config_.progress != ProgressStyle::Quiet) {
      if (why.empty()) out_ << "plot: " << config_.plot << "\n";
      else out_ << "plot: " << why << "\n";
    }
  }
  return result_;
}

TrainingResult train(const TrainerConfig& config, const Datasets& data, std::ostream& out) {
  Trainer trainer(config, data, out);
  if (!config.resume.empty()) trainer.resume();
  return trainer.run();
}

}  // namespace minidl::fashion_mnist
