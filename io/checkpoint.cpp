// The checkpoint layout of io/checkpoint.h: the training state flattened into safetensors tensors
// and string metadata, read back with every number validated, and the version 1 layouts mapped
// onto it.
#include "io/checkpoint.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <sstream>

namespace minidl::io {

namespace {

constexpr const char* kVersion = "2";
constexpr const char* kProgramPrefix = "run.";
// A checkpoint describes one model; more groups than this is a damaged file, not a real optimizer.
constexpr int64_t kMaxGroups = 1 << 20;

std::string join_reals(const std::vector<double>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) (out += (i ? "," : "")) += format_exact(values[i]);
  return out;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) (out += (i ? "," : "")) += names[i];
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// How many of t's values are NaN or infinite (none for an integer tensor).
int64_t count_non_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return 0;
  int64_t bad = 0;
  for (double v : t.to(Device::cpu()).to(DType::Float64).to_vector<double>()) bad += std::isfinite(v) ? 0 : 1;
  return bad;
}

// Note [a checkpoint holds only finite numbers]: weights or optimizer state with NaN or Inf in
// them cannot be trained on (every later loss is NaN), and a number that does not read back
// makes the file unreadable. save_checkpoint refuses to write either, so the file keeps its last
// good contents; load_checkpoint refuses them with the tensor's name (load_safetensors itself
// accepts any values, as the format does).
void check_finite_tensors(const TensorMap& tensors, const std::string& what) {
  for (const auto& [name, t] : tensors) {
    const int64_t bad = count_non_finite(t);
    MINIDL_CHECK(bad == 0, what, ": tensor '", name, "' holds ", bad, " NaN or infinite value", bad == 1 ? "" : "s",
                 " of ", t.numel(), " (the run it comes from diverged)");
  }
}

void check_finite(double v, const std::string& what, const std::string& key) {
  MINIDL_CHECK(std::isfinite(v), what, ": '", key, "' is ", v, "; a checkpoint holds finite numbers only");
}

// ---- version 1: the trainers' own layouts ----

// Note [reading version 1]: "char_gpt/1" and "fashion_mnist/1" hold the same library parts under
// almost the same keys (no minidl.program, no step, no run. prefix; char_gpt's iteration and
// generator.default.*; fashion_mnist's generator.* and scheduler.name "none", no groups). They are
// rewritten into version 2 keys here; what is the program's own stays under run.<key>.
Metadata upgrade_v1(const Metadata& m, const std::string& layout, const std::string& path) {
  const bool gpt = layout == "char_gpt/1";
  Metadata out;
  out["minidl.checkpoint"] = kVersion;
  out["minidl.program"] = gpt ? "char_gpt" : "fashion_mnist";
  for (const auto& [k, v] : m) {
    if (k == "minidl.checkpoint") continue;
    if (starts_with(k, "optimizer.") || starts_with(k, "scheduler.")) out[k] = v;
    else if (gpt && starts_with(k, "generator.default.")) out[k] = v;
    else if (!gpt && (k == "generator.seed" || k == "generator.offset")) out["generator.default." + k.substr(10)] = v;
    else if (gpt && k == "iteration") out["step"] = v;
    else if (gpt && k == "generator.batch.offset") {  // rank 0's batch stream: Generator(seed)
      out[k] = v;
      out["generator.batch.seed"] = m.count("hp.seed") ? m.at("hp.seed") : "0";
    }
    else out[kProgramPrefix + k] = v;  // hp.*, vocab, history, generator.batch.offset, loader.*, epoch.*
  }
  if (!gpt) {
    // The step of a fashion_mnist/1 file: its loader position in batches.
    const MetadataReader r(m, path);
    const int64_t n = r.integer("loader.dataset_size", 0), b = r.integer("loader.batch_size", 1);
    const int64_t per_epoch = r.text("loader.drop_last") == "1" || n % b == 0 ? n / b : n / b + 1;  // no n + b - 1: b may be INT64_MAX
    const int64_t epoch = r.integer("loader.epoch", 0, INT64_MAX / std::max<int64_t>(per_epoch, 1) - 1);
    out["step"] = std::to_string(epoch * per_epoch + r.integer("loader.batch", 0, per_epoch));
  }
  return out;
}

}  // namespace

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

std::string format_exact(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  MINIDL_CHECK(ec == std::errc(), "format_exact: cannot format ", v);
  return std::string(buf, end);
}

// ---- MetadataReader ----

const std::string& MetadataReader::text(const std::string& key) const {
  auto it = m_.find(key);
  MINIDL_CHECK(it != m_.end(), "checkpoint ", path_, ": metadata key '", key,
               "' is missing (not a checkpoint of this program, or a damaged one)");
  return it->second;
}

