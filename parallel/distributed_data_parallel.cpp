// DistributedDataParallel: the configuration check, the broadcast from rank 0, the reducer over
// the process group, and forward.
#include "parallel/distributed_data_parallel.h"

#include <algorithm>
#include <sstream>

#include "core/autograd.h"
#include "parallel/model_state.h"

namespace minidl::parallel {
namespace {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int64_t fnv1a(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

// One line per parameter, then per buffer: "parameter fc1.weight [8, 6] float32".
std::vector<std::string> describe_state(const nn::Module& model) {
  std::vector<std::string> lines;
  auto add = [&](const char* kind, const std::string& name, const Tensor& t) {
    std::ostringstream os;
    os << kind << " " << name << " " << t.shape() << " " << t.dtype();
    lines.push_back(os.str());
  };
  for (const auto& [name, p] : model.named_parameters()) add("parameter", name, p);
  for (const auto& [name, b] : model.named_buffers()) add("buffer", name, b);
  return lines;
}

}  // namespace

void check_same_on_every_rank(ProcessGroup& group, const std::string& what, const std::vector<std::string>& lines) {
  const std::string text = join_lines(lines);
  const Tensor mine = from_vector(std::vector<int64_t>{fnv1a(text), static_cast<int64_t>(text.size())}).to(group.device());
  const std::vector<int64_t> digests = group.all_gather(mine).to(Device::cpu()).to_vector<int64_t>();  // [world, 2]
  const int world = group.world_size();
  bool same = true;
  int64_t longest = 0;
  for (int r = 0; r < world; ++r) {
    same = same && digests[2 * r] == digests[0] && digests[2 * r + 1] == digests[1];
    longest = std::max(longest, digests[2 * r + 1]);
  }
  if (same) return;

  // They differ: gather the texts themselves (every rank takes part, so every rank throws).
  std::vector<int64_t> chars(static_cast<size_t>(longest), -1);
  for (size_t i = 0; i < text.size(); ++i) chars[i] = static_cast<unsigned char>(text[i]);
  const Tensor padded = from_vector(chars, Shape{longest}).to(group.device());
  const std::vector<int64_t> all = group.all_gather(padded).to(Device::cpu()).to_vector<int64_t>();  // [world, longest]
  std::vector<std::vector<std::string>> texts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    std::string t;
    for (int64_t i = 0; i < longest && all[static_cast<size_t>(r * longest + i)] >= 0; ++i)
      t.push_back(static_cast<char>(all[static_cast<size_t>(r * longest + i)]));
    texts[static_cast<size_t>(r)] = split_lines(t);
  }
  std::vector<int> differing;
  for (int r = 1; r < world; ++r)
    if (texts[static_cast<size_t>(r)] != texts[0]) differing.push_back(r);
  const int r = differing.empty() ? 0 : differing[0];  // empty only on a digest collision
  const auto& a = texts[0];
  const auto& b = texts[static_cast<size_t>(r)];
  size_t line = 0;
  while (line < a.size() && line < b.size() && a[line] == b[line]) ++line;
  auto entry = [&](const std::vector<std::string>& t) {
    return line < t.size() ? "'" + t[line] + "'" : std::string("nothing (it has ") + std::to_string(t.size()) + " entries)";
  };
  std::ostringstream os;
  os << what << " differs between ranks: at entry " << line << ", rank 0 has " << entry(a) << " and rank " << r
     << " has " << entry(b) << " (ranks that differ from rank 0:";
  for (int d : differing) os << " " << d;
  os << "; every rank must run the same program with the same configuration)";
  throw Error(os.str());
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> model, std::shared_ptr<ProcessGroup> group,
                                                 DistributedDataParallelOptions options)
    : model_(std::move(model)), group_(std::move(group)) {
  MINIDL_CHECK(model_ != nullptr, "DistributedDataParallel: got a null model");
  MINIDL_CHECK(group_ != nullptr, "DistributedDataParallel: got a null process group");
  const Device device = group_->device();
  // A rank whose model is elsewhere must not throw alone (the others would wait in the check's
  // all-gather): whether it is on the group's device is one more line of the checked list.
  const std::string misplaced = first_tensor_not_on(*model_, device);
  std::vector<std::string> lines = describe_state(*model_);
  lines.push_back(misplaced.empty() ? "on the process group's device" : "not on the process group's device");
  register_module("module", model_);
  check_same_on_every_rank(*group_, "DistributedDataParallel: the model (" + model_->name() + ": parameter and buffer "
                           "names, shapes and dtypes)", lines);
  MINIDL_CHECK(misplaced.empty(), "DistributedDataParallel: the model's (", model_->name(), ") ", misplaced,
               ", but rank ", group_->rank(), " of the ", group_->backend_name(), " process group passes tensors on ",
               device, "; move the model there first (model->to(", device, "))");
  broadcast_state();
  reducer_ = GradientReducer::create({model_->parameters()}, group_, options.bucket_cap_bytes, "DistributedDataParallel");
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::string DistributedDataParallel::name() const {
  return "DistributedDataParallel(" + model_->name() + ", rank " + std::to_string(group_->rank()) + " of " +
         std::to_string(group_->world_size()) + " on " + group_->device().str() + ")";
}

std::shared_ptr<nn::Module> DistributedDataParallel::clone() const {
  throw Error("DistributedDataParallel: cannot be cloned; clone the wrapped model (module()->clone()) and wrap the copy");
}

void DistributedDataParallel::broadcast_state() {
  const std::vector<Tensor> state = parameters_and_buffers(*model_);
  if (state.empty() || group_->world_size() == 1) return;
  NoGradGuard no_grad;
  std::vector<DeviceTensors> groups;
  for (const Tensor& t : state) groups.push_back({t});
  group_->broadcast_grouped(std::move(groups), 0)->wait();
}

BatchShard DistributedDataParallel::shard(int64_t total) const {
  const int world = group_->world_size();
  MINIDL_CHECK(total >= world, "DistributedDataParallel: a batch of ", total, " rows cannot be shared by ", world,
               " processes, each needs at least one row");
  return BatchShard::part_of(total, group_->rank(), world);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  check_defined(x, "DistributedDataParallel", "x");
  last_shard_.reset();
  return run(x, 1.0);
}

Tensor DistributedDataParallel::forward(const Tensor& batch, const BatchShard& shard) {
  check_defined(batch, "DistributedDataParallel", "batch");
  MINIDL_CHECK(batch.dim() >= 1 && batch.size(0) == shard.total, "DistributedDataParallel: the shard is rows [",
               shard.begin, ", ", shard.begin + shard.rows, ") of a batch of ", shard.total,
               " rows, but the batch has shape ", batch.shape(), "; pass the global batch every rank built alike");
  MINIDL_CHECK(shard.rows > 0, "DistributedDataParallel: rank ", group_->rank(), "'s shard of the batch of ",
               shard.total, " rows is empty");
  last_shard_ = shard;
  // Note [a shard's gradient weight] in parallel/gradient_reducer.cpp: rows * world / total.
  const double weight = static_cast<double>(shard.rows * group_->world_size()) / static_cast<double>(shard.total);
  BatchRowsGuard rows(shard);  // Note [random draws of a batch shard] in core/generator.h
  return run(shard.of(batch), weight, shard.total);
}

Tensor DistributedDataParallel::run(const Tensor& x, double gradient_weight, int64_t batch_rows) {
  const auto buffers = model_->named_buffers();
  if (!buffers.empty() && model_->is_training() && group_->world_size() > 1) {
    NoGradGuard no_grad;
    std::vector<DeviceTensors> groups;
    for (const auto& [name, b] : buffers) groups.push_back({b});
    group_->broadcast_grouped(std::move(groups), 0)->wait();
  }
  reducer_->prepare_for_forward(1, sync_, gradient_weight, batch_rows);
  return (*model_)(x);
}

double DistributedDataParallel::global_mean(const Tensor& loss) {
  check_defined(loss, "DistributedDataParallel::global_mean", "loss");
  MINIDL_CHECK(loss.numel() == 1, "DistributedDataParallel::global_mean: expected a one-element loss, got shape ",
               loss.shape());
  const double mine = loss.item();
  const int world = group_->world_size();
  if (world == 1) return mine;
  // This rank's term of the global mean: (rows / total) * its mean, or (1 / world) * its mean.
  const double term = last_shard_ ? mine * static_cast<double>(last_shard_->rows) / static_cast<double>(last_shard_->total)
                                  : mine / static_cast<double>(world);
  // float64 where the device computes in it (the CPU); CUDA collectives carry float32.
  const Device device = group_->device();
  Tensor sum = full(Shape{1}, term, TensorOptions(device.is_cuda() ? DType::Float32 : DType::Float64, device));
  group_->all_reduce_(sum, ReduceOp::Sum);
  return sum.item();
}

}  // namespace minidl::parallel
