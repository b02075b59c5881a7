// The SIMT GEMM on bfloat16 and float16 tensors (kernels/cuda/gemm/simt_gemm.cu, linear.cu, with
// MINIDL_GEMM=simt: the tensor-core kernel, which the backend picks for 16-bit products on sm_80
// and later, has tests/cuda/test_cuda_mma_gemm.cpp): the kernel reads and writes 16-bit elements itself, in every tile plan and split K, in
// every transpose variant, on odd sizes (the scalar load and store paths), on views whose start
// refuses the 8-byte vector path or allows only it (8- but not 16-byte aligned), with the fused
// bias + ReLU, batched, and in linear forward and backward (dx, dW, db); the cuBLAS path, which
// runs 16-bit products on float32 copies, is held to the same answers.
//
// Each result is checked two ways, on fresh random inputs rounded to 16 bits first:
//   - against a float32 reference: the CPU's float32 GEMM on those inputs widened to float32
//     (exact), within Note [16-bit GEMM tolerance];
//   - bit for bit against the float32 GEMM of the same implementation on the widened inputs,
//     rounded to 16 bits on the host: the 16-bit kernel does the same float32 operations in the
//     same order (same plan, same tiles) and rounds each output once to the nearest even value,
//     so any other rounding (truncation, a second rounding, a 16-bit accumulator) or a lost
//     element shows here even where it hides inside the tolerance.
// Outputs start as NaN, so an element the kernel never writes (a dropped tile edge) fails both.
//
// Note [16-bit GEMM tolerance]
// The inputs are exact in float32, so the float32 results of the device and of the CPU each lie
// within γ·scale of the exact sum, scale[i, j] = Σ_p |op(A)[i, p]·op(B)[p, j]| + |bias[j]| and
// γ ≈ (K + 1)·2^-24 (any summation order: K products and sums, one bias add); together
// e = (K + 2)·2^-22·scale covers both with room to spare. Then the device rounds once to 16 bits:
// at most u16·|value| with u16 = 2^-8 for bfloat16 and 2^-11 for float16 (half an ulp: 8 and 11
// significant bits), plus half the smallest spacing below the normal range (2^-25 for float16).
// ReLU is 1-Lipschitz, so the bound of the pre-activation holds after it:
//   |got - ref| <= u16·(|ref| + e) + e + tiny.
// For the uniform(-1, 1) inputs here e is ~1e-4 of the products' scale at K = 333, while a lost
// or doubled product moves an element by |a·b| ~ 0.25.
#include "cuda_test_util.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_impl.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

constexpr DType kHalves[] = {DType::BFloat16, DType::Float16};
// The SIMT kernel for 16-bit products too (MINIDL_GEMM=simt; the default on sm_80 and later is
// the tensor-core kernel, tests/cuda/test_cuda_mma_gemm.cpp), and the cuBLAS path.
const GemmImpl kImpls[] = {GemmImpl::Simt, GemmImpl::Cublas};

struct GemmShape {
  int64_t m, n, k;
};

std::string describe(const std::string& what, DType half, const GemmShape& s, bool ta = false, bool tb = false) {
  std::ostringstream o;
  o << what << " " << half << " M=" << s.m << " N=" << s.n << " K=" << s.k << " trans_a=" << ta << " trans_b=" << tb;
  return o.str();
}

TensorOptions f32_cpu() { return TensorOptions(DType::Float32, Device::cpu()); }

// Uniform(-1, 1) values rounded to `half`, as a 16-bit CPU tensor (fresh for each seed).
Tensor random_half(const Shape& shape, DType half, uint64_t seed) { return random_cpu(shape, seed).to(half); }

// `t` (any device) widened to a float32 CPU tensor: exact.
Tensor widened(const Tensor& t) { return t.to(Device::cpu()).to(DType::Float32); }

// A 16-bit tensor of `shape` on cuda:0 whose every element is NaN.
Tensor nan_half(const Shape& shape, DType half) {
  return full(shape, std::numeric_limits<double>::quiet_NaN(), TensorOptions(half, kGpu));
}

