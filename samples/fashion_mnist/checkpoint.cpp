// The checkpoint layout of samples/fashion_mnist/checkpoint.h: flattening the trainer's state
// into safetensors tensors + string metadata, and reading it back with a clear error for any
// key that is missing or unreadable.
#include "samples/fashion_mnist/checkpoint.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "io/safetensors.h"

namespace minidl::fashion_mnist {

namespace {

constexpr const char* kLayout = "fashion_mnist/1";

std::string format_int(int64_t v) { return std::to_string(v); }
std::string format_uint(uint64_t v) { return std::to_string(v); }

std::string join(const std::vector<double>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += format_exact(values[i]);
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
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

// Reads the metadata of one file, each error naming the file and the key.
class MetadataReader {
 public:
  MetadataReader(const io::Metadata& m, const std::string& path) : m_(m), path_(path) {}

  const std::string& text(const std::string& key) const {
    auto it = m_.find(key);
    MINIDL_CHECK(it != m_.end(), "checkpoint ", path_, ": metadata key '", key,
                 "' is missing (not a checkpoint of samples/fashion_mnist, or a damaged one)");
    return it->second;
  }
  double real(const std::string& key) const { return parse_double(text(key), where(key)); }
  int64_t integer(const std::string& key) const { return parse_int(text(key), key); }
  uint64_t unsigned_integer(const std::string& key) const {
    const std::string& t = text(key);
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    MINIDL_CHECK(ec == std::errc() && end == t.data() + t.size(), where(key), ": '", t,
                 "' is not an unsigned integer");
    return v;
  }
  bool flag(const std::string& key) const {
    const std::string& t = text(key);
    MINIDL_CHECK(t == "0" || t == "1", where(key), ": expected 0 or 1, got '", t, "'");
    return t == "1";
  }
  std::vector<double> reals(const std::string& key) const {
    std::vector<double> out;
    for (const std::string& part : split(text(key), ',')) out.push_back(parse_double(part, where(key)));
    return out;
  }
  // Every "<prefix><rest>" key, as rest -> value.
  std::map<std::string, std::string> with_prefix(const std::string& prefix) const {
    std::map<std::string, std::string> out;
    for (auto it = m_.lower_bound(prefix); it != m_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      out.emplace(it->first.substr(prefix.size()), it->second);
    return out;
  }
  int64_t parse_int(const std::string& t, const std::string& key) const {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    MINIDL_CHECK(ec == std::errc() && end == t.data() + t.size(), where(key), ": '", t, "' is not an integer");
    return v;
  }
  std::string where(const std::string& key) const { return "checkpoint " + path_ + ", metadata '" + key + "'"; }

 private:
  const io::Metadata& m_;
  const std::string& path_;
};

std::string history_text(const std::vector<EpochMetrics>& history) {
  std::string out;
  for (const EpochMetrics& e : history) {
    out += format_int(e.epoch) + "," + format_exact(e.train_loss) + "," + format_exact(e.test_loss) + "," +
           format_exact(e.test_acc) + "," + format_exact(e.samples_per_s) + "," + format_exact(e.lr) + "\n";
  }
  return out;
}

std::vector<EpochMetrics> parse_history(const MetadataReader& r) {
  std::vector<EpochMetrics> out;
  for (const std::string& row : split(r.text("history"), '\n')) {
    if (row.empty()) continue;
    const std::vector<std::string> f = split(row, ',');
    MINIDL_CHECK(f.size() == 6, r.where("history"), ": row '", row, "' has ", f.size(), " fields, expected 6");
    EpochMetrics e;
    e.epoch = r.parse_int(f[0], "history");
    e.train_loss = parse_double(f[1], r.where("history"));
    e.test_loss = parse_double(f[2], r.where("history"));
    e.test_acc = parse_double(f[3], r.where("history"));
    e.samples_per_s = parse_double(f[4], r.where("history"));
    e.lr = parse_double(f[5], r.where("history"));
    out.push_back(e);
  }
  return out;
}

// How many of t's values are NaN or infinite (none for an integer tensor).
int64_t count_non_finite(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype())) return 0;
  int64_t bad = 0;
  for (double v : t.to(Device::cpu()).to(DType::Float64).to_vector<double>()) bad += std::isfinite(v) ? 0 : 1;
  return bad;
}

// Note [a checkpoint holds only finite numbers]: a run's weights or optimizer state with NaN or
// Inf in them cannot be trained on (every later loss is NaN), and metadata parse_double cannot
// read back would make the file unreadable. save_checkpoint refuses to write either, so the file
// at `path` keeps its last good contents; load_checkpoint refuses them with the tensor's name
// (io::load_safetensors itself accepts any values, as the format does).
void check_finite_tensors(const io::TensorMap& tensors, const std::string& what) {
  for (const auto& [name, t] : tensors) {
    const int64_t bad = count_non_finite(t);
    MINIDL_CHECK(bad == 0, what, ": tensor '", name, "' holds ", bad, " NaN or infinite value", bad == 1 ? "" : "s",
                 " of ", t.numel(), " (the run it comes from diverged)");
  }
}

}  // namespace

std::string format_exact(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  MINIDL_CHECK(ec == std::errc(), "format_exact: cannot format ", v);
  return std::string(buf, end);
}

double parse_double(const std::string& text, const std::string& what) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  MINIDL_CHECK(ec == std::errc() && end == text.data() + text.size() && std::isfinite(v), what, ": '", text,
               "' is not a finite number");
  return v;
}

