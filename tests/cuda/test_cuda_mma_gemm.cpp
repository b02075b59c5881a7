// The tensor-core GEMM (kernels/cuda/gemm/mma_gemm.cu) on bfloat16 and float16 matrices, each rung
// (mma, mma_ldmatrix, mma_pipeline on both tiles), against a float64 reference on the host, on
// fresh random inputs rounded to 16 bits first:
//   - every transpose variant (the four tile layouts and both ldmatrix forms);
//   - M, N, K that leave partial tiles, K tails inside a 16-byte chunk and a K shorter than one
//     step; leading dimensions that are not multiples of 8, and operands 2 bytes off a 16-byte
//     boundary (the guarded element path instead of cp.async), with and without bias + ReLU;
//   - every rung and tile gives the same bits: each output is the same sequence of mma over k,
//     so a rung that loads a fragment from the wrong place, forgets a swizzle on one side, or
//     reads a stage before its copy lands differs from the others even inside the tolerance;
//   - the same run twice gives the same bits; a strided batch (one B shared by all products);
//   - matmul and linear (forward and backward) through the backend take this kernel for 16-bit
//     tensors on a device of compute capability 8.0 or later (the simulated device reports 9.0).
// Outputs start as NaN, so an output the kernel never writes fails.
//
// Tolerance (Note [16-bit GEMM tolerance] in test_cuda_half_gemm.cpp, which this bound repeats):
// the products of 16-bit values are exact in float32; the float32 sum of K products and a bias
// lies within (K + 2)·2^-22·scale of the exact one in any order and with the tensor cores'
// truncating adds (at most one float32 ulp, 2^-23 relative, per add), scale = Σ|a·b| + |bias|;
// then one rounding to 16 bits, u16 = 2^-8 (bf16) or 2^-11 (fp16) of the value.
#include "cuda_test_util.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_impl.h"
#include "kernels/cuda/gemm/gemm_plan.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

constexpr DType kHalves[] = {DType::BFloat16, DType::Float16};

struct Rung {
  cuda::GemmKernel kernel;
  cuda::MmaTile tile;
  std::string name() const {
    return std::string(cuda::gemm_kernel_name(kernel)) + " " + cuda::mma_tile_name(tile);
  }
};
const Rung kRungs[] = {{cuda::GemmKernel::Mma, cuda::MmaTile::Large128x128},
                       {cuda::GemmKernel::MmaLdmatrix, cuda::MmaTile::Large128x128},
                       {cuda::GemmKernel::MmaPipeline, cuda::MmaTile::Small64x64},
                       {cuda::GemmKernel::MmaPipeline, cuda::MmaTile::Large128x128}};

struct Shape3 {
  int64_t m, n, k;
};

// A 16-bit matrix [rows, cols] with leading dimension ld >= cols, `offset` elements into its
// storage on cuda:0, values uniform(-1, 1) rounded to `half`; also returned widened on the host.
struct Matrix {
  Tensor storage;  // on cuda:0
  int64_t rows = 0, cols = 0, ld = 0, offset = 0;
  std::vector<double> host;  // [rows, cols], the 16-bit values exactly
  const void* data() const { return static_cast<const char*>(storage.raw_data()) + offset * 2; }
  void* data() { return static_cast<char*>(storage.raw_data()) + offset * 2; }
  double at(int64_t r, int64_t c) const { return host[static_cast<size_t>(r * cols + c)]; }
};

Matrix random_matrix(int64_t rows, int64_t cols, int64_t ld, int64_t offset, DType half, uint64_t seed) {
  Matrix mat;
  mat.rows = rows;
  mat.cols = cols;
  mat.ld = ld;
  mat.offset = offset;
  const int64_t total = offset + (rows > 0 ? (rows - 1) * ld + cols : 0);
  // Padding and gaps between rows hold NaN: a kernel that reads outside the matrix shows it.
  Tensor values = random_cpu({total}, seed).to(half);
  std::vector<float> v = values.to(DType::Float32).to_vector<float>();
  for (int64_t i = 0; i < total; ++i) {
    const int64_t j = i - offset;
    const bool inside = j >= 0 && j % ld < cols;
    if (!inside) v[static_cast<size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
  }
  Tensor cpu = from_vector(v, {total}, TensorOptions(DType::Float32, Device::cpu())).to(half);
  mat.storage = cpu.to(kGpu);
  const std::vector<float> rounded = cpu.to(DType::Float32).to_vector<float>();
  mat.host.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) mat.host[static_cast<size_t>(r * cols + c)] = rounded[static_cast<size_t>(offset + r * ld + c)];
  return mat;
}

