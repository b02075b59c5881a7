// mpi_check: the multi-process tests of the process group and DistributedDataParallel, one
// scenario per run, started by mpiexec with 2 or 3 processes (tests/CMakeLists.txt registers
// them under the label `mpi`; run_mpi_case.py checks the exit status, the output and the time).
// Each scenario asserts on every rank; a failed check prints "rank r: FAILED ..." and ends the
// job (parallel::abort_job), so a failure is never a hang. Scenarios:
//   collectives — all-reduce (sum, average), broadcast from every root, all-gather, barrier, for
//                 float32, float64 and int64, at odd sizes; ranks and local ranks;
//   ddp         — DistributedDataParallel trains like one process on the global batch, with each
//                 rank's own batches and with each rank's shard of a global batch split unevenly;
//   no-sync     — k micro-batches under no_sync equal one step on their union;
//   unused      — a parameter used on one rank only, and one used nowhere;
//   mismatch    — the last rank builds another model: a clear error on every rank (exit 1);
//   kill        — rank 1 kills itself mid-training: the launcher ends the job.
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "core/ops.h"
#include "data/data.h"
#include "data/distributed_sampler.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "parallel/batch_shard.h"
#include "parallel/distributed_data_parallel.h"
#include "parallel/process_group.h"

using namespace minidl;

namespace {

int g_rank = 0;

template <typename... Args>
void expect(bool ok, const Args&... args) {
  if (ok) return;
  std::ostringstream os;
  os << "rank " << g_rank << ": FAILED ";
  (os << ... << args);
  parallel::abort_job(1, os.str());
}

// ---- collectives ----

// Exact in every dtype: small integers, whose sums over a few ranks are exact in float32.
double value(int rank, int64_t i) { return static_cast<double>((rank + 1) * ((i * 7) % 97) - 40); }

Tensor filled(DType dtype, int64_t n, int rank) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(rank, i);
  return from_vector(v, Shape{n}).to(dtype);
}

void check_equal(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> g = got.to(DType::Float64).to_vector<double>();
  expect(g.size() == want.size(), what, ": ", g.size(), " elements, expected ", want.size());
  for (size_t i = 0; i < g.size(); ++i)
    expect(g[i] == want[i], what, ": element ", i, " is ", g[i], ", expected ", want[i]);
}

