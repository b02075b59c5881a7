// Tests for parallel/data_parallel.* and parallel/gradient_reducer.*: training over 1..4 CPU
// replicas matches one device (losses, gradients, parameters); bucket sizes do not change a
// bit; the first all-reduce starts while backward still runs; replicas stay bitwise copies of
// the model; parameters without gradients, gradient accumulation, grad mode on the replica
// threads, replica errors, and the process-group scaling slot.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "fixtures.h"
#include "optim/optim.h"
#include "parallel/parallel.h"

using namespace minidl;
using namespace minidl::parallel;
using namespace parallel_fixtures;

namespace {

optim::SGDOptions sgd_momentum() { return optim::SGDOptions{.lr = 0.1, .momentum = 0.9}; }

std::shared_ptr<Classifier> fresh_classifier(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<Classifier>();
}

// Log of what a test observed, in order.
struct EventLog {
  std::vector<std::string> events;
  int count(const std::string& e) const { return static_cast<int>(std::count(events.begin(), events.end(), e)); }
  int first(const std::string& e) const {
    auto it = std::find(events.begin(), events.end(), e);
    return it == events.end() ? -1 : static_cast<int>(it - events.begin());
  }
  int last(const std::string& e) const {
    auto it = std::find(events.rbegin(), events.rend(), e);
    return it == events.rend() ? -1 : static_cast<int>(events.rend() - it - 1);
  }
};

// A CPU communicator that logs every all-reduce it launches; every collective goes to the
// worker threads (no inline small ones), so a launched all-reduce runs beside backward.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(std::vector<Device> devices, EventLog& log)
      : Communicator(devices), inner_(devices, 0), log_(log) {}
  std::string backend_name() const override { return "recording cpu"; }
  std::shared_ptr<CollectiveWork> all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) override {
    log_.events.push_back("all_reduce");
    return inner_.all_reduce_grouped(std::move(groups), op);
  }
  std::shared_ptr<CollectiveWork> broadcast_grouped(std::vector<DeviceTensors> groups, int root) override {
    return inner_.broadcast_grouped(std::move(groups), root);
  }
  std::shared_ptr<CollectiveWork> barrier() override { return inner_.barrier(); }

 private:
  CpuCommunicator inner_;
  EventLog& log_;
};

// Stands in for a process-group backend with two processes whose gradients are identical:
// world_size() counts both, and an all-reduce's result is twice the local sum.
class TwoProcessCommunicator final : public Communicator {
 public:
  explicit TwoProcessCommunicator(std::vector<Device> devices) : Communicator(devices), inner_(devices) {}
  std::string backend_name() const override { return "two-process stand-in"; }
  int world_size() const override { return 2 * local_size(); }
  std::shared_ptr<CollectiveWork> all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) override {
    REQUIRE(op == ReduceOp::Sum);
    return std::make_shared<Doubled>(inner_.all_reduce_grouped(groups, op), groups);
  }
  std::shared_ptr<CollectiveWork> broadcast_grouped(std::vector<DeviceTensors> groups, int root) override {
    return inner_.broadcast_grouped(std::move(groups), root);
  }
  std::shared_ptr<CollectiveWork> barrier() override { return inner_.barrier(); }

 private:
  struct Doubled final : CollectiveWork {
    Doubled(std::shared_ptr<CollectiveWork> w, std::vector<DeviceTensors> g) : inner(std::move(w)), groups(std::move(g)) {}
    bool is_completed() override { return inner->is_completed(); }
    void wait() override {
      inner->wait();
      if (doubled) return;
      doubled = true;
      for (auto& g : groups)
        for (Tensor& t : g) t.copy_(t * 2.0);  // the other process's equal contribution
    }
    std::shared_ptr<CollectiveWork> inner;
    std::vector<DeviceTensors> groups;
    bool doubled = false;
  };
  CpuCommunicator inner_;
};

// One step of the single-device loop; returns the loss.
double plain_step(nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  nn::CrossEntropyLoss criterion;
  opt.zero_grad();
  Tensor loss = criterion(model(x), y);
  loss.backward();
  opt.step();
  return loss.item();
}

}  // namespace

