// Tensor basics: factories, dtypes, devices, views sharing storage, broadcasting, printing,
// the seeded generator, and the errors bad input must raise.
#include <catch2/catch.hpp>
#include <sstream>

#include "core/ops.h"

using namespace minidl;

TEST_CASE("devices parse and print like PyTorch, and CUDA is reported as the machine has it", "[core][device]") {
  CHECK(Device("cpu") == Device::cpu());
  CHECK(Device("cuda:1") == Device::cuda(1));
  CHECK(Device("cuda").str() == "cuda:0");
  CHECK(Device::cuda(3).str() == "cuda:3");
  CHECK_THROWS_WITH(Device("gpu"), Catch::Contains("cannot parse 'gpu'"));
  CHECK_THROWS_AS(Device("cuda:-1"), Error);
  CHECK_THROWS_AS(Device("cuda:x"), Error);
  // This suite also runs on a GPU machine (scripts/gpu/gpu-check): a device beyond the count is
  // refused either way, and the default device follows what is there.
  const int count = cuda_device_count();
  CHECK(cuda_is_available() == (count > 0));
  CHECK(default_device() == (count > 0 ? Device::cuda(0) : Device::cpu()));
  const std::string missing = Device::cuda(count).str();
  CHECK_THROWS_WITH(zeros({2}, Device::cuda(count)), Catch::Contains(missing + " is not available"));
}

TEST_CASE("factories fill the values they promise", "[core][tensor]") {
  CHECK(zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({4}, DType::Float64).to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(full({2}, 7.5).to_vector<float>() == std::vector<float>{7.5f, 7.5f});
  CHECK(arange(4, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(arange(1.0, 2.0, 0.25, DType::Float64).to_vector<double>() == std::vector<double>{1.0, 1.25, 1.5, 1.75});
  Tensor e = empty({0, 3});
  CHECK(e.numel() == 0);
  CHECK(from_vector<float>({1, 2, 3, 4}, {2, 2}).at({1, 0}) == 3.0);
  CHECK_THROWS_WITH(from_vector<float>({1, 2, 3}, {2, 2}), Catch::Contains("do not fill shape [2, 2]"));
  CHECK(scalar_tensor(2.5).item() == 2.5);
  CHECK_THROWS_WITH(ones({2}).item(), Catch::Contains("one element"));
}

TEST_CASE("the same seed gives the same random numbers and the distributions look right", "[core][generator]") {
  Generator g1(42), g2(42), g3(43);
  Tensor a = randn({1000}, {}, &g1), b = randn({1000}, {}, &g2), c = randn({1000}, {}, &g3);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  // Mean of 1000 standard normals: standard error 0.032, so 0.15 is a ~5-sigma bound.
  CHECK(std::abs(a.mean().item()) < 0.15);
  Tensor u = rand({10000}, DType::Float64, &g1);
  for (double v : u.to_vector<double>()) REQUIRE((v >= 0.0 && v < 1.0));
  Tensor r = randint(3, 7, {1000}, DType::Int64, &g1);
  std::vector<int> seen(4, 0);
  for (int64_t v : r.to_vector<int64_t>()) {
    REQUIRE((v >= 3 && v < 7));
    seen[static_cast<size_t>(v - 3)]++;
  }
  for (int s : seen) CHECK(s > 150);  // each value expected 250 times
  manual_seed(5);
  Tensor d1 = rand({4});
  manual_seed(5);
  CHECK(rand({4}).to_vector<float>() == d1.to_vector<float>());
}

TEST_CASE("views share storage: reshape, narrow, split, chunk, transpose", "[core][views]") {
  Tensor x = arange(12, DType::Float64).reshape({3, 4});
  Tensor r = x.reshape({4, 3});
  CHECK(r.storage().data() == x.storage().data());
  Tensor n = x.narrow(1, 1, 2);
  CHECK(n.shape() == Shape{3, 2});
  CHECK(n.at({2, 1}) == 10.0);
  CHECK_FALSE(n.is_contiguous());
  auto parts = x.split(2, 0);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].shape() == Shape{1, 4});
  auto chunks = arange(10).chunk(3);
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[0].numel() == 4);
  CHECK(chunks[2].numel() == 2);
  Tensor t = x.t();
  CHECK(t.shape() == Shape{4, 3});
  CHECK(t.at({3, 2}) == 11.0);
  CHECK(t.contiguous().to_vector<double>()[1] == 4.0);
  CHECK(t.reshape({12}).to_vector<double>()[1] == 4.0);  // non-contiguous reshape copies
  CHECK_THROWS_WITH(t.view({12}), Catch::Contains("not contiguous"));
  CHECK_THROWS_WITH(x.reshape({5, -1}), Catch::Contains("invalid for input of shape [3, 4]"));
  CHECK_THROWS_WITH(x.narrow(0, 2, 2), Catch::Contains("outside dim 0"));
  Tensor z = x.detach();
  z.narrow(0, 0, 1).fill_(-1.0);  // writes through the view into x
  CHECK(x.at({0, 3}) == -1.0);
  CHECK(x.flatten().shape() == Shape{12});
}