void collectives(parallel::ProcessGroup& group) {
  const int world = group.world_size(), rank = group.rank();
  expect(group.local_rank() == rank && group.local_world_size() == world, "on one machine the local rank ",
         group.local_rank(), " of ", group.local_world_size(), " should be the rank ", rank, " of ", world);
  expect(group.device() == Device::cpu() && group.backend_name() == "mpi", "the MPI group passes CPU tensors");
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{4099}, int64_t{65537}}) {
      std::ostringstream tag;
      tag << dtype << " n=" << n;
      std::vector<double> sum(static_cast<size_t>(n), 0.0);
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < n; ++i) sum[static_cast<size_t>(i)] += value(r, i);

      Tensor t = filled(dtype, n, rank);
      group.all_reduce_(t, parallel::ReduceOp::Sum);
      check_equal(t, sum, "all_reduce(sum) " + tag.str());
      if (dtype != DType::Int64) {  // the average is the sum divided by the world size, in the dtype
        Tensor a = filled(dtype, n, rank);
        group.all_reduce_(a, parallel::ReduceOp::Average);
        std::vector<double> avg(sum.size());
        for (size_t i = 0; i < sum.size(); ++i)
          avg[i] = dtype == DType::Float32 ? static_cast<double>(static_cast<float>(sum[i]) / static_cast<float>(world))
                                           : sum[i] / world;
        check_equal(a, avg, "all_reduce(average) " + tag.str());
      }
      for (int root = 0; root < world; ++root) {
        Tensor b = rank == root ? filled(dtype, n, rank) : zeros(Shape{n}, TensorOptions(dtype));
        group.broadcast_(b, root);
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = value(root, i);
        check_equal(b, want, "broadcast(root " + std::to_string(root) + ") " + tag.str());
      }
      const Tensor gathered = group.all_gather(filled(dtype, n, rank));  // [world, n]
      expect(gathered.shape() == Shape{world, n}, "all_gather ", tag.str(), ": shape ", gathered.shape());
      std::vector<double> want;
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < n; ++i) want.push_back(value(r, i));
      check_equal(gathered.reshape(Shape{world * n}), want, "all_gather " + tag.str());
    }
  }
  // Two tensors in one grouped call, then a barrier.
  Tensor x = filled(DType::Float32, 5, rank), y = filled(DType::Float64, 9, rank);
  group.all_reduce_grouped({{x}, {y}}, parallel::ReduceOp::Sum)->wait();
  std::vector<double> sx(5, 0.0), sy(9, 0.0);
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < 5; ++i) sx[static_cast<size_t>(i)] += value(r, i);
    for (int64_t i = 0; i < 9; ++i) sy[static_cast<size_t>(i)] += value(r, i);
  }
  check_equal(x, sx, "grouped all_reduce, first tensor");
  check_equal(y, sy, "grouped all_reduce, second tensor");
  group.barrier_wait();
  // Bad input is an error on the caller's side, before anything is launched (so no rank waits).
  Tensor ints = filled(DType::Int64, 4, rank);
  bool threw = false;
  try {
    group.all_reduce_(ints, parallel::ReduceOp::Average);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("average of int64") != std::string::npos;
  }
  expect(threw, "all_reduce(average) of int64 should be an error naming the dtype");
  threw = false;
  try {
    group.broadcast_(ints, world);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("root rank") != std::string::npos;
  }
  expect(threw, "broadcast from root ", world, " should be an error naming the root rank");
  group.barrier_wait();
}

// ---- training ----

struct Net : nn::Cloneable<Net> {
  explicit Net(int64_t hidden = 16) : hidden_(hidden) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, hidden));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(hidden, 3));
  }
  Tensor forward(const Tensor& x) override { return (*fc3)(ops::relu((*fc2)(ops::relu((*fc1)(x))))); }
  std::string name() const override { return "Net"; }
  int64_t hidden_;
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

std::shared_ptr<data::TensorDataset> make_data(int64_t n) {
  Generator g(7);
  Tensor x = randn({n, 6}, {}, &g);
  Tensor y = randint(0, 3, {n}, DType::Int64, &g);
  return std::make_shared<data::TensorDataset>(x, y);
}

// This rank's batches of an epoch: its sampler indices cut into batches of b (the last shorter).
std::vector<std::vector<int64_t>> batches_of(const std::vector<int64_t>& indices, int64_t b) {
  std::vector<std::vector<int64_t>> out;
  for (size_t s = 0; s < indices.size(); s += static_cast<size_t>(b))
    out.emplace_back(indices.begin() + static_cast<std::ptrdiff_t>(s),
                     indices.begin() + static_cast<std::ptrdiff_t>(std::min(indices.size(), s + static_cast<size_t>(b))));
  return out;
}

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double m = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const auto va = a[k].to_vector<float>(), vb = b[k].to_vector<float>();
    for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(static_cast<double>(va[i]) - vb[i]));
  }
  return m;
}

// Every rank's parameters are the same bits as rank 0's.
void expect_same_on_every_rank(parallel::ProcessGroup& group, const nn::Module& model, const std::string& when) {
  std::vector<Tensor> flat;
  for (const Tensor& p : model.parameters()) flat.push_back(p.detach().reshape(Shape{p.numel()}));
  const Tensor mine = ops::cat(flat, 0).contiguous();
  const std::vector<float> all = group.all_gather(mine).to_vector<float>();
  const size_t n = static_cast<size_t>(mine.numel());
  for (int r = 1; r < group.world_size(); ++r)
    expect(std::memcmp(all.data(), all.data() + static_cast<size_t>(r) * n, n * sizeof(float)) == 0, when,
           ": rank ", r, "'s parameters differ from rank 0's");
}