// The 16 bits of every element of C [m, n] (row stride ldc, `offset` elements in), as stored.
std::vector<uint16_t> read_c(const Tensor& storage, int64_t m, int64_t n, int64_t ldc, int64_t offset) {
  const Tensor host = storage.to(Device::cpu());
  std::vector<uint16_t> all(static_cast<size_t>(host.numel()));
  std::memcpy(all.data(), host.raw_data(), all.size() * 2);
  std::vector<uint16_t> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(i * n + j)] = all[static_cast<size_t>(offset + i * ldc + j)];
  return c;
}

double value_of(uint16_t bits, DType half) {
  return half == DType::BFloat16 ? minidl::bfloat16_bits_to_float(bits) : minidl::float16_bits_to_float(bits);
}

struct Case {
  Shape3 s;
  bool ta = false, tb = false;
  int64_t pad = 0;     // added to every leading dimension (0 keeps them as the shape gives)
  int64_t offset = 0;  // elements each matrix starts past its storage's (16-byte aligned) start
  bool epilogue = false;
  DType half = DType::BFloat16;
  std::string text() const {
    std::ostringstream o;
    o << half << " M=" << s.m << " N=" << s.n << " K=" << s.k << " trans_a=" << ta << " trans_b=" << tb << " ld+" << pad
      << " offset " << offset << (epilogue ? " bias+relu" : "");
    return o.str();
  }
};

struct Operands {
  Matrix a, b, bias;
  int64_t ldc = 0;
};

Operands make_operands(const Case& c, uint64_t seed) {
  Operands o;
  const Shape3& s = c.s;
  o.a = c.ta ? random_matrix(s.k, s.m, s.m + c.pad, c.offset, c.half, seed)
             : random_matrix(s.m, s.k, s.k + c.pad, c.offset, c.half, seed);
  o.b = c.tb ? random_matrix(s.n, s.k, s.k + c.pad, c.offset, c.half, seed + 1)
             : random_matrix(s.k, s.n, s.n + c.pad, c.offset, c.half, seed + 1);
  o.bias = random_matrix(1, s.n, s.n, c.offset, c.half, seed + 2);
  o.ldc = s.n + c.pad;
  return o;
}

// C[m, n] = op(A)·op(B), row-major with the given leading dimensions; no bias, no batch.
cuda::GemmProblem problem_of(DType dtype, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, bool ta,
                             const void* b, int64_t ldb, bool tb, void* c, int64_t ldc) {
  cuda::GemmProblem p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a;
  p.lda = lda;
  p.trans_a = ta;
  p.b = b;
  p.ldb = ldb;
  p.trans_b = tb;
  p.c = c;
  p.ldc = ldc;
  return p;
}

// Runs the case on `rung` into a fresh NaN-filled C and returns C's bits.
std::vector<uint16_t> run(const Case& c, Operands& o, const Rung& rung) {
  const Shape3& s = c.s;
  Tensor cs = full({c.offset + (s.m - 1) * o.ldc + s.n}, std::numeric_limits<double>::quiet_NaN(),
                   TensorOptions(c.half, kGpu));
  cuda::GemmProblem p = problem_of(c.half, s.m, s.n, s.k, o.a.data(), o.a.ld, c.ta, o.b.data(), o.b.ld, c.tb,
                                   static_cast<char*>(cs.raw_data()) + c.offset * 2, o.ldc);
  p.bias = c.epilogue ? o.bias.data() : nullptr;
  p.relu = c.epilogue;
  backend_for(kGpu).synchronize();
  cuda::mma_gemm(p, rung.kernel, rung.tile, nullptr);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  return read_c(cs, s.m, s.n, o.ldc, c.offset);
}