int64_t MetadataReader::parse_integer(const std::string& t, const std::string& key, int64_t min, int64_t max) const {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  MINIDL_CHECK(ec == std::errc() && end == t.data() + t.size(), where(key), ": '", t, "' is not an integer");
  MINIDL_CHECK(v >= min && v <= max, where(key), ": ", v, " is out of range; expected ",
               max == INT64_MAX ? "an integer >= " + std::to_string(min)
                                : "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

int64_t MetadataReader::integer(const std::string& key, int64_t min, int64_t max) const {
  return parse_integer(text(key), key, min, max);
}

uint64_t MetadataReader::unsigned_integer(const std::string& key) const {
  const std::string& t = text(key);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  MINIDL_CHECK(ec == std::errc() && end == t.data() + t.size(), where(key), ": '", t, "' is not an unsigned integer");
  return v;
}

double MetadataReader::parse_real(const std::string& t, const std::string& key) const {
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  MINIDL_CHECK(ec == std::errc() && end == t.data() + t.size() && std::isfinite(v), where(key), ": '", t,
               "' is not a finite number");
  return v;
}

double MetadataReader::real(const std::string& key) const { return parse_real(text(key), key); }

std::vector<double> MetadataReader::reals(const std::string& key) const {
  std::vector<double> out;
  for (const std::string& part : split_text(text(key), ',')) out.push_back(parse_real(part, key));
  return out;
}

std::map<std::string, std::string> MetadataReader::with_prefix(const std::string& prefix) const {
  std::map<std::string, std::string> out;
  for (auto it = m_.lower_bound(prefix); it != m_.end() && starts_with(it->first, prefix); ++it)
    out.emplace(it->first.substr(prefix.size()), it->second);
  return out;
}

// ---- save ----

void save_checkpoint(const Checkpoint& c, const std::string& path) {
  // Note [a checkpoint holds only finite numbers]: everything is checked before anything is written.
  const std::string refusing = "save_checkpoint: " + path + ": refusing to save (the file keeps its last contents)";
  MINIDL_CHECK(!c.program.empty(), refusing, ": the checkpoint names no program");
  MINIDL_CHECK(c.step >= 0, refusing, ": step is ", c.step, "; expected >= 0");
  TensorMap tensors;
  Metadata meta;
  meta["minidl.checkpoint"] = kVersion;
  meta["minidl.program"] = c.program;
  meta["step"] = std::to_string(c.step);
  for (const auto& [name, t] : c.model) tensors.emplace("model." + name, t);

  const optim::OptimizerState& o = c.optimizer;
  meta["optimizer.name"] = o.optimizer;
  meta["optimizer.group_lrs"] = join_reals(o.group_lrs);
  for (double lr : o.group_lrs) check_finite(lr, refusing, "optimizer.group_lrs");
  for (const auto& [k, v] : o.hyperparameters) {
    check_finite(v, refusing, "optimizer.hp." + k);
    meta["optimizer.hp." + k] = format_exact(v);
  }
  for (const auto& [k, v] : o.counters) {
    MINIDL_CHECK(v >= 0, refusing, ": optimizer counter '", k, "' is ", v, "; expected >= 0");
    meta["optimizer.counter." + k] = std::to_string(v);
  }
  for (const auto& [k, t] : o.tensors) tensors.emplace("optimizer." + k, t);
  meta["optimizer.groups"] = std::to_string(o.param_groups.size());
  for (size_t i = 0; i < o.param_groups.size(); ++i) {
    const std::string g = "optimizer.group." + std::to_string(i) + ".";
    meta[g + "params"] = join_names(o.param_groups[i].params);
    for (const auto& [k, v] : o.param_groups[i].options) {
      check_finite(v, refusing, g + "option." + k);
      meta[g + "option." + k] = format_exact(v);
    }
  }

  meta["scheduler.name"] = c.scheduler ? c.scheduler->scheduler : "none";
  if (c.scheduler) {
    const optim::LRSchedulerState& s = *c.scheduler;
    MINIDL_CHECK(s.last_epoch >= 0, refusing, ": the scheduler's last_epoch is ", s.last_epoch, "; expected >= 0");
    meta["scheduler.last_epoch"] = std::to_string(s.last_epoch);
    for (double v : s.base_lrs) check_finite(v, refusing, "scheduler.base_lrs");
    for (double v : s.last_lr) check_finite(v, refusing, "scheduler.last_lr");
    meta["scheduler.base_lrs"] = join_reals(s.base_lrs);
    meta["scheduler.last_lr"] = join_reals(s.last_lr);
    for (const auto& [k, v] : s.hyperparameters) {
      check_finite(v, refusing, "scheduler.hp." + k);
      meta["scheduler.hp." + k] = format_exact(v);
    }
  }

  if (c.grad_scaler) {
    const optim::GradScalerState& s = *c.grad_scaler;
    MINIDL_CHECK(std::isfinite(s.scale) && s.scale > 0, refusing, ": the grad scaler's scale is ", s.scale,
                 "; expected finite and positive");
    MINIDL_CHECK(s.growth_tracker >= 0 && s.growth_interval >= 1, refusing, ": the grad scaler's growth tracker ",
                 s.growth_tracker, " or interval ", s.growth_interval, " is out of range");
    check_finite(s.growth_factor, refusing, "grad_scaler.growth_factor");
    check_finite(s.backoff_factor, refusing, "grad_scaler.backoff_factor");
    meta["grad_scaler.scale"] = format_exact(s.scale);
    meta["grad_scaler.growth_tracker"] = std::to_string(s.growth_tracker);
    meta["grad_scaler.growth_factor"] = format_exact(s.growth_factor);
    meta["grad_scaler.backoff_factor"] = format_exact(s.backoff_factor);
    meta["grad_scaler.growth_interval"] = std::to_string(s.growth_interval);
  }

  for (const auto& [name, g] : c.generators) {
    MINIDL_CHECK(!name.empty() && name.find('.') == std::string::npos, refusing, ": generator name '", name,
                 "' must be non-empty without '.'");
    meta["generator." + name + ".seed"] = std::to_string(g.seed);
    meta["generator." + name + ".offset"] = std::to_string(g.offset);
  }
  for (const auto& [k, v] : c.metadata) {
    MINIDL_CHECK(!k.empty(), refusing, ": a metadata key is empty");
    meta[kProgramPrefix + k] = v;
  }
  check_finite_tensors(tensors, refusing);
  save_safetensors(tensors, path, meta);
}

// ---- load ----

Checkpoint load_checkpoint(const std::string& path, const std::string& program) {
  SafetensorsFile file = load_safetensors(path);
  Metadata meta = std::move(file.metadata);
  {
    const MetadataReader r(meta, path);
    const std::string& version = r.text("minidl.checkpoint");
    if (version == "char_gpt/1" || version == "fashion_mnist/1") meta = upgrade_v1(meta, version, path);  // Note [reading version 1]
    else
      MINIDL_CHECK(version == kVersion, "checkpoint ", path, ": layout version '", version, "'; this minidl reads version ",
                   kVersion, " and the trainers' version 1 layouts (char_gpt/1, fashion_mnist/1)");
  }
  const MetadataReader r(meta, path);
  Checkpoint c;
  c.program = r.text("minidl.program");
  MINIDL_CHECK(program.empty() || c.program == program, "checkpoint ", path, ": written by ", c.program,
               ", not by ", program, "; expected a checkpoint of ", program);
  c.step = r.integer("step", 0);

  for (auto& [name, t] : file.tensors) {
    if (starts_with(name, "model.")) c.model.emplace(name.substr(6), t);
    else if (starts_with(name, "optimizer.")) c.optimizer.tensors.emplace(name.substr(10), t);
    else throw Error("checkpoint " + path + ": unexpected tensor '" + name + "' (expected model.* or optimizer.*)");
  }
  check_finite_tensors(file.tensors, "checkpoint " + path);  // Note [a checkpoint holds only finite numbers]

  optim::OptimizerState& o = c.optimizer;
  o.optimizer = r.text("optimizer.name");
  o.group_lrs = r.reals("optimizer.group_lrs");
  for (double lr : o.group_lrs) MINIDL_CHECK(lr >= 0, r.where("optimizer.group_lrs"), ": a negative lr ", lr);
  for (const auto& [k, v] : r.with_prefix("optimizer.hp.")) o.hyperparameters[k] = r.parse_real(v, "optimizer.hp." + k);
  for (const auto& [k, v] : r.with_prefix("optimizer.counter."))
    o.counters[k] = r.parse_integer(v, "optimizer.counter." + k, 0);
  // Files written before groups had options of their own have no optimizer.groups (optim/optimizer.h).
  const int64_t groups = r.has("optimizer.groups") ? r.integer("optimizer.groups", 0, kMaxGroups) : 0;
  MINIDL_CHECK(groups == 0 || groups == static_cast<int64_t>(o.group_lrs.size()), r.where("optimizer.groups"), ": ",
               groups, " groups but ", o.group_lrs.size(), " group lrs");
  for (int64_t i = 0; i < groups; ++i) {
    const std::string g = "optimizer.group." + std::to_string(i) + ".";
    optim::ParamGroupState s;
    s.params = split_text(r.text(g + "params"), ',');
    for (const auto& [k, v] : r.with_prefix(g + "option.")) s.options[k] = r.parse_real(v, g + "option." + k);
    o.param_groups.push_back(std::move(s));
  }

  if (r.text("scheduler.name") != "none") {
    optim::LRSchedulerState s;
    s.scheduler = r.text("scheduler.name");
    s.last_epoch = r.integer("scheduler.last_epoch", 0);
    s.base_lrs = r.reals("scheduler.base_lrs");
    s.last_lr = r.reals("scheduler.last_lr");
    MINIDL_CHECK(s.base_lrs.size() == o.group_lrs.size() && s.last_lr.size() == o.group_lrs.size(),
                 "checkpoint ", path, ": the scheduler has ", s.base_lrs.size(), " base lr(s) and ", s.last_lr.size(),
                 " last lr(s) for ", o.group_lrs.size(), " optimizer group(s)");
    for (const auto& [k, v] : r.with_prefix("scheduler.hp.")) s.hyperparameters[k] = r.parse_real(v, "scheduler.hp." + k);
    c.scheduler = std::move(s);
  }

  if (!r.with_prefix("grad_scaler.").empty()) {
    optim::GradScalerState s;
    s.scale = r.parse_real(r.text("grad_scaler.scale"), "grad_scaler.scale");
    MINIDL_CHECK(s.scale > 0, r.where("grad_scaler.scale"), ": ", s.scale, " is not a positive scale");
    s.growth_tracker = r.integer("grad_scaler.growth_tracker", 0);
    s.growth_factor = r.parse_real(r.text("grad_scaler.growth_factor"), "grad_scaler.growth_factor");
    s.backoff_factor = r.parse_real(r.text("grad_scaler.backoff_factor"), "grad_scaler.backoff_factor");
    s.growth_interval = r.integer("grad_scaler.growth_interval", 1);
    c.grad_scaler = s;
  }

  for (const auto& [rest, value] : r.with_prefix("generator.")) {
    const size_t dot = rest.rfind('.');
    const std::string name = rest.substr(0, dot), field = dot == std::string::npos ? "" : rest.substr(dot + 1);
    MINIDL_CHECK(dot != std::string::npos && (field == "seed" || field == "offset"), r.where("generator." + rest),
                 ": expected generator.<name>.seed or .offset");
    if (c.generators.count(name)) continue;
    c.generators[name] = GeneratorState{r.unsigned_integer("generator." + name + ".seed"),
                                        r.unsigned_integer("generator." + name + ".offset")};
  }
  c.metadata = r.with_prefix(kProgramPrefix);
  return c;
}

// ---- the common parts in one call ----

void capture_training_state(const TrainingState& s, Checkpoint& c) {
  c.model = s.model.state_dict();
  c.optimizer = s.optimizer.state_dict(s.names);
  if (s.scheduler) c.scheduler = s.scheduler->state();
  else c.scheduler.reset();
  if (s.grad_scaler && s.grad_scaler->is_enabled()) c.grad_scaler = s.grad_scaler->state();
  else c.grad_scaler.reset();
  c.generators["default"] = default_generator().state();
}

void restore_training_state(const TrainingState& s, const Checkpoint& c, const std::string& path) {
  MINIDL_CHECK(c.scheduler.has_value() == (s.scheduler != nullptr), "checkpoint ", path, " has ",
               c.scheduler ? "scheduler " + c.scheduler->scheduler : std::string("no scheduler"), ", this run ",
               s.scheduler ? "has one" : "has none");
  const bool scaled = s.grad_scaler && s.grad_scaler->is_enabled();
  MINIDL_CHECK(c.grad_scaler.has_value() == scaled, "checkpoint ", path, " has ",
               c.grad_scaler ? "a float16 loss scale" : "no loss scale", ", this run ",
               scaled ? "scales its float16 loss" : "has no loss scaling", " (resume with the --dtype it was written with)");
  auto def = c.generators.find("default");
  MINIDL_CHECK(def != c.generators.end(), "checkpoint ", path, ": the default generator's state is missing");
  // Each load checks before it changes anything; the model's comes first.
  s.model.load_state_dict(c.model);
  s.optimizer.load_state_dict(c.optimizer, s.names);
  if (s.scheduler) s.scheduler->load_state(*c.scheduler);
  if (scaled) s.grad_scaler->load_state(*c.grad_scaler);
  default_generator().set_state(def->second);
}

}  // namespace minidl::io
