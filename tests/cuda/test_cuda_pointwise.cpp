// kernels/cuda/elementwise.cu and reduce.cu through the public ops, against the CPU: binary
// ops (contiguous, broadcast row/column/scalar, transposed and high-rank views), ReLU forward
// and backward, eq, sum along every kind of dim (including the split paths for long sums),
// argmax with ties and NaN; views that start one element past an aligned address, so that the
// float4 paths must fall back.
#include "cuda_test_util.h"

#include <cmath>
#include <limits>

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

const int64_t kSizes[] = {0, 1, 31, 257, 1000};

// Small integers as float32: any sum of fewer than 2^24 / 7 of them is exact in float32 in any
// order, so sums of these compare exactly (an element dropped or added twice shows up).
Tensor small_integers(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randint(0, 8, shape, DType::Int64, &g).to(DType::Float32);
}

// A contiguous view of n elements that starts 4 bytes past the (64-byte aligned) storage start.
Tensor unaligned_gpu(const Tensor& cpu_values) {
  const int64_t n = cpu_values.numel();
  Tensor big = zeros({n + 1}, TensorOptions(DType::Float32, kGpu));
  Tensor view = big.narrow(0, 1, n);
  view.copy_(cpu_values.reshape({n}));
  return view.reshape(cpu_values.shape());
}

Tensor apply_binary(int op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    default: return a / b;
  }
}

const char* binary_name(int op) { return op == 0 ? "add" : op == 1 ? "sub" : op == 2 ? "mul" : "div"; }

}  // namespace

// Tolerance for every elementwise comparison below: both sides perform the same single IEEE
// float32 operation, correctly rounded, so they should agree exactly; 1e-5 absolute on values of
// magnitude <= 2 accepts at most a rounding difference and rejects any wrong element.
constexpr double kElementwiseAtol = 1e-5;

TEST_CASE("add, sub, mul and div of contiguous device tensors match the CPU", "[cuda][elementwise]") {
  for (int64_t n : kSizes) {
    const Tensor a = random_cpu({n}, 1 + static_cast<uint64_t>(n));
    const Tensor b = random_cpu({n}, 2 + static_cast<uint64_t>(n), 0.5, 2.0);  // divisors away from 0
    for (int op = 0; op < 4; ++op) {
      INFO("n = " << n);
      check_close(apply_binary(op, a.to(kGpu), b.to(kGpu)), apply_binary(op, a, b), kElementwiseAtol, 0.0,
                  binary_name(op));
    }
    // A scalar on either side takes the broadcast-scalar path.
    check_close(a.to(kGpu) * 0.5, a * 0.5, kElementwiseAtol, 0.0, "tensor * scalar");
    check_close(1.0 - a.to(kGpu), 1.0 - a, kElementwiseAtol, 0.0, "scalar - tensor");
    check_close(3.0 / b.to(kGpu), 3.0 / b, kElementwiseAtol, 0.0, "scalar / tensor");
  }
}