// A device copy of `t` starting `offset` elements into its storage: contiguous; for 16-bit
// elements offset 1 is 2 bytes past an aligned start (no 8-byte vectors), offset 4 is 8 bytes
// (8-byte vectors allowed, 16-byte ones not).
Tensor offset_copy(const Tensor& t, int64_t offset) {
  Tensor storage = zeros({t.numel() + offset}, TensorOptions(t.dtype(), kGpu));
  Tensor view = storage.narrow(0, offset, t.numel()).view(t.shape());
  view.copy_(t);
  return view;
}

std::vector<float> abs_values(const Tensor& t) {
  std::vector<float> v = widened(t).to_vector<float>();
  for (float& x : v) x = std::abs(x);
  return v;
}

// want = act(op(A)·op(B) + bias) and its scale Σ_p |op(A)·op(B)| + |bias| (Note [16-bit GEMM
// tolerance]), both float32 on the CPU from the widened 16-bit inputs.
struct Reference {
  Tensor want, scale;
};
Reference reference_gemm(const Tensor& a, const Tensor& b, bool ta, bool tb, int64_t m, int64_t n,
                         const Tensor& bias = Tensor(), bool relu = false) {
  Tensor want = empty({m, n}, f32_cpu()), scale = empty({m, n}, f32_cpu());
  cpu_backend().matmul(widened(a), widened(b), want, ta, tb);
  cpu_backend().matmul(from_vector(abs_values(a), a.shape(), f32_cpu()), from_vector(abs_values(b), b.shape(), f32_cpu()),
                       scale, ta, tb);
  std::vector<float> w = want.to_vector<float>(), s = scale.to_vector<float>();
  const std::vector<float> bv = bias.defined() ? widened(bias).to_vector<float>() : std::vector<float>();
  for (size_t i = 0; i < w.size(); ++i) {
    const size_t j = i % static_cast<size_t>(n);
    if (bias.defined()) {
      w[i] += bv[j];
      s[i] += std::abs(bv[j]);
    }
    if (relu && w[i] < 0.0f) w[i] = 0.0f;
  }
  return {from_vector(w, want.shape(), f32_cpu()), from_vector(s, want.shape(), f32_cpu())};
}

// Note [16-bit GEMM tolerance]: |got - want| <= u16·(|want| + e) + e + tiny, e = (K + 2)·2^-22·scale.
void check_near_reference(const Tensor& got, const Reference& ref, int64_t k, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == ref.want.shape());
  const DType half = got.dtype();
  REQUIRE(is_half(half));
  const double u16 = half == DType::BFloat16 ? 0x1p-8 : 0x1p-11;
  const double tiny = half == DType::BFloat16 ? 0x1p-134 : 0x1p-25;
  const std::vector<float> g = widened(got).to_vector<float>();
  const std::vector<float> w = ref.want.to_vector<float>(), s = ref.scale.to_vector<float>();
  size_t bad = 0, worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = static_cast<double>(k + 2) * 0x1p-22 * s[i];
    const double bound = u16 * (std::abs(static_cast<double>(w[i])) + e) + e + tiny;
    const double err = std::abs(static_cast<double>(g[i]) - w[i]);
    const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity() : err - bound;
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  INFO(bad << " of " << g.size() << " elements outside the bound; worst element " << worst << ": got "
            << (g.empty() ? 0.f : g[worst]) << ", want " << (w.empty() ? 0.f : w[worst]) << ", scale "
            << (s.empty() ? 0.f : s[worst]));
  CHECK(bad == 0);
}

// The 16 bits of each element of a 16-bit tensor (any device).
std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint16_t> v(static_cast<size_t>(c.numel()));
  if (!v.empty()) std::memcpy(v.data(), c.raw_data(), v.size() * sizeof(uint16_t));
  return v;
}

// got (16-bit) has exactly the bits of `f32` (the float32 GEMM's result) rounded to got's dtype.
void check_rounded_from(const Tensor& got, const Tensor& f32, const std::string& what) {
  INFO(what << ": against the float32 GEMM of the widened inputs, rounded once");
  REQUIRE(got.shape() == f32.shape());
  const std::vector<uint16_t> g = bits_of(got), w = bits_of(f32.to(Device::cpu()).to(got.dtype()));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && bad++ == 0) first = i;
  INFO(bad << " of " << g.size() << " elements differ; the first, " << first << ": got bits 0x" << std::hex
            << (bad ? g[first] : 0) << ", want 0x" << (bad ? w[first] : 0));
  CHECK(bad == 0);
}