TEST_CASE("DataParallel over 1 to 4 CPU replicas trains like one device for 20 SGD momentum steps",
          "[parallel][dp][equivalence]") {
  const Batches data = make_batches();
  const std::shared_ptr<Classifier> init = fresh_classifier(7);
  for (int n = 1; n <= 4; ++n)
  for (size_t inline_bytes : {size_t{0}, CpuCommunicator::kDefaultInlineBytes}) {  // asynchronous, or inline
    INFO("replicas = " << n << ", inline_bytes = " << inline_bytes);
    std::shared_ptr<nn::Module> reference = init->clone();
    std::shared_ptr<nn::Module> model = init->clone();
    DataParallel dp(model, cpu_replicas(n),
                    DataParallelOptions{.communicator = std::make_shared<CpuCommunicator>(cpu_replicas(n), inline_bytes)});
    CHECK(dp.parameters().size() == 6);
    CHECK(dp.named_parameters()[0].first == "module.fc1.weight");
    optim::SGD ref_opt(reference->parameters(), sgd_momentum());
    optim::SGD dp_opt(dp.parameters(), sgd_momentum());
    nn::CrossEntropyLoss criterion;
    double worst_loss = 0, worst_grad = 0, first_loss = 0, last_loss = 0;
    for (int step = 0; step < 20; ++step) {
      const Tensor& x = data.x[step % 4];
      const Tensor& y = data.y[step % 4];
      ref_opt.zero_grad();
      Tensor ref_loss = criterion((*reference)(x), y);
      ref_loss.backward();

      dp_opt.zero_grad();
      Tensor out = dp(x);
      REQUIRE(out.shape() == Shape{x.size(0), 3});
      Tensor loss = criterion(out, y);
      loss.backward();
      // When backward returns, the model holds the full-batch gradient (sum over replicas).
      for (size_t p = 0; p < 6; ++p)
        worst_grad = std::max(worst_grad, max_abs_diff(reference->parameters()[p].grad(), model->parameters()[p].grad()));
      ref_opt.step();
      dp_opt.step();
      worst_loss = std::max(worst_loss, std::abs(ref_loss.item() - loss.item()));
      if (step == 0) first_loss = loss.item();
      last_loss = loss.item();
    }
    // float32 with the batch's rows summed in other groupings (per shard, then across
    // replicas): the measured worst differences are 1.5e-7 (one replica: 0); the bound 1e-5 is
    // some 60 times that. An average instead of a sum is off by a factor of n, far outside it.
    CHECK(worst_grad < 1e-5);
    CHECK(worst_loss < 1e-5);
    CHECK(max_param_diff(*reference, *model) < 1e-5);
    CHECK(last_loss < first_loss);  // it did train
    // 25 MiB holds this model; one replica has nothing to reduce (Note [one participant]).
    CHECK(dp.last_gradient_sync().buckets == (n == 1 ? 0 : 1));
  }
}

TEST_CASE("a tiny bucket size and a huge one give bit-identical training", "[parallel][dp][buckets]") {
  const Batches data = make_batches();
  const std::shared_ptr<Classifier> init = fresh_classifier(11);
  std::shared_ptr<nn::Module> tiny_model = init->clone(), huge_model = init->clone();
  DataParallel tiny(tiny_model, cpu_replicas(3), DataParallelOptions{.bucket_cap_bytes = 1});
  DataParallel huge(huge_model, cpu_replicas(3), DataParallelOptions{.bucket_cap_bytes = size_t{1} << 30});
  REQUIRE(tiny.buckets().size() == 6);  // one gradient each
  REQUIRE(huge.buckets().size() == 1);
  optim::SGD tiny_opt(tiny.parameters(), sgd_momentum()), huge_opt(huge.parameters(), sgd_momentum());
  for (int step = 0; step < 12; ++step) {
    const double a = plain_step(tiny, tiny_opt, data.x[step % 4], data.y[step % 4]);
    const double b = plain_step(huge, huge_opt, data.x[step % 4], data.y[step % 4]);
    CHECK(a == b);
  }
  // Each element is reduced in device order whatever bucket holds it (Note [a fixed reduction order]).
  CHECK(bitwise_equal(*tiny_model, *huge_model));
}

