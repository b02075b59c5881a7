// CUDA graphs (core/cuda_graph.h): a captured training step — forward, loss, backward, SGD
// update — replayed on new data gives the same numbers, bit for bit, as the same steps run
// eagerly (the same kernels on the same inputs in the same order); the graph's memory is its
// own while it lives; what a replay could not repeat is refused with an Error naming the op,
// and the device works as before; a replay is one launch however many kernels it holds.
#include "cuda_test_util.h"

#include <memory>
#include <vector>

#include "core/cuda_graph.h"
#include "core/memory.h"
#include "core/profiler.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

constexpr int64_t kBatch = 37, kIn = 23, kHidden = 45, kClasses = 7;  // odd sizes: partial tiles

// A Linear-ReLU-Linear-ReLU-Linear MLP on `device`, the same weights for every call.
std::shared_ptr<nn::Sequential> make_mlp(Device device) {
  manual_seed(11);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(kIn, kHidden));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(kHidden, kHidden));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(kHidden, kClasses));
  model->to(device);
  return model;
}

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_batches(int n) {
  std::vector<Batch> batches;
  for (int i = 0; i < n; ++i) {
    Generator g(500 + static_cast<uint64_t>(i));
    Tensor y = randint(0, kClasses, Shape{kBatch}, TensorOptions(DType::Int64, Device::cpu()), &g);
    batches.push_back({random_cpu({kBatch, kIn}, 900 + static_cast<uint64_t>(i)), y});
  }
  return batches;
}

optim::SGDOptions sgd_options() { return {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3}; }

}  // namespace

TEST_CASE("a captured MLP training step replays to the eager steps' losses and weights, bit for bit",
          "[cuda][graph]") {
  const std::vector<Batch> batches = make_batches(6);
  nn::CrossEntropyLoss criterion;

  // Eager: every batch a step.
  auto eager_model = make_mlp(kGpu);
  optim::SGD eager_opt(eager_model->parameters(), sgd_options());
  std::vector<float> eager_losses;
  for (const Batch& b : batches) {
    eager_opt.zero_grad();
    Tensor loss = criterion((*eager_model)(b.x.to(kGpu)), b.y.to(kGpu));
    loss.backward();
    eager_opt.step();
    eager_losses.push_back(static_cast<float>(loss.item()));
  }

  // Graph: batch 0 eagerly (SGD's first step starts its momentum buffers), then one capture,
  // then a replay per batch after copying it into the static inputs.
  auto model = make_mlp(kGpu);
  optim::SGD opt(model->parameters(), sgd_options());
  std::vector<float> losses;
  {
    opt.zero_grad();
    Tensor loss = criterion((*model)(batches[0].x.to(kGpu)), batches[0].y.to(kGpu));
    loss.backward();
    opt.step();
    losses.push_back(static_cast<float>(loss.item()));
  }
  Tensor static_x = empty(Shape{kBatch, kIn}, TensorOptions(DType::Float32, kGpu));
  Tensor static_y = empty(Shape{kBatch}, TensorOptions(DType::Int64, kGpu));
  Tensor static_loss;
  const std::vector<Tensor> before = [&] {
    std::vector<Tensor> copies;
    for (const Tensor& p : model->parameters()) copies.push_back(p.detach().to(Device::cpu()).clone());
    return copies;
  }();
  CUDAGraph graph;
  graph.capture(kGpu, [&] {
    opt.zero_grad();
    static_loss = criterion((*model)(static_x), static_y);
    static_loss.backward();
    opt.step();
  });
  REQUIRE(graph.captured());
  CHECK(graph.nodes() > 10);
  // The capture ran nothing: the weights are those after batch 0.
  const std::vector<Tensor> params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    check_equal(params[i].detach().to(Device::cpu()), before[i], "weights after the capture");

  for (size_t i = 1; i < batches.size(); ++i) {
    static_x.copy_(batches[i].x);  // from pageable host memory, outside the capture: an eager copy
    static_y.copy_(batches[i].y);
    graph.replay();
    losses.push_back(static_cast<float>(static_loss.item()));
  }
  REQUIRE(losses.size() == eager_losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("batch " << i);
    CHECK(losses[i] == eager_losses[i]);  // the same kernels on the same data in the same order
  }
  const std::vector<Tensor> eager_params = eager_model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor got = params[i].detach().to(Device::cpu());
    const Tensor want = eager_params[i].detach().to(Device::cpu());
    check_equal(got, want, "weights after the replays");
  }
}

