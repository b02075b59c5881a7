// CUDA memory: copies in every direction, pinned memory, the strided copy behind contiguous(),
// casts, fills, arange, row gathers, Philox random fills against the CPU, the caching
// allocator's statistics, and out-of-memory as a recoverable error.
#include "cuda_test_util.h"

#include "core/generator.h"
#include "core/memory.h"
#include "core/ops.h"
#include "data/data.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {
const int64_t kSizes[] = {0, 1, 31, 257, 1000};
}

TEST_CASE("host to device to host copies are exact for float32 and int64", "[cuda][memory]") {
  for (int64_t n : kSizes) {
    Tensor x = random_cpu({n}, 10 + static_cast<uint64_t>(n));
    check_equal(x.to(kGpu).to(Device::cpu()), x, "float32 round trip");
    Tensor labels = randint(-5, 5, {n}, DType::Int64);
    check_equal(labels.to(kGpu).to(Device::cpu()), labels, "int64 round trip");
    // device -> device on one device (clone) keeps the values
    check_equal(x.to(kGpu).clone(), x, "device clone");
  }
}

TEST_CASE("pinned host tensors copy to the device and their blocks are reused", "[cuda][memory]") {
  Tensor x = random_cpu({257, 3}, 3);
  Tensor p = pin_memory(x);
  CHECK(is_pinned(p));
  CHECK_FALSE(is_pinned(x));
  check_equal(p.to(kGpu), x, "pinned -> device");
  CHECK_THROWS_WITH(pin_memory(x.to(kGpu)), Catch::Contains("expected a CPU tensor"));
}

// A copy from pinned memory is asynchronous. Queued behind a slow matmul, it is still pending when
// its pinned tensor dies and a tensor of the same size is pinned and filled; the pinned allocator
// must not hand the block out again until the stream has passed the copy.
TEST_CASE("a pinned block is not reused while a queued copy still reads it", "[cuda][memory]") {
  const Tensor x = random_cpu({257, 3}, 41);
  const Tensor a = random_cpu({384, 384}, 42).to(kGpu);
  const Tensor busy = ops::matmul(a, a);  // queued first: keeps the stream busy
  Tensor on_device;
  {
    const Tensor p = pin_memory(x);
    on_device = p.to(kGpu);
  }
  const Tensor other = pin_memory(random_cpu({257, 3}, 43));  // may take p's block, filled at once
  check_equal(on_device, x, "the copy of a pinned tensor freed while its copy was queued");
  CHECK(is_pinned(other));
  CHECK(busy.size(0) == 384);
}

// A copy to another device runs on the destination's stream, here kept busy by a matmul queued
// first. The copy's source dies as soon as the copy returns and a tensor of the same size is
// made on the source device, which may take its block and is written at once (that device is
// idle): the copy must have read its source before it returned. On a machine with one device,
// the copy within it is what is checked.
TEST_CASE("a copy to another device has read its source when it returns, so the source may be freed and reused",
          "[cuda][memory]") {
  const Device other = cuda_device_count() > 1 ? Device::cuda(1) : kGpu;
  INFO("copy from " << kGpu << " to " << other);
  const Tensor x = random_cpu({257, 3}, 51);
  const Tensor a = random_cpu({384, 384}, 52).to(other);
  const Tensor busy = ops::matmul(a, a);  // queued first on the destination's stream
  Tensor copied;
  {
    const Tensor source = x.to(kGpu);
    copied = source.to(other);
  }
  const Tensor reuse = random_cpu({257, 3}, 53).to(kGpu);  // may take the source's block
  check_equal(copied, x, "a copy whose source was freed and its block reused right after the copy returned");
  CHECK(reuse.device() == kGpu);
  CHECK(busy.size(0) == 384);
}