TEST_CASE("the first bucket's all-reduce is launched while backward is still producing gradients",
          "[parallel][dp][buckets]") {
  const Batches data = make_batches();
  EventLog log;
  std::shared_ptr<nn::Module> model = fresh_classifier(5);
  auto comm = std::make_shared<RecordingCommunicator>(cpu_replicas(3), log);
  DataParallel dp(model, cpu_replicas(3), DataParallelOptions{.bucket_cap_bytes = 1, .communicator = comm});
  // Registered after DataParallel's own hooks, so each logs once its gradient has been handed over.
  for (int r = 0; r < 3; ++r)
    for (const Tensor& p : dp.replica(r).parameters()) p.register_hook([&](const Tensor&) { log.events.push_back("grad"); });

  nn::CrossEntropyLoss criterion;
  Tensor loss = criterion(dp(data.x[0]), data.y[0]);
  log.events.clear();  // the forward's broadcast is not an all-reduce, but start clean
  loss.backward();
  REQUIRE(log.count("grad") == 18);        // 6 parameters x 3 replicas
  REQUIRE(log.count("all_reduce") == 6);   // one per bucket
  CHECK(log.first("all_reduce") < log.last("grad"));  // overlap: launched before the last gradient existed
  CHECK(dp.last_gradient_sync().launched_during_backward == 6);
  CHECK(dp.last_gradient_sync().launched_at_end == 0);
}

TEST_CASE("replicas are bitwise copies of the model whenever they run, over 50 steps", "[parallel][dp]") {
  const Batches data = make_batches();
  std::shared_ptr<nn::Module> model = fresh_classifier(13);
  DataParallel dp(model, cpu_replicas(3));
  optim::Adam opt(dp.parameters(), optim::AdamOptions{.lr = 0.01});
  nn::CrossEntropyLoss criterion;
  for (int r = 1; r < 3; ++r) CHECK(bitwise_equal(dp.replica(r), *model));  // broadcast at construction
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    Tensor out = dp(data.x[step % 4]);
    for (int r = 1; r < 3; ++r) CHECK(bitwise_equal(dp.replica(r), *model));
    criterion(out, data.y[step % 4]).backward();
    opt.step();  // updates replica 0 only; the next forward re-broadcasts
  }
  // The stale copies are refreshed by the next forward, even one that records no graph.
  CHECK_FALSE(bitwise_equal(dp.replica(1), *model));
  NoGradGuard no_grad;
  dp(data.x[0]);
  for (int r = 1; r < 3; ++r) CHECK(bitwise_equal(dp.replica(r), *model));
}

// Note [a replica's random draws] (parallel/data_parallel.cpp): the replicas' dropout masks are
// the rows of the mask one device draws for the whole batch, whatever the replica count (and
// however the replica threads interleave), and the caller's generator ends where one device's
// would. Dropout alone, so the outputs are the masks themselves, compared bit for bit.
TEST_CASE("dropout under DataParallel draws one device's masks, over 1 to 4 replicas", "[parallel][dp][dropout]") {
  const Tensor x = ones({13, 37});  // 13 rows: uneven shards over 2, 3 and 4 replicas
  manual_seed(21);
  auto single = std::make_shared<nn::Dropout>(0.5);
  const std::vector<float> expected_first = (*single)(x).to_vector<float>();
  const std::vector<float> expected_second = (*single)(x).to_vector<float>();
  const GeneratorState expected_state = default_generator().state();
  for (int n = 1; n <= 4; ++n) {
    INFO("replicas = " << n);
    manual_seed(21);
    DataParallel dp(std::make_shared<nn::Dropout>(0.5), cpu_replicas(n));
    CHECK(dp(x).to_vector<float>() == expected_first);
    CHECK(dp(x).to_vector<float>() == expected_second);  // and the next forward goes on from there
    CHECK(default_generator().state() == expected_state);
  }
  // Under a slice of a larger batch (a process's rows of it), the shards are rows of that batch.
  manual_seed(21);
  const std::vector<float> big = (*single)(ones({20, 37})).to_vector<float>();
  manual_seed(21);
  DataParallel dp(std::make_shared<nn::Dropout>(0.5), cpu_replicas(3));
  {
    BatchRowsGuard process_rows(BatchRows{.begin = 5, .rows = 13, .total = 20});
    CHECK(dp(x).to_vector<float>() == std::vector<float>(big.begin() + 5 * 37, big.begin() + 18 * 37));
  }
}

