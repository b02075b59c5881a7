// The CUDA GEMM family (kernels/cuda/gemm/simt_gemm.cu, cublas_gemm.cu, linear.cu) against the CPU
// backend on fresh random inputs, for the hand-written kernel and for cuBLAS (set_gemm_impl):
// matmul in every transpose variant, linear forward with and without bias and ReLU, linear
// backward (dx, dW, db, each skippable), empty inner dimensions, misaligned operands (the
// scalar load path), native against cuBLAS, and run-to-run determinism. Which plan (tile size,
// split K) the native kernel takes for each shape is asserted, so a change of its heuristic
// cannot silently drop a path from these tests; and each plan is also forced on small shapes
// (a small multiprocessor count given to the kernel, and plans given outright), which is what
// compute-sanitizer runs ([small]; the shapes of the other tests are [large] for it).
//
// Note [GEMM tolerance]
// The CPU, the native kernel and cuBLAS add the K products of
// each output in different orders (and tile sizes), so their float32 results differ by rounding.
// The rounding error of a float32 dot product is bounded by a multiple of eps·Σ_p |a_p·b_p|, so
// each element is compared against scale[i, j] = (|op(A)|·|op(B)|)[i, j] + |bias[j]|:
//   |cuda - cpu| <= 1e-5 · scale + 1e-6.
// For the uniform(-1, 1) inputs here the observed error is about sqrt(K)·eps·|partial sums|, some
// 100x below that bound at K = 1000, while a lost, doubled or misplaced product (an edge-tile or
// K-tail bug) moves an element by |a_p·b_p| ~ 0.25, far above 1e-5 · scale even at K = 1000.
#include "cuda_test_util.h"

#include <cuda_runtime.h>

#include <cmath>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_impl.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

constexpr double kRel = 1e-5;  // Note [GEMM tolerance]
constexpr double kAbs = 1e-6;  // outputs whose scale is ~0 (products of tiny inputs)

const GemmImpl kImpls[] = {GemmImpl::Native, GemmImpl::Cublas};

struct GemmShape {
  int64_t m, n, k;
};
// Tile-unfriendly shapes, the MLP's (batch 128, 784-256-128-10), K not a multiple of any BK, and
// two big enough that the native kernel takes its medium (600x900: 150 tiles of 64) and large
// (1537x1400: 143 tiles of 128) configurations on a 132-SM H200; the rest take the small tile,
// and 1000x1x999, 257x31x1000 and 128x256x784 also split K (5, 7 and 5 slices, simt_gemm.cu). Two
// tall thin ones split K over a larger tile: 300x500x3000 (12 large tiles x 21 slices of 144)
// and 130x260x2000 (15 medium tiles x 14 slices of 144).
// kPlansOn132 states each shape's plan; the first test case below holds the heuristic to it.
const GemmShape kShapes[] = {{1, 1, 1},       {17, 33, 65},    {1000, 1, 999},   {128, 784, 256},
                             {128, 128, 10},  {257, 31, 1000}, {128, 256, 784},  {128, 10, 128},
                             {5, 300, 9},     {600, 900, 130}, {1537, 1400, 67}, {300, 500, 3000},
                             {130, 260, 2000}};

// A native GEMM plan: the tile and the number of K slices (1: no split).
struct Plan {
  cuda::GemmTile tile;
  int64_t splits;
};
constexpr int kH200Sms = 132;  // an H200's multiprocessors: the device these shapes were chosen for
constexpr cuda::GemmTile kLarge = cuda::GemmTile::Large128x128, kMedium = cuda::GemmTile::Medium64x64,
                         kSmall = cuda::GemmTile::Small32x32;
const Plan kPlansOn132[] = {{kSmall, 1}, {kSmall, 1},  {kSmall, 5}, {kSmall, 1},   {kSmall, 1},
                            {kSmall, 7}, {kSmall, 5},  {kSmall, 1}, {kSmall, 1},   {kMedium, 1},
                            {kLarge, 1}, {kLarge, 21}, {kMedium, 14}};
static_assert(std::size(kPlansOn132) == std::size(kShapes), "one plan per shape");

// The misaligned test's shapes: small, medium and large tiles on an H200, and a small one that
// splits K (200x40x1000: 7 slices).
const GemmShape kMisalignedShapes[] = {{130, 260, 64}, {600, 900, 132}, {1537, 1400, 68}, {200, 40, 1000}};
const Plan kMisalignedPlansOn132[] = {{kSmall, 1}, {kMedium, 1}, {kLarge, 1}, {kSmall, 7}};

