// The profiler (core/profiler.h) on the CPU: a small MLP's training steps — the loader's
// batches, module calls, ops, autograd nodes and the optimizer's step — come back as ranges
// nested as they ran, counted per step; the table sums them; the Chrome trace is well-formed
// trace-event JSON (checked here field by field, and that ranges on one track nest, which is
// what Perfetto needs to draw them); grouped by input shapes, an op's calls split by shape;
// nothing is recorded while it is off; the errors.
// On a device: tests/cuda/test_cuda_profiler.cpp.
#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "nn/activation.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/sgd.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;
namespace prof = minidl::profiler;

namespace {

struct Mlp {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 4)});
  optim::SGD sgd{model->parameters(), {.lr = 0.1, .momentum = 0.9}};
  data::DataLoader loader;
  explicit Mlp(int workers)
      : loader(std::make_shared<data::TensorDataset>(randn({24, 8}), randint(0, 4, {24})),
               data::DataLoaderOptions{.batch_size = 8, .num_workers = workers}) {}

  // Steps over one epoch (3 batches), each marked with profiler::step().
  void epoch() {
    for (auto& batch : loader) {
      sgd.zero_grad();
      const Tensor loss = nn::functional::cross_entropy((*model)(batch.x), batch.y);
      loss.backward();
      sgd.step();
      prof::step();
    }
  }
};

