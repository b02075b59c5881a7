// The char_gpt trainer: config checks, the model, AdamW's two groups and the schedule, the
// task the shared training loop runs (samples/common/train_loop.h: resume, evaluations,
// checkpoints, divergence, profiler, progress), one dumped step for the parity check, and
// sampling.
//
// Note [what a bit-identical resume needs]: on the CPU every kernel sums in a fixed order, so an
// iteration depends only on the parameters, the optimizer state, the lr and its batches. A
// checkpoint taken at iteration k (before its step) holds the first three exactly (the lr is
// the scheduler's step count) and the generators' states: the batch generator's offset and the
// default generator (dropout's draws). Every process draws the same number of counters per
// iteration (batch_size per micro-batch) from its Generator(seed + rank), so one saved offset
// serves every rank. Evaluation draws from a stream of its own, restarted at every evaluation,
// and runs without dropout, so it leaves the run's state untouched: a resumed run whose
// evaluations fall elsewhere still trains the same weights.
#include "samples/char_gpt/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "core/autograd.h"
#include "core/ops.h"
#include "io/checkpoint.h"
#include "nn/clip_grad.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "parallel/process_group.h"
#include "samples/common/input_files.h"
#include "samples/common/parallel_model.h"
#include "samples/common/precision.h"
#include "samples/common/train_loop.h"

namespace minidl::char_gpt {

namespace {

constexpr const char* kProgram = "char_gpt";
// Evaluation batches: counters from 2^62 on of Generator(seed), far past anything training draws.
constexpr uint64_t kEvalOffset = uint64_t{1} << 62;

// ---- config ----


// The iteration where the cosine reaches min_lr in a new run: --lr-decay-iters, else --iters
// (nanoGPT's), and never before the warm-up ends (a run no longer than its warm-up never decays;
// WarmupCosineLR needs the horizon past the warm-up).
int64_t decay_iters(const TrainerConfig& c) {
  return c.lr_decay_iters > 0 ? c.lr_decay_iters : std::max(c.iters, c.warmup + 1);
}

void check_trainer_config(const TrainerConfig& c, bool writes) {
  MINIDL_CHECK(c.batch_size > 0, "char_gpt: --batch-size must be positive, got ", c.batch_size);
  MINIDL_CHECK(c.iters >= 0, "char_gpt: --iters must be >= 0, got ", c.iters);
  MINIDL_CHECK(std::isfinite(c.lr) && c.lr > 0, "char_gpt: --lr must be a finite number > 0, got ", c.lr);
  MINIDL_CHECK(std::isfinite(c.min_lr) && c.min_lr >= 0 && c.min_lr <= c.lr, "char_gpt: --min-lr must be in [0, --lr ",
               c.lr, "], got ", c.min_lr);
  MINIDL_CHECK(c.warmup >= 0, "char_gpt: --warmup must be >= 0, got ", c.warmup);
  MINIDL_CHECK(c.lr_decay_iters >= 0, "char_gpt: --lr-decay-iters must be >= 0 (0: --iters), got ", c.lr_decay_iters);
  MINIDL_CHECK(c.lr_decay_iters == 0 || c.lr_decay_iters > c.warmup, "char_gpt: --lr-decay-iters (", c.lr_decay_iters,
               ") must be greater than --warmup (", c.warmup, ")");
  MINIDL_CHECK(c.weight_decay >= 0, "char_gpt: --weight-decay must be >= 0, got ", c.weight_decay);
  MINIDL_CHECK(c.beta2 >= 0 && c.beta2 < 1, "char_gpt: --beta2 must be in [0, 1), got ", c.beta2);
  MINIDL_CHECK(c.grad_clip >= 0, "char_gpt: --grad-clip must be >= 0 (0: off), got ", c.grad_clip);
  MINIDL_CHECK(c.grad_accum > 0, "char_gpt: --grad-accum must be positive, got ", c.grad_accum);
  MINIDL_CHECK(c.eval_interval > 0 && c.eval_iters > 0, "char_gpt: --eval-interval and --eval-iters must be positive, got ",
               c.eval_interval, " and ", c.eval_iters);
  MINIDL_CHECK(c.stop_after >= 0, "char_gpt: --stop-after must be >= 0, got ", c.stop_after);
  MINIDL_CHECK(c.dropout >= 0 && c.dropout < 1, "char_gpt: --dropout must be in [0, 1), got ", c.dropout);
  if (writes) samples::check_output_folder(c.checkpoint, "--checkpoint");
}

// What a checkpoint must agree with to be continued by this config (the vocabulary is checked
// on its own). The run's length and its schedule's horizon are not here: Note [a longer run
// keeps its schedule] in samples/common/train_loop.cpp.
std::map<std::string, std::string> hyperparameters_of(const TrainerConfig& c, int64_t vocab_size) {
  return {{"n_layer", std::to_string(c.n_layer)},
          {"n_head", std::to_string(c.n_head)},
          {"n_embd", std::to_string(c.n_embd)},
          {"block_size", std::to_string(c.block_size)},
          {"vocab_size", std::to_string(vocab_size)},
          {"dropout", io::format_exact(c.dropout)},
          {"batch_size", std::to_string(c.batch_size)},
          {"lr", io::format_exact(c.lr)},
          {"min_lr", io::format_exact(c.min_lr)},
          {"warmup", std::to_string(c.warmup)},
          {"weight_decay", io::format_exact(c.weight_decay)},
          {"beta2", io::format_exact(c.beta2)},
          {"grad_clip", io::format_exact(c.grad_clip)},
          {"grad_accum", std::to_string(c.grad_accum)},
          {"seed", std::to_string(c.seed)}};
}

// The hyperparameters a checkpoint records and a resume must match: the precision too, where it
// is not float32 (a float32 run's checkpoints keep the keys they always had).
std::map<std::string, std::string> checkpoint_hyperparameters(const TrainerConfig& c, int64_t vocab_size) {
  std::map<std::string, std::string> hp = hyperparameters_of(c, vocab_size);
  if (c.dtype != DType::Float32) hp["dtype"] = samples::precision_name(c.dtype);
  return hp;
}

// ---- the optimizer ----

// AdamW with weight decay on the parameters of rank >= 2 only (nanoGPT's configure_optimizers).
std::unique_ptr<optim::AdamW> make_optimizer(const TrainerConfig& c, const GPT& model) {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  return std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{{decay, {.weight_decay = c.weight_decay}}, {no_decay, {.weight_decay = 0.0}}},
      optim::AdamWOptions{.lr = c.lr, .beta1 = 0.9, .beta2 = c.beta2, .eps = 1e-8, .weight_decay = c.weight_decay});
}

std::unique_ptr<optim::WarmupCosineLR> make_scheduler(const TrainerConfig& c, optim::Optimizer& opt, int64_t horizon) {
  return std::make_unique<optim::WarmupCosineLR>(opt, c.warmup, horizon, c.min_lr / c.lr);
}

// The mean cross-entropy of next-character prediction over a batch.
Tensor batch_loss(const Tensor& logits, const Tensor& y) {  // logits [B, T, V], y [B, T]
  const int64_t V = logits.size(2);
  return ops::softmax_cross_entropy(logits.reshape({-1, V}), y.reshape({-1}));
}

std::string eval_line(const EvalPoint& e) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "step %lld: train loss %.4f, val loss %.4f", static_cast<long long>(e.iter), e.train_loss,
                e.val_loss);
  return buf;
}