std::string plan_str(const cuda::NativeGemmPlan& p) {
  return std::string(cuda::gemm_tile_name(p.tile)) + ", " + std::to_string(p.splits) + " K slice(s) of " +
         std::to_string(p.k_split);
}

// The path a plan takes through simt_gemm.cu: its tile, and whether it splits K.
std::string path_of(const cuda::NativeGemmPlan& p) {
  return std::string(cuda::gemm_tile_name(p.tile)) + (p.splits > 1 ? " split K" : "");
}

std::string describe(const char* what, const GemmShape& s, GemmImpl impl, bool ta = false, bool tb = false) {
  return std::string(what) + " M=" + std::to_string(s.m) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) +
         " trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb) + " impl=" + gemm_impl_name(impl);
}

TensorOptions on_gpu() { return TensorOptions(DType::Float32, kGpu); }
TensorOptions on_cpu() { return TensorOptions(DType::Float32, Device::cpu()); }

// A CUDA tensor whose every element is NaN, so an element the kernel never wrote cannot pass.
Tensor nan_gpu(const Shape& shape) { return full(shape, std::numeric_limits<double>::quiet_NaN(), on_gpu()); }

Tensor abs_cpu(const Tensor& t) {
  std::vector<float> v = t.to(Device::cpu()).to_vector<float>();
  for (float& x : v) x = std::abs(x);
  return from_vector(v, t.shape(), on_cpu());
}

// scale = |op(A)|·|op(B)| (+ |bias| on every row), on the CPU: Note [GEMM tolerance].
Tensor product_scale(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t m, int64_t n,
                     const Tensor& bias = Tensor()) {
  Tensor s = empty({m, n}, on_cpu());
  cpu_backend().matmul(abs_cpu(a), abs_cpu(b), s, ta, tb);
  if (!bias.defined()) return s;
  std::vector<float> v = s.to_vector<float>();
  const std::vector<float> bv = abs_cpu(bias).to_vector<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(i * n + j)] += bv[static_cast<size_t>(j)];
  return from_vector(v, s.shape(), on_cpu());
}

// |got - want| <= rel · scale + kAbs for every element; reports the worst one.
void check_gemm_close(const Tensor& got, const Tensor& want, const Tensor& scale, const std::string& what,
                      double rel = kRel) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(scale.shape() == want.shape());
  const std::vector<float> g = got.to(Device::cpu()).to_vector<float>();
  const std::vector<float> w = want.to(Device::cpu()).to_vector<float>();
  const std::vector<float> s = scale.to(Device::cpu()).to_vector<float>();
  size_t worst = 0, bad = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(static_cast<double>(g[i]) - w[i]);
    const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - (rel * s[i] + kAbs);
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  INFO(bad << " of " << g.size() << " elements outside; worst element " << worst << ": got "
            << (g.empty() ? 0.f : g[worst]) << ", want " << (w.empty() ? 0.f : w[worst]) << ", scale "
            << (s.empty() ? 0.f : s[worst]));
  CHECK(bad == 0);
}

// A device copy of `t` that starts one float into its storage: contiguous, 4 bytes past 16-byte
// alignment, so the kernels must take their scalar paths.
Tensor offset_copy(const Tensor& t) {
  Tensor storage = zeros({t.numel() + 1}, on_gpu());
  Tensor view = storage.narrow(0, 1, t.numel()).view(t.shape());
  view.copy_(t);
  return view;
}