TEST_CASE("contiguous of transposed, narrowed and expanded device views matches the CPU", "[cuda][memory]") {
  for (int64_t n : kSizes) {
    Tensor x = random_cpu({n, 7}, 20 + static_cast<uint64_t>(n));
    Tensor g = x.to(kGpu);
    check_equal(g.t().contiguous(), x.t().contiguous(), "transpose");
    if (n > 2) check_equal(g.narrow(0, 1, n - 2).t().contiguous(), x.narrow(0, 1, n - 2).t().contiguous(), "narrow");
    check_equal(ops::expand(g.narrow(1, 2, 1), {n, 5}).contiguous(), ops::expand(x.narrow(1, 2, 1), {n, 5}).contiguous(),
                "expand");
  }
}

TEST_CASE("casts, fills and arange on the device match the CPU", "[cuda][memory]") {
  for (int64_t n : kSizes) {
    Tensor x = random_cpu({n}, 30 + static_cast<uint64_t>(n), -50.0, 50.0);
    check_equal(x.to(kGpu).to(DType::Int64), x.to(DType::Int64), "float32 -> int64 truncates toward zero");
    Tensor i = randint(-1000, 1000, {n}, DType::Int64);
    check_equal(i.to(kGpu).to(DType::Float32), i.to(DType::Float32), "int64 -> float32");
    check_equal(full({n}, 2.5, TensorOptions(DType::Float32, kGpu)), full({n}, 2.5), "fill float32");
    check_equal(full({n}, -7, TensorOptions(DType::Int64, kGpu)), full({n}, -7, DType::Int64), "fill int64");
    check_equal(arange(0.5, 0.5 + 0.25 * static_cast<double>(n), 0.25, TensorOptions(DType::Float32, kGpu)),
                arange(0.5, 0.5 + 0.25 * static_cast<double>(n), 0.25, DType::Float32), "arange");
  }
}

TEST_CASE("index_rows gathers device rows like the CPU", "[cuda][memory]") {
  for (int64_t n : kSizes) {
    if (n == 0) continue;
    Tensor x = random_cpu({n, 5}, 40 + static_cast<uint64_t>(n));
    const std::vector<int64_t> idx = randint(0, n, {2 * n + 1}, DType::Int64).to_vector<int64_t>();
    check_equal(ops::index_rows(x.to(kGpu), idx), ops::index_rows(x, idx), "float rows");
    Tensor labels = randint(0, 10, {n}, DType::Int64);
    check_equal(ops::index_rows(labels.to(kGpu), idx), ops::index_rows(labels, idx), "int64 rows");
  }
}

TEST_CASE("uniform, normal and randint give the CPU's numbers for the same seed", "[cuda][random]") {
  for (int64_t n : kSizes) {
    Generator a(99), b(99);
    check_equal(rand({n}, TensorOptions(DType::Float32, kGpu), &a), rand({n}, DType::Float32, &b),
                "uniform is bit-identical (same float arithmetic)");
    // Box–Muller uses double log/cos, whose last bit may differ between CUDA's and glibc's
    // implementations; after rounding to float32 that is at most 1 ulp: 1e-6 relative.
    check_close(randn({n}, TensorOptions(DType::Float32, kGpu), &a), randn({n}, DType::Float32, &b), 1e-6, 1e-6,
                "normal");
    check_equal(randint(-3, 1000003, {n}, TensorOptions(DType::Int64, kGpu), &a),
                randint(-3, 1000003, {n}, DType::Int64, &b), "randint is bit-identical");
  }
}

TEST_CASE("float64 tensors are refused on the device with a clear error", "[cuda][memory]") {
  CHECK_THROWS_WITH(zeros({3}, TensorOptions(DType::Float64, kGpu)), Catch::Contains("float64"));
  CHECK_THROWS_WITH(random_cpu({3}, 1).to(DType::Float64).to(kGpu), Catch::Contains("float64"));
}