TEST_CASE("broadcasting: N x C op C, op scalar, and mismatches", "[core][broadcast]") {
  Tensor a = arange(6, DType::Float64).reshape({2, 3});
  Tensor b = from_vector<double>({10, 20, 30});
  CHECK((a + b).to_vector<double>() == std::vector<double>{10, 21, 32, 13, 24, 35});
  CHECK((a * 2.0).to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10});
  CHECK((1.0 - a).to_vector<double>()[5] == -4.0);
  Tensor col = from_vector<double>({1, 2}, {2, 1});
  CHECK((a / (col + 0.0)).to_vector<double>()[5] == 2.5);
  CHECK_THROWS_WITH(a + ones({2}, DType::Float64), Catch::Contains("add") && Catch::Contains("[2, 3]") &&
                                                        Catch::Contains("[2]"));
  // Floating dtypes promote (float64 + float32 is float64, as in PyTorch); int64 is refused.
  CHECK((a + ones({3})).dtype() == DType::Float64);
  CHECK((a + ones({3})).to_vector<double>()[5] == 6.0);
  CHECK_THROWS_WITH(a + ones({3}, DType::Int64), Catch::Contains("dtypes differ"));
  CHECK((a.t() + a.t()).to_vector<double>() == std::vector<double>{0, 6, 2, 8, 4, 10});
}

TEST_CASE("dtype conversion, copy_ and comparisons for accuracy", "[core][tensor]") {
  Tensor x = from_vector<float>({1.5f, -2.25f});
  CHECK(x.to(DType::Float64).to_vector<double>() == std::vector<double>{1.5, -2.25});
  CHECK(x.to(DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  Tensor y = zeros({2});
  y.copy_(from_vector<double>({3.0, 4.0}));
  CHECK(y.to_vector<float>() == std::vector<float>{3.0f, 4.0f});
  Tensor logits = from_vector<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.3f}, {3, 2});
  Tensor pred = logits.argmax(1);
  CHECK(pred.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});  // ties pick the first
  Tensor labels = from_vector<int64_t>({1, 1, 0});
  CHECK(pred.eq(labels).mean().item() == Approx(2.0 / 3.0));
  CHECK(arange(6).reshape({2, 3}).argmax(0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
}

// The CPU copy takes one of three ways (both contiguous: one block move; last dimension
// contiguous in both: a move per row; else element by element); each is checked against the
// values read one element at a time, and must leave what lies outside the destination view
// alone.
TEST_CASE("copy_ between views writes exactly the view, whichever way it copies", "[core][tensor]") {
  const Tensor src = arange(60, DType::Float64).reshape({3, 4, 5});
  auto expect_view = [](const Tensor& base, const Tensor& view, const Tensor& from, double untouched) {
    const std::vector<double> got = base.to_vector<double>();
    int64_t inside = 0;
    for (double v : got) inside += v != untouched;
    CHECK(inside == view.numel());  // nothing outside the view was written
    for (int64_t i = 0; i < view.shape()[0]; ++i)
      for (int64_t j = 0; j < view.shape()[1]; ++j)
        for (int64_t k = 0; k < view.shape()[2]; ++k) CHECK(view.at({i, j, k}) == from.at({i, j, k}));
  };
  SECTION("contiguous into contiguous") {
    Tensor dst = full({3, 4, 5}, -1.0, TensorOptions(DType::Float64));
    dst.copy_(src);
    CHECK(dst.to_vector<double>() == src.to_vector<double>());
  }
  SECTION("rows: a narrowed source into a narrowed destination") {
    Tensor base = full({3, 6, 7}, -1.0, TensorOptions(DType::Float64));
    Tensor dst = base.narrow(1, 1, 4).narrow(2, 2, 5);
    const Tensor from = (arange(144, DType::Float64) + 100.0).reshape({3, 6, 8}).narrow(1, 1, 4).narrow(2, 3, 5);
    REQUIRE_FALSE(from.is_contiguous());
    dst.copy_(from);
    expect_view(base, dst, from, -1.0);
  }
  SECTION("one block: contiguous views that start inside their storage") {
    Tensor base = full({5, 4, 5}, -1.0, TensorOptions(DType::Float64));
    Tensor dst = base.narrow(0, 1, 3);
    const Tensor from = (arange(100, DType::Float64) + 100.0).reshape({5, 4, 5}).narrow(0, 2, 3);
    REQUIRE(from.is_contiguous());
    REQUIRE(from.offset() != 0);
    dst.copy_(from);
    expect_view(base, dst, from, -1.0);
  }
  SECTION("overlapping source and destination, as the element walk copies them") {
    Tensor x = arange(10, DType::Float64);
    x.narrow(0, 0, 9).copy_(x.narrow(0, 1, 9));  // a shift left: every element read before it is written
    CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 9});
  }
  SECTION("elements: a transposed source, and a destination strided in its last dimension") {
    Tensor base = full({3, 4, 10}, -1.0, TensorOptions(DType::Float64));
    Tensor dst = base.view({3, 4, 5, 2}).narrow(3, 1, 1).squeeze(3);  // every other element
    const Tensor from = (src + 100.0).transpose(0, 2).contiguous().transpose(0, 2);
    REQUIRE_FALSE(from.is_contiguous());
    dst.copy_(from);
    expect_view(base, dst, from, -1.0);
  }
}