// ---- the task the training loop runs ----
// The checkpoint's own entries (run.<key>, io/checkpoint.h): hp.* (hyperparameters_of), vocab
// (Vocabulary::serialize), history (rows "iter,train,val"); the generator "batch" (rank 0's batch
// stream; Note [what a bit-identical resume needs]).

class GPTTask final : public samples::TrainingTask {
 public:
  GPTTask(const TrainerConfig& config, const TextData& data)
      : config_(config), data_(data) {
    const int world = config_.group ? config_.group->world_size() : 1;
    rank_ = config_.group ? config_.group->rank() : 0;
    check_trainer_config(config_, rank_ == 0);
    if (world > 1) {
      std::vector<std::string> lines;
      for (const auto& [k, v] : hyperparameters_of(config_, data_.vocab.size())) lines.push_back(k + " " + v);
      lines.push_back("iters " + std::to_string(config_.iters));
      lines.push_back("lr_decay_iters " + std::to_string(config_.lr_decay_iters));
      lines.push_back("resume " + config_.resume);
      lines.push_back("stop-after " + std::to_string(config_.stop_after));
      lines.push_back("eval-interval " + std::to_string(config_.eval_interval));
      parallel::check_same_on_every_rank(*config_.group, "char_gpt: the configuration", lines);
    }
    device_ = world > 1 ? config_.group->device() : samples::resolve_device(config_.device);

    manual_seed(config_.seed);  // the initial weights (rank 0's reach every rank through DDP)
    model_ = std::make_shared<GPT>(model_config(config_, data_.vocab.size()));
    model_->to(device_);
    parallel_ = std::make_unique<samples::ParallelModel>(model_, std::vector<Device>{}, world > 1 ? config_.group : nullptr,
                                                         samples::RankBatches::OwnBatches);
    names_ = model_->named_parameters();
    params_ = model_->parameters();
    optimizer_ = make_optimizer(config_, *model_);
    scheduler_ = make_scheduler(config_, *optimizer_, decay_iters(config_));
    batch_gen_.manual_seed(config_.seed + static_cast<uint64_t>(rank_));
  }

