// Which hand-written GEMM kernel runs a product (choose_gemm_kernel, first below), and how the
// SIMT kernel (simt_gemm.cu) runs one: which block tile, and into how many K slices it cuts the
// product. Pure functions of the dtype, the shape and the device (compute capability,
// multiprocessor count), in plain C++ (no CUDA header), built with or without CUDA so that the
// CPU test suite holds them to their stated plans (tests/kernels/test_gemm_plan.cpp).
// simt_gemm.cu states the SIMT heuristic and why; the tile sizes below are the one source of
// that kernel's TileConfig too.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace minidl::cuda {

// ---- which kernel: one table ----
//
// The CUDA GEMM family (kernels/cuda/gemm/, docs/gemm-ladder.md):
//   simt          simt_gemm.cu: float32 FMA, register-tiled; any dtype (16-bit widened as read)
//   mma           mma_gemm.cu: mma.sync tensor cores, fragments by scalar shared loads
//   mma_ldmatrix  + ldmatrix from swizzled tiles
//   mma_pipeline  + a 3-stage cp.async pipeline
// choose_gemm_kernel picks by dtype, compute capability and shape, the first row that matches:
//   dtype          compute capability   shape                      kernel, tile
//   bf16 or fp16   >= 8.0               T128 >= P multiprocessors  mma_pipeline, 128x128
//   bf16 or fp16   >= 8.0               otherwise                  mma_pipeline, 64x64
//   any            any                  any                        simt (native_gemm_plan)
// where T128 = batch · tiles of 128x128 in C. The mma rungs need sm_80 (mma.sync with bf16,
// ldmatrix, cp.async); float32 stays on the SIMT kernel (TF32 would change its results). The
// tensor-core kernel keeps K whole: a product with few tiles and a long K is latency-bound on
// it, as on the SIMT kernel without a split (not yet measured on a GPU: a split would be the
// next row of this table).
enum class GemmKernel : uint8_t { Simt, Mma, MmaLdmatrix, MmaPipeline };
constexpr GemmKernel kGemmKernels[] = {GemmKernel::Simt, GemmKernel::Mma, GemmKernel::MmaLdmatrix,
                                       GemmKernel::MmaPipeline};
const char* gemm_kernel_name(GemmKernel kernel);  // "simt", "mma", "mma_ldmatrix", "mma_pipeline"
// The tensor-core kernel's block tiles (mma_gemm.cu); the teaching rungs run on the large one.
enum class MmaTile : uint8_t { Large128x128, Small64x64 };
const char* mma_tile_name(MmaTile tile);  // "128x128x32", "64x64x32"

struct GemmKernelChoice {
  GemmKernel kernel = GemmKernel::Simt;
  MmaTile mma_tile = MmaTile::Large128x128;  // when kernel is an mma rung
};
// Whether a device of compute capability cc_major.x runs the mma rungs (and flash_mma.cu).
constexpr bool has_mma_sync(int cc_major) { return cc_major >= 8; }
GemmKernelChoice choose_gemm_kernel(DType dtype, int cc_major, int cc_minor, int64_t batch, int64_t m, int64_t n,
                                    int sm_count);

// Large128x128K16 is the large tile with a K step of 16 (half the barriers and global-load
// rounds per K, twice the shared memory and prefetch registers, so its launch bounds promise one
// block per multiprocessor: capped at 128 registers it spills): a candidate measured by
// bench_kernels' plan sweep and tested like the others, which the heuristic does not pick.
enum class GemmTile : uint8_t { Large128x128, Medium64x64, Small32x32, Large128x128K16 };
constexpr GemmTile kGemmTiles[] = {GemmTile::Large128x128, GemmTile::Medium64x64, GemmTile::Small32x32,
                                   GemmTile::Large128x128K16};

// What the plan needs to know of a tile configuration: the block tile [bm, bn] of C, its K
// step bk (a K slice is a multiple of it), its threads, and the blocks the kernel's launch
// bounds guarantee resident on one multiprocessor (min_blocks: 65536 registers / (threads ·
// 128 registers) — the three tiles the heuristic picks hold 16 warps per multiprocessor when
// full; the K16 candidate promises one block of 8, as it needs more registers).
struct GemmTileShape {
  int bm, bn, bk;
  int threads;
  int min_blocks;
};
constexpr GemmTileShape gemm_tile_shape(GemmTile tile) {
  switch (tile) {
    case GemmTile::Large128x128: return {128, 128, 8, 256, 2};
    case GemmTile::Medium64x64: return {64, 64, 16, 128, 4};
    case GemmTile::Small32x32: return {32, 32, 16, 64, 8};
    case GemmTile::Large128x128K16: return {128, 128, 16, 256, 1};
  }
  return {0, 0, 0, 0, 0};
}
const char* gemm_tile_name(GemmTile tile);  // "128x128x8", "64x64x16", "32x32x16", "128x128x16"

// A plan for C[m, n] (K is what k_split and splits cut): one block per tile of C and K slice,
// grid [tiles, splits]. With splits > 1 slice s covers k in [s·k_split, min(K, (s+1)·k_split)),
// writes its partial product to a workspace of workspace_floats() floats, and a second kernel
// adds the partials in slice order (deterministic).
struct NativeGemmPlan {
  GemmTile tile = GemmTile::Large128x128;
  int64_t splits = 1;   // K slices
  int64_t k_split = 0;  // K values per slice (a multiple of the tile's bk), the last may be shorter
  int64_t m = 0, n = 0;
  int64_t workspace_floats() const { return splits > 1 ? splits * m * n : 0; }
};

// The plan native_sgemm takes for M, N, K >= 1 on a device with `sm_count` multiprocessors.
NativeGemmPlan native_gemm_plan(int64_t m, int64_t n, int64_t k, int sm_count);

// The plan for `batch` products C[m, n] at once (batch >= 1; batch 1 is native_gemm_plan): the
// batch fills the device as tiles of one product do, so the tile is the large, else the medium
// one when batch·T >= P multiprocessors, else the small one, always with whole K (the batch,
// not K slices, supplies the blocks; a split would need a workspace per product).
NativeGemmPlan native_batched_gemm_plan(int64_t batch, int64_t m, int64_t n, int64_t k, int sm_count);

// The plan of `tile` with (at most) `splits` K slices for M, N, K >= 1: k_split rounded up to
// the tile's K step, so the slice count it gets may be smaller (every slice non-empty).
NativeGemmPlan native_gemm_plan_with(GemmTile tile, int64_t splits, int64_t m, int64_t n, int64_t k);

// Throws minidl::Error unless `plan` runs C[m, n] = op(A)·op(B) with inner dimension k: its m
// and n are the problem's, splits >= 1 and at most 65535 (a grid's y), k_split a positive
// multiple of the tile's bk, and the slices cover K with none empty:
// (splits - 1)·k_split < k <= splits·k_split.
void check_gemm_plan(const NativeGemmPlan& plan, int64_t m, int64_t n, int64_t k);

}  // namespace minidl::cuda