const prof::Event* find_event(const prof::Profile& p, const std::string& name) {
  for (const prof::Event& e : p.events())
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("the profiler records an MLP's steps as nested ranges of every kind", "[core][profiler]") {
  Mlp mlp(/*workers=*/0);
  mlp.epoch();  // warm-up, unrecorded
  prof::Profiler profiler;
  profiler.start();
  CHECK(profiler.recording());
  mlp.epoch();
  const prof::Profile p = profiler.stop();
  CHECK_FALSE(profiler.recording());
  REQUIRE_FALSE(p.events().empty());
  CHECK(p.steps() == 3);

  std::map<std::string, int64_t> calls;
  std::set<prof::Kind> kinds;
  for (const prof::Event& e : p.events()) {
    calls[e.name] += 1;
    kinds.insert(e.kind);
  }
  CHECK(kinds == std::set<prof::Kind>{prof::Kind::Op, prof::Kind::Backward, prof::Kind::Module,
                                       prof::Kind::Optimizer, prof::Kind::DataLoader});
  CHECK(calls["Optimizer.step#SGD.step"] == 3);
  CHECK(calls["DataLoader.next"] == 3);
  CHECK(calls["Sequential"] == 3);              // the model itself: no parent, its type
  CHECK(calls["0 (Linear) + ReLU"] == 3);       // the fused Linear + ReLU, by registered name
  CHECK(calls["2 (Linear)"] == 3);
  CHECK(calls["linear"] == 6);
  CHECK(calls["AccumulateGrad"] == 12);         // 4 parameters, 3 steps

  // Nesting: each range lies inside its parent, one level deeper, on the same thread.
  const auto& events = p.events();
  for (const prof::Event& e : events) {
    INFO(e.name);
    CHECK(e.start_ns >= 0);
    CHECK(e.end_ns >= e.start_ns);
    CHECK(e.end_ns <= p.wall_ns());
    CHECK(e.bytes >= 0);
    CHECK(e.launches == 0);  // the CPU launches nothing
    CHECK(e.device_start_ns == -1);
    if (e.parent < 0) {
      CHECK(e.depth == 0);
      continue;
    }
    const prof::Event& parent = events[static_cast<size_t>(e.parent)];
    CHECK(parent.thread == e.thread);
    CHECK(parent.depth + 1 == e.depth);
    CHECK(parent.start_ns <= e.start_ns);
    CHECK(e.end_ns <= parent.end_ns);
  }
  // A linear op inside its module, with the input's shape, dtype and device.
  const prof::Event* fc2 = find_event(p, "2 (Linear)");
  REQUIRE(fc2 != nullptr);
  bool linear_inside = false;
  for (const prof::Event& e : events)
    if (e.name == "linear" && e.parent >= 0 && &events[static_cast<size_t>(e.parent)] == fc2) {
      linear_inside = true;
      CHECK(e.shapes.size() == 3);  // x, w, b
      CHECK(e.shapes[0] == Shape{8, 16});
      CHECK(e.shapes[1] == Shape{4, 16});
      CHECK(e.dtype == "float32");
      CHECK(e.device.is_cpu());
      CHECK(e.bytes >= 8 * 4 * 4);  // its [8, 4] output at least
    }
  CHECK(linear_inside);

  // The table: one row per name and kind, calls summed, self time within total.
  const std::vector<prof::Summary> rows = p.key_averages();
  int64_t row_calls = 0, self_sum = 0;
  for (const prof::Summary& s : rows) {
    row_calls += s.calls;
    self_sum += s.self_ns;
    CHECK(s.self_ns <= s.total_ns);
  }
  CHECK(row_calls == static_cast<int64_t>(events.size()));
  CHECK(self_sum <= p.wall_ns());
  const std::string table = p.table();
  CHECK_THAT(table, Catch::Contains("Optimizer.step#SGD.step") && Catch::Contains("Self host") &&
                        Catch::Contains("over 3 steps"));
  // Nothing was launched on a CPU step: no launch column, no launch count in the footer.
  CHECK_THAT(table, !Catch::Contains("Launches") && !Catch::Contains("launches"));
  CHECK_THAT(p.table(2), Catch::Contains("more rows"));
}

TEST_CASE("key_averages and the table group by input shapes when asked, one row per shape list",
          "[core][profiler]") {
  const Tensor w = randn({4, 8}), b = randn({4});
  prof::Profiler profiler;
  profiler.start();
  (void)ops::linear(randn({2, 8}), w, b);
  (void)ops::linear(randn({2, 8}), w, b);
  (void)ops::linear(randn({3, 8}), w, b);
  const prof::Profile p = profiler.stop();

  auto linear_rows = [](const std::vector<prof::Summary>& rows) {
    std::vector<prof::Summary> out;
    for (const prof::Summary& s : rows)
      if (s.name == "linear") out.push_back(s);
    return out;
  };
  const std::vector<prof::Summary> by_name = linear_rows(p.key_averages());
  REQUIRE(by_name.size() == 1);
  CHECK(by_name[0].calls == 3);
  CHECK(by_name[0].input_shapes.empty());

  std::vector<prof::Summary> by_shape = linear_rows(p.key_averages(/*group_by_input_shape=*/true));
  REQUIRE(by_shape.size() == 2);
  std::sort(by_shape.begin(), by_shape.end(), [](const auto& a, const auto& c) { return a.calls > c.calls; });
  CHECK(by_shape[0].calls == 2);
  CHECK(by_shape[0].input_shapes == std::vector<Shape>{Shape{2, 8}, Shape{4, 8}, Shape{4}});
  CHECK(by_shape[1].calls == 1);
  CHECK(by_shape[1].input_shapes == std::vector<Shape>{Shape{3, 8}, Shape{4, 8}, Shape{4}});
  CHECK(by_shape[0].total_ns + by_shape[1].total_ns == by_name[0].total_ns);

  const std::string grouped = p.table(0, /*group_by_input_shape=*/true);
  CHECK_THAT(grouped, Catch::Contains("Input shapes") && Catch::Contains("[2, 8], [4, 8], [4]") &&
                          Catch::Contains("[3, 8], [4, 8], [4]"));
  CHECK_THAT(p.table(), !Catch::Contains("Input shapes") && !Catch::Contains("[2, 8]"));
}

TEST_CASE("the profiler's Chrome trace is trace-event JSON whose ranges nest on each track", "[core][profiler]") {
  Mlp mlp(/*workers=*/1);  // a loader worker: its batches' ops are on a thread of their own
  prof::Profiler profiler;
  profiler.start();
  mlp.epoch();
  const prof::Profile p = profiler.stop();

  const std::filesystem::path path = std::filesystem::temp_directory_path() / "minidl_test_profiler_trace.json";
  p.write_chrome_trace(path.string());
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::filesystem::remove(path);

  REQUIRE(trace.is_object());
  REQUIRE(trace.contains("traceEvents"));
  const nlohmann::json& list = trace["traceEvents"];
  REQUIRE(list.is_array());
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::set<int> named_threads;
  size_t complete = 0;
  for (const nlohmann::json& e : list) {
    REQUIRE(e.is_object());
    REQUIRE(e["name"].is_string());
    REQUIRE(e["ph"].is_string());
    REQUIRE(e["pid"].is_number_integer());
    REQUIRE(e["tid"].is_number_integer());
    const std::string ph = e["ph"];
    if (ph == "M") {
      REQUIRE(e["args"]["name"].is_string());
      if (e["name"] == "thread_name" && e["pid"] == 1) named_threads.insert(e["tid"].get<int>());
      continue;
    }
    REQUIRE(ph == "X");
    REQUIRE(e["cat"].is_string());
    REQUIRE(e["ts"].is_number());
    REQUIRE(e["dur"].is_number());
    REQUIRE(e["args"].is_object());
    CHECK(e["ts"].get<double>() >= 0);
    CHECK(e["dur"].get<double>() >= 0);
    tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(e["ts"].get<double>(),
                                                                      e["ts"].get<double>() + e["dur"].get<double>());
    ++complete;
  }
  CHECK(complete == p.events().size());
  CHECK(tracks.size() >= 2);  // the main thread and the loader's worker
  for (const auto& [track, ranges] : tracks) CHECK(named_threads.count(track.second) == 1);
  // On each track, sorted by start (longest first on ties), every range ends before the one
  // that encloses it: no partial overlaps. 1 ns of slack for the µs rounding of ts and dur.
  for (auto [track, ranges] : tracks) {
    std::sort(ranges.begin(), ranges.end(), [](auto a, auto b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<double> open_ends;
    for (const auto& [start, end] : ranges) {
      while (!open_ends.empty() && open_ends.back() <= start + 1e-3) open_ends.pop_back();
      if (!open_ends.empty()) CHECK(end <= open_ends.back() + 1e-3);
      open_ends.push_back(end);
    }
  }
}

TEST_CASE("the profiler records nothing while off, and says what is wrong", "[core][profiler][errors]") {
  CHECK_FALSE(prof::active());
  const Tensor x = randn({4, 4});
  (void)ops::mul(x, x);  // no recording: nothing to collect anywhere
  prof::Profiler a;
  a.start();
  CHECK(prof::active());
  const prof::Profile empty = a.stop();
  CHECK_FALSE(prof::active());
  CHECK(empty.events().empty());
  CHECK(empty.steps() == 0);
  CHECK_THAT(empty.table(), Catch::Contains("Wall time"));

  prof::Profiler b, c;
  b.start();
  CHECK_THAT(error_message([&] { b.start(); }), Catch::Contains("profiler") && Catch::Contains("already"));
  CHECK_THAT(error_message([&] { c.start(); }), Catch::Contains("already"));
  CHECK_THAT(error_message([&] { (void)c.stop(); }), Catch::Contains("stop()") && Catch::Contains("start()"));
  const prof::Profile one = [&] {
    prof::RecordScope scope("outer", prof::Kind::User);
    (void)ops::mul(x, x);
    return b.stop();  // "outer" is still open: it ends at the stop time
  }();
  const prof::Event* outer = find_event(one, "outer");
  REQUIRE(outer != nullptr);
  CHECK(outer->end_ns == one.wall_ns());
  CHECK(find_event(one, "mul") != nullptr);
  CHECK_THAT(error_message([&] { one.write_chrome_trace("/nonexistent-dir/trace.json"); }),
             Catch::Contains("/nonexistent-dir/trace.json"));
  // A scope opened in one recording and closed after it ended changes nothing.
  prof::Profiler d;
  d.start();
  {
    prof::RecordScope late("late", prof::Kind::User);
    const prof::Profile cut = d.stop();
    CHECK(find_event(cut, "late") != nullptr);
  }
  CHECK_FALSE(prof::active());
}

TEST_CASE("the profiler table shows each op's dtype when a recording mixes precisions", "[core][profiler][half]") {
  const Tensor x = ones({4, 8}), w = ones({3, 8}).requires_grad_();
  prof::Profiler profiler;
  profiler.start();
  {
    AutocastGuard guard(Device::cpu(), DType::BFloat16);
    (void)ops::linear(x, w);
  }
  const prof::Profile p = profiler.stop();
  CHECK(p.mixed_precision());
  const std::string table = p.table();
  CHECK(table.find("Dtype") != std::string::npos);
  CHECK(table.find("bfloat16") != std::string::npos);  // the linear, on its cast inputs
  CHECK(table.find("float32") != std::string::npos);   // the casts of its float32 inputs
}
