// The warp-level matrix instructions the tensor-core kernels use, one small inline function
// each: inline PTX under nvcc (sm_80 and later), the simulated device's model otherwise
// (cudasim/warp_matrix.h). Kernels call only these, so the same kernel source runs on a GPU and
// in CI. Include only from .cu files.
//
// The layouts below are NVIDIA's PTX ISA's ("Matrix fragments for mma.m16n8k16 with
// floating point type", "ldmatrix"), in its words: a warp's 32 lanes are 8 groups of 4,
//   group = lane / 4      (PTX: groupID)
//   tig   = lane % 4      (PTX: threadID_in_group)
// A 32-bit register holds two 16-bit elements; the lower 16 bits hold the element of the lower
// index. tests/cuda/test_warp_matrix.cpp checks every lane and element against a table.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(MINIDL_CUDA_SIM)
#include "cudasim/warp_matrix.h"
#endif

namespace minidl::cuda::wm {

#if defined(__CUDACC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "kernels/cuda/gemm/warp_matrix.cuh needs sm_80 or later (mma.sync with bf16, ldmatrix, cp.async)"
#endif

// ---- mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 ----
//
// D[16×8] = A[16×16] · B[16×8] + C[16×8], A and B 16-bit, C and D float32, one warp.
//
//   A (row-major, 16 rows m × 16 columns k), registers a[0..3], two elements each:
//     a[0] = A[group    ][2·tig, 2·tig+1]      a[2] = A[group    ][2·tig+8, 2·tig+9]
//     a[1] = A[group + 8][2·tig, 2·tig+1]      a[3] = A[group + 8][2·tig+8, 2·tig+9]
//   B ("col": 16 rows k × 8 columns n, a lane holds two consecutive k of one column):
//     b[0] = B[2·tig, 2·tig+1][group]          b[1] = B[2·tig+8, 2·tig+9][group]
//   C and D (16 × 8 float), c[0..3]:
//     c[0], c[1] = C[group    ][2·tig, 2·tig+1]
//     c[2], c[3] = C[group + 8][2·tig, 2·tig+1]
//
// So one lane's a[0] and b[0] are the k pair (2·tig, 2·tig+1) of its row and its column, and
// the 4 lanes of a group together hold a row of A and a column of B: the product needs the whole
// warp, which is why the instruction is a warp collective. d may be c (accumulate in place).
template <bool BF16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                             const float (&c)[4]) {
#if defined(MINIDL_CUDA_SIM)
  cudasim::mma_m16n8k16(BF16 ? cudasim::MmaInput::BFloat16 : cudasim::MmaInput::Float16, d, a, b, c);
#elif defined(__CUDA_ARCH__)
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
  }
#endif
}

// ---- ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 ----
//
// Loads COUNT 8×8 matrices of 16-bit elements from shared memory into fragments, one register
// per matrix per lane. Each row of a matrix is 16 contiguous bytes (8 elements) anywhere in
// shared memory, 16-byte aligned: lanes 8·i .. 8·i+7 give the addresses of rows 0..7 of matrix
// i (the other lanes' addresses are ignored; .x1 uses lanes 0-7, .x2 lanes 0-15). Then
//   r[i] = M_i[group][2·tig, 2·tig+1]                      (no .trans)
//   r[i] = M_i[2·tig][group], M_i[2·tig+1][group]          (.trans: the transposed matrix's row)
// which is exactly a quarter of an mma fragment: an A fragment is ldmatrix.x4 of its four 8×8
// quarters (rows 0-7 / 8-15 × k 0-7 / 8-15, in the order a[0..3] above), a B fragment
// ldmatrix.x2 of its two k halves; .trans loads a fragment from a tile stored the other way round
// (B as [k][n] rows instead of [n][k]). Eight lanes read eight 16-byte rows at once: if those
// rows fall in the same 4-byte banks, the read is serialised (a bank conflict), which is what the
// kernels' swizzled tile layouts avoid.
template <int COUNT, bool TRANS>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[COUNT], const void* row_address) {
  static_assert(COUNT == 1 || COUNT == 2 || COUNT == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(MINIDL_CUDA_SIM)
  cudasim::ldmatrix(COUNT, TRANS, r, row_address);
#elif defined(__CUDA_ARCH__)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  if constexpr (COUNT == 1 && !TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
  } else if constexpr (COUNT == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
  } else if constexpr (COUNT == 2 && !TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  } else if constexpr (COUNT == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
  } else if constexpr (!TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
#endif
}

// ---- cp.async.cg.shared.global (16 bytes), commit_group, wait_group ----
//
// cp_async_16 starts a copy of src_bytes (0..16) bytes from global to shared memory and fills
// the rest of the 16 destination bytes with zeros (src_bytes = 0 reads nothing: the way a tile
// at the matrix's edge is padded without a branch or a padding copy). Both addresses are 16-byte
// aligned; .cg caches the source in L2 only (a tile is read once per block). The copy is
// asynchronous: the thread goes on at once, and the destination is defined only after a wait.
// cp_async_commit closes a group of the copies issued since the last commit; cp_async_wait<N>
// returns when at most the N most recent groups are still in flight. Another thread sees the
// landed data only after a barrier (__syncthreads) that follows the wait.
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src, int src_bytes) {
#if defined(MINIDL_CUDA_SIM)
  cudasim::cp_async_16(shared_dst, global_src, src_bytes);
#elif defined(__CUDA_ARCH__)
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src), "r"(src_bytes));
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(MINIDL_CUDA_SIM)
  cudasim::cp_async_commit_group();
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(MINIDL_CUDA_SIM)
  cudasim::cp_async_wait_group(N);
#elif defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Two 16-bit values packed into one 32-bit register as the fragments hold them (lo in the lower
// half), from their bits.
__host__ __device__ __forceinline__ uint32_t pack_b16(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

}  // namespace minidl::cuda::wm
