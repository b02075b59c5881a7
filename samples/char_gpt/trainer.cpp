// The char_gpt trainer: config checks, the model, AdamW's two groups and the schedule, the
// iteration loop with its evaluations, the checkpoint round trip that makes --resume continue
// the same run, one dumped step for the parity check, and sampling.
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

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "io/safetensors.h"
#include "nn/clip_grad.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "parallel/distributed_data_parallel.h"
#include "parallel/process_group.h"

namespace minidl::char_gpt {

namespace {

constexpr const char* kLayout = "char_gpt/1";
// Evaluation batches: counters from 2^62 on of Generator(seed), far past anything training draws.
constexpr uint64_t kEvalOffset = uint64_t{1} << 62;

// ---- exact text of numbers (std::to_chars' shortest form reads back to the same bits) ----

std::string format_exact(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  MINIDL_CHECK(ec == std::errc(), "char_gpt: cannot format ", v);
  return std::string(buf, end);
}

template <typename Number>
Number parse_number(const std::string& text, const std::string& what) {
  Number v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  MINIDL_CHECK(ec == std::errc() && end == text.data() + text.size(), what, ": '", text, "' is not a number");
  return v;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) (out += (i ? sep : "")) += parts[i];
  return out;
}

std::vector<std::string> split_text(const std::string& text, char sep) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// ---- config ----

void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  MINIDL_CHECK(!p.filename().empty() && !std::filesystem::is_directory(p, ec), "char_gpt: ", flag, " ", path,
               " names a folder; expected a file path");
  MINIDL_CHECK(std::filesystem::is_directory(dir, ec), "char_gpt: ", flag, " ", path, ": the folder ", dir.string(),
               " does not exist (create it first)");
  MINIDL_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "char_gpt: ", flag, " ", path, ": the folder ", dir.string(),
               " is not writable: ", std::strerror(errno));
}

int64_t decay_iters(const TrainerConfig& c) { return c.lr_decay_iters > 0 ? c.lr_decay_iters : c.iters; }

void check_trainer_config(const TrainerConfig& c, bool writes) {
  MINIDL_CHECK(c.batch_size > 0, "char_gpt: --batch-size must be positive, got ", c.batch_size);
  MINIDL_CHECK(c.iters >= 0, "char_gpt: --iters must be >= 0, got ", c.iters);
  MINIDL_CHECK(std::isfinite(c.lr) && c.lr > 0, "char_gpt: --lr must be a finite number > 0, got ", c.lr);
  MINIDL_CHECK(std::isfinite(c.min_lr) && c.min_lr >= 0 && c.min_lr <= c.lr, "char_gpt: --min-lr must be in [0, --lr ",
               c.lr, "], got ", c.min_lr);
  MINIDL_CHECK(c.warmup >= 0, "char_gpt: --warmup must be >= 0, got ", c.warmup);
  MINIDL_CHECK(decay_iters(c) > c.warmup, "char_gpt: --lr-decay-iters (", decay_iters(c),
               c.lr_decay_iters > 0 ? "" : ", from --iters", ") must be greater than --warmup (", c.warmup, ")");
  MINIDL_CHECK(c.weight_decay >= 0, "char_gpt: --weight-decay must be >= 0, got ", c.weight_decay);
  MINIDL_CHECK(c.beta2 >= 0 && c.beta2 < 1, "char_gpt: --beta2 must be in [0, 1), got ", c.beta2);
  MINIDL_CHECK(c.grad_clip >= 0, "char_gpt: --grad-clip must be >= 0 (0: off), got ", c.grad_clip);
  MINIDL_CHECK(c.grad_accum > 0, "char_gpt: --grad-accum must be positive, got ", c.grad_accum);
  MINIDL_CHECK(c.eval_interval > 0 && c.eval_iters > 0, "char_gpt: --eval-interval and --eval-iters must be positive, got ",
               c.eval_interval, " and ", c.eval_iters);
  MINIDL_CHECK(c.stop_after >= 0, "char_gpt: --stop-after must be >= 0, got ", c.stop_after);
  if (writes) check_output_path(c.checkpoint, "--checkpoint");
}

Device resolve_device(const std::string& name) { return name == "auto" ? default_device() : Device(name); }