// Matrices whose elements are laid out for op(X) = X or Xᵀ.
Shape a_shape(const GemmShape& s, bool ta) { return ta ? Shape{s.k, s.m} : Shape{s.m, s.k}; }
Shape b_shape(const GemmShape& s, bool tb) { return tb ? Shape{s.n, s.k} : Shape{s.k, s.n}; }

// The problem C = act(op(A)·op(B) + bias) on a, b, c (all of one dtype, contiguous, on cuda:0).
cuda::GemmProblem problem(const GemmShape& s, bool ta, bool tb, const Tensor& a, const Tensor& b, Tensor& c,
                          const Tensor& bias, bool relu) {
  cuda::GemmProblem p;
  p.dtype = c.dtype();
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.a = a.raw_data();
  p.lda = ta ? s.m : s.k;
  p.trans_a = ta;
  p.b = b.raw_data();
  p.ldb = tb ? s.k : s.n;
  p.trans_b = tb;
  p.c = c.raw_data();
  p.ldc = s.n;
  p.bias = bias.defined() ? bias.raw_data() : nullptr;
  p.relu = relu;
  return p;
}

// Runs p on `plan` directly (kernels/cuda/gemm/gemm.h) on the legacy default stream, after the
// backend's stream (which wrote the inputs), and waits for it. A split-K workspace starts as NaN
// for each run, so a partial product a slice fails to write cannot pass for an earlier run's.
void run_on_plan(const cuda::GemmProblem& p, const cuda::NativeGemmPlan& plan) {
  const Tensor workspace = plan.workspace_floats() > 0 ? full({plan.workspace_floats()},
                                                              std::numeric_limits<double>::quiet_NaN(),
                                                              TensorOptions(DType::Float32, kGpu))
                                                       : Tensor();
  backend_for(kGpu).synchronize();
  cuda::native_sgemm_with_plan(p, plan, device_sm_count(), workspace.defined() ? workspace.data<float>() : nullptr,
                               nullptr);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
}

std::string plan_str(const cuda::NativeGemmPlan& p) {
  return std::string(cuda::gemm_tile_name(p.tile)) + ", " + std::to_string(p.splits) + " K slice(s) of " +
         std::to_string(p.k_split);
}

}  // namespace

TEST_CASE("the native 16-bit GEMM on every tile and split K matches float32 and rounds once",
          "[cuda][gemm][half][small]") {
  // Each tile (the three the heuristic picks and the 128x128x16 candidate), whole K and split
  // into 3 and into as many slices as K allows (K / BK, the last one short), in every transpose
  // variant; with and without bias + ReLU; aligned, 2 bytes off (scalar loads and stores), and
  // 8 bytes off (8-byte vectors only). M, N and K leave partial tiles and K tails everywhere.
  uint64_t seed = 9100;
  std::set<std::string> paths;
  for (DType half : kHalves) {
    for (const GemmShape& s : {GemmShape{37, 45, 333}, GemmShape{130, 70, 200}}) {
      for (cuda::GemmTile tile : cuda::kGemmTiles) {
        for (int64_t splits : {int64_t{1}, int64_t{3}, int64_t{1000}}) {
          const cuda::NativeGemmPlan plan = cuda::native_gemm_plan_with(tile, splits, s.m, s.n, s.k);
          REQUIRE_NOTHROW(cuda::check_gemm_plan(plan, s.m, s.n, s.k));
          paths.insert(std::string(cuda::gemm_tile_name(tile)) + (plan.splits > 1 ? " split K" : ""));
          for (int variant = 0; variant < 4; ++variant) {
            const bool ta = (variant & 1) != 0, tb = (variant & 2) != 0;
            const Tensor a = random_half(a_shape(s, ta), half, ++seed), b = random_half(b_shape(s, tb), half, ++seed);
            const Tensor bias = random_half({s.n}, half, ++seed);
            for (bool epilogue : {false, true}) {
              const Reference ref = reference_gemm(a, b, ta, tb, s.m, s.n, epilogue ? bias : Tensor(), epilogue);
              // The float32 kernel on the widened inputs, same plan: what the 16-bit one must round.
              const Tensor a32 = widened(a).to(kGpu), b32 = widened(b).to(kGpu), bias32 = widened(bias).to(kGpu);
              Tensor c32 = full({s.m, s.n}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(DType::Float32, kGpu));
              run_on_plan(problem(s, ta, tb, a32, b32, c32, epilogue ? bias32 : Tensor(), epilogue), plan);
              for (int64_t offset : {0, 1, 4}) {
                if (offset == 4 && !epilogue) continue;
                const Tensor ag = offset_copy(a, offset), bg = offset_copy(b, offset), biasg = offset_copy(bias, offset);
                Tensor c = offset_copy(nan_half({s.m, s.n}, half), offset);
                run_on_plan(problem(s, ta, tb, ag, bg, c, epilogue ? biasg : Tensor(), epilogue), plan);
                const std::string what = describe(plan_str(plan) + (epilogue ? ", bias+relu" : "") + ", offset " +
                                                      std::to_string(offset),
                                                  half, s, ta, tb);
                check_near_reference(c, ref, s.k, what);
                check_rounded_from(c, c32, what);
              }
            }
          }
        }
      }
    }
  }
  for (cuda::GemmTile tile : cuda::kGemmTiles) {  // every tile ran whole and split
    CHECK(paths.count(cuda::gemm_tile_name(tile)) == 1);
    CHECK(paths.count(std::string(cuda::gemm_tile_name(tile)) + " split K") == 1);
  }
}