// Note [tolerance of DDP against one process]: both runs compute the same float32 math, but
// in different orders — the global gradient is (1/W) Σ_ranks (mean over the rank's rows) against
// one mean over all rows, and the matrix products sum over other row blocks — so each step
// differs by a few float32 ulps (~1e-7 relative), carried forward by momentum over the steps.
// 2e-5 on losses and parameters of magnitude ~1 is ~100x that rounding and far below the step
// size (lr 0.1 moves parameters by ~1e-2 per step), so a wrong average (a factor W) or a
// missing bucket fails by orders of magnitude.
constexpr double kTolerance = 2e-5;

void ddp(parallel::ProcessGroup& group) {
  const int world = group.world_size(), rank = group.rank();
  const int64_t n = 66, b = 4;  // 66 rows split evenly over 2 or 3 ranks; the last batch is short
  const int epochs = world == 2 ? 3 : 4;  // >= 20 steps: 9 per epoch over 2 ranks, 6 over 3
  auto dataset = make_data(n);
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};

  manual_seed(3);
  auto reference = std::make_shared<Net>();
  manual_seed(3 + static_cast<uint64_t>(rank));  // different weights per rank: the broadcast must fix them
  auto model = std::make_shared<Net>();
  // A small bucket cap: several buckets, launched from hooks in index order.
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, std::shared_ptr<parallel::ProcessGroup>(&group, [](auto*) {}),
                                                                 parallel::DistributedDataParallelOptions{.bucket_cap_bytes = 512});
  expect(max_diff(model->parameters(), reference->parameters()) == 0, "after construction every rank holds rank 0's weights");
  expect(ddp->buckets().size() >= 3, "512-byte buckets should make several buckets, got ", ddp->buckets().size());

  optim::SGD opt(ddp->parameters(), sgd), ref_opt(reference->parameters(), sgd);
  nn::CrossEntropyLoss criterion;
  std::vector<data::DistributedSampler> samplers;
  for (int r = 0; r < world; ++r) samplers.emplace_back(n, world, r, data::DistributedSamplerOptions{.seed = 11});
  int steps = 0;
  bool saw_short_batch = false;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& s : samplers) s.set_epoch(epoch);
    std::vector<std::vector<std::vector<int64_t>>> per_rank;
    for (auto& s : samplers) per_rank.push_back(batches_of(s.indices(), b));
    for (size_t j = 0; j < per_rank[0].size(); ++j) {
      // DDP: this rank's batch, its own mean loss.
      data::Batch mine = dataset->get_batch(per_rank[static_cast<size_t>(rank)][j]);
      saw_short_batch = saw_short_batch || mine.x.size(0) < b;
      opt.zero_grad();
      Tensor loss = criterion((*ddp)(mine.x), mine.y);
      loss.backward();
      opt.step();
      // A copy: reshape and contiguous() would hand back loss's own storage, which all_reduce_ writes.
      Tensor global_loss = loss.detach().reshape(Shape{1}).clone();
      group.all_reduce_(global_loss, parallel::ReduceOp::Average);
      // One process: the union of the ranks' batch j, one mean loss.
      std::vector<int64_t> all;
      for (int r = 0; r < world; ++r) all.insert(all.end(), per_rank[static_cast<size_t>(r)][j].begin(), per_rank[static_cast<size_t>(r)][j].end());
      data::Batch whole = dataset->get_batch(all);
      ref_opt.zero_grad();
      Tensor ref_loss = criterion((*reference)(whole.x), whole.y);
      ref_loss.backward();
      ref_opt.step();
      const double dl = std::abs(global_loss.item() - ref_loss.item());
      expect(dl <= kTolerance, "step ", steps, ": the ranks' mean loss ", global_loss.item(), " differs from one process's ",
             ref_loss.item(), " by ", dl, " (tolerance ", kTolerance, ")");
      expect(world == 1 || ddp->last_gradient_sync().launched_during_backward >= 1, "step ", steps,
             ": no bucket was launched from a hook during backward");
      // Every rank used every parameter: the "used" flags are not read on the host (no host sync).
      expect(!ddp->last_gradient_sync().read_used_flags, "step ", steps, ": the used flags were read on the host");
      ++steps;
    }
  }
  expect(steps >= 20 && saw_short_batch, "the run should take >= 20 steps with a short last batch, took ", steps);
  const double dp = max_diff(model->parameters(), reference->parameters());
  expect(dp <= kTolerance, "after ", steps, " steps the parameters differ from one process's by ", dp, " (tolerance ",
         kTolerance, ")");
  expect_same_on_every_rank(group, *model, "after training");
  if (rank == 0) std::printf("ddp over %d processes: %d steps, max |param - one process| = %.3g\n", world, steps, dp);
}