TEST_CASE("set_data_ swaps a leaf's data behind every handle and refuses a dtype, shape or graph change",
          "[core][tensor]") {
  Tensor w = full({2, 3}, 1.0).requires_grad_();
  const Tensor handle = w;  // another holder of the same TensorImpl (an optimizer, say)
  w.set_grad(full({2, 3}, 5.0));
  const Tensor src = arange(6).to(DType::Float32).reshape({3, 2}).t();  // a transposed view: strides kept
  w.set_data_(src);
  CHECK(handle.storage().data() == src.storage().data());
  CHECK(handle.strides() == src.strides());
  CHECK(handle.to_vector<float>() == std::vector<float>{0, 2, 4, 1, 3, 5});
  CHECK(handle.requires_grad());  // the TensorImpl's own state stays
  CHECK(handle.grad().to_vector<float>() == std::vector<float>(6, 5.0f));
  w.set_data_(w);  // its own data: nothing changes
  CHECK(handle.to_vector<float>() == std::vector<float>{0, 2, 4, 1, 3, 5});

  CHECK_THROWS_WITH(w.set_data_(zeros({2, 3}, DType::Float64)),
                    Catch::Contains("set_data_: the new data is float64 [2, 3]") && Catch::Contains("keeps a tensor's dtype and shape"));
  CHECK_THROWS_WITH(w.set_data_(zeros({3, 2})), Catch::Contains("float32 [3, 2]") && Catch::Contains("float32 [2, 3]"));
  CHECK_THROWS_WITH(w.set_data_(Tensor()), Catch::Contains("set_data_") && Catch::Contains("src"));
  Tensor y = w * 2.0;
  CHECK_THROWS_WITH(y.set_data_(zeros({2, 3})), Catch::Contains("set_data_: cannot replace the data of a non-leaf tensor"));
  CHECK(handle.to_vector<float>() == std::vector<float>{0, 2, 4, 1, 3, 5});  // the refusals changed nothing
}

TEST_CASE("tensors print like PyTorch", "[core][print]") {
  std::ostringstream os;
  os << from_vector<float>({1.0f, -2.5f}, {1, 2});
  CHECK(os.str() == "tensor([[ 1.0000, -2.5000]])");
  os.str("");
  os << ones({2}).requires_grad_();
  CHECK(os.str() == "tensor([1.0000, 1.0000], requires_grad=True)");
  os.str("");
  os << arange(3, DType::Int64);
  CHECK(os.str() == "tensor([0, 1, 2])");
  os.str("");
  os << (ones({1}).requires_grad_() * 2.0);
  CHECK(os.str() == "tensor([2.0000], grad_fn=<MulBackward>)");
}