// What a checkpoint must agree with to be continued by this config (the vocabulary is checked
// on its own).
std::map<std::string, std::string> hyperparameters_of(const TrainerConfig& c, int64_t vocab_size) {
  return {{"n_layer", std::to_string(c.n_layer)},
          {"n_head", std::to_string(c.n_head)},
          {"n_embd", std::to_string(c.n_embd)},
          {"block_size", std::to_string(c.block_size)},
          {"vocab_size", std::to_string(vocab_size)},
          {"dropout", format_exact(c.dropout)},
          {"batch_size", std::to_string(c.batch_size)},
          {"iters", std::to_string(c.iters)},
          {"lr", format_exact(c.lr)},
          {"min_lr", format_exact(c.min_lr)},
          {"warmup", std::to_string(c.warmup)},
          {"lr_decay_iters", std::to_string(decay_iters(c))},
          {"weight_decay", format_exact(c.weight_decay)},
          {"beta2", format_exact(c.beta2)},
          {"grad_clip", format_exact(c.grad_clip)},
          {"grad_accum", std::to_string(c.grad_accum)},
          {"seed", std::to_string(c.seed)}};
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

std::unique_ptr<optim::WarmupCosineLR> make_scheduler(const TrainerConfig& c, optim::Optimizer& opt) {
  return std::make_unique<optim::WarmupCosineLR>(opt, c.warmup, decay_iters(c), c.min_lr / c.lr);
}

// The mean cross-entropy of next-character prediction over a batch.
Tensor batch_loss(nn::Module& model, const Tensor& x, const Tensor& y) {
  const Tensor logits = model(x);  // [B, T, V]
  const int64_t V = logits.size(2);
  return ops::softmax_cross_entropy(logits.reshape({-1, V}), y.reshape({-1}));
}

// ---- the checkpoint (one safetensors file) ----
// Tensors: model.<name> (the state dict), optimizer.<param>.<entry> (AdamW's moments).
// Metadata: minidl.checkpoint "char_gpt/1"; hp.* (hyperparameters_of); vocab (the bytes,
// Vocabulary::serialize); iteration (iterations done); generator.default.seed/offset;
// generator.batch.offset (every rank's, Note [what a bit-identical resume needs]);
// optimizer.name, .group_lrs, .hp.*, .counter.*, .groups and .group.<i>.params / .option.<k>;
// scheduler.last_epoch, .base_lrs, .last_lr, .hp.*; history (rows "iter,train,val").

struct Checkpoint {
  std::map<std::string, std::string> hyperparameters;
  std::string vocab;
  int64_t iteration = 0;
  nn::StateDict model;
  optim::OptimizerState optimizer;
  optim::LRSchedulerState scheduler;
  GeneratorState default_generator;
  uint64_t batch_offset = 0;
  std::vector<EvalPoint> history;
};

std::string join_reals(const std::vector<double>& v) {
  std::vector<std::string> parts;
  for (double x : v) parts.push_back(format_exact(x));
  return join(parts, ",");
}

void save_checkpoint(const Checkpoint& c, const std::string& path) {
  io::TensorMap tensors;
  io::Metadata meta;
  meta["minidl.checkpoint"] = kLayout;
  for (const auto& [k, v] : c.hyperparameters) meta["hp." + k] = v;
  meta["vocab"] = c.vocab;
  meta["iteration"] = std::to_string(c.iteration);
  for (const auto& [name, t] : c.model) tensors.emplace("model." + name, t);

  const optim::OptimizerState& o = c.optimizer;
  meta["optimizer.name"] = o.optimizer;
  meta["optimizer.group_lrs"] = join_reals(o.group_lrs);
  for (const auto& [k, v] : o.hyperparameters) meta["optimizer.hp." + k] = format_exact(v);
  for (const auto& [k, v] : o.counters) meta["optimizer.counter." + k] = std::to_string(v);
  for (const auto& [k, t] : o.tensors) tensors.emplace("optimizer." + k, t);
  meta["optimizer.groups"] = std::to_string(o.param_groups.size());
  for (size_t i = 0; i < o.param_groups.size(); ++i) {
    const std::string g = "optimizer.group." + std::to_string(i) + ".";
    meta[g + "params"] = join(o.param_groups[i].params, ",");
    for (const auto& [k, v] : o.param_groups[i].options) meta[g + "option." + k] = format_exact(v);
  }

  meta["scheduler.name"] = c.scheduler.scheduler;
  meta["scheduler.last_epoch"] = std::to_string(c.scheduler.last_epoch);
  meta["scheduler.base_lrs"] = join_reals(c.scheduler.base_lrs);
  meta["scheduler.last_lr"] = join_reals(c.scheduler.last_lr);
  for (const auto& [k, v] : c.scheduler.hyperparameters) meta["scheduler.hp." + k] = format_exact(v);

  meta["generator.default.seed"] = std::to_string(c.default_generator.seed);
  meta["generator.default.offset"] = std::to_string(c.default_generator.offset);
  meta["generator.batch.offset"] = std::to_string(c.batch_offset);
  std::string history;
  for (const EvalPoint& e : c.history)
    history += std::to_string(e.iter) + "," + format_exact(e.train_loss) + "," + format_exact(e.val_loss) + "\n";
  meta["history"] = history;
  io::save_safetensors(tensors, path, meta);  // atomic: a failed save leaves the old file
}

class MetadataReader {
 public:
  MetadataReader(const io::Metadata& m, const std::string& path) : m_(m), path_(path) {}
  const std::string& text(const std::string& key) const {
    auto it = m_.find(key);
    MINIDL_CHECK(it != m_.end(), "checkpoint ", path_, ": metadata key '", key,
                 "' is missing (not a checkpoint of samples/char_gpt, or a damaged one)");
    return it->second;
  }
  template <typename Number>
  Number number(const std::string& key) const {
    return parse_number<Number>(text(key), where(key));
  }
  std::vector<double> reals(const std::string& key) const {
    std::vector<double> out;
    for (const std::string& part : split_text(text(key), ',')) out.push_back(parse_number<double>(part, where(key)));
    return out;
  }
  std::map<std::string, std::string> with_prefix(const std::string& prefix) const {
    std::map<std::string, std::string> out;
    for (auto it = m_.lower_bound(prefix); it != m_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      out.emplace(it->first.substr(prefix.size()), it->second);
    return out;
  }
  std::string where(const std::string& key) const { return "checkpoint " + path_ + ", metadata '" + key + "'"; }

 private:
  const io::Metadata& m_;
  const std::string& path_;
};

Checkpoint load_checkpoint(const std::string& path) {
  io::SafetensorsFile file = io::load_safetensors(path);
  const MetadataReader r(file.metadata, path);
  MINIDL_CHECK(r.text("minidl.checkpoint") == kLayout, "checkpoint ", path, ": layout '", r.text("minidl.checkpoint"),
               "', char_gpt reads '", kLayout, "'");
  Checkpoint c;
  c.hyperparameters = r.with_prefix("hp.");
  c.vocab = r.text("vocab");
  c.iteration = r.number<int64_t>("iteration");
  for (auto& [name, t] : file.tensors) {
    if (name.rfind("model.", 0) == 0) c.model.emplace(name.substr(6), t);
    else if (name.rfind("optimizer.", 0) == 0) c.optimizer.tensors.emplace(name.substr(10), t);
    else throw Error("checkpoint " + path + ": unexpected tensor '" + name + "' (expected model.* or optimizer.*)");
  }
  c.optimizer.optimizer = r.text("optimizer.name");
  c.optimizer.group_lrs = r.reals("optimizer.group_lrs");
  for (const auto& [k, v] : r.with_prefix("optimizer.hp."))
    c.optimizer.hyperparameters[k] = parse_number<double>(v, r.where("optimizer.hp." + k));
  for (const auto& [k, v] : r.with_prefix("optimizer.counter."))
    c.optimizer.counters[k] = parse_number<int64_t>(v, r.where("optimizer.counter." + k));
  const auto groups = r.number<int64_t>("optimizer.groups");
  for (int64_t i = 0; i < groups; ++i) {
    const std::string g = "optimizer.group." + std::to_string(i) + ".";
    optim::ParamGroupState s;
    s.params = split_text(r.text(g + "params"), ',');
    for (const auto& [k, v] : r.with_prefix(g + "option.")) s.options[k] = parse_number<double>(v, r.where(g + "option." + k));
    c.optimizer.param_groups.push_back(std::move(s));
  }
  c.scheduler.scheduler = r.text("scheduler.name");
  c.scheduler.last_epoch = r.number<int64_t>("scheduler.last_epoch");
  c.scheduler.base_lrs = r.reals("scheduler.base_lrs");
  c.scheduler.last_lr = r.reals("scheduler.last_lr");
  for (const auto& [k, v] : r.with_prefix("scheduler.hp."))
    c.scheduler.hyperparameters[k] = parse_number<double>(v, r.where("scheduler.hp." + k));
  c.default_generator.seed = r.number<uint64_t>("generator.default.seed");
  c.default_generator.offset = r.number<uint64_t>("generator.default.offset");
  c.batch_offset = r.number<uint64_t>("generator.batch.offset");
  for (const std::string& row : split_text(r.text("history"), '\n')) {
    if (row.empty()) continue;
    const std::vector<std::string> f = split_text(row, ',');
    MINIDL_CHECK(f.size() == 3, r.where("history"), ": row '", row, "' has ", f.size(), " fields, expected 3");
    c.history.push_back({parse_number<int64_t>(f[0], r.where("history")), parse_number<double>(f[1], r.where("history")),
                         parse_number<double>(f[2], r.where("history"))});
  }
  return c;
}

void check_resumable(const Checkpoint& ck, const TrainerConfig& c, const Vocabulary& vocab) {
  std::vector<std::string> differ;
  for (const auto& [key, value] : hyperparameters_of(c, vocab.size())) {
    auto it = ck.hyperparameters.find(key);
    const std::string saved = it == ck.hyperparameters.end() ? "(none)" : it->second;
    if (saved != value) differ.push_back(key + " " + saved + " in the checkpoint, " + value + " here");
  }
  if (!differ.empty()) {
    throw Error("char_gpt: refusing to resume from " + c.resume + ": it was trained with other hyperparameters (" +
                join(differ, "; ") + "); resume with the flags it was started with, or start without --resume");
  }
  MINIDL_CHECK(ck.vocab == vocab.serialize(), "char_gpt: refusing to resume from ", c.resume,
               ": its vocabulary differs from that of --data ", c.data.empty() ? default_data_path() : c.data,
               " (another text); resume with the text it was trained on");
}

// ---- progress between evaluations ----

class IterProgress {
 public:
  IterProgress(std::ostream& out, ProgressStyle style, int64_t iters) : out_(out), style_(style), iters_(iters) {}
  // After iteration `done` (1-based count of iterations finished) with its loss.
  void update(int64_t done, double loss, double ms_per_iter) {
    if (style_ != ProgressStyle::Bar) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done < iters_) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = iters_ > 0 ? static_cast<int>(kWidth * done / iters_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    char line[256];
    const double left_s = ms_per_iter * static_cast<double>(iters_ - done) / 1000.0;
    std::snprintf(line, sizeof line, "\riter %lld/%lld [%s] loss %.4f  %.1f ms/iter  %.0f s left ",
                  static_cast<long long>(done), static_cast<long long>(iters_), bar.c_str(), loss, ms_per_iter, left_s);
    out_ << line << std::flush;
    drawn_ = true;
  }
  // Clears the bar and prints `text` on its own line.
  void print(const std::string& text) {
    if (style_ == ProgressStyle::Quiet) return;
    if (drawn_) out_ << "\r\033[K";
    drawn_ = false;
    out_ << text << "\n" << std::flush;
  }

 private:
  std::ostream& out_;
  ProgressStyle style_;
  int64_t iters_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_;
};

std::string eval_line(const EvalPoint& e) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "step %lld: train loss %.4f, val loss %.4f", static_cast<long long>(e.iter), e.train_loss,
                e.val_loss);
  return buf;
}