// Column sums of dy [rows, cols] of |dy| on the CPU: the scale of db.
Tensor column_abs_sum(const Tensor& dy) {
  const int64_t rows = dy.shape()[0], cols = dy.shape()[1];
  const std::vector<float> v = abs_cpu(dy).to_vector<float>();
  std::vector<float> s(static_cast<size_t>(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[static_cast<size_t>(c)] += v[static_cast<size_t>(r * cols + c)];
  return from_vector(s, Shape{cols}, on_cpu());
}

}  // namespace

TEST_CASE("the native GEMM takes the plan each test shape was chosen for on a 132-SM H200", "[cuda][gemm]") {
  // native_gemm_plan is host code: this holds the heuristic to the table whatever the device.
  for (size_t i = 0; i < std::size(kShapes); ++i) {
    const GemmShape& s = kShapes[i];
    const cuda::NativeGemmPlan p = cuda::native_gemm_plan(s.m, s.n, s.k, kH200Sms);
    INFO("M=" << s.m << " N=" << s.n << " K=" << s.k << ": " << plan_str(p));
    CHECK(p.tile == kPlansOn132[i].tile);
    CHECK(p.splits == kPlansOn132[i].splits);
  }
  for (size_t i = 0; i < std::size(kMisalignedShapes); ++i) {
    const GemmShape& s = kMisalignedShapes[i];
    const cuda::NativeGemmPlan p = cuda::native_gemm_plan(s.m, s.n, s.k, kH200Sms);
    INFO("misaligned M=" << s.m << " N=" << s.n << " K=" << s.k << ": " << plan_str(p));
    CHECK(p.tile == kMisalignedPlansOn132[i].tile);
    CHECK(p.splits == kMisalignedPlansOn132[i].splits);
  }
}

TEST_CASE("the shapes of the GEMM tests reach every native plan on this device", "[cuda][gemm]") {
  // On another multiprocessor count the plans move: a path no shape reaches is untested here,
  // and this says which (the [small] test below still forces every one).
  const int sms = device_sm_count();
  std::set<std::string> reached, reached_misaligned;
  for (const GemmShape& s : kShapes) reached.insert(path_of(cuda::native_gemm_plan(s.m, s.n, s.k, sms)));
  for (const GemmShape& s : kMisalignedShapes)
    reached_misaligned.insert(path_of(cuda::native_gemm_plan(s.m, s.n, s.k, sms)));
  INFO("on " << sms << " multiprocessors (the shapes were chosen for " << kH200Sms << ")");
  for (cuda::GemmTile tile : {kLarge, kMedium, kSmall}) {
    CHECK(reached.count(cuda::gemm_tile_name(tile)) == 1);
    CHECK(reached.count(std::string(cuda::gemm_tile_name(tile)) + " split K") == 1);
    CHECK(reached_misaligned.count(cuda::gemm_tile_name(tile)) == 1);
  }
  CHECK(reached_misaligned.count(std::string(cuda::gemm_tile_name(kSmall)) + " split K") == 1);
}

TEST_CASE("cuda matmul matches the cpu in every transpose variant for native and cublas", "[cuda][gemm][large]") {
  uint64_t seed = 100;
  for (const GemmShape& s : kShapes) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool ta = (variant & 1) != 0, tb = (variant & 2) != 0;
      const Tensor a = random_cpu(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, ++seed);
      const Tensor b = random_cpu(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, ++seed);
      Tensor want = empty({s.m, s.n}, on_cpu());
      cpu_backend().matmul(a, b, want, ta, tb);
      const Tensor scale = product_scale(a, b, ta, tb, s.m, s.n);
      const Tensor ag = a.to(kGpu), bg = b.to(kGpu);
      std::vector<Tensor> results;
      for (GemmImpl impl : kImpls) {
        GemmImplScope scope(impl);
        Tensor got = nan_gpu({s.m, s.n});
        backend_for(kGpu).matmul(ag, bg, got, ta, tb);
        check_gemm_close(got, want, scale, describe("matmul vs cpu", s, impl, ta, tb));
        results.push_back(got);
      }
      // Each is within kRel·scale of the CPU, so of each other within twice that.
      check_gemm_close(results[0], results[1], scale, describe("native vs cublas", s, GemmImpl::Native, ta, tb),
                       2 * kRel);
    }
  }
}

TEST_CASE("cuda matmul reads misaligned operands and writes a misaligned output through the scalar path",
          "[cuda][gemm][large]") {
  // Leading dimensions that are multiples of 4 would allow float4 loads, but each tensor starts
  // one float into its storage (4-byte, not 16-byte, aligned): the kernel must notice and fall back.
  uint64_t seed = 300;
  for (const GemmShape& s : kMisalignedShapes) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool ta = (variant & 1) != 0, tb = (variant & 2) != 0;
      const Tensor a = random_cpu(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, ++seed);
      const Tensor b = random_cpu(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, ++seed);
      Tensor want = empty({s.m, s.n}, on_cpu());
      cpu_backend().matmul(a, b, want, ta, tb);
      const Tensor scale = product_scale(a, b, ta, tb, s.m, s.n);
      const Tensor ag = offset_copy(a), bg = offset_copy(b);
      for (GemmImpl impl : kImpls) {
        GemmImplScope scope(impl);
        Tensor got = offset_copy(full({s.m, s.n}, std::numeric_limits<double>::quiet_NaN(), on_cpu()));
        REQUIRE(got.is_contiguous());
        backend_for(kGpu).matmul(ag, bg, got, ta, tb);
        check_gemm_close(got, want, scale, describe("misaligned matmul vs cpu", s, impl, ta, tb));
      }
    }
  }
}