  io::TrainingState training_state() override {
    return {*model_, *optimizer_, names_, scheduler_.get(), &precision_.scaler()};
  }
  std::map<std::string, std::string> hyperparameters() const override {
    return checkpoint_hyperparameters(config_, data_.vocab.size());
  }

  // One optimizer step of grad_accum micro-batches; returns their mean loss (this process's).
  samples::StepResult train_step() override {
    optimizer_->zero_grad();
    double loss_sum = 0;
    for (int64_t m = 0; m < config_.grad_accum; ++m) {
      const Batch b = get_batch(data_.train, config_.batch_size, config_.block_size, batch_gen_, "training");
      const Tensor x = b.x.to(device_), y = b.y.to(device_);
      // Over processes the gradients are reduced once, after the last micro-batch's backward.
      const auto no_sync = m + 1 < config_.grad_accum ? parallel_->no_sync() : nullptr;
      Tensor loss;
      {
        const auto cast = precision_.autocast(device_);  // --dtype bf16/fp16: the forward only
        loss = batch_loss(parallel_->forward(x, parallel_->shard(x.size(0))), y);
      }
      // The mean over micro-batches, times the loss scale for fp16 (1 otherwise).
      precision_.scaler().scale(loss / static_cast<double>(config_.grad_accum)).backward();
      loss_sum += loss.item();
    }
    optim::GradScaler& scaler = precision_.scaler();
    if (config_.grad_clip > 0) {
      scaler.unscale_(*optimizer_);  // clip the true gradients, not the scaled ones
      nn::clip_grad_norm_(params_, config_.grad_clip);
    }
    scaler.step(*optimizer_);  // skipped (fp16) when a gradient overflowed
    scaler.update();
    scheduler_->step();  // the lr of the next iteration
    return {loss_sum / static_cast<double>(config_.grad_accum), 0};
  }

  samples::NamedValues evaluate(const samples::EvalAt&) override {
    return {{"train loss", split_loss(data_.train, "training")}, {"validation loss", split_loss(data_.val, "validation")}};
  }

  std::string record(const samples::EvalAt& at, const samples::NamedValues& values) override {
    const EvalPoint e{at.step, values.empty() ? 0.0 : values[0].second, values.empty() ? 0.0 : values[1].second};
    history_.push_back(e);
    return eval_line(e);
  }

  std::string where(int64_t step) const override { return "iteration " + std::to_string(step); }
  double lr() const override { return optimizer_->param_groups()[0].lr; }

  void save_state(io::Checkpoint& ck) const override {
    ck.metadata["vocab"] = data_.vocab.serialize();
    std::string rows;
    for (const EvalPoint& e : history_)
      rows += std::to_string(e.iter) + "," + io::format_exact(e.train_loss) + "," + io::format_exact(e.val_loss) + "\n";
    ck.metadata["history"] = rows;
    ck.generators["batch"] = GeneratorState{config_.seed, batch_gen_.state().offset};
  }

  void prepare_resume(io::Checkpoint& ck) override {
    const io::MetadataReader r(ck.metadata, config_.resume);
    MINIDL_CHECK(r.text("vocab") == data_.vocab.serialize(), "char_gpt: refusing to resume from ", config_.resume,
                 ": its vocabulary differs from that of --data ", config_.data.empty() ? default_data_path() : config_.data,
                 " (another text); resume with the text it was trained on");
    MINIDL_CHECK(ck.generators.count("batch"), "checkpoint ", config_.resume, ": the batch generator's state is missing");
    // Note [a longer run keeps its schedule]: the stored horizon, unless --lr-decay-iters sets one.
    MINIDL_CHECK(ck.scheduler.has_value(), "checkpoint ", config_.resume, ": the schedule's state is missing");
    auto& horizon = ck.scheduler->hyperparameters["lr_decay_iters"];
    if (config_.lr_decay_iters > 0) horizon = static_cast<double>(config_.lr_decay_iters);
    MINIDL_CHECK(horizon > static_cast<double>(config_.warmup) && horizon <= 9e15, "checkpoint ", config_.resume,
                 ": its schedule's horizon ", horizon, " is not an iteration past the warm-up (", config_.warmup, ")");
    scheduler_ = make_scheduler(config_, *optimizer_, static_cast<int64_t>(horizon));
  }