// ---- the trainer ----

class Trainer {
 public:
  Trainer(const TrainerConfig& config, const TextData& data, std::ostream& out)
      : config_(config), data_(data), out_(out), progress_(out, config.progress, config.iters) {
    world_ = config_.group ? config_.group->world_size() : 1;
    rank_ = config_.group ? config_.group->rank() : 0;
    check_trainer_config(config_, rank_ == 0);
    if (world_ > 1) {
      std::vector<std::string> lines;
      for (const auto& [k, v] : hyperparameters_of(config_, data_.vocab.size())) lines.push_back(k + " " + v);
      lines.push_back("resume " + config_.resume);
      lines.push_back("stop-after " + std::to_string(config_.stop_after));
      lines.push_back("eval-interval " + std::to_string(config_.eval_interval));
      parallel::check_same_on_every_rank(*config_.group, "char_gpt: the configuration", lines);
    }
    device_ = world_ > 1 ? config_.group->device() : resolve_device(config_.device);

    manual_seed(config_.seed);  // the initial weights (rank 0's reach every rank through DDP)
    model_ = std::make_shared<GPT>(model_config(config_, data_.vocab.size()));
    model_->to(device_);
    if (world_ > 1) ddp_ = std::make_shared<parallel::DistributedDataParallel>(model_, config_.group);
    names_ = model_->named_parameters();
    params_ = model_->parameters();
    optimizer_ = make_optimizer(config_, *model_);
    scheduler_ = make_scheduler(config_, *optimizer_);
    batch_gen_.manual_seed(config_.seed + static_cast<uint64_t>(rank_));
    result_.model = model_;
    result_.vocab = data_.vocab;
  }