TEST_CASE("cuda linear forward with and without bias and relu matches the cpu for native and cublas",
          "[cuda][gemm][linear][large]") {
  uint64_t seed = 500;
  for (const GemmShape& s : kShapes) {  // x [M, K], W [N, K], b [N] -> y [M, N]
    const Tensor x = random_cpu({s.m, s.k}, ++seed), w = random_cpu({s.n, s.k}, ++seed), b = random_cpu({s.n}, ++seed);
    const Tensor xg = x.to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu);
    for (bool with_bias : {false, true}) {
      for (Activation act : {Activation::None, Activation::ReLU}) {
        const Tensor bias_cpu = with_bias ? b : Tensor(), bias_gpu = with_bias ? bg : Tensor();
        Tensor want = empty({s.m, s.n}, on_cpu());
        cpu_backend().linear_forward(x, w, bias_cpu, want, act, nullptr);
        // ReLU is 1-Lipschitz, so the bound of the pre-activation still holds after it.
        const Tensor scale = product_scale(x, w, false, true, s.m, s.n, bias_cpu);
        const std::string what = std::string("linear_forward bias=") + (with_bias ? "yes" : "no") +
                                 " relu=" + (act == Activation::ReLU ? "yes" : "no");
        for (GemmImpl impl : kImpls) {
          GemmImplScope scope(impl);
          Tensor got = nan_gpu({s.m, s.n});
          backend_for(kGpu).linear_forward(xg, wg, bias_gpu, got, act, nullptr);
          check_gemm_close(got, want, scale, describe(what.c_str(), s, impl));
        }
      }
    }
  }
}

TEST_CASE("cuda linear backward gives dx, dW and db like the cpu for native and cublas",
          "[cuda][gemm][linear][large]") {
  // {batch, out, in}: the GEMM shapes again (dy [batch, out]), plus tall dy for the two-stage
  // column sum (1025 rows: a second chunk of one row; 5000 rows: five chunks).
  std::vector<GemmShape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({1025, 3, 7});
  shapes.push_back({5000, 33, 5});
  uint64_t seed = 700;
  for (const GemmShape& s : shapes) {
    const int64_t batch = s.m, out = s.n, in = s.k;
    const Tensor dy = random_cpu({batch, out}, ++seed), x = random_cpu({batch, in}, ++seed),
                 w = random_cpu({out, in}, ++seed);
    Tensor dx = empty({batch, in}, on_cpu()), dw = empty({out, in}, on_cpu()), db = empty({out}, on_cpu());
    cpu_backend().linear_backward(dy, x, w, dx, dw, db);
    const Tensor dx_scale = product_scale(dy, w, false, false, batch, in);
    const Tensor dw_scale = product_scale(dy, x, true, false, out, in);
    const Tensor db_scale = column_abs_sum(dy);
    const Tensor dyg = dy.to(kGpu), xg = x.to(kGpu), wg = w.to(kGpu);
    for (GemmImpl impl : kImpls) {
      GemmImplScope scope(impl);
      Tensor gdx = nan_gpu({batch, in}), gdw = nan_gpu({out, in}), gdb = nan_gpu({out});
      backend_for(kGpu).linear_backward(dyg, xg, wg, gdx, gdw, gdb);
      check_gemm_close(gdx, dx, dx_scale, describe("dx = dy·W", s, impl));
      check_gemm_close(gdw, dw, dw_scale, describe("dW = dyᵀ·x", s, impl));
      check_gemm_close(gdb, db, db_scale, describe("db = column sums of dy", s, impl));

      // Outputs not needed are undefined: each one alone is still right, the others skipped.
      Tensor none;
      Tensor only_dx = nan_gpu({batch, in}), only_dw = nan_gpu({out, in}), only_db = nan_gpu({out});
      backend_for(kGpu).linear_backward(dyg, xg, wg, only_dx, none, none);
      backend_for(kGpu).linear_backward(dyg, xg, wg, none, only_dw, none);
      backend_for(kGpu).linear_backward(dyg, xg, wg, none, none, only_db);
      check_gemm_close(only_dx, dx, dx_scale, describe("dx alone", s, impl));
      check_gemm_close(only_dw, dw, dw_scale, describe("dW alone", s, impl));
      check_gemm_close(only_db, db, db_scale, describe("db alone", s, impl));
    }
  }
}