namespace {
struct WithUnused : nn::Cloneable<WithUnused> {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(6, 3));
  Tensor unused = register_parameter("unused", zeros({4}));
  Tensor forward(const Tensor& x) override { return (*fc)(x); }
};
}  // namespace

TEST_CASE("a parameter no replica used keeps no gradient, as on one device", "[parallel][dp]") {
  const Batches data = make_batches();
  manual_seed(3);
  auto model = std::make_shared<WithUnused>();
  std::shared_ptr<nn::Module> reference = model->clone();
  DataParallel dp(model, cpu_replicas(2), DataParallelOptions{.bucket_cap_bytes = 1});
  nn::CrossEntropyLoss criterion;
  criterion(dp(data.x[0]), data.y[0]).backward();
  criterion((*reference)(data.x[0]), data.y[0]).backward();
  CHECK_FALSE(model->unused.grad().defined());
  auto& ref = dynamic_cast<WithUnused&>(*reference);
  CHECK(max_abs_diff(model->fc->weight.grad(), ref.fc->weight.grad()) < 1e-6);  // float32 regrouping
  CHECK(max_abs_diff(model->fc->bias.grad(), ref.fc->bias.grad()) < 1e-6);
  CHECK(dp.last_gradient_sync().launched_during_backward == 2);
  CHECK(dp.last_gradient_sync().launched_at_end == 1);  // the bucket of `unused` never filled
}

TEST_CASE("gradients accumulate over two backward passes without zero_grad, as on one device", "[parallel][dp]") {
  const Batches data = make_batches();
  std::shared_ptr<nn::Module> model = fresh_classifier(17), reference = model->clone();
  DataParallel dp(model, cpu_replicas(3));
  nn::CrossEntropyLoss criterion;
  for (int b = 0; b < 2; ++b) {
    criterion(dp(data.x[b]), data.y[b]).backward();
    criterion((*reference)(data.x[b]), data.y[b]).backward();
  }
  for (size_t p = 0; p < 6; ++p)  // float32 regrouping, as in the equivalence test
    CHECK(max_abs_diff(model->parameters()[p].grad(), reference->parameters()[p].grad()) < 1e-5);
}

TEST_CASE("replica threads run under the caller's grad mode, and a replica's error names it", "[parallel][dp]") {
  std::shared_ptr<nn::Module> model = fresh_classifier(19);
  DataParallel dp(model, cpu_replicas(3));
  Tensor x = randn({7, 6});
  CHECK(dp(x).requires_grad());
  {
    NoGradGuard no_grad;
    Tensor out = dp(x);
    CHECK_FALSE(out.requires_grad());
    CHECK(out.grad_fn() == nullptr);
  }
  CHECK_THROWS_WITH(dp(zeros({3, 5})), Catch::Contains("replica 0 on cpu") && Catch::Contains("last dim 6"));
  CHECK(dp(x).shape() == Shape{7, 3});  // still usable
}

TEST_CASE("with a process-group communicator the summed gradients are averaged over processes",
          "[parallel][dp]") {
  // Note [one division, by the number of processes] in parallel/gradient_reducer.cpp: two
  // processes with the same batch must give the one-device gradient, not twice it.
  const Batches data = make_batches();
  std::shared_ptr<nn::Module> model = fresh_classifier(23), reference = model->clone();
  DataParallel dp(model, cpu_replicas(2),
                  DataParallelOptions{.communicator = std::make_shared<TwoProcessCommunicator>(cpu_replicas(2))});
  nn::CrossEntropyLoss criterion;
  criterion(dp(data.x[0]), data.y[0]).backward();
  criterion((*reference)(data.x[0]), data.y[0]).backward();
  for (size_t p = 0; p < 6; ++p)  // float32 regrouping
    CHECK(max_abs_diff(model->parameters()[p].grad(), reference->parameters()[p].grad()) < 1e-6);
}