  void load_state(const io::Checkpoint& ck) override {
    batch_gen_.set_state({config_.seed + static_cast<uint64_t>(rank_), ck.generators.at("batch").offset});
    const io::MetadataReader r(ck.metadata, config_.resume);
    history_.clear();
    for (const std::string& row : io::split_text(r.text("history"), '\n')) {
      if (row.empty()) continue;
      const std::vector<std::string> f = io::split_text(row, ',');
      MINIDL_CHECK(f.size() == 3, r.where("history"), ": row '", row, "' has ", f.size(), " fields, expected 3");
      history_.push_back({r.parse_integer(f[0], "history", 0), r.parse_real(f[1], "history"), r.parse_real(f[2], "history")});
    }
  }

  std::shared_ptr<GPT> model() const { return model_; }
  const std::vector<EvalPoint>& history() const { return history_; }
  bool lead() const { return rank_ == 0; }
  Device device() const { return device_; }

 private:
  double split_loss(const std::vector<int64_t>& split, const char* name) {
    NoGradGuard no_grad;
    model_->eval();
    Generator gen(config_.seed);
    gen.set_state({config_.seed, kEvalOffset});
    double sum = 0;
    for (int64_t i = 0; i < config_.eval_iters; ++i) {
      const Batch b = get_batch(split, config_.batch_size, config_.block_size, gen, name);
      const auto cast = precision_.autocast(device_);  // evaluated in the precision it trains in
      sum += batch_loss((*model_)(b.x.to(device_)), b.y.to(device_)).item();
    }
    model_->train();
    return sum / static_cast<double>(config_.eval_iters);
  }

  const TrainerConfig& config_;
  const TextData& data_;
  int rank_ = 0;
  Device device_ = Device::cpu();
  std::shared_ptr<GPT> model_;
  std::unique_ptr<samples::ParallelModel> parallel_;
  optim::NamedParameters names_;
  std::vector<Tensor> params_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::WarmupCosineLR> scheduler_;
  samples::MixedPrecision precision_{config_.dtype};
  Generator batch_gen_;
  std::vector<EvalPoint> history_;
};

}  // namespace

GPTConfig model_config(const TrainerConfig& c, int64_t vocab_size) {
  return GPTConfig{.vocab_size = vocab_size,
                   .block_size = c.block_size,
                   .n_layer = c.n_layer,
                   .n_head = c.n_head,
                   .n_embd = c.n_embd,
                   .dropout = c.dropout,
                   .bias = true};
}

TrainingResult train(const TrainerConfig& config, const TextData& data, std::ostream& out) {
  GPTTask task(config, data);
  samples::LoopOptions options{
      .program = kProgram,
      .steps = config.iters,
      .steps_flag = "--iters",
      .eval_every = config.eval_interval,
      .stop_after = config.stop_after,
      .checkpoint = config.checkpoint,
      .resume = config.resume,
      .lead = task.lead(),
      .print_speed = true,
      .device = task.device(),
      .progress = config.progress,
      .profile = config.profile};
  const samples::LoopResult r = samples::run_training(std::move(options), task, out);
  TrainingResult result;
  result.history = task.history();
  result.iterations = r.step;
  result.finished = r.finished;
  result.ms_per_iter = r.ms_per_step();
  result.model = task.model();
  result.vocab = data.vocab;
  return result;
}

