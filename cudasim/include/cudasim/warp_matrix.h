// The simulated device's warp-level matrix instructions: mma.sync (m16n8k16, bf16 or f16 inputs,
// f32 accumulators), ldmatrix (.m8n8 .x1/.x2/.x4, with or without .trans, .b16) and cp.async
// (16 bytes, .cg, with commit and wait groups). A kernel calls them through the wrappers of
// kernels/cuda/gemm/warp_matrix.cuh, which state each fragment layout and issue the PTX
// instruction under nvcc, these functions on the simulated device.
//
// Each model follows NVIDIA's PTX ISA ("Warp-level matrix instructions": the fragment layouts of
// mma.m16n8k16 for .bf16/.f16 and of ldmatrix, and cp.async's semantics):
//   - mma and ldmatrix are warp collectives (cudasim::warp_exchange): all 32 lanes must arrive
//     (.sync.aligned), then every lane's registers are computed from what every lane brought;
//   - ldmatrix: each addressing lane reads its own 16-byte row before the exchange, so the
//     sanitizers see those reads as that lane's (a missing barrier before it is a race);
//   - cp.async is asynchronous as on the GPU: at the issue the 16 destination bytes are poisoned
//     (0xFF bytes: a NaN in every float format) and the copy is queued on the issuing thread;
//     it lands at the cp.async.wait_group that retires its group, written by that thread then.
//     So a kernel that reads the destination before waiting reads NaN, and one that waits but
//     has no barrier before another thread reads is a race ThreadSanitizer reports.
#pragma once

#include <cstdint>

namespace cudasim {

enum class MmaInput : int { BFloat16, Float16 };

// mma.sync.aligned.m16n8k16.row.col.f32.<in>.<in>.f32: d = A·B + c for the warp's 16×16 A,
// 16×8 B and 16×8 C, D, each lane holding its fragment (layouts in warp_matrix.cuh). The sum
// of each output is float32, c first and then the 16 exact products in k order.
void mma_m16n8k16(MmaInput in, float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);

// ldmatrix.sync.aligned.m8n8.x<count>[.trans].shared.b16: `count` (1, 2 or 4) 8×8 matrices of
// 16-bit elements, whose rows lanes 8·i .. 8·i+7 address for matrix i (16-byte aligned); each
// lane receives one 32-bit register per matrix.
void ldmatrix(int count, bool trans, uint32_t* regs, const void* row_address);

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: copies src_bytes (0..16) of src and
// zero-fills the rest of the 16 destination bytes, both 16-byte aligned. Lands at a wait.
void cp_async_16(void* shared_dst, const void* global_src, int src_bytes);
// cp.async.commit_group: the copies issued since the last commit form a group.
void cp_async_commit_group();
// cp.async.wait_group n: returns when at most the n most recent committed groups are pending;
// the copies of the older ones have landed. wait_group 0 with no commit after the last copies
// leaves those copies pending, as on the GPU (they belong to no committed group yet).
void cp_async_wait_group(int n);

}  // namespace cudasim
