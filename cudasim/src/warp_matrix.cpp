// The models of the warp-level matrix instructions (cudasim/warp_matrix.h): mma.sync m16n8k16,
// ldmatrix and cp.async, per the fragment layouts and semantics of NVIDIA's PTX ISA. The
// layouts are written once here, as the formulas the PTX ISA gives (groupID = lane / 4,
// threadID_in_group = lane % 4), and once in kernels/cuda/gemm/warp_matrix.cuh's comments;
// tests/cuda/test_warp_matrix.cpp checks every lane and element against a table of its own.
#include "cudasim/warp_matrix.h"

#include <cuda_runtime.h>

#include <bit>
#include <cstdio>
#include <cstring>

#include "block_runner.h"
#include "cudasim/float16_rounding.h"

namespace cudasim {

namespace {

// ---- mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 ----

struct MmaLane {
  MmaInput in;
  const uint32_t* a;  // 4 registers, 2 elements each (the lower half holds the lower index)
  const uint32_t* b;  // 2 registers
  const float* c;     // 4 accumulators
  float* d;           // 4 results (may be c itself)
};

float widen(MmaInput in, uint16_t bits) {
  return in == MmaInput::BFloat16 ? std::bit_cast<float>(static_cast<uint32_t>(bits) << 16)
                                  : float16::float16_value(bits);
}
uint16_t half_of(uint32_t reg, int which) { return static_cast<uint16_t>(which == 0 ? reg : reg >> 16); }

void mma_model(void* const* lanes, unsigned /*mask: all 32 lanes, checked by the caller*/) {
  const MmaInput in = static_cast<const MmaLane*>(lanes[0])->in;
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const MmaLane& l = *static_cast<const MmaLane*>(lanes[lane]);
    if (l.in != in) device_trap(cudaErrorLaunchFailure, "mma.sync: the lanes of a warp disagree on the input type");
    const int group = lane >> 2, tig = lane & 3;
    // A, row-major 16×16: a0..a7 in registers 0..3, two each; a_i sits at
    //   row group + 8·((i / 2) % 2), column 2·tig + (i % 2) + 8·(i / 4).
    for (int i = 0; i < 8; ++i)
      A[group + 8 * ((i / 2) % 2)][2 * tig + (i % 2) + 8 * (i / 4)] = widen(in, half_of(l.a[i / 2], i % 2));
    // B, "col" 16×8 (k × n): b0..b3 in registers 0..1; b_i sits at row (k) 2·tig + (i % 2) + 8·(i / 2),
    //   column (n) group.
    for (int i = 0; i < 4; ++i) B[2 * tig + (i % 2) + 8 * (i / 2)][group] = widen(in, half_of(l.b[i / 2], i % 2));
    // C and D, 16×8 float: c_i sits at row group + 8·(i / 2), column 2·tig + (i % 2).
    for (int i = 0; i < 4; ++i) C[group + 8 * (i / 2)][2 * tig + (i % 2)] = l.c[i];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const MmaLane& l = *static_cast<const MmaLane*>(lanes[lane]);
    const int group = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = group + 8 * (i / 2), col = 2 * tig + (i % 2);
      float sum = C[row][col];
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];  // each product exact in float32
      l.d[i] = sum;
    }
  }
}

// ---- ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16 ----

struct LdmatrixLane {
  int count;
  bool trans;
  uint32_t* regs;   // count registers
  uint16_t row[8];  // the 16-byte row this lane addressed (lanes below 8·count)
};

void ldmatrix_model(void* const* lanes, unsigned /*mask*/) {
  const LdmatrixLane& first = *static_cast<const LdmatrixLane*>(lanes[0]);
  for (int lane = 1; lane < 32; ++lane) {
    const LdmatrixLane& l = *static_cast<const LdmatrixLane*>(lanes[lane]);
    if (l.count != first.count || l.trans != first.trans)
      device_trap(cudaErrorLaunchFailure, "ldmatrix: the lanes of a warp disagree on .x<count> or .trans");
  }
  auto row = [&](int matrix, int r) { return static_cast<const LdmatrixLane*>(lanes[8 * matrix + r])->row; };
  for (int lane = 0; lane < 32; ++lane) {
    LdmatrixLane& l = *static_cast<LdmatrixLane*>(lanes[lane]);
    const int r = lane >> 2, c = 2 * (lane & 3);
    for (int m = 0; m < first.count; ++m) {
      // Lane holds elements (r, c) and (r, c + 1) of matrix m; with .trans, (c, r) and (c + 1, r).
      const uint16_t lo = first.trans ? row(m, c)[r] : row(m, r)[c];
      const uint16_t hi = first.trans ? row(m, c + 1)[r] : row(m, r)[c + 1];
      l.regs[m] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

[[noreturn]] void misaligned(const char* instruction, const void* p) {
  char what[160];
  std::snprintf(what, sizeof what, "%s: address %p is not 16-byte aligned", instruction, p);
  device_trap(cudaErrorMisalignedAddress, what);
}

void land(const PendingCopy& c) {
  std::memcpy(c.dst, c.src, static_cast<size_t>(c.src_bytes));
  std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, static_cast<size_t>(16 - c.src_bytes));
}

}  // namespace

void mma_m16n8k16(MmaInput in, float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  MmaLane lane{in, a, b, c, d};
  warp_exchange("mma.sync.m16n8k16", 0xffffffffu, &lane, &mma_model);
}

void ldmatrix(int count, bool trans, uint32_t* regs, const void* row_address) {
  if (count != 1 && count != 2 && count != 4)
    device_trap(cudaErrorLaunchFailure, "ldmatrix: .x<count> must be 1, 2 or 4");
  LdmatrixLane lane{count, trans, regs, {}};
  const int lane_id = static_cast<int>((threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) % 32);
  if (lane_id < 8 * count) {  // an addressing lane: its row is read here, by this thread
    if (!aligned16(row_address)) misaligned("ldmatrix", row_address);
    std::memcpy(lane.row, row_address, 16);
  }
  warp_exchange(trans ? "ldmatrix.trans" : "ldmatrix", 0xffffffffu, &lane, &ldmatrix_model);
}

void cp_async_16(void* shared_dst, const void* global_src, int src_bytes) {
  if (src_bytes < 0 || src_bytes > 16) device_trap(cudaErrorLaunchFailure, "cp.async: src-size must be in [0, 16]");
  if (!aligned16(shared_dst)) misaligned("cp.async (shared destination)", shared_dst);
  if (src_bytes > 0 && !aligned16(global_src)) misaligned("cp.async (global source)", global_src);
  AsyncCopies& q = current_async_copies("cp.async");
  std::memset(shared_dst, 0xff, 16);  // poisoned until the copy lands
  q.pending.push_back(PendingCopy{shared_dst, global_src, src_bytes, q.committed});
}

void cp_async_commit_group() { ++current_async_copies("cp.async.commit_group").committed; }

void cp_async_wait_group(int n) {
  if (n < 0) device_trap(cudaErrorLaunchFailure, "cp.async.wait_group: n must be >= 0");
  AsyncCopies& q = current_async_copies("cp.async.wait_group");
  const long retire_below = q.committed - n;  // groups 0 .. committed - n - 1 must have landed
  size_t kept = 0;
  for (size_t i = 0; i < q.pending.size(); ++i) {
    if (q.pending[i].group < retire_below) land(q.pending[i]);
    else q.pending[kept++] = q.pending[i];
  }
  q.pending.resize(kept);
}

}  // namespace cudasim