// The samples' way (parallel/batch_shard.h): every rank builds the same global batch of 13 rows,
// which splits unevenly over 2 and 3 ranks, and trains on its shard of it; the reducer weights
// each rank's gradient by rows * world / 13, and global_mean gives the global batch's mean loss.
void ddp_shards(parallel::ProcessGroup& group) {
  const int world = group.world_size(), rank = group.rank();
  const int64_t n = 13, steps = 8;
  auto dataset = make_data(n * steps);
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};
  manual_seed(4);
  auto reference = std::make_shared<Net>();
  manual_seed(4);
  auto model = std::make_shared<Net>();
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, std::shared_ptr<parallel::ProcessGroup>(&group, [](auto*) {}),
                                                                 parallel::DistributedDataParallelOptions{.bucket_cap_bytes = 512});
  optim::SGD opt(ddp->parameters(), sgd), ref_opt(reference->parameters(), sgd);
  nn::CrossEntropyLoss criterion;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < n; ++i) idx.push_back(step * n + i);
    const data::Batch batch = dataset->get_batch(idx);
    const parallel::BatchShard shard = ddp->shard(n);
    const parallel::BatchShard want = parallel::BatchShard::part_of(n, rank, world);
    expect(shard.begin == want.begin && shard.rows == want.rows && shard.total == n, "rank ", rank, "'s shard is rows [",
           shard.begin, ", ", shard.begin + shard.rows, ") of ", shard.total);
    opt.zero_grad();
    const Tensor loss = criterion(ddp->forward(batch.x, shard), shard.of(batch.y));
    loss.backward();
    opt.step();
    const double global_loss = ddp->global_mean(loss);
    ref_opt.zero_grad();
    const Tensor ref_loss = criterion((*reference)(batch.x), batch.y);
    ref_loss.backward();
    ref_opt.step();
    // Note [tolerance of DDP against one process].
    const double dl = std::abs(global_loss - ref_loss.item());
    expect(dl <= kTolerance, "shards, step ", step, ": global_mean ", global_loss, " differs from one process's loss ",
           ref_loss.item(), " by ", dl);
  }
  const double dp = max_diff(model->parameters(), reference->parameters());
  expect(dp <= kTolerance, "shards: after ", steps, " steps on uneven shards the parameters differ from one process's by ",
         dp, " (an unweighted average would be off by ~1e-2)");
  expect_same_on_every_rank(group, *model, "after training on shards");
  bool threw = false;
  try {
    (void)ddp->shard(world - 1);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("cannot be shared by") != std::string::npos;
  }
  expect(threw, "a batch with fewer rows than processes should be an error naming both");
  if (rank == 0) std::printf("ddp on shards over %d processes: max |param - one process| = %.3g\n", world, dp);
}