void dump_one_step(const TrainerConfig& config, const TextData& data, const std::string& path) {
  check_trainer_config(config, true);
  samples::check_output_folder(path, "--dump-grads");
  MINIDL_CHECK(config.dropout == 0, "char_gpt: --dump-grads needs --dropout 0 (a dropout mask cannot be reproduced ",
               "elsewhere), got ", config.dropout);
  const Device device = samples::resolve_device(config.device);
  manual_seed(config.seed);
  GPT model(model_config(config, data.vocab.size()));
  model.to(device);
  Generator batch_gen(config.seed);  // rank 0's first training batch
  const Batch b = get_batch(data.train, config.batch_size, config.block_size, batch_gen, "training");
  io::TensorMap out;
  out.emplace("x", b.x);
  out.emplace("y", b.y);
  const auto named = model.named_parameters();
  for (const auto& [name, p] : named) out.emplace("init." + name, p.detach().cpu().clone());

  auto optimizer = make_optimizer(config, model);
  auto scheduler = make_scheduler(config, *optimizer, decay_iters(config));  // sets the lr of iteration 0
  const Tensor loss = batch_loss(model(b.x.to(device)), b.y.to(device));
  loss.backward();
  out.emplace("loss", from_vector(std::vector<float>{static_cast<float>(loss.item())}));
  for (const auto& [name, p] : named) out.emplace("grad." + name, p.grad().detach().cpu().clone());
  const double norm = nn::clip_grad_norm_(model.parameters(), config.grad_clip > 0 ? config.grad_clip : 1e30).item();
  out.emplace("grad_norm", from_vector(std::vector<float>{static_cast<float>(norm)}));
  optimizer->step();
  for (const auto& [name, p] : named) out.emplace("step." + name, p.detach().cpu().clone());
  io::Metadata meta{{"vocab", data.vocab.serialize()}, {"lr", io::format_exact(optimizer->param_groups()[0].lr)}};
  for (const auto& [k, v] : hyperparameters_of(config, data.vocab.size())) meta["hp." + k] = v;
  io::save_safetensors(out, path, meta);
}

std::string generate(GPT& model, const Vocabulary& vocab, const SampleOptions& o) {
  MINIDL_CHECK(std::isfinite(o.temperature) && o.temperature > 0, "char_gpt: --temperature must be > 0, got ",
               o.temperature);
  MINIDL_CHECK(o.top_k >= 0, "char_gpt: --top-k must be >= 0 (0: all characters), got ", o.top_k);
  MINIDL_CHECK(o.length >= 0, "char_gpt: --sample must be >= 0, got ", o.length);
  std::vector<int64_t> tokens = o.prompt.empty()
                                    ? std::vector<int64_t>{vocab.contains('\n') ? vocab.encode("\n")[0] : 0}
                                    : vocab.encode(o.prompt, "--prompt");
  const bool was_training = model.is_training();
  NoGradGuard no_grad;
  model.eval();
  Generator gen(o.seed);
  const int64_t block = model.config().block_size, V = model.config().vocab_size;
  const Device device = model.lm_head_weight().device();
  for (int64_t i = 0; i < o.length; ++i) {
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t len = std::min(n, block);  // the context cropped to the last block_size tokens
    const std::vector<int64_t> ctx(tokens.end() - len, tokens.end());
    const Tensor logits = model(from_vector(ctx, Shape{1, len}).to(device));       // [1, len, V]
    const Tensor last = logits.narrow(1, len - 1, 1).reshape({1, V}) / o.temperature;  // [1, V]
    int64_t next = 0;
    if (o.top_k > 0 && o.top_k < V) {
      const auto [values, indices] = ops::topk(last, o.top_k);  // [1, k] each, largest first
      const Tensor pick = ops::multinomial(ops::softmax(values, -1), 1, false, &gen);  // [1, 1] in [0, k)
      next = indices.cpu().to_vector<int64_t>()[static_cast<size_t>(pick.cpu().to_vector<int64_t>()[0])];
    } else {
      next = ops::multinomial(ops::softmax(last, -1), 1, false, &gen).cpu().to_vector<int64_t>()[0];
    }
    tokens.push_back(next);
  }
  model.train(was_training);
  return vocab.decode(tokens);
}

LoadedModel load_model(const std::string& path, const std::string& device) {
  const io::Checkpoint ck = io::load_checkpoint(path, kProgram);
  const io::MetadataReader r(ck.metadata, path);
  LoadedModel out;
  out.vocab = Vocabulary::deserialize(r.text("vocab"));
  constexpr int64_t kMax = int64_t{1} << 40;  // sizes past this are a damaged file, not a model
  GPTConfig c{.vocab_size = out.vocab.size(),
              .block_size = r.integer("hp.block_size", 1, kMax),
              .n_layer = r.integer("hp.n_layer", 1, kMax),
              .n_head = r.integer("hp.n_head", 1, kMax),
              .n_embd = r.integer("hp.n_embd", 1, kMax),
              .dropout = r.real("hp.dropout"),
              .bias = true};
  out.model = std::make_shared<GPT>(c);
  out.model->load_state_dict(ck.model);
  out.model->to(samples::resolve_device(device));
  out.iterations = ck.step;
  return out;
}

}  // namespace minidl::char_gpt