void save_checkpoint(const Checkpoint& c, const std::string& path) {
  io::TensorMap tensors;
  io::Metadata meta;
  meta["minidl.checkpoint"] = kLayout;
  for (const auto& [k, v] : c.hyperparameters) meta["hp." + k] = v;
  for (const auto& [name, t] : c.model) tensors.emplace("model." + name, t);

  const optim::OptimizerState& o = c.optimizer;
  meta["optimizer.name"] = o.optimizer;
  meta["optimizer.group_lrs"] = join(o.group_lrs);
  for (const auto& [k, v] : o.hyperparameters) meta["optimizer.hp." + k] = format_exact(v);
  for (const auto& [k, v] : o.counters) meta["optimizer.counter." + k] = format_int(v);
  for (const auto& [k, t] : o.tensors) tensors.emplace("optimizer." + k, t);

  meta["scheduler.name"] = c.scheduler ? c.scheduler->scheduler : "none";
  if (c.scheduler) {
    meta["scheduler.last_epoch"] = format_int(c.scheduler->last_epoch);
    meta["scheduler.base_lrs"] = join(c.scheduler->base_lrs);
    meta["scheduler.last_lr"] = join(c.scheduler->last_lr);
    for (const auto& [k, v] : c.scheduler->hyperparameters) meta["scheduler.hp." + k] = format_exact(v);
  }

  meta["generator.seed"] = format_uint(c.generator.seed);
  meta["generator.offset"] = format_uint(c.generator.offset);

  const data::DataLoaderState& l = c.loader;
  meta["loader.epoch"] = format_int(l.epoch);
  meta["loader.batch"] = format_int(l.batch);
  meta["loader.seed"] = format_uint(l.seed);
  meta["loader.shuffle"] = l.shuffle ? "1" : "0";
  meta["loader.drop_last"] = l.drop_last ? "1" : "0";
  meta["loader.batch_size"] = format_int(l.batch_size);
  meta["loader.dataset_size"] = format_int(l.dataset_size);

  meta["epoch.loss_sum"] = format_exact(c.epoch_loss_sum);
  meta["epoch.samples"] = format_int(c.epoch_samples);
  meta["history"] = history_text(c.history);

  // Note [a checkpoint holds only finite numbers]: check everything before writing anything.
  const std::string refusing = "checkpoint " + path + ": refusing to save (the file keeps its last contents)";
  check_finite_tensors(tensors, refusing);
  std::vector<double> reals = {c.epoch_loss_sum};
  reals.insert(reals.end(), o.group_lrs.begin(), o.group_lrs.end());
  for (const auto& [k, v] : o.hyperparameters) reals.push_back(v);
  if (c.scheduler) {
    reals.insert(reals.end(), c.scheduler->base_lrs.begin(), c.scheduler->base_lrs.end());
    reals.insert(reals.end(), c.scheduler->last_lr.begin(), c.scheduler->last_lr.end());
    for (const auto& [k, v] : c.scheduler->hyperparameters) reals.push_back(v);
  }
  for (const EpochMetrics& e : c.history)
    reals.insert(reals.end(), {e.train_loss, e.test_loss, e.test_acc, e.samples_per_s, e.lr});
  for (double v : reals)
    MINIDL_CHECK(std::isfinite(v), refusing, ": its metadata would hold ", v,
                 " (the losses, lrs and metrics must be finite numbers to be read back)");

  io::save_safetensors(tensors, path, meta);
}