// k micro-batches, the first k-1 under no_sync: the gradient after the k-th backward equals
// one process's on the union of every rank's k micro-batches.
void no_sync(parallel::ProcessGroup& group) {
  const int world = group.world_size(), rank = group.rank();
  const int64_t m = 3;
  const int k = 3;
  auto dataset = make_data(m * k * world);
  manual_seed(5);
  auto reference = std::make_shared<Net>();
  manual_seed(5);
  auto model = std::make_shared<Net>();
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, std::shared_ptr<parallel::ProcessGroup>(&group, [](auto*) {}),
                                                                 parallel::DistributedDataParallelOptions{.bucket_cap_bytes = 512});
  nn::CrossEntropyLoss criterion;
  auto rows = [&](int r, int micro) {  // rank r's micro-batch: rows (r*k + micro)*m ...
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < m; ++i) idx.push_back((r * k + micro) * m + i);
    return idx;
  };
  for (int micro = 0; micro < k; ++micro) {
    data::Batch batch = dataset->get_batch(rows(rank, micro));
    auto step = [&] { (criterion((*ddp)(batch.x), batch.y) * (1.0 / k)).backward(); };
    if (micro < k - 1) {
      auto guard = ddp->no_sync();
      step();
    } else {
      step();
    }
    if (micro == 0) {  // not reduced: each rank's gradient is its own (they differ)
      const Tensor g = model->fc3->weight.grad().reshape(Shape{-1}).contiguous();
      const std::vector<float> all = group.all_gather(g).to_vector<float>();
      const size_t n = static_cast<size_t>(g.numel());
      expect(std::memcmp(all.data(), all.data() + n, n * sizeof(float)) != 0,
             "under no_sync the gradients were reduced (they are equal on ranks 0 and 1)");
    }
  }
  std::vector<int64_t> all;
  for (int r = 0; r < world; ++r)
    for (int micro = 0; micro < k; ++micro) {
      auto idx = rows(r, micro);
      all.insert(all.end(), idx.begin(), idx.end());
    }
  data::Batch whole = dataset->get_batch(all);
  criterion((*reference)(whole.x), whole.y).backward();
  std::vector<Tensor> grads, ref_grads;
  for (const Tensor& p : model->parameters()) grads.push_back(p.grad());
  for (const Tensor& p : reference->parameters()) ref_grads.push_back(p.grad());
  const double d = max_diff(grads, ref_grads);
  // float32 sums in another order (Note [tolerance of DDP against one process]), one step only.
  expect(d <= 1e-6, "no_sync accumulation over ", k, " micro-batches differs from one step on their union by ", d);
  if (rank == 0) std::printf("no_sync over %d processes: max |grad - one process| = %.3g\n", world, d);
}

// fc_extra is used by rank 0 only, fc_never by nobody.
struct Branchy : nn::Cloneable<Branchy> {
  Branchy() {
    fc = register_module("fc", std::make_shared<nn::Linear>(6, 3));
    fc_extra = register_module("fc_extra", std::make_shared<nn::Linear>(6, 3));
    fc_never = register_module("fc_never", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override { return use_extra ? (*fc)(x) + (*fc_extra)(x) : (*fc)(x); }
  std::string name() const override { return "Branchy"; }
  bool use_extra = false;
  std::shared_ptr<nn::Linear> fc, fc_extra, fc_never;
};

void unused(parallel::ProcessGroup& group) {
  const int world = group.world_size(), rank = group.rank();
  auto dataset = make_data(4 * world);
  manual_seed(9);
  auto model = std::make_shared<Branchy>();
  manual_seed(9);
  auto reference = std::make_shared<Branchy>();  // the same weights: rank 0's extra gradient, alone
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, std::shared_ptr<parallel::ProcessGroup>(&group, [](auto*) {}),
                                                                 parallel::DistributedDataParallelOptions{.bucket_cap_bytes = 64});
  model->use_extra = rank == 0;
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 4; ++i) idx.push_back(rank * 4 + i);
  data::Batch batch = dataset->get_batch(idx);
  nn::CrossEntropyLoss criterion;
  criterion((*ddp)(batch.x), batch.y).backward();
  expect(!model->fc_never->weight.grad().defined(), "a parameter no rank used should keep an undefined gradient");
  expect(ddp->last_gradient_sync().read_used_flags, "a rank that skipped a parameter must read the used flags");
  expect(model->fc_extra->weight.grad().defined(), "a parameter rank 0 used should get a gradient on rank ", rank);
  // Its gradient is rank 0's divided by the world size (the others contribute zeros).
  reference->use_extra = true;
  std::vector<int64_t> idx0 = {0, 1, 2, 3};
  data::Batch batch0 = dataset->get_batch(idx0);
  criterion((*reference)(batch0.x), batch0.y).backward();
  const Tensor want = reference->fc_extra->weight.grad() * (1.0 / world);
  const double d = max_diff({model->fc_extra->weight.grad()}, {want});
  expect(d <= 1e-7, "the gradient of a parameter used on rank 0 only should be rank 0's / ", world, ", off by ", d);
  expect_same_on_every_rank(group, *model, "after a step with a rank-dependent branch");
}