TEST_CASE("a replay is one launch, and a graph's memory is never handed to eager work while it lives",
          "[cuda][graph]") {
  Tensor x = random_cpu({1000}, 3).to(kGpu);
  Tensor y;
  CUDAGraph graph;
  graph.capture(kGpu, [&] {
    Tensor t = x * 2.0;  // freed inside the capture: its block stays the graph's
    y = ops::relu(t - 1.0) + x;
  });
  const int64_t nodes = graph.nodes();
  CHECK(nodes >= 3);

  profiler::Profiler prof;
  prof.start();
  graph.replay();
  const profiler::Profile profile = prof.stop();
  int64_t launches = 0;
  for (const auto& row : profile.key_averages()) launches += row.launches;
  CHECK(launches == 1);

  // Eager allocations of the sizes the graph used get blocks of their own.
  std::vector<Tensor> eager;
  for (int i = 0; i < 4; ++i) eager.push_back(full(Shape{1000}, 5.0, TensorOptions(DType::Float32, kGpu)));
  graph.replay();  // would overwrite an eager tensor that shared its memory
  const Tensor x_cpu = x.to(Device::cpu());
  const Tensor want = ops::relu(x_cpu * 2.0 - 1.0) + x_cpu;
  const Tensor got = y.to(Device::cpu());
  check_equal(got, want, "the graph's output");
  for (const Tensor& e : eager) check_equal(e.to(Device::cpu()), full(Shape{1000}, 5.0), "eager tensors untouched");

  // Destroyed: its blocks are the shared cache's again, and the device goes on.
  graph.reset();
  CHECK_FALSE(graph.captured());
  CHECK_THROWS_WITH(graph.replay(), Catch::Contains("nothing has been captured"));
  const Tensor after = (x + 1.0).to(Device::cpu());
  check_equal(after, x_cpu + 1.0, "an op after the graph is gone");
}

TEST_CASE("what a replay could not repeat is refused during capture, and the device works on",
          "[cuda][graph]") {
  Tensor x = random_cpu({64}, 4).to(kGpu);
  const Tensor x_cpu = x.to(Device::cpu());
  auto refused = [&](const std::function<void()>& step, const std::string& op) {
    CUDAGraph graph;
    CHECK_THROWS_WITH(graph.capture(kGpu, step),
                      Catch::Contains("cannot be captured") && Catch::Contains(op) && Catch::Contains("cuda:0"));
    CHECK_FALSE(graph.captured());
    CHECK_FALSE(backend_for(kGpu).capturing());
    // The device works as before, and a later capture succeeds.
    const Tensor doubled = (x * 2.0).to(Device::cpu());
    check_equal(doubled, x_cpu * 2.0, "an eager op after the refused capture");
    Tensor y;
    graph.capture(kGpu, [&] { y = x + 3.0; });
    graph.replay();
    check_equal(y.to(Device::cpu()), x_cpu + 3.0, "a capture after the refused one");
  };
  SECTION("a copy to the host") { refused([&] { (void)(x * 2.0).sum().item(); }, "a copy to the host"); }
  SECTION("synchronize") { refused([&] { backend_for(kGpu).synchronize(); }, "synchronize"); }
  SECTION("a copy from pageable host memory") {
    refused([&] { (void)x_cpu.to(kGpu); }, "pageable host memory");
  }
  SECTION("dropout") {
    refused([&] { (void)ops::dropout(x, 0.5, /*training=*/true); }, "dropout");
  }
  SECTION("random numbers") {
    refused([&] { (void)rand(Shape{8}, TensorOptions(DType::Float32, kGpu)); }, "uniform_");
  }
  SECTION("Adam's step") {
    Tensor p = x.clone().detach().requires_grad_();
    optim::AdamW opt({p}, optim::AdamWOptions{.lr = 1e-3});
    p.set_grad(x.clone());
    opt.step();
    refused([&] { opt.step(); }, "Adam's step");
  }
  SECTION("SGD's first step with momentum") {
    Tensor p = x.clone().detach().requires_grad_();
    optim::SGD opt({p}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    p.set_grad(x.clone());
    refused([&] { opt.step(); }, "SGD's first step with momentum");
  }
}

TEST_CASE("CUDAGraph misuse and the CPU get clear errors", "[cuda][graph]") {
  CUDAGraph graph;
  CHECK_THROWS_WITH(graph.capture(Device::cpu(), [] {}), Catch::Contains("CUDA graphs need a CUDA device"));
  CHECK_THROWS_WITH(graph.capture_end(), Catch::Contains("not capturing"));
  graph.capture_begin(kGpu);
  CUDAGraph other;
  CHECK_THROWS_WITH(other.capture_begin(kGpu), Catch::Contains("already under way"));
  CHECK_THROWS_WITH(graph.replay(), Catch::Contains("still capturing"));
  graph.capture_end();
  CHECK(graph.captured());
  CHECK(graph.nodes() == 0);
  graph.replay();  // an empty graph replays to nothing
  backend_for(kGpu).synchronize();
}
