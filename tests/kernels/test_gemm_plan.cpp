// The native CUDA GEMM's plan (kernels/cuda/gemm/gemm_plan.h): plain C++, so it is tested here
// without a GPU. The plans a 132-SM H200 gets for the products bench_kernels measures (the
// Fashion-MNIST MLP's layers at batch 128 and 4096, forward and both backward products, and the
// squares) are stated one by one; every plan of a sweep of shapes and multiprocessor counts is
// checked for the properties the kernel relies on; and check_gemm_plan refuses broken plans.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/gemm/gemm_plan.h"

using namespace minidl;
using namespace minidl::cuda;

namespace {

constexpr int kH200Sms = 132;
constexpr GemmTile kLarge = GemmTile::Large128x128, kMedium = GemmTile::Medium64x64, kSmall = GemmTile::Small32x32;

struct Expected {
  int64_t m, n, k;  // C[m, n], inner dimension k
  const char* what;
  GemmTile tile;
  int64_t splits, k_split;
};

std::string text(const NativeGemmPlan& p) {
  return std::string(gemm_tile_name(p.tile)) + " in " + std::to_string(p.splits) + " K slice(s) of " +
         std::to_string(p.k_split);
}

void check_plans(const std::vector<Expected>& cases) {
  for (const Expected& e : cases) {
    const NativeGemmPlan p = native_gemm_plan(e.m, e.n, e.k, kH200Sms);
    INFO(e.what << ": M=" << e.m << " N=" << e.n << " K=" << e.k << " gets " << text(p));
    CHECK(p.tile == e.tile);
    CHECK(p.splits == e.splits);
    CHECK(p.k_split == e.k_split);
    CHECK(p.m == e.m);
    CHECK(p.n == e.n);
  }
}

}  // namespace

TEST_CASE("the weight gradients of the MLP at batch 4096 split K over a larger tile on 132 SMs", "[gemm_plan]") {
  // dW[out, in] = dyᵀ·x: M = out, N = in, K = batch (kernels/cuda/linear.cu).
  check_plans({
      // 14 large tiles x 18 slices = 252 blocks, one wave of 2 per SM; slices of 232 (the last 152).
      {256, 784, 4096, "fc1 dW", kLarge, 18, 232},
      // 2 large tiles x 32 slices would be 64 blocks; 8 medium tiles x 32 slices = 256.
      {128, 256, 4096, "fc2 dW", kMedium, 32, 128},
      // Even 32 medium slices give 64 blocks: the small tile, 4 tiles x 32 slices of 128.
      {10, 128, 4096, "fc3 dW", kSmall, 32, 128},
  });
}

TEST_CASE("the MLP's other products at batch 4096 keep whole-K plans on 132 SMs", "[gemm_plan]") {
  check_plans({
      {4096, 256, 784, "fc1 forward", kMedium, 1, 784},  // 256 medium tiles
      {4096, 784, 256, "fc1 dx", kLarge, 1, 256},        // 224 large tiles
      {4096, 128, 256, "fc2 forward", kSmall, 1, 256},   // K < M + N: no split; 512 small tiles
      {4096, 256, 128, "fc2 dx", kMedium, 1, 128},
      {4096, 10, 128, "fc3 forward", kSmall, 1, 128},  // K < 256: too short to split
      {4096, 128, 10, "fc3 dx", kSmall, 1, 16},
  });
}

TEST_CASE("the MLP's products at batch 128 keep their small-tile plans on 132 SMs", "[gemm_plan]") {
  // forward y[batch, out] = x·Wᵀ: M = batch, N = out, K = in; dx[batch, in] = dy·W: M = batch,
  // N = in, K = out; dW: M = out, N = in, K = batch.
  check_plans({
      {128, 256, 784, "fc1 forward", kSmall, 5, 160},  // 32 small tiles x 5 = 160 blocks
      {128, 784, 256, "fc1 dx", kSmall, 1, 256},       // 100 small tiles > 132 / 2
      {256, 784, 128, "fc1 dW", kSmall, 1, 128},
      {128, 128, 256, "fc2 forward", kSmall, 2, 128},  // 16 tiles; K = 256 allows 2 slices of 128
      {128, 256, 128, "fc2 dx", kSmall, 1, 128},
      {128, 256, 128, "fc2 dW", kSmall, 1, 128},
      {128, 10, 128, "fc3 forward", kSmall, 1, 128},
      {128, 128, 10, "fc3 dx", kSmall, 1, 16},
      {10, 128, 128, "fc3 dW", kSmall, 1, 128},
  });
}