void mismatch(parallel::ProcessGroup& group) {
  manual_seed(1);
  // The last rank's hidden layer is wider: fc1.weight [17, 6] against [16, 6].
  auto model = std::make_shared<Net>(group.rank() == group.world_size() - 1 ? 17 : 16);
  parallel::DistributedDataParallel ddp(model, std::shared_ptr<parallel::ProcessGroup>(&group, [](auto*) {}));
  expect(false, "a model that differs between ranks was accepted");
}

void kill(parallel::ProcessGroup& group) {
  auto dataset = make_data(64);
  manual_seed(1);
  auto model = std::make_shared<Net>();
  parallel::DistributedDataParallel ddp(model, std::shared_ptr<parallel::ProcessGroup>(&group, [](auto*) {}));
  optim::SGD opt(ddp.parameters(), optim::SGDOptions{.lr = 0.01});
  nn::CrossEntropyLoss criterion;
  data::Batch batch = dataset->get_batch({0, 1, 2, 3});
  for (int step = 0; step < 1000000; ++step) {
    if (step == 20 && group.rank() == 1) {
      std::fprintf(stderr, "rank 1: killing itself at step 20\n");
      std::raise(SIGKILL);
    }
    opt.zero_grad();
    criterion(ddp(batch.x), batch.y).backward();
    opt.step();
  }
  expect(false, "training went on for a million steps after rank 1 was killed");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    std::shared_ptr<parallel::ProcessGroup> group = parallel::make_mpi_process_group();
    g_rank = group->rank();
    if (scenario == "collectives") collectives(*group);
    else if (scenario == "ddp") {
      ddp(*group);
      ddp_shards(*group);
    }
    else if (scenario == "no-sync") no_sync(*group);
    else if (scenario == "unused") unused(*group);
    else if (scenario == "mismatch") mismatch(*group);
    else if (scenario == "kill") kill(*group);
    else throw Error("mpi_check: unknown scenario '" + scenario + "' (collectives, ddp, no-sync, unused, mismatch, kill)");
    group->barrier_wait();
    if (g_rank == 0) std::printf("%s: passed on %d processes\n", scenario.c_str(), group->world_size());
  } catch (const Error& e) {
    // A configuration mismatch is thrown by every rank alike, so each ends normally (exit 1).
    // Any other error may be one rank's alone, with the others inside a collective: that ends
    // the job (Note [a failed rank] in parallel/process_group.h).
    const std::string message = "rank " + std::to_string(g_rank) + ": " + e.what();
    if (scenario != "mismatch") parallel::abort_job(1, message);
    std::fprintf(stderr, "%s\n", message.c_str());
    return 1;
  }
  return 0;
}