TEST_CASE("cuda linear through autograd gives the cpu gradients for native and cublas",
          "[cuda][gemm][linear][large]") {
  const Tensor x = random_cpu({128, 784}, 901), w = random_cpu({256, 784}, 902), b = random_cpu({256}, 903);
  const Tensor g = random_cpu({128, 256}, 904);  // the incoming gradient of y
  auto run = [&](Device device) {
    Tensor xd = x.to(device).detach().requires_grad_(), wd = w.to(device).detach().requires_grad_(),
           bd = b.to(device).detach().requires_grad_();
    Tensor y = ops::linear(xd, wd, bd);
    y.backward(g.to(device));
    return std::vector<Tensor>{y.detach(), xd.grad(), wd.grad(), bd.grad()};
  };
  const std::vector<Tensor> want = run(Device::cpu());
  const Tensor y_scale = product_scale(x, w, false, true, 128, 256, b);
  const Tensor dx_scale = product_scale(g, w, false, false, 128, 784);
  const Tensor dw_scale = product_scale(g, x, true, false, 256, 784);
  const Tensor db_scale = column_abs_sum(g);
  for (GemmImpl impl : kImpls) {
    GemmImplScope scope(impl);
    const std::vector<Tensor> got = run(kGpu);
    const std::string name = gemm_impl_name(impl);
    for (const Tensor& t : got) REQUIRE(t.defined());
    check_gemm_close(got[0], want[0], y_scale, "y, " + name);
    check_gemm_close(got[1], want[1], dx_scale, "x.grad, " + name);
    check_gemm_close(got[2], want[2], dw_scale, "w.grad, " + name);
    check_gemm_close(got[3], want[3], db_scale, "b.grad, " + name);
  }
}

TEST_CASE("cuda GEMMs with an empty inner dimension write the bias or zeros", "[cuda][gemm][linear]") {
  for (GemmImpl impl : kImpls) {
    GemmImplScope scope(impl);
    INFO("impl=" << gemm_impl_name(impl));
    Backend& gpu = backend_for(kGpu);
    // matmul [5, 0]·[0, 7] = zeros (the output starts as NaN: it must be written).
    Tensor c = nan_gpu({5, 7});
    gpu.matmul(zeros({5, 0}, on_gpu()), zeros({0, 7}, on_gpu()), c, false, false);
    check_equal(c, zeros({5, 7}, on_cpu()), "matmul with K = 0");
    Tensor ct = nan_gpu({5, 7});
    gpu.matmul(zeros({0, 5}, on_gpu()), zeros({7, 0}, on_gpu()), ct, true, true);
    check_equal(ct, zeros({5, 7}, on_cpu()), "transposed matmul with K = 0");

    // linear with no input features: y = act(b) on every row.
    const Tensor bias = from_vector<float>({1.5f, -2.0f, 0.0f, 3.0f}, {4}, on_cpu());
    Tensor y = nan_gpu({3, 4});
    gpu.linear_forward(zeros({3, 0}, on_gpu()), zeros({4, 0}, on_gpu()), bias.to(kGpu), y, Activation::None, nullptr);
    check_equal(y, from_vector<float>({1.5f, -2, 0, 3, 1.5f, -2, 0, 3, 1.5f, -2, 0, 3}, {3, 4}, on_cpu()), "K = 0, bias");
    Tensor yr = nan_gpu({3, 4});
    gpu.linear_forward(zeros({3, 0}, on_gpu()), zeros({4, 0}, on_gpu()), bias.to(kGpu), yr, Activation::ReLU, nullptr);
    check_equal(yr, from_vector<float>({1.5f, 0, 0, 3, 1.5f, 0, 0, 3, 1.5f, 0, 0, 3}, {3, 4}, on_cpu()),
                "K = 0, bias, relu");
    Tensor y0 = nan_gpu({3, 4});
    gpu.linear_forward(zeros({3, 0}, on_gpu()), zeros({4, 0}, on_gpu()), Tensor(), y0, Activation::None, nullptr);
    check_equal(y0, zeros({3, 4}, on_cpu()), "K = 0, no bias");

    // linear backward with an empty batch: dW and db are empty sums (zeros), dx has no elements.
    Tensor dx = empty({0, 3}, on_gpu()), dw = nan_gpu({4, 3}), db = nan_gpu({4});
    gpu.linear_backward(zeros({0, 4}, on_gpu()), zeros({0, 3}, on_gpu()), random_cpu({4, 3}, 7).to(kGpu), dx, dw, db);
    check_equal(dw, zeros({4, 3}, on_cpu()), "dW of an empty batch");
    check_equal(db, zeros({4}, on_cpu()), "db of an empty batch");
    // ... and with no output features: dx = dy[5, 0]·W[0, 3] = zeros.
    Tensor dx2 = nan_gpu({5, 3}), dw2 = empty({0, 3}, on_gpu()), db2 = empty({0}, on_gpu());
    gpu.linear_backward(zeros({5, 0}, on_gpu()), random_cpu({5, 3}, 8).to(kGpu), zeros({0, 3}, on_gpu()), dx2, dw2,
                        db2);
    check_equal(dx2, zeros({5, 3}, on_cpu()), "dx with no output features");
  }
}