TEST_CASE("square products take the large tile with whole K on 132 SMs", "[gemm_plan]") {
  check_plans({
      {4096, 4096, 4096, "4096^3", kLarge, 1, 4096},
      {8192, 8192, 8192, "8192^3", kLarge, 1, 8192},
      {1024, 1024, 1024, "1024^3", kMedium, 1, 1024},  // 64 large tiles < 132 <= 256 medium ones
  });
}

TEST_CASE("a gemm plan's slices cover K with none empty for any shape and multiprocessor count", "[gemm_plan]") {
  const std::vector<int64_t> dims = {1, 2, 7, 10, 31, 32, 33, 64, 100, 128, 129, 256, 300, 784, 1000, 1537, 4096, 8192};
  const std::vector<int64_t> ks = {1, 5, 8, 9, 16, 127, 128, 255, 256, 257, 500, 784, 1000, 2048, 4096, 4097, 65536};
  const std::vector<int> sm_counts = {0, 1, 2, 8, 16, 46, 64, 80, 108, 114, 132, 144};
  for (int sms : sm_counts) {
    for (int64_t m : dims) {
      for (int64_t n : dims) {
        for (int64_t k : ks) {
          const NativeGemmPlan p = native_gemm_plan(m, n, k, sms);
          const int64_t bk = gemm_tile_shape(p.tile).bk;
          const bool ok = p.m == m && p.n == n && p.splits >= 1 && p.splits <= 32 && p.k_split >= bk &&
                          p.k_split % bk == 0 && (p.splits - 1) * p.k_split < k && p.splits * p.k_split >= k &&
                          p.workspace_floats() == (p.splits > 1 ? p.splits * m * n : 0);
          if (!ok) {  // one INFO and CHECK per failure only: the sweep is ~60,000 plans
            INFO("M=" << m << " N=" << n << " K=" << k << " on " << sms << " SMs gets " << text(p));
            CHECK(ok);
          }
          // A split slice is at least 128 long except the last, and the slices of a larger
          // tile never exceed one wave of its resident blocks.
          if (p.splits > 1) {
            const GemmTileShape t = gemm_tile_shape(p.tile);
            const int64_t tiles = ((m + t.bm - 1) / t.bm) * ((n + t.bn - 1) / t.bn);
            const bool long_enough = p.k_split >= 128 && k >= 256;
            const bool one_wave = p.tile == kSmall || tiles * p.splits <= int64_t{sms > 0 ? sms : 1} * t.min_blocks;
            if (!long_enough || !one_wave) {
              INFO("M=" << m << " N=" << n << " K=" << k << " on " << sms << " SMs gets " << text(p));
              CHECK(long_enough);
              CHECK(one_wave);
            }
            check_gemm_plan(p, m, n, k);  // and the kernel's own check accepts it
          }
        }
      }
    }
  }
}

TEST_CASE("a gemm plan of a given tile and slice count rounds its slices to the tile's K step", "[gemm_plan]") {
  for (GemmTile tile : kGemmTiles) {
    const int64_t bk = gemm_tile_shape(tile).bk;
    for (int64_t k : {int64_t{1}, int64_t{15}, int64_t{333}, int64_t{4096}}) {
      for (int64_t splits : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{64}, int64_t{100000}}) {
        const NativeGemmPlan p = native_gemm_plan_with(tile, splits, 37, 45, k);
        INFO(gemm_tile_name(tile) << " K=" << k << ", " << splits << " slices wanted: " << text(p));
        CHECK(p.tile == tile);
        CHECK(p.splits <= splits);
        CHECK(p.k_split % bk == 0);
        CHECK_NOTHROW(check_gemm_plan(p, 37, 45, k));
      }
    }
  }
  // 333 in 3 slices: 111 rounds up to 112, a multiple of both 16 and 8.
  CHECK(native_gemm_plan_with(kMedium, 3, 37, 45, 333).k_split == 112);
  CHECK(native_gemm_plan_with(kLarge, 3, 37, 45, 333).k_split == 112);
  // 333 in 21 slices of the small tile: 16 each (the last 13).
  const NativeGemmPlan small = native_gemm_plan_with(kSmall, 21, 37, 45, 333);
  CHECK(small.k_split == 16);
  CHECK(small.splits == 21);
}