TEST_CASE("to() casts on the CPU side, so float64 crosses to and from the device in one call", "[cuda][memory]") {
  Tensor x = random_cpu({257}, 5);
  Tensor on_gpu = x.to(kGpu);
  // cuda float32 -> cpu float64 in one call: the bytes move, then the CPU casts (exact).
  Tensor wide = ops::to(on_gpu, Device::cpu(), DType::Float64);
  CHECK(wide.dtype() == DType::Float64);
  CHECK(wide.to_vector<double>() == x.to(DType::Float64).to_vector<double>());
  Tensor labels = randint(0, 10, {31}, TensorOptions(DType::Int64, kGpu));
  CHECK(ops::to(labels, Device::cpu(), DType::Float64).to_vector<double>() ==
        labels.to(Device::cpu()).to(DType::Float64).to_vector<double>());
  // The gradient of a CPU float64 leaf moved to the device as float32 comes back as float64.
  Tensor leaf = x.to(DType::Float64).detach();
  leaf.requires_grad_(true);
  Tensor y = ops::to(leaf, kGpu, DType::Float32);
  (y * 2.0).sum().backward();
  REQUIRE(leaf.grad().defined());
  CHECK(leaf.grad().dtype() == DType::Float64);
  CHECK(leaf.grad().device() == Device::cpu());
  CHECK(leaf.grad().to_vector<double>() == std::vector<double>(257, 2.0));
}

TEST_CASE("the caching allocator reuses freed blocks and reports its statistics", "[cuda][memory]") {
  backend_for(kGpu).synchronize();
  empty_cache(kGpu);
  const MemoryStats before = memory_stats(kGpu);
  {
    Tensor a = empty({1 << 20}, TensorOptions(DType::Float32, kGpu));  // 4 MiB
    const MemoryStats during = memory_stats(kGpu);
    CHECK(during.allocated_bytes >= before.allocated_bytes + (4 << 20));
    CHECK(during.peak_allocated_bytes >= during.allocated_bytes);
  }
  const MemoryStats freed = memory_stats(kGpu);
  CHECK(freed.allocated_bytes == before.allocated_bytes);
  CHECK(freed.reserved_bytes >= before.reserved_bytes + (4 << 20));  // kept in the cache
  Tensor again = empty({1 << 20}, TensorOptions(DType::Float32, kGpu));
  const MemoryStats hit = memory_stats(kGpu);
  CHECK(hit.cache_hits == freed.cache_hits + 1);
  CHECK(hit.device_allocations == freed.device_allocations);
  again = Tensor();
  empty_cache(kGpu);
  CHECK(memory_stats(kGpu).reserved_bytes == memory_stats(kGpu).allocated_bytes);
}

TEST_CASE("a huge device allocation throws OutOfMemory and the next small one succeeds", "[cuda][memory]") {
  // 2^40 floats = 4 TiB: more than any GPU has.
  try {
    Tensor huge = empty({int64_t{1} << 40}, TensorOptions(DType::Float32, kGpu));
    FAIL("a 4 TiB allocation succeeded");
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("cuda:0") && Catch::Contains("free of") && Catch::Contains("cache holds"));
  }
  Tensor small = full({31}, 1.0, TensorOptions(DType::Float32, kGpu));
  CHECK(ops::sum(small).item() == 31.0);
}

TEST_CASE("a DataLoader with pin_memory delivers pinned batches that copy to the device exactly", "[cuda][memory]") {
  Tensor x = random_cpu({37, 4}, 5);
  Tensor y = randint(0, 3, {37}, DType::Int64);
  auto ds = std::make_shared<data::TensorDataset>(x, y);
  for (int workers : {0, 2}) {
    data::DataLoader loader(ds, data::DataLoaderOptions{.batch_size = 8, .num_workers = workers, .pin_memory = true});
    int64_t row = 0;
    for (data::Batch& b : loader) {
      CHECK(is_pinned(b.x));
      CHECK(is_pinned(b.y));
      const int64_t n = b.x.shape()[0];
      check_equal(b.x.to(kGpu), x.narrow(0, row, n).contiguous(), "pinned batch x");
      check_equal(b.y.to(kGpu), y.narrow(0, row, n).contiguous(), "pinned batch y");
      row += n;
    }
    CHECK(row == 37);
  }
}
