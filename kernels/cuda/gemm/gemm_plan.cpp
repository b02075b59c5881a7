// The native SGEMM's plan (gemm_plan.h): the heuristic that simt_gemm.cu's header comment states and
// argues ("Plans"), the plan of a given tile and slice count, and the check of a given plan.
#include "kernels/cuda/gemm/gemm_plan.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace minidl::cuda {

namespace {

constexpr int64_t kMinSplitK = 128;  // shortest K slice worth a block's prologue and epilogue
constexpr int64_t kMaxSplits = 32;   // K slices at most (each partial is one more read of M·N floats)
constexpr int64_t kMaxGridY = 65535;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t tiles_of(GemmTile tile, int64_t m, int64_t n) {
  const GemmTileShape t = gemm_tile_shape(tile);
  return ceil_div(m, t.bm) * ceil_div(n, t.bn);
}

std::string plan_text(const NativeGemmPlan& p) {
  return std::string(gemm_tile_name(p.tile)) + " for " + std::to_string(p.m) + "x" + std::to_string(p.n) + " in " +
         std::to_string(p.splits) + " K slice(s) of " + std::to_string(p.k_split);
}

}  // namespace

const char* gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::Simt: return "simt";
    case GemmKernel::Mma: return "mma";
    case GemmKernel::MmaLdmatrix: return "mma_ldmatrix";
    case GemmKernel::MmaPipeline: return "mma_pipeline";
  }
  return "?";
}

const char* mma_tile_name(MmaTile tile) { return tile == MmaTile::Large128x128 ? "128x128x32" : "64x64x32"; }

GemmKernelChoice choose_gemm_kernel(DType dtype, int cc_major, int /*cc_minor*/, int64_t batch, int64_t m, int64_t n,
                                    int sm_count) {
  const bool half = dtype == DType::BFloat16 || dtype == DType::Float16;
  if (half && has_mma_sync(cc_major)) {
    const int64_t large_tiles = batch * ceil_div(m, 128) * ceil_div(n, 128);
    return {GemmKernel::MmaPipeline, large_tiles >= sm_count ? MmaTile::Large128x128 : MmaTile::Small64x64};
  }
  return {GemmKernel::Simt, MmaTile::Large128x128};
}

const char* gemm_tile_name(GemmTile tile) {
  switch (tile) {
    case GemmTile::Large128x128: return "128x128x8";
    case GemmTile::Medium64x64: return "64x64x16";
    case GemmTile::Small32x32: return "32x32x16";
    case GemmTile::Large128x128K16: return "128x128x16";
  }
  return "?";
}

NativeGemmPlan native_gemm_plan_with(GemmTile tile, int64_t splits, int64_t m, int64_t n, int64_t k) {
  const int64_t bk = gemm_tile_shape(tile).bk;
  const int64_t wanted = std::clamp<int64_t>(splits, 1, std::max<int64_t>(k, 1));
  NativeGemmPlan plan;
  plan.tile = tile;
  plan.m = m;
  plan.n = n;
  plan.k_split = ceil_div(ceil_div(k, wanted), bk) * bk;
  plan.splits = ceil_div(k, plan.k_split);  // <= wanted; rounding k_split up may leave fewer
  return plan;
}

NativeGemmPlan native_gemm_plan(int64_t m, int64_t n, int64_t k, int sm_count) {
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  // 1. A large or medium tile that already gives every multiprocessor a block: whole K.
  for (GemmTile tile : {GemmTile::Large128x128, GemmTile::Medium64x64})
    if (tiles_of(tile, m, n) >= sms) return native_gemm_plan_with(tile, 1, m, n, k);
  // 2. Tall and thin (K >= M + N, K long enough for two slices): the larger tile whose K
  //    slices, up to one wave of resident blocks, give every multiprocessor a block.
  const int64_t max_splits = std::min(k / kMinSplitK, kMaxSplits);
  if (k >= m + n && max_splits >= 2) {
    for (GemmTile tile : {GemmTile::Large128x128, GemmTile::Medium64x64}) {
      const int64_t tiles = tiles_of(tile, m, n);
      const int64_t splits = std::min(sms * gemm_tile_shape(tile).min_blocks / tiles, max_splits);
      if (tiles * splits >= sms) return native_gemm_plan_with(tile, splits, m, n, k);
    }
  }
  // 3. The small tile: whole K, or, when it fills at most half the multiprocessors, as many
  //    slices as give each one a block.
  const int64_t tiles = tiles_of(GemmTile::Small32x32, m, n);
  const int64_t splits = 2 * tiles <= sms && max_splits >= 2 ? std::min(ceil_div(sms, tiles), max_splits) : 1;
  return native_gemm_plan_with(GemmTile::Small32x32, splits, m, n, k);
}

NativeGemmPlan native_batched_gemm_plan(int64_t batch, int64_t m, int64_t n, int64_t k, int sm_count) {
  if (batch <= 1) return native_gemm_plan(m, n, k, sm_count);
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  for (GemmTile tile : {GemmTile::Large128x128, GemmTile::Medium64x64})
    if (batch * tiles_of(tile, m, n) >= sms) return native_gemm_plan_with(tile, 1, m, n, k);
  return native_gemm_plan_with(GemmTile::Small32x32, 1, m, n, k);
}

void check_gemm_plan(const NativeGemmPlan& plan, int64_t m, int64_t n, int64_t k) {
  const int64_t bk = gemm_tile_shape(plan.tile).bk;
  MINIDL_CHECK(bk > 0, "native GEMM plan: unknown tile ", static_cast<int>(plan.tile));
  MINIDL_CHECK(plan.m == m && plan.n == n, "native GEMM plan ", plan_text(plan), " is for another C than ", m, "x",
               n);
  MINIDL_CHECK(plan.splits >= 1 && plan.splits <= kMaxGridY, "native GEMM plan ", plan_text(plan),
               ": the K slices must number 1 to ", kMaxGridY);
  MINIDL_CHECK(plan.k_split >= bk && plan.k_split % bk == 0 && plan.k_split <= ceil_div(k, bk) * bk,
               "native GEMM plan ", plan_text(plan), ": a K slice must be a multiple of the tile's K step ", bk,
               " and no longer than K = ", k, " rounded up to it");
  MINIDL_CHECK((plan.splits - 1) * plan.k_split < k && k <= plan.splits * plan.k_split, "native GEMM plan ",
               plan_text(plan), ": the slices must cover K = ", k, " with none empty");
}

}  // namespace minidl::cuda