TEST_CASE("16-bit cuda matmul of odd sizes in every transpose variant matches float32 and rounds once",
          "[cuda][gemm][half]") {
  // M, N, K in {1, 7, 33, 130}: leading dimensions that are not multiples of 4 take the scalar
  // paths, 130 the vector ones with partial tiles; the native kernel on the plan this device's
  // heuristic picks.
  GemmImplScope scope(GemmImpl::Simt);
  Backend& gpu = backend_for(kGpu);
  uint64_t seed = 9300;
  const int64_t sizes[] = {1, 7, 33, 130};
  for (DType half : kHalves) {
    for (int64_t m : sizes) {
      for (int64_t n : sizes) {
        for (int64_t k : sizes) {
          const GemmShape s{m, n, k};
          for (int variant = 0; variant < 4; ++variant) {
            const bool ta = (variant & 1) != 0, tb = (variant & 2) != 0;
            const Tensor a = random_half(a_shape(s, ta), half, ++seed), b = random_half(b_shape(s, tb), half, ++seed);
            const Reference ref = reference_gemm(a, b, ta, tb, m, n);
            Tensor c = nan_half({m, n}, half);
            gpu.matmul(a.to(kGpu), b.to(kGpu), c, ta, tb);
            Tensor c32 = empty({m, n}, TensorOptions(DType::Float32, kGpu));
            gpu.matmul(widened(a).to(kGpu), widened(b).to(kGpu), c32, ta, tb);
            const std::string what = describe("matmul", half, s, ta, tb);
            check_near_reference(c, ref, k, what);
            check_rounded_from(c, c32, what);
          }
        }
      }
    }
  }
}