TEST_CASE("binary ops broadcast rows, columns, scalars and transposed views like the CPU", "[cuda][elementwise]") {
  const int64_t shapes[][2] = {{0, 5}, {1, 1}, {31, 257}, {257, 31}, {1000, 3}};
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    const int64_t n = s[0], c = s[1];
    // Every operand in [0.5, 2): each one is a divisor somewhere below.
    const Tensor x = random_cpu({n, c}, ++seed, 0.5, 2.0);
    const Tensor row = random_cpu({c}, ++seed, 0.5, 2.0);
    const Tensor col = random_cpu({n, 1}, ++seed, 0.5, 2.0);
    const Tensor scalar0 = random_cpu({}, ++seed, 0.5, 2.0);   // 0-dim
    const Tensor scalar2 = random_cpu({1, 1}, ++seed, 0.5, 2.0);
    const Tensor xt = random_cpu({c, n}, ++seed, 0.5, 2.0);  // its transpose is an [n, c] strided view
    const Tensor xg = x.to(kGpu);
    for (int op = 0; op < 4; ++op) {
      INFO("shape [" << n << ", " << c << "], " << binary_name(op));
      check_close(apply_binary(op, xg, row.to(kGpu)), apply_binary(op, x, row), kElementwiseAtol, 0.0, "x op row");
      check_close(apply_binary(op, row.to(kGpu), xg), apply_binary(op, row, x), kElementwiseAtol, 0.0, "row op x");
      check_close(apply_binary(op, xg, col.to(kGpu)), apply_binary(op, x, col), kElementwiseAtol, 0.0, "x op column");
      check_close(apply_binary(op, xg, scalar0.to(kGpu)), apply_binary(op, x, scalar0), kElementwiseAtol, 0.0,
                  "x op 0-dim scalar");
      check_close(apply_binary(op, scalar2.to(kGpu), xg), apply_binary(op, scalar2, x), kElementwiseAtol, 0.0,
                  "[1, 1] scalar op x");
      check_close(apply_binary(op, xt.to(kGpu).t(), row.to(kGpu)), apply_binary(op, xt.t(), row), kElementwiseAtol,
                  0.0, "transposed view op row");
      check_close(apply_binary(op, xg, xt.to(kGpu).t()), apply_binary(op, x, xt.t()), kElementwiseAtol, 0.0,
                  "x op transposed view");
    }
  }
}

TEST_CASE("binary ops over rank-5 broadcasts and narrowed views match the CPU", "[cuda][elementwise]") {
  const Tensor a = random_cpu({3, 1, 4, 1, 5}, 7);
  const Tensor b = random_cpu({2, 1, 6, 1}, 8, 0.5, 2.0);  // broadcasts to [3, 2, 4, 6, 5]
  for (int op = 0; op < 4; ++op)
    check_close(apply_binary(op, a.to(kGpu), b.to(kGpu)), apply_binary(op, a, b), kElementwiseAtol, 0.0,
                binary_name(op));
  // A column slice (non-contiguous rows) against a full tensor.
  const Tensor wide = random_cpu({40, 9}, 9);
  const Tensor other = random_cpu({40, 3}, 10, 0.5, 2.0);
  check_close(wide.to(kGpu).narrow(1, 2, 3) / other.to(kGpu), wide.narrow(1, 2, 3) / other, kElementwiseAtol, 0.0,
              "narrowed columns / tensor");
}

TEST_CASE("binary ops on views that start off a 16-byte boundary match the CPU", "[cuda][elementwise]") {
  for (int64_t n : {31, 257, 1000, 4099}) {
    const Tensor a = random_cpu({n}, 20 + static_cast<uint64_t>(n));
    const Tensor b = random_cpu({n}, 21 + static_cast<uint64_t>(n), 0.5, 2.0);
    const Tensor ua = unaligned_gpu(a), ub = unaligned_gpu(b);
    REQUIRE(ua.is_contiguous());
    INFO("n = " << n);
    check_close(ua + b.to(kGpu), a + b, kElementwiseAtol, 0.0, "unaligned + aligned");
    check_close(a.to(kGpu) * ub, a * b, kElementwiseAtol, 0.0, "aligned * unaligned");
    check_close(ua / ub, a / b, kElementwiseAtol, 0.0, "unaligned / unaligned");
    check_close(ua * 2.0, a * 2.0, kElementwiseAtol, 0.0, "unaligned * scalar");
  }
}