  void resume() {
    Checkpoint ck = load_checkpoint(config_.resume);
    check_resumable(ck, config_, data_.vocab);
    model_->load_state_dict(ck.model);  // each load checks before it changes anything
    optimizer_->load_state_dict(ck.optimizer, names_);
    scheduler_->load_state(ck.scheduler);
    default_generator().set_state(ck.default_generator);
    batch_gen_.set_state({config_.seed + static_cast<uint64_t>(rank_), ck.batch_offset});
    iteration_ = ck.iteration;
    result_.history = ck.history;
    if (rank_ == 0 && config_.progress != ProgressStyle::Quiet)
      out_ << "resumed from " << config_.resume << " at iteration " << iteration_ << " of " << config_.iters << "\n";
  }

  TrainingResult run() {
    int64_t run_here = 0;
    double seconds = 0;
    samples::ProfileWindow profile(rank_ == 0 ? config_.profile : samples::ProfileOptions{}, out_);
    while (true) {
      const int64_t it = iteration_;
      if (it % config_.eval_interval == 0 || it == config_.iters) evaluate(it);
      if (it >= config_.iters) break;
      const auto start = std::chrono::steady_clock::now();
      const double loss = step();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      profile.step_done();
      ++run_here;
      ++iteration_;
      MINIDL_CHECK(std::isfinite(loss), "char_gpt: the training loss is ", loss, " at iteration ", it,
                   " (lr ", optimizer_->param_groups()[0].lr, "): the run diverged and stops here; a smaller --lr may train");
      result_.ms_per_iter = 1000.0 * seconds / static_cast<double>(run_here);
      progress_.update(iteration_, loss, result_.ms_per_iter);
      if (config_.stop_after > 0 && run_here >= config_.stop_after && iteration_ < config_.iters) {
        save();
        progress_.print("stopped after " + std::to_string(run_here) + " iterations at iteration " +
                        std::to_string(iteration_) +
                        (config_.checkpoint.empty() ? "" : "; checkpoint " + config_.checkpoint));
        break;
      }
    }
    profile.finish();
    result_.iterations = iteration_;
    result_.finished = iteration_ >= config_.iters;
    if (run_here > 0 && rank_ == 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "%lld iterations in %.1f s, %.2f ms/iter", static_cast<long long>(run_here), seconds,
                    result_.ms_per_iter);
      progress_.print(buf);
    }
    return result_;
  }

 private:
  // One optimizer step of grad_accum micro-batches; returns their mean loss (this process's).
  double step() {
    optimizer_->zero_grad();
    double loss_sum = 0;
    nn::Module& forward = ddp_ ? static_cast<nn::Module&>(*ddp_) : *model_;
    for (int64_t m = 0; m < config_.grad_accum; ++m) {
      const Batch b = get_batch(data_.train, config_.batch_size, config_.block_size, batch_gen_, "training");
      const Tensor x = b.x.to(device_), y = b.y.to(device_);
      auto micro_step = [&] {
        const Tensor loss = batch_loss(forward, x, y);
        (loss / static_cast<double>(config_.grad_accum)).backward();  // the mean over micro-batches
        return loss.item();
      };
      // Over processes the gradients are reduced once, after the last micro-batch's backward.
      if (ddp_ && m + 1 < config_.grad_accum) {
        auto no_sync = ddp_->no_sync();
        loss_sum += micro_step();
      } else {
        loss_sum += micro_step();
      }
    }
    if (config_.grad_clip > 0) nn::clip_grad_norm_(params_, config_.grad_clip);
    optimizer_->step();
    scheduler_->step();  // the lr of the next iteration
    return loss_sum / static_cast<double>(config_.grad_accum);
  }

  // The lead process measures both splits, prints the line and saves the checkpoint.
  void evaluate(int64_t it) {
    if (rank_ != 0) return;
    profiler::RecordScope profile_scope("evaluate", profiler::Kind::User);
    EvalPoint e{it, split_loss(data_.train, "training"), split_loss(data_.val, "validation")};
    MINIDL_CHECK(std::isfinite(e.train_loss) && std::isfinite(e.val_loss), "char_gpt: ", eval_line(e),
                 ": the run diverged and stops here; a smaller --lr may train");
    // A resumed run evaluates again where the checkpoint was taken after an evaluation.
    if (!result_.history.empty() && result_.history.back().iter == it) result_.history.pop_back();
    result_.history.push_back(e);
    progress_.print(eval_line(e));
    save();
  }

  double split_loss(const std::vector<int64_t>& split, const char* name) {
    NoGradGuard no_grad;
    model_->eval();
    Generator gen(config_.seed);
    gen.set_state({config_.seed, kEvalOffset});
    double sum = 0;
    for (int64_t i = 0; i < config_.eval_iters; ++i) {
      const Batch b = get_batch(split, config_.batch_size, config_.block_size, gen, name);
      sum += batch_loss(*model_, b.x.to(device_), b.y.to(device_)).item();
    }
    model_->train();
    return sum / static_cast<double>(config_.eval_iters);
  }

  void save() {
    if (rank_ != 0 || config_.checkpoint.empty()) return;
    Checkpoint ck;
    ck.hyperparameters = hyperparameters_of(config_, data_.vocab.size());
    ck.vocab = data_.vocab.serialize();
    ck.iteration = iteration_;
    ck.model = model_->state_dict();
    ck.optimizer = optimizer_->state_dict(names_);
    ck.scheduler = scheduler_->state();
    ck.default_generator = default_generator().state();
    ck.batch_offset = batch_gen_.state().offset;
    ck.history = result_.history;
    save_checkpoint(ck, config_.checkpoint);
  }

  const TrainerConfig& config_;
  const TextData& data_;
  std::ostream& out_;
  IterProgress progress_;
  int world_ = 1, rank_ = 0;
  Device device_ = Device::cpu();
  std::shared_ptr<GPT> model_;
  std::shared_ptr<parallel::DistributedDataParallel> ddp_;
  optim::NamedParameters names_;
  std::vector<Tensor> params_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::WarmupCosineLR> scheduler_;
  Generator batch_gen_;
  int64_t iteration_ = 0;
  TrainingResult result_;
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
  Trainer trainer(config, data, out);
  if (!config.resume.empty()) trainer.resume();
  return trainer.run();
}