TEST_CASE("16-bit cuda batched matmul matches float32 per product and rounds once for native and cublas",
          "[cuda][gemm][half]") {
  // C[i] = op(A[i])·op(B[i]) for 5 products (grid.z in the native kernel), B either one per
  // product or one matrix for all (stride 0), in every transpose variant.
  uint64_t seed = 9500;
  const GemmShape s{33, 70, 45};
  const int64_t batch = 5;
  for (GemmImpl impl : kImpls) {
    GemmImplScope scope(impl);
    INFO("impl=" << gemm_impl_name(impl));
    Backend& gpu = backend_for(kGpu);
    for (DType half : kHalves) {
      for (bool shared_b : {false, true}) {
        for (int variant = 0; variant < 4; ++variant) {
          const bool ta = (variant & 1) != 0, tb = (variant & 2) != 0;
          const Shape as = a_shape(s, ta), bs = b_shape(s, tb);
          const Tensor a = random_half({batch, as[0], as[1]}, half, ++seed);
          const Tensor b = random_half(shared_b ? Shape{1, bs[0], bs[1]} : Shape{batch, bs[0], bs[1]}, half, ++seed);
          Backend::BatchedMatmul bm;
          bm.batch = batch;
          bm.m = s.m;
          bm.n = s.n;
          bm.k = s.k;
          bm.stride_a = as[0] * as[1];
          bm.lda = as[1];
          bm.trans_a = ta;
          bm.stride_b = shared_b ? 0 : bs[0] * bs[1];
          bm.ldb = bs[1];
          bm.trans_b = tb;
          Tensor c = nan_half({batch, s.m, s.n}, half);
          gpu.matmul_batched(a.to(kGpu), b.to(kGpu), c, bm);
          Tensor c32 = empty({batch, s.m, s.n}, TensorOptions(DType::Float32, kGpu));
          gpu.matmul_batched(widened(a).to(kGpu), widened(b).to(kGpu), c32, bm);
          const std::string what = describe(std::string("batched matmul") + (shared_b ? ", one B" : ""), half, s, ta, tb);
          check_rounded_from(c, c32, what);
          for (int64_t i = 0; i < batch; ++i) {
            const Reference ref = reference_gemm(a.narrow(0, i, 1).view(as), b.narrow(0, shared_b ? 0 : i, 1).view(bs), ta,
                                                 tb, s.m, s.n);
            check_near_reference(c.narrow(0, i, 1).view({s.m, s.n}), ref, s.k, what + ", product " + std::to_string(i));
          }
        }
      }
    }
  }
}

TEST_CASE("16-bit cuda linear forward with bias and relu matches float32 and rounds once for native and cublas",
          "[cuda][gemm][linear][half]") {
  // y[M, N] = act(x[M, K]·W[N, K]ᵀ + b): odd sizes, the MLP's, and a tall K that splits K on the
  // default simulated device (257x31x1000: 7 small slices on 132 multiprocessors).
  uint64_t seed = 9700;
  for (GemmImpl impl : kImpls) {
    GemmImplScope scope(impl);
    INFO("impl=" << gemm_impl_name(impl));
    Backend& gpu = backend_for(kGpu);
    for (DType half : kHalves) {
      for (const GemmShape& s : {GemmShape{7, 33, 130}, GemmShape{128, 256, 784}, GemmShape{257, 31, 1000}}) {
        const Tensor x = random_half({s.m, s.k}, half, ++seed), w = random_half({s.n, s.k}, half, ++seed),
                     b = random_half({s.n}, half, ++seed);
        for (bool with_bias : {false, true}) {
          for (Activation act : {Activation::None, Activation::ReLU}) {
            const bool relu = act == Activation::ReLU;
            const Tensor bias = with_bias ? b : Tensor();
            const Reference ref = reference_gemm(x, w, false, true, s.m, s.n, bias, relu);
            Tensor y = nan_half({s.m, s.n}, half);
            gpu.linear_forward(x.to(kGpu), w.to(kGpu), with_bias ? b.to(kGpu) : Tensor(), y, act, nullptr);
            Tensor y32 = empty({s.m, s.n}, TensorOptions(DType::Float32, kGpu));
            gpu.linear_forward(widened(x).to(kGpu), widened(w).to(kGpu), with_bias ? widened(b).to(kGpu) : Tensor(), y32,
                               act, nullptr);
            const cuda::NativeGemmPlan plan = cuda::native_gemm_plan(s.m, s.n, s.k, device_sm_count());
            const std::string what = describe(std::string("linear_forward bias=") + (with_bias ? "yes" : "no") +
                                                  " relu=" + (relu ? "yes" : "no") + " (native plan " +
                                                  plan_str(plan) + ")",
                                              half, s, false, true);
            check_near_reference(y, ref, s.k, what);
            check_rounded_from(y, y32, what);
          }
        }
      }
    }
  }
}