TEST_CASE("the native cuda GEMM and column sums give the same bits on every run", "[cuda][gemm][large]") {
  GemmImplScope scope(GemmImpl::Native);
  for (const GemmShape& s : {GemmShape{257, 31, 1000}, GemmShape{1537, 1400, 67}}) {
    const Tensor a = random_cpu({s.m, s.k}, 1001).to(kGpu), b = random_cpu({s.n, s.k}, 1002).to(kGpu);
    Tensor first = nan_gpu({s.m, s.n}), second = nan_gpu({s.m, s.n});
    backend_for(kGpu).matmul(a, b, first, false, true);
    backend_for(kGpu).matmul(a, b, second, false, true);
    check_equal(first, second, describe("matmul twice", s, GemmImpl::Native, false, true));
  }
  const Tensor dy = random_cpu({5000, 33}, 1003).to(kGpu), x = random_cpu({5000, 5}, 1004).to(kGpu),
               w = random_cpu({33, 5}, 1005).to(kGpu);
  Tensor none, db1 = nan_gpu({33}), db2 = nan_gpu({33});
  backend_for(kGpu).linear_backward(dy, x, w, none, none, db1);
  backend_for(kGpu).linear_backward(dy, x, w, none, none, db2);
  check_equal(db1, db2, "db of a tall dy twice");
}