TEST_CASE("relu forward and backward on the device match the CPU for any size and alignment", "[cuda][elementwise]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{257}, int64_t{1000}, int64_t{100003}}) {
    const Tensor x = random_cpu({n}, 30 + static_cast<uint64_t>(n));
    const Tensor g = random_cpu({n}, 31 + static_cast<uint64_t>(n));
    INFO("n = " << n);
    // max(x, 0) and the mask select values: exact on both sides.
    const Tensor yc = ops::relu(x);
    check_equal(ops::relu(x.to(kGpu)), yc, "relu forward");
    if (n == 0) continue;
    Tensor xc = x.clone().requires_grad_();
    ops::relu(xc).backward(g);
    Tensor xg = x.to(kGpu).detach().requires_grad_();
    ops::relu(xg).backward(g.to(kGpu));
    check_equal(xg.grad(), xc.grad(), "relu backward");
    // The input and the upstream gradient start 4 bytes past alignment: scalar fallback.
    check_equal(ops::relu(unaligned_gpu(x)), yc, "relu forward of an unaligned view");
    Tensor xu = x.to(kGpu).detach().requires_grad_();
    ops::relu(xu).backward(unaligned_gpu(g));
    check_equal(xu.grad(), xc.grad(), "relu backward with an unaligned gradient");
  }
}

TEST_CASE("eq on the device compares float32 and int64 like the CPU", "[cuda][elementwise]") {
  for (int64_t n : kSizes) {
    Generator g(40 + static_cast<uint64_t>(n));
    // Few distinct values, so that about a third of the pairs are equal.
    const Tensor a = randint(0, 3, {n}, DType::Int64, &g), b = randint(0, 3, {n}, DType::Int64, &g);
    check_equal(a.to(kGpu).eq(b.to(kGpu)), a.eq(b), "int64");
    const Tensor af = a.to(DType::Float32), bf = b.to(DType::Float32);
    check_equal(af.to(kGpu).eq(bf.to(kGpu)), af.eq(bf), "float32");
  }
  // NaN is equal to nothing, itself included.
  const Tensor nan = full({4}, std::numeric_limits<double>::quiet_NaN());
  check_equal(nan.to(kGpu).eq(nan.to(kGpu)), zeros({4}), "NaN == NaN is 0");
}

// Sums of uniform [0, 1) values (no cancellation) against a float64 CPU sum: float32 with a
// fixed tree/chunk order keeps the relative error near log2(n)·eps ~ 1e-6; 1e-4 relative.
constexpr double kSumRtol = 1e-4;

TEST_CASE("sum of all elements on the device matches the CPU", "[cuda][reduce]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{257}, int64_t{1000}, int64_t{300001}}) {
    INFO("n = " << n);
    const Tensor x = random_cpu({n}, 50 + static_cast<uint64_t>(n), 0.0, 1.0);
    check_close(x.to(kGpu).sum(), x.to(DType::Float64).sum(), 0.0, kSumRtol, "sum of uniform values");
    const Tensor k = small_integers({n}, 51 + static_cast<uint64_t>(n));
    check_equal(k.to(kGpu).sum(), k.sum(), "sum of small integers is exact");
  }
}

TEST_CASE("sum along the last, first and middle dims matches the CPU, split paths included", "[cuda][reduce]") {
  struct Case {
    Shape shape;
    int64_t dim;
    const char* what;
  };
  const Case cases[] = {
      {{0, 7}, 1, "empty rows"},
      {{7, 0}, 1, "rows of nothing: zeros"},
      {{1, 1}, 0, "one element"},
      {{31, 257}, 1, "row sums, a warp per row"},
      {{257, 31}, 0, "column sums over 257 rows"},
      {{5, 1000}, 1, "row sums of 1000"},
      {{1000, 5}, 0, "column sums of 5 columns"},
      {{9, 5000}, 1, "row sums, a block per row"},
      {{3, 5001}, 1, "row sums, rows not a multiple of 4 (scalar loads)"},
      {{2, 200000}, 1, "long rows: two-pass split"},
      {{1, 70003}, 1, "one long odd row: split with scalar loads"},
      {{100000, 3}, 0, "long columns: two-pass split"},
      {{4096, 10}, 0, "the MLP's bias gradient shape"},
      {{6, 40, 33}, 1, "a middle dim"},
      {{2, 30000, 5}, 1, "a long middle dim: split"},
      {{4, 3, 2, 50}, 2, "rank 4"},
  };
  uint64_t seed = 60;
  for (const Case& c : cases) {
    INFO(c.what << ": shape " << c.shape << " dim " << c.dim);
    const Tensor x = random_cpu(c.shape, ++seed, 0.0, 1.0);
    check_close(x.to(kGpu).sum(c.dim), x.to(DType::Float64).sum(c.dim), 0.0, kSumRtol, "uniform values");
    const Tensor k = small_integers(c.shape, ++seed);
    check_equal(k.to(kGpu).sum(c.dim, true), k.sum(c.dim, true), "small integers, exact");
    // The same input twice gives the same bits (fixed order, no atomics).
    const Tensor xg = x.to(kGpu);
    check_equal(xg.sum(c.dim), xg.sum(c.dim), "deterministic");
  }
}