Checkpoint load_checkpoint(const std::string& path) {
  io::SafetensorsFile file = io::load_safetensors(path);
  const MetadataReader r(file.metadata, path);
  MINIDL_CHECK(r.text("minidl.checkpoint") == kLayout, "checkpoint ", path, ": layout '", r.text("minidl.checkpoint"),
               "', this trainer reads '", kLayout, "'");
  Checkpoint c;
  c.hyperparameters = r.with_prefix("hp.");

  for (auto& [name, t] : file.tensors) {
    if (name.rfind("model.", 0) == 0) c.model.emplace(name.substr(6), t);
    else if (name.rfind("optimizer.", 0) == 0) c.optimizer.tensors.emplace(name.substr(10), t);
    else throw Error("checkpoint " + path + ": unexpected tensor '" + name + "' (expected model.* or optimizer.*)");
  }
  check_finite_tensors(file.tensors, "checkpoint " + path);  // Note [a checkpoint holds only finite numbers]

  c.optimizer.optimizer = r.text("optimizer.name");
  c.optimizer.group_lrs = r.reals("optimizer.group_lrs");
  for (const auto& [k, v] : r.with_prefix("optimizer.hp."))
    c.optimizer.hyperparameters[k] = parse_double(v, r.where("optimizer.hp." + k));
  for (const auto& [k, v] : r.with_prefix("optimizer.counter."))
    c.optimizer.counters[k] = r.parse_int(v, "optimizer.counter." + k);

  if (r.text("scheduler.name") != "none") {
    optim::LRSchedulerState s;
    s.scheduler = r.text("scheduler.name");
    s.last_epoch = r.integer("scheduler.last_epoch");
    s.base_lrs = r.reals("scheduler.base_lrs");
    s.last_lr = r.reals("scheduler.last_lr");
    for (const auto& [k, v] : r.with_prefix("scheduler.hp."))
      s.hyperparameters[k] = parse_double(v, r.where("scheduler.hp." + k));
    c.scheduler = s;
  }

  c.generator.seed = r.unsigned_integer("generator.seed");
  c.generator.offset = r.unsigned_integer("generator.offset");

  c.loader.epoch = r.integer("loader.epoch");
  c.loader.batch = r.integer("loader.batch");
  c.loader.seed = r.unsigned_integer("loader.seed");
  c.loader.shuffle = r.flag("loader.shuffle");
  c.loader.drop_last = r.flag("loader.drop_last");
  c.loader.batch_size = r.integer("loader.batch_size");
  c.loader.dataset_size = r.integer("loader.dataset_size");

  c.epoch_loss_sum = r.real("epoch.loss_sum");
  c.epoch_samples = r.integer("epoch.samples");
  c.history = parse_history(r);
  return c;
}

}  // namespace minidl::fashion_mnist