TEST_CASE("bad input to ops throws minidl::Error naming the op and the shapes", "[core][errors]") {
  CHECK_THROWS_WITH(ops::matmul(ones({2, 3}), ones({2, 3})), Catch::Contains("matmul") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(ops::linear(ones({4, 3}), ones({5, 2}), ones({5})),
                    Catch::Contains("linear") && Catch::Contains("[4, 3]") && Catch::Contains("[5, 2]"));
  CHECK_THROWS_WITH(ops::linear(ones({4, 2}), ones({5, 2}), ones({4})), Catch::Contains("bias has shape [4]"));
  Tensor logits = zeros({3, 4});
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, from_vector<int64_t>({0, 4, 1})),
                    Catch::Contains("target 4 at row 1") && Catch::Contains("[0, 4)"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, from_vector<int64_t>({0, -1, 1})), Catch::Contains("target -1"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, zeros({3})),
                    Catch::Contains("int64") && Catch::Contains("float32"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(zeros({0, 4}), empty({0}, DType::Int64)), Catch::Contains("empty batch"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, from_vector<int64_t>({0, 1})), Catch::Contains("targets must be [N]"));
  CHECK_THROWS_WITH(Tensor().shape(), Catch::Contains("undefined tensor"));
  CHECK_THROWS_WITH(ones({2}).sum(2), Catch::Contains("dim 2 is out of range"));
  CHECK_THROWS_WITH(arange(4, DType::Int64) / zeros({4}, DType::Int64), Catch::Contains("division by zero"));
}

TEST_CASE("a tensor with no element is contiguous, so views, reshapes and the ops built on them work",
          "[core][views]") {
  // PyTorch's rule: numel() == 0 is contiguous whatever the strides. contiguous_strides steps over
  // a zero-size dim as over a 1 (a fresh [5, 0] has strides [1, 1]), so a stride test alone would
  // call it "not contiguous" and view()/reshape() of it would throw.
  for (const Shape& shape : {Shape{5, 0}, Shape{0, 5}, Shape{2, 0, 3}, Shape{0}, Shape{2, 0, 5, 5}}) {
    INFO("shape " << shape);
    const Tensor e = zeros(shape);
    CHECK(e.is_contiguous());
    CHECK(e.view({0}).shape() == Shape{0});
    CHECK(e.reshape({1, 0}).shape() == Shape({1, 0}));
    CHECK(e.contiguous().shape() == shape);
  }
  // A non-contiguous view with elements stays non-contiguous; narrowed to nothing it is contiguous.
  const Tensor x = arange(12, DType::Float64).reshape({3, 4});
  CHECK_FALSE(x.transpose(0, 1).is_contiguous());
  CHECK(x.narrow(1, 1, 0).is_contiguous());

  // The ops that failed on both devices before: softmax along the last dim of [5, 0], the
  // backward of a sum of [5, 0], a matmul backward with a [3, 0] operand, max-pool backward over
  // no channel.
  CHECK(ops::softmax(zeros({5, 0}), -1).shape() == Shape{5, 0});
  CHECK(ops::log_softmax(zeros({5, 0}), -1).shape() == Shape{5, 0});
  Tensor s = zeros({5, 0}, DType::Float64).requires_grad_();
  s.sum().backward();
  CHECK(s.grad().shape() == Shape{5, 0});
  Tensor a = ones({3, 0}, DType::Float64).requires_grad_(), b = ones({0, 4}, DType::Float64).requires_grad_();
  Tensor c = ops::matmul(a, b);  // [3, 4] of empty sums: zeros
  CHECK(c.to_vector<double>() == std::vector<double>(12, 0.0));
  c.backward(ones({3, 4}, DType::Float64));
  CHECK(a.grad().shape() == Shape{3, 0});
  CHECK(b.grad().shape() == Shape{0, 4});
  Tensor p = zeros({2, 0, 5, 5}, DType::Float64).requires_grad_();
  ops::max_pool2d(p, {3, 3}, Size2{2, 2}, {1, 1}).sum().backward();
  CHECK(p.grad().shape() == Shape{2, 0, 5, 5});
}