TEST_CASE("16-bit cuda linear backward gives dx, dW and db that match float32 and round once for native and cublas",
          "[cuda][gemm][linear][half]") {
  // {batch, out, in}: odd sizes, the MLP's first layer, and tall dy for the two-stage column sum
  // (1025 rows: a second chunk of one row; 5000 rows: five chunks) whose dW splits K.
  uint64_t seed = 9900;
  for (GemmImpl impl : kImpls) {
    GemmImplScope scope(impl);
    INFO("impl=" << gemm_impl_name(impl));
    Backend& gpu = backend_for(kGpu);
    for (DType half : kHalves) {
      for (const GemmShape& s : {GemmShape{7, 33, 130}, GemmShape{128, 256, 784}, GemmShape{1025, 3, 7},
                                 GemmShape{5000, 33, 5}}) {
        const int64_t batch = s.m, out = s.n, in = s.k;
        const Tensor dy = random_half({batch, out}, half, ++seed), x = random_half({batch, in}, half, ++seed),
                     w = random_half({out, in}, half, ++seed);
        Tensor dx = nan_half({batch, in}, half), dw = nan_half({out, in}, half), db = nan_half({out}, half);
        gpu.linear_backward(dy.to(kGpu), x.to(kGpu), w.to(kGpu), dx, dw, db);
        const TensorOptions f32_gpu(DType::Float32, kGpu);
        Tensor dx32 = empty({batch, in}, f32_gpu), dw32 = empty({out, in}, f32_gpu), db32 = empty({out}, f32_gpu);
        gpu.linear_backward(widened(dy).to(kGpu), widened(x).to(kGpu), widened(w).to(kGpu), dx32, dw32, db32);

        const std::string what = describe("linear_backward", half, s);
        check_near_reference(dx, reference_gemm(dy, w, false, false, batch, in), out, what + ": dx = dy·W");
        check_rounded_from(dx, dx32, what + ": dx = dy·W");
        check_near_reference(dw, reference_gemm(dy, x, true, false, out, in), batch, what + ": dW = dyᵀ·x");
        check_rounded_from(dw, dw32, what + ": dW = dyᵀ·x");
        // db = column sums of dy: the GEMM 1ᵀ·dy, with its bound (K = batch).
        const Tensor ones_row = ones({batch, 1}, TensorOptions(half, Device::cpu()));
        check_near_reference(db.view({1, out}), reference_gemm(ones_row, dy, true, false, 1, out), batch,
                             what + ": db = column sums of dy");
        check_rounded_from(db, db32, what + ": db = column sums of dy");
      }
    }
  }
}

TEST_CASE("16-bit cuda GEMMs with an empty inner dimension write the rounded bias or zeros", "[cuda][gemm][half]") {
  for (GemmImpl impl : kImpls) {
    GemmImplScope scope(impl);
    Backend& gpu = backend_for(kGpu);
    for (DType half : kHalves) {
      INFO(half << " impl=" << gemm_impl_name(impl));
      const TensorOptions on_gpu(half, kGpu), on_cpu(half, Device::cpu());
      // matmul [5, 0]·[0, 7] = zeros (the output starts as NaN: it must be written).
      Tensor c = nan_half({5, 7}, half);
      gpu.matmul(zeros({5, 0}, on_gpu), zeros({0, 7}, on_gpu), c, false, false);
      CHECK(bits_of(c) == bits_of(zeros({5, 7}, on_cpu)));
      // linear with no input features: y = act(b) on every row, b rounded to 16 bits.
      const Tensor bias = from_vector<float>({1.5f, -2.0f, 0.1f, 3.0f}, {4}).to(half);
      for (Activation act : {Activation::None, Activation::ReLU}) {
        Tensor y = nan_half({3, 4}, half);
        gpu.linear_forward(zeros({3, 0}, on_gpu), zeros({4, 0}, on_gpu), bias.to(kGpu), y, act, nullptr);
        const Tensor row = act == Activation::ReLU ? from_vector<float>({1.5f, 0.0f, 0.1f, 3.0f}, {4}).to(half) : bias;
        CHECK(bits_of(y) == bits_of(row.view({1, 4}).expand({3, 4}).contiguous()));
      }
      // linear backward of an empty batch: dW and db are empty sums (zeros).
      Tensor dx = empty({0, 3}, on_gpu), dw = nan_half({4, 3}, half), db = nan_half({4}, half);
      gpu.linear_backward(zeros({0, 4}, on_gpu), zeros({0, 3}, on_gpu), random_half({4, 3}, half, 7).to(kGpu), dx, dw,
                          db);
      CHECK(bits_of(dw) == bits_of(zeros({4, 3}, on_cpu)));
      CHECK(bits_of(db) == bits_of(zeros({4}, on_cpu)));
    }
  }
}