namespace {

// A plan forced on a small shape: the multiprocessor count the kernel is told, which moves its
// heuristic to the plan named (native_gemm_plan, gemm_plan.cpp).
struct ForcedPlan {
  GemmShape shape;
  int sm_count;
  Plan plan;
};
// 130x260: 6 tiles of 128 >= 1 SM -> large. 130x130: 4 tiles of 128 < 8 <= 9 tiles of 64 ->
// medium. 40x40x21: 4 tiles of 32 and 2·4 > 4 SMs -> small, whole K. 40x40x300 on 16 SMs: a
// large or medium tile in 2 slices (K / 128) is 2 blocks < 16; small: 2·4 <= 16 and K >= 256
// -> 2 slices (160 and a shorter 140). 33x70x520 on 64 SMs: 4 small slices of 144,
// the last 88. 130x100x1001 on 8 SMs: 2 large tiles (and 6 medium ones) < 8, K >= M + N ->
// 7 large slices of 144 (14 blocks <= 8·2), the last 137. 100x100x900 on 16 SMs: 7 large slices
// give 7 blocks < 16; 4 medium tiles x 7 slices of 144 (the last 36) = 28 blocks. Every K here
// leaves a tail shorter than the tile's K step.
const ForcedPlan kForcedPlans[] = {{{130, 260, 41}, 1, {kLarge, 1}},       {{130, 130, 43}, 8, {kMedium, 1}},
                                   {{40, 40, 21}, 4, {kSmall, 1}},         {{40, 40, 300}, 16, {kSmall, 2}},
                                   {{33, 70, 520}, 64, {kSmall, 4}},       {{130, 100, 1001}, 8, {kLarge, 7}},
                                   {{100, 100, 900}, 16, {kMedium, 7}}};

// Runs C = act(op(A)·op(B) + bias) for `s` on the native kernel directly (kernels/cuda/gemm/gemm.h) in
// every transpose variant, on the legacy default stream after the backend's stream is
// synchronised, and compares it with the CPU. With heuristic_sms > 0 through native_sgemm told
// that many multiprocessors (whose plan the caller has checked is `plan`), else through
// native_sgemm_with_plan(plan). `cases` lists the (epilogue, misaligned) pairs to run: with the
// epilogue bias + ReLU are fused; misaligned operands start 4 bytes past 16-byte alignment.
void check_native_plan(const GemmShape& s, const cuda::NativeGemmPlan& plan, int heuristic_sms,
                       std::initializer_list<std::pair<bool, bool>> cases, uint64_t& seed) {
  Tensor workspace = plan.workspace_floats() > 0 ? nan_gpu({plan.workspace_floats()}) : Tensor();
  for (int variant = 0; variant < 4; ++variant) {
    const bool ta = (variant & 1) != 0, tb = (variant & 2) != 0;
    const Tensor a = random_cpu(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, ++seed);
    const Tensor b = random_cpu(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, ++seed);
    const Tensor bias = random_cpu({s.n}, ++seed);
    Tensor product = empty({s.m, s.n}, on_cpu());
    cpu_backend().matmul(a, b, product, ta, tb);
    for (const std::pair<bool, bool>& c : cases) {
      const bool epilogue = c.first, misaligned = c.second;
      // want = relu(op(A)·op(B) + bias) with the epilogue, op(A)·op(B) without it.
      std::vector<float> w = product.to_vector<float>();
      const std::vector<float> bv = bias.to_vector<float>();
      if (epilogue)
        for (size_t i = 0; i < w.size(); ++i) {
          const float v = w[i] + bv[i % static_cast<size_t>(s.n)];
          w[i] = v < 0.0f ? 0.0f : v;
        }
      const Tensor want = from_vector(w, Shape{s.m, s.n}, on_cpu());
      // ReLU is 1-Lipschitz: the bound of the pre-activation holds after it.
      const Tensor scale = product_scale(a, b, ta, tb, s.m, s.n, epilogue ? bias : Tensor());
      auto place = [&](const Tensor& t) { return misaligned ? offset_copy(t) : t.to(kGpu); };
      const Tensor ag = place(a), bg = place(b), biasg = place(bias);
      Tensor got = place(full({s.m, s.n}, std::numeric_limits<double>::quiet_NaN(), on_cpu()));
      cuda::GemmProblem p;
      p.m = s.m;
      p.n = s.n;
      p.k = s.k;
      p.a = ag.data<float>();
      p.lda = ta ? s.m : s.k;
      p.trans_a = ta;
      p.b = bg.data<float>();
      p.ldb = tb ? s.k : s.n;
      p.trans_b = tb;
      p.c = got.data<float>();
      p.ldc = s.n;
      p.bias = epilogue ? biasg.data<float>() : nullptr;
      p.relu = epilogue;
      float* ws = workspace.defined() ? workspace.data<float>() : nullptr;
      backend_for(kGpu).synchronize();  // the inputs, written on the backend's stream
      if (heuristic_sms > 0) cuda::native_sgemm(p, heuristic_sms, ws, nullptr);
      else cuda::native_sgemm_with_plan(p, plan, device_sm_count(), ws, nullptr);
      REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
      const std::string what = std::string(heuristic_sms > 0 ? "forced " : "given ") + plan_str(plan) +
                               (epilogue ? ", bias+relu" : "") + (misaligned ? ", misaligned" : "");
      check_gemm_close(got, want, scale, describe(what.c_str(), s, GemmImpl::Native, ta, tb));
    }
  }
}

}  // namespace

TEST_CASE("the native cuda GEMM forced into each tile plan and split K on small shapes matches the cpu",
          "[cuda][gemm][small]") {
  // In every transpose variant, with and without the bias + ReLU epilogue, on aligned and
  // misaligned operands.
  uint64_t seed = 1200;
  std::set<std::string> forced;
  for (const ForcedPlan& f : kForcedPlans) {
    const GemmShape& s = f.shape;
    const cuda::NativeGemmPlan plan = cuda::native_gemm_plan(s.m, s.n, s.k, f.sm_count);
    INFO("M=" << s.m << " N=" << s.n << " K=" << s.k << " on " << f.sm_count << " SMs: " << plan_str(plan));
    REQUIRE(plan.tile == f.plan.tile);
    REQUIRE(plan.splits == f.plan.splits);
    forced.insert(path_of(plan));
    check_native_plan(s, plan, f.sm_count, {{false, false}, {true, false}, {false, true}, {true, true}}, seed);
  }
  for (cuda::GemmTile tile : {kLarge, kMedium, kSmall}) {  // the table reaches every path
    CHECK(forced.count(cuda::gemm_tile_name(tile)) == 1);
    CHECK(forced.count(std::string(cuda::gemm_tile_name(tile)) + " split K") == 1);
  }
}