void dump_one_step(const TrainerConfig& config, const TextData& data, const std::string& path) {
  check_trainer_config(config, true);
  check_output_path(path, "--dump-grads");
  MINIDL_CHECK(config.dropout == 0, "char_gpt: --dump-grads needs --dropout 0 (a dropout mask cannot be reproduced ",
               "elsewhere), got ", config.dropout);
  const Device device = resolve_device(config.device);
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
  auto scheduler = make_scheduler(config, *optimizer);  // sets the lr of iteration 0
  const Tensor loss = batch_loss(model, b.x.to(device), b.y.to(device));
  loss.backward();
  out.emplace("loss", from_vector(std::vector<float>{static_cast<float>(loss.item())}));
  for (const auto& [name, p] : named) out.emplace("grad." + name, p.grad().detach().cpu().clone());
  const double norm = nn::clip_grad_norm_(model.parameters(), config.grad_clip > 0 ? config.grad_clip : 1e30).item();
  out.emplace("grad_norm", from_vector(std::vector<float>{static_cast<float>(norm)}));
  optimizer->step();
  for (const auto& [name, p] : named) out.emplace("step." + name, p.detach().cpu().clone());
  io::Metadata meta{{"vocab", data.vocab.serialize()}, {"lr", format_exact(optimizer->param_groups()[0].lr)}};
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
  const Checkpoint ck = load_checkpoint(path);
  auto hp = [&](const std::string& key) {
    auto it = ck.hyperparameters.find(key);
    MINIDL_CHECK(it != ck.hyperparameters.end(), "checkpoint ", path, ": metadata key 'hp.", key, "' is missing");
    return it->second;
  };
  LoadedModel out;
  out.vocab = Vocabulary::deserialize(ck.vocab);
  GPTConfig c{.vocab_size = out.vocab.size(),
              .block_size = parse_number<int64_t>(hp("block_size"), path),
              .n_layer = parse_number<int64_t>(hp("n_layer"), path),
              .n_head = parse_number<int64_t>(hp("n_head"), path),
              .n_embd = parse_number<int64_t>(hp("n_embd"), path),
              .dropout = parse_number<double>(hp("dropout"), path),
              .bias = true};
  out.model = std::make_shared<GPT>(c);
  out.model->load_state_dict(ck.model);
  out.model->to(resolve_device(device));
  out.iterations = ck.iteration;
  return out;
}

}  // namespace minidl::char_gpt