void check_against_reference(const std::vector<uint16_t>& got, const Case& c, const Operands& o, const std::string& what) {
  INFO(what);
  const Shape3& s = c.s;
  const double u16 = c.half == DType::BFloat16 ? 0x1p-8 : 0x1p-11;
  const double tiny = c.half == DType::BFloat16 ? 0x1p-134 : 0x1p-25;
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double exact = 0, scale = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double term = (c.ta ? o.a.at(p, i) : o.a.at(i, p)) * (c.tb ? o.b.at(j, p) : o.b.at(p, j));
        exact += term;
        scale += std::fabs(term);
      }
      if (c.epilogue) {
        exact += o.bias.at(0, j);
        scale += std::fabs(o.bias.at(0, j));
        if (exact < 0) exact = 0;
      }
      const double e = static_cast<double>(s.k + 2) * 0x1p-22 * scale;
      const double g = value_of(got[static_cast<size_t>(i * s.n + j)], c.half);
      const double bound = u16 * (std::fabs(exact) + e) + e + tiny;
      if (!(std::fabs(g - exact) <= bound) && bad++ == 0) {
        std::ostringstream os;
        os << "C[" << i << "][" << j << "] = " << g << ", want " << exact << " +- " << bound;
        first = os.str();
      }
    }
  INFO(bad << " of " << s.m * s.n << " outputs outside the bound; the first: " << first);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("tensor-core GEMM: every rung and tile, every transpose, edges and alignments, the same bits",
          "[cuda][gemm][half][mma]") {
  uint64_t seed = 12000;
  // Partial tiles on both tiles' edges, a K tail inside a chunk (72 = 2 steps + 8, 33), K below
  // one step (8, 1), and the smallest product.
  const Shape3 shapes[] = {{1, 1, 1}, {37, 45, 72}, {130, 70, 40}, {64, 136, 33}, {19, 200, 8}};
  for (DType half : kHalves)
    for (const Shape3& s : shapes)
      for (int variant = 0; variant < 4; ++variant) {
        Case c;
        c.s = s;
        c.half = half;
        c.ta = (variant & 1) != 0;
        c.tb = (variant & 2) != 0;
        // Alternate the layouts: aligned, padded leading dimensions (+8: still whole chunks; +3:
        // none), 2 bytes off with bias + ReLU.
        const int layout = (variant + static_cast<int>(s.k)) % 4;
        c.pad = layout == 1 ? 8 : (layout == 2 ? 3 : 0);
        c.offset = layout == 3 ? 1 : 0;
        c.epilogue = layout >= 2;
        Operands o = make_operands(c, seed += 3);
        const std::vector<uint16_t> first = run(c, o, kRungs[3]);
        check_against_reference(first, c, o, c.text() + " on " + kRungs[3].name());
        CHECK(run(c, o, kRungs[3]) == first);  // run to run
        for (const Rung& rung : kRungs) {
          if (rung.kernel == kRungs[3].kernel && rung.tile == kRungs[3].tile) continue;
          INFO(c.text() << " on " << rung.name() << ": the same bits as " << kRungs[3].name());
          CHECK(run(c, o, rung) == first);
        }
      }
}

TEST_CASE("tensor-core GEMM: a strided batch, one B for all products", "[cuda][gemm][half][mma]") {
  const int64_t batch = 3, m = 40, n = 72, k = 48;
  for (DType half : kHalves) {
    const Tensor a = random_cpu({batch, m, k}, 12500).to(half), b = random_cpu({k, n}, 12501).to(half);
    Tensor c = full({batch, m, n}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(half, kGpu));
    const Tensor ag = a.to(kGpu), bg = b.to(kGpu);
    cuda::GemmProblem p = problem_of(half, m, n, k, ag.raw_data(), k, false, bg.raw_data(), n, false, c.raw_data(), n);
    p.batch = batch;
    p.stride_a = m * k;
    p.stride_b = 0;
    p.stride_c = m * n;
    backend_for(kGpu).synchronize();
    cuda::mma_gemm(p, cuda::GemmKernel::MmaPipeline, cuda::MmaTile::Small64x64, nullptr);
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    // Each product against the CPU's float32 GEMM of the widened inputs (exact inputs; the float32
    // sums of both sides within 2·K·2^-23 of the exact one; then one 16-bit rounding).
    const Tensor want = ops::matmul(a.to(DType::Float32), b.to(DType::Float32));
    check_close(c.to(Device::cpu()).to(DType::Float32), want, 1e-4 * k, half == DType::BFloat16 ? 0x1p-7 : 0x1p-10,
                std::string("batched mma_gemm ") + dtype_name(half));
  }
}