TEST_CASE("the native cuda GEMM on plans given outright matches the cpu for every tile and slice count",
          "[cuda][gemm][small]") {
  // Plans the heuristic may never pick (native_gemm_plan_with): each tile whole and in 2, 3 and
  // many K slices, down to one K step per slice (the small tile's 21 slices of 16 for K = 333,
  // the last 13 long); odd M and N that leave partial tiles on both edges.
  // Every tile, the candidate the heuristic never picks (128x128 with a K step of 16) too.
  uint64_t seed = 1400;
  for (const GemmShape& s : {GemmShape{37, 45, 333}, GemmShape{130, 70, 200}}) {
    for (cuda::GemmTile tile : cuda::kGemmTiles) {
      for (int64_t splits : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{21}}) {
        const cuda::NativeGemmPlan plan = cuda::native_gemm_plan_with(tile, splits, s.m, s.n, s.k);
        INFO("M=" << s.m << " N=" << s.n << " K=" << s.k << ": " << plan_str(plan));
        REQUIRE_NOTHROW(cuda::check_gemm_plan(plan, s.m, s.n, s.k));
        check_native_plan(s, plan, 0, {{false, false}, {true, true}}, seed);
      }
    }
  }
}

TEST_CASE("the native cuda GEMM refuses a plan that does not fit its problem before launching", "[cuda][gemm][small]") {
  const Tensor a = random_cpu({37, 333}, 1500).to(kGpu), b = random_cpu({333, 45}, 1501).to(kGpu);
  Tensor c = nan_gpu({37, 45});
  cuda::GemmProblem p;
  p.m = 37;
  p.n = 45;
  p.k = 333;
  p.a = a.data<float>();
  p.lda = 333;
  p.b = b.data<float>();
  p.ldb = 45;
  p.c = c.data<float>();
  p.ldc = 45;
  const int sms = device_sm_count();
  backend_for(kGpu).synchronize();
  // A plan for another C, one whose slices end before K (3 of 80 for K = 200), and a split one
  // without workspace.
  // Each refusal is checked by its own message, so that one check cannot pass for another's reason.
  CHECK_THROWS_WITH(cuda::native_sgemm_with_plan(p, cuda::native_gemm_plan_with(kSmall, 1, 37, 46, 333), sms, nullptr,
                                                 nullptr),
                    Catch::Contains("is for another C"));
  CHECK_THROWS_WITH(cuda::native_sgemm_with_plan(p, cuda::native_gemm_plan_with(kSmall, 3, 37, 45, 200), sms, nullptr,
                                                 nullptr),
                    Catch::Contains("must cover K = 333"));
  CHECK_THROWS_WITH(cuda::native_sgemm_with_plan(p, cuda::native_gemm_plan_with(kMedium, 3, 37, 45, 333), sms, nullptr,
                                                 nullptr),
                    Catch::Contains("needs a workspace"));
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  // Nothing ran: C is still all NaN.
  const std::vector<float> v = c.to(Device::cpu()).to_vector<float>();
  size_t written = 0;
  for (float x : v) written += std::isnan(x) ? 0 : 1;
  CHECK(written == 0);
}

TEST_CASE("cuda linear backward's column sums of small tall inputs match the cpu", "[cuda][gemm][linear][small]") {
  // db = column sums of dy (linear.cu, a shared-memory kernel): one chunk, a chunk and a row
  // (1025 rows), several chunks (5000 rows); small enough for compute-sanitizer.
  uint64_t seed = 1300;
  for (const GemmShape& s : {GemmShape{7, 3, 2}, GemmShape{1025, 3, 2}, GemmShape{5000, 33, 2}}) {
    const Tensor dy = random_cpu({s.m, s.n}, ++seed), x = random_cpu({s.m, s.k}, ++seed),
                 w = random_cpu({s.n, s.k}, ++seed);
    Tensor none, db = empty({s.n}, on_cpu());
    cpu_backend().linear_backward(dy, x, w, none, none, db);
    Tensor gdb = nan_gpu({s.n});
    backend_for(kGpu).linear_backward(dy.to(kGpu), x.to(kGpu), w.to(kGpu), none, none, gdb);
    check_gemm_close(gdb, db, column_abs_sum(dy), describe("db = column sums of dy", s, GemmImpl::Native));
  }
}
