// The Fashion-MNIST trainer's checkpoint entries (samples/fashion_mnist/checkpoint.h) on top of
// the library's checkpoint (io/checkpoint.h).
#include "samples/fashion_mnist/checkpoint.h"

#include <cmath>

namespace minidl::fashion_mnist {

namespace {

constexpr const char* kProgram = "fashion_mnist";

int64_t batches_per_epoch(const data::DataLoaderState& l) {
  // A ceiling without n + b - 1, which overflows for a batch size near INT64_MAX.
  const int64_t full = l.dataset_size / l.batch_size;
  return l.drop_last || l.dataset_size % l.batch_size == 0 ? full : full + 1;
}

}  // namespace

void write_run_entries(const RunEntries& e, io::Metadata& meta) {
  std::string rows;
  for (const EpochMetrics& m : e.history) {
    for (double v : {m.train_loss, m.test_loss, m.test_acc, m.samples_per_s, m.lr})
      MINIDL_CHECK(std::isfinite(v), "fashion_mnist: refusing to save the checkpoint: the metrics of epoch ", m.epoch,
                   " hold ", v, "; the losses, lrs and metrics must be finite to be read back");
    rows += std::to_string(m.epoch) + "," + io::format_exact(m.train_loss) + "," + io::format_exact(m.test_loss) + "," +
            io::format_exact(m.test_acc) + "," + io::format_exact(m.samples_per_s) + "," + io::format_exact(m.lr) + "\n";
  }
  meta["history"] = rows;
  const data::DataLoaderState& l = e.loader;
  meta["loader.epoch"] = std::to_string(l.epoch);
  meta["loader.batch"] = std::to_string(l.batch);
  meta["loader.seed"] = std::to_string(l.seed);
  meta["loader.shuffle"] = l.shuffle ? "1" : "0";
  meta["loader.drop_last"] = l.drop_last ? "1" : "0";
  meta["loader.batch_size"] = std::to_string(l.batch_size);
  meta["loader.dataset_size"] = std::to_string(l.dataset_size);
}

RunEntries read_run_entries(const io::Metadata& meta, const std::string& path) {
  const io::MetadataReader r(meta, path);
  auto flag = [&](const std::string& key) {
    const std::string& t = r.text(key);
    MINIDL_CHECK(t == "0" || t == "1", r.where(key), ": expected 0 or 1, got '", t, "'");
    return t == "1";
  };
  RunEntries e;
  data::DataLoaderState& l = e.loader;
  l.epoch = r.integer("loader.epoch", 0);
  l.seed = r.unsigned_integer("loader.seed");
  l.shuffle = flag("loader.shuffle");
  l.drop_last = flag("loader.drop_last");
  l.batch_size = r.integer("loader.batch_size", 1);
  l.dataset_size = r.integer("loader.dataset_size", 0);
  l.batch = r.integer("loader.batch", 0, batches_per_epoch(l));
  for (const std::string& row : io::split_text(r.text("history"), '\n')) {
    if (row.empty()) continue;
    const std::vector<std::string> f = io::split_text(row, ',');
    MINIDL_CHECK(f.size() == 6, r.where("history"), ": row '", row, "' has ", f.size(), " fields, expected 6");
    EpochMetrics m;
    m.epoch = r.parse_integer(f[0], "history", 1);
    m.train_loss = r.parse_real(f[1], "history");
    m.test_loss = r.parse_real(f[2], "history");
    m.test_acc = r.parse_real(f[3], "history");
    m.samples_per_s = r.parse_real(f[4], "history");
    m.lr = r.parse_real(f[5], "history");
    e.history.push_back(m);
  }
  return e;
}

void save_checkpoint(const Checkpoint& c, const std::string& path) {
  io::Checkpoint ck;
  ck.program = kProgram;
  ck.step = c.loader.epoch * batches_per_epoch(c.loader) + c.loader.batch;
  ck.model = c.model;
  ck.optimizer = c.optimizer;
  ck.scheduler = c.scheduler;
  ck.generators["default"] = c.generator;
  for (const auto& [k, v] : c.hyperparameters) ck.metadata["hp." + k] = v;
  MINIDL_CHECK(std::isfinite(c.epoch_loss_sum), "fashion_mnist: refusing to save the checkpoint: the epoch's loss sum is ",
               c.epoch_loss_sum, "; it must be finite to be read back");
  ck.metadata["epoch.loss_sum"] = io::format_exact(c.epoch_loss_sum);
  ck.metadata["epoch.samples"] = std::to_string(c.epoch_samples);
  write_run_entries({c.loader, c.history}, ck.metadata);
  io::save_checkpoint(ck, path);
}

Checkpoint load_checkpoint(const std::string& path) {
  io::Checkpoint ck = io::load_checkpoint(path, kProgram);
  const io::MetadataReader r(ck.metadata, path);
  Checkpoint c;
  for (const auto& [k, v] : r.with_prefix("hp.")) c.hyperparameters[k] = v;
  c.model = std::move(ck.model);
  c.optimizer = std::move(ck.optimizer);
  c.scheduler = std::move(ck.scheduler);
  auto def = ck.generators.find("default");
  MINIDL_CHECK(def != ck.generators.end(), "checkpoint ", path, ": the default generator's state is missing");
  c.generator = def->second;
  c.epoch_loss_sum = r.real("epoch.loss_sum");
  c.epoch_samples = r.integer("epoch.samples", 0);
  RunEntries e = read_run_entries(ck.metadata, path);
  c.loader = e.loader;
  c.history = std::move(e.history);
  return c;
}

}  // namespace minidl::fashion_mnist