TEST_CASE("sum over rows that start off a 16-byte boundary matches the CPU", "[cuda][reduce]") {
  for (const Shape& shape : {Shape{3, 8000}, Shape{1, 100000}, Shape{5, 64}}) {
    const Tensor k = small_integers(shape, 70 + static_cast<uint64_t>(shape.numel()));
    check_equal(unaligned_gpu(k).sum(1), k.sum(1), "unaligned rows, exact");
  }
}

TEST_CASE("mean on the device matches the CPU", "[cuda][reduce]") {
  const Tensor x = random_cpu({37, 129}, 80, 0.0, 1.0);
  check_close(x.to(kGpu).mean(), x.to(DType::Float64).mean(), 0.0, kSumRtol, "mean of all");
  check_close(x.to(kGpu).mean(0), x.to(DType::Float64).mean(0), 0.0, kSumRtol, "mean over dim 0");
  check_close(x.to(kGpu).mean(1, true), x.to(DType::Float64).mean(1, true), 0.0, kSumRtol, "mean over dim 1");
}

TEST_CASE("argmax on the device picks the CPU's index, ties and NaN included", "[cuda][reduce]") {
  uint64_t seed = 90;
  for (int64_t rows : {1, 7, 300}) {
    for (int64_t cols : {1, 2, 31, 1000, 1025, 5000}) {
      INFO("[" << rows << ", " << cols << "]");
      const Tensor x = random_cpu({rows, cols}, ++seed);
      check_equal(x.to(kGpu).argmax(1), x.argmax(1), "distinct values");
      // Values in {0, ..., 7}: every row has ties for its maximum; the first one wins.
      const Tensor k = small_integers({rows, cols}, ++seed);
      check_equal(k.to(kGpu).argmax(1), k.argmax(1), "ties");
      check_equal(k.to(kGpu).argmax(0), k.argmax(0), "ties along dim 0");
    }
  }
  // NaN, as the CPU treats it: at column 0 it wins, elsewhere it is skipped; -inf rows pick 0.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (int64_t cols : {5, 2000}) {
    std::vector<double> v(static_cast<size_t>(5 * cols), 0.0);
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = static_cast<double>((c * 7 + r) % 11);
    v[0] = nan;                                                      // row 0: NaN first
    v[static_cast<size_t>(cols + cols / 2)] = nan;                   // row 1: NaN in the middle
    for (int64_t c = 1; c < cols; ++c) v[static_cast<size_t>(2 * cols + c)] = nan;  // row 2: all NaN but column 0
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(3 * cols + c)] = -inf;  // row 3: all -inf
    v[static_cast<size_t>(4 * cols + cols - 1)] = inf;               // row 4: +inf last
    const Tensor x = from_vector(v, {5, cols}, DType::Float32);
    INFO("cols = " << cols);
    check_equal(x.to(kGpu).argmax(1), x.argmax(1), "NaN and infinities");
  }
}

TEST_CASE("sum and binary ops refuse int64 device tensors with a clear error", "[cuda][reduce]") {
  const Tensor labels = randint(0, 5, {10}, DType::Int64).to(kGpu);
  CHECK_THROWS_WITH(labels.sum(), Catch::Contains("float32"));
  CHECK_THROWS_WITH(labels + labels, Catch::Contains("float32"));
}
