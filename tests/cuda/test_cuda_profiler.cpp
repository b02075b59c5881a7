// The profiler (core/profiler.h) on cuda:0: an MLP's training steps on the device give every op
// a device time from events on its stream (inside the host's recording window, each within
// its enclosing op's device range), kernel launches counted where they are made, a track per
// stream in the Chrome trace, and the device columns of the table. The CPU side: tests/core/test_profiler.cpp.
#include "cuda_test_util.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/profiler.h"
#include "nn/activation.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/sgd.h"

using namespace minidl;
using namespace minidl::cuda_test;
namespace prof = minidl::profiler;

TEST_CASE("the profiler gives device ops their device time, launches and a stream track", "[cuda][profiler]") {
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(32, 64), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 10)});
  model->to(kGpu);
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor x = random_cpu({16, 32}, 1201).to(kGpu);
  const Tensor y = randint(0, 10, {16}).to(kGpu);
  auto step = [&] {
    sgd.zero_grad();
    nn::functional::cross_entropy((*model)(x), y).backward();
    sgd.step();
    prof::step();
  };
  step();  // warm-up: the caching allocator's first blocks, the cuBLAS handle
  prof::Profiler profiler;
  profiler.start();
  for (int i = 0; i < 3; ++i) step();
  backend_for(kGpu).synchronize();
  const prof::Profile p = profiler.stop();
  REQUIRE(p.steps() == 3);

  const auto& events = p.events();
  int64_t device_ops = 0, launches = 0;
  for (const prof::Event& e : events) {
    INFO(e.name << " (" << prof::kind_name(e.kind) << ")");
    if (e.parent < 0) launches += e.launches;
    if (e.device.is_cuda() && (e.kind == prof::Kind::Op || e.kind == prof::Kind::Backward)) {
      CHECK(e.device_start_ns >= 0);
    }
    if (e.device_start_ns < 0) continue;
    ++device_ops;
    CHECK(e.device.is_cuda());
    CHECK(e.stream >= 0);
    CHECK(e.device_end_ns >= e.device_start_ns);
    CHECK(e.device_end_ns <= p.wall_ns() + 1000);  // the host waited for all of it before stop(); µs rounding
    // Nested device ranges lie within the enclosing op's (the events are queued in that order).
    if (e.parent >= 0) {
      const prof::Event& parent = events[static_cast<size_t>(e.parent)];
      if (parent.device_start_ns >= 0) {
        CHECK(parent.device_start_ns <= e.device_start_ns);
        CHECK(e.device_end_ns <= parent.device_end_ns);
      }
    }
  }
  CHECK(device_ops > 0);
  CHECK(launches > 0);

  std::map<std::string, prof::Summary> rows;
  for (const prof::Summary& s : p.key_averages()) rows[s.name] = s;
  REQUIRE(rows.count("linear"));
  CHECK(rows["linear"].device_calls == 6);
  CHECK(rows["linear"].launches >= 6);  // a GEMM (and its epilogue) per call
  REQUIRE(rows.count("Optimizer.step#SGD.step"));
  CHECK(rows["Optimizer.step#SGD.step"].launches == 3);  // one launch per step for all four parameters
  CHECK(rows["Optimizer.zero_grad#SGD.zero_grad"].launches == 0);  // gradients set to none
  CHECK_THAT(p.table(), Catch::Contains("Device") && Catch::Contains("launches per step"));

  const std::string trace = p.chrome_trace();
  CHECK_THAT(trace, Catch::Contains("\"cuda:0 stream 0\"") && Catch::Contains("\"cat\": \"device\"") &&
                        Catch::Contains("\"pid\": 2"));
}