TEST_CASE("check_gemm_plan refuses a plan that does not fit its problem", "[gemm_plan]") {
  const NativeGemmPlan good = native_gemm_plan_with(kLarge, 4, 100, 200, 1000);  // 4 slices of 256
  REQUIRE(good.splits == 4);
  REQUIRE(good.k_split == 256);
  CHECK_NOTHROW(check_gemm_plan(good, 100, 200, 1000));

  NativeGemmPlan p = good;
  CHECK_THROWS_AS(check_gemm_plan(p, 101, 200, 1000), Error);  // another C
  CHECK_THROWS_AS(check_gemm_plan(p, 100, 200, 1025), Error);  // 4 x 256 < K: slices miss the end
  CHECK_THROWS_AS(check_gemm_plan(p, 100, 200, 768), Error);   // the 4th slice would be empty
  p.k_split = 252;                                             // not a multiple of 8
  CHECK_THROWS_AS(check_gemm_plan(p, 100, 200, 1000), Error);
  p = good;
  p.splits = 0;
  CHECK_THROWS_AS(check_gemm_plan(p, 100, 200, 1000), Error);
  p = good;
  p.tile = kMedium;  // 256 is a multiple of 16: still valid
  CHECK_NOTHROW(check_gemm_plan(p, 100, 200, 1000));
  p.k_split = 264;  // a multiple of 8, not of 16
  p.splits = 4;
  CHECK_THROWS_AS(check_gemm_plan(p, 100, 200, 1000), Error);
  p = good;
  p.splits = 1;
  p.k_split = int64_t{1} << 40;  // longer than K: refused before any product can overflow
  CHECK_THROWS_AS(check_gemm_plan(p, 100, 200, 1000), Error);
  try {
    check_gemm_plan(good, 100, 200, 1025);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("128x128x8") != std::string::npos);
    CHECK(msg.find("1025") != std::string::npos);
  }
}

TEST_CASE("a batch of products picks its tile from the blocks of the whole batch and keeps K whole", "[gemm_plan]") {
  // Attention's scores at batch 8, 12 heads, T = 1024, head size 64 on 132 SMs: 96 products of
  // 1024x1024x64 fill the device with the large tile; 40 products of 128x128 have 40 large tiles
  // but 160 medium ones: the medium tile; 2 products of 40x40 take the small tile.
  const NativeGemmPlan scores = native_batched_gemm_plan(96, 1024, 1024, 64, 132);
  CHECK(scores.tile == GemmTile::Large128x128);
  CHECK(scores.splits == 1);
  const NativeGemmPlan heads = native_batched_gemm_plan(40, 128, 128, 4096, 132);
  CHECK(heads.tile == GemmTile::Medium64x64);
  CHECK(heads.splits == 1);
  CHECK(native_gemm_plan(128, 128, 4096, 132).splits > 1);  // one such product alone splits K
  const NativeGemmPlan tiny = native_batched_gemm_plan(2, 40, 40, 16, 132);
  CHECK(tiny.tile == GemmTile::Small32x32);
  CHECK(tiny.splits == 1);
  CHECK_NOTHROW(check_gemm_plan(heads, 128, 128, 4096));
  // Batch 1 is the single product's plan.
  const NativeGemmPlan one = native_batched_gemm_plan(1, 256, 784, 4096, 132), single = native_gemm_plan(256, 784, 4096, 132);
  CHECK(one.tile == single.tile);
  CHECK(one.splits == single.splits);
  CHECK(one.k_split == single.k_split);
}

TEST_CASE("the GEMM kernel table: 16-bit on sm_80 and later takes the tensor cores, the rest the SIMT kernel",
          "[kernels][gemm-plan]") {
  // gemm_plan.h's table, row by row, on a 132-SM H200 (9.0), an A100 (8.0, 108 SMs) and a V100 (7.0).
  for (DType half : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(half));
    // 32 x 32 tiles of 128 = 1024 >= 132: the large tile.
    const GemmKernelChoice big = choose_gemm_kernel(half, 9, 0, 1, 4096, 4096, kH200Sms);
    CHECK(big.kernel == GemmKernel::MmaPipeline);
    CHECK(big.mma_tile == MmaTile::Large128x128);
    // 4 x 4 = 16 tiles < 132: the small one; a batch of 9 such products gives 144: the large one.
    CHECK(choose_gemm_kernel(half, 9, 0, 1, 512, 512, kH200Sms).mma_tile == MmaTile::Small64x64);
    CHECK(choose_gemm_kernel(half, 9, 0, 9, 512, 512, kH200Sms).mma_tile == MmaTile::Large128x128);
    CHECK(choose_gemm_kernel(half, 8, 0, 1, 4096, 4096, 108).kernel == GemmKernel::MmaPipeline);
    CHECK(choose_gemm_kernel(half, 7, 0, 1, 4096, 4096, 80).kernel == GemmKernel::Simt);  // no bf16 mma.sync
  }
  CHECK(choose_gemm_kernel(DType::Float32, 9, 0, 1, 4096, 4096, kH200Sms).kernel == GemmKernel::Simt);
  CHECK(std::string(gemm_kernel_name(GemmKernel::MmaLdmatrix)) == "mma_ldmatrix");
  CHECK(std::string(mma_tile_name(MmaTile::Small64x64)) == "64x64x32");
}