TEST_CASE("tensor-core GEMM: refuses float32 with a clear error", "[cuda][gemm][mma]") {
  cuda::GemmProblem p;
  p.dtype = DType::Float32;
  p.m = p.n = p.k = 4;
  p.lda = p.ldb = p.ldc = 4;
  CHECK_THROWS_WITH(cuda::mma_gemm(p, cuda::GemmKernel::MmaPipeline, cuda::MmaTile::Small64x64, nullptr),
                    Catch::Contains("bfloat16 or float16") && Catch::Contains("float32"));
}

TEST_CASE("16-bit matmul and linear on cuda take the tensor-core kernel and match the CPU", "[cuda][gemm][half][mma]") {
  // The backend's choice (gemm_plan.h): 16-bit on compute capability >= 8.0 is mma_pipeline. Its
  // bits equal a direct mma_gemm on the same inputs; forward and backward match the CPU's float32.
  GemmImplScope scope(GemmImpl::Native);
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  // The build targets sm_90 (the simulated device reports 9.0): a device that runs this test has
  // mma.sync, so the backend must pick it; a silent pass without it would check nothing.
  REQUIRE(major >= 8);
  for (DType half : kHalves) {
    const int64_t m = 50, n = 72, k = 96;
    const Tensor x = random_cpu({m, k}, 12600).to(half), w = random_cpu({n, k}, 12601).to(half);
    const Tensor bias = random_cpu({n}, 12602).to(half);
    // Forward + backward on cuda, and in float32 on the CPU from the same 16-bit values.
    Tensor xg = x.to(kGpu).detach(), wg = w.to(kGpu).detach(), bg = bias.to(kGpu).detach();
    xg.requires_grad_();
    wg.requires_grad_();
    Tensor y = ops::linear(xg, wg, bg);
    Tensor upstream = random_cpu({m, n}, 12603).to(half);
    ops::sum(ops::mul(y, upstream.to(kGpu))).backward();
    Tensor x32 = x.to(DType::Float32).detach(), w32 = w.to(DType::Float32).detach();
    x32.requires_grad_();
    w32.requires_grad_();
    Tensor y32 = ops::linear(x32, w32, bias.to(DType::Float32));
    ops::sum(ops::mul(y32, upstream.to(DType::Float32))).backward();
    const double rtol = half == DType::BFloat16 ? 0x1p-7 : 0x1p-10;  // one 16-bit rounding, with room
    const std::string what = std::string("linear ") + dtype_name(half);
    check_close(y.to(Device::cpu()).to(DType::Float32), y32, 1e-4 * k, rtol, what + " forward");
    check_close(xg.grad().to(Device::cpu()).to(DType::Float32), x32.grad(), 1e-4 * n, rtol, what + " dx");
    check_close(wg.grad().to(Device::cpu()).to(DType::Float32), w32.grad(), 1e-4 * m, rtol, what + " dW");
    // The forward's bits are the kernel's: y = x·Wᵀ + b on mma_pipeline (the small tile for 1 tile).
    Tensor direct = full({m, n}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(half, kGpu));
    cuda::GemmProblem p =
        problem_of(half, m, n, k, xg.raw_data(), k, false, wg.raw_data(), k, true, direct.raw_data(), n);
    p.bias = bg.raw_data();
    backend_for(kGpu).synchronize();
    const cuda::GemmKernelChoice choice = cuda::choose_gemm_kernel(half, major, 0, 1, m, n, 1);
    cuda::mma_gemm(p, choice.kernel, choice.mma_tile, nullptr);
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    check_equal(y.to(Device::cpu()).to(DType::Float32), direct.to(Device::cpu()).to(DType::Float32),
                what + ": through the op and directly");
  }
}
