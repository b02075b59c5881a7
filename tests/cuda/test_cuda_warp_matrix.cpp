// The warp-level matrix instructions (kernels/cuda/gemm/warp_matrix.cuh: mma.sync m16n8k16,
// ldmatrix, cp.async) against the PTX ISA's fragment layouts, written here once more as a table
// of its own (the PTX ISA's wording: "row = groupID for a0, a1, a4, a5; groupID + 8 for a2, a3,
// a6, a7"), independent of the simulator's model (cudasim/src/warp_matrix.cpp) and of the
// wrappers' comments:
//   - mma: the host scatters random A[16×16], B[16×8], C[16×8] into the 32 lanes' registers by
//     the table, the kernel runs one mma per warp, and the host gathers D by the table and checks
//     it against A·B + C in double, for bf16 and f16 inputs, with D in place of C too;
//   - ldmatrix: four 8×8 matrices whose elements encode (matrix, row, column), their rows at
//     scattered places in shared memory, loaded .x1/.x2/.x4, plain and .trans: every lane's every
//     register must hold the elements the table names;
//   - cp.async: every src-size from 0 to 16 (the rest zero-filled), and the groups: wait_group 1
//     leaves exactly the newest group in flight. On the simulated device, where a copy lands at
//     the wait, the destination must read as poison before it (a kernel that forgets the wait
//     reads NaN there, which the GEMM's mutations rely on), and a misaligned address is a fault.
// On a GPU these cases check the hardware's layouts against the same table.
#if defined(__CUDACC__) || defined(MINIDL_CUDA_SIM)

#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/cuda/cuda_check.h"
#include "device_array.h"
#include "kernels/cuda/gemm/warp_matrix.cuh"

namespace {

using minidl::cuda::wm::pack_b16;
using minidl::cuda_test::DeviceArray;
using minidl::cuda_test::launch;

// ---- the PTX ISA's fragment layouts, as a table: (row, column) of each element a lane holds ----

struct Pos {
  int row, col;
};
int group_of(int lane) { return lane >> 2; }  // PTX: groupID
int tig_of(int lane) { return lane % 4; }     // PTX: threadID_in_group

// A (16×16, row): element a_i, i in 0..7, of `lane`; a_i lives in register i / 2, half i % 2.
Pos a_pos(int lane, int i) {
  const bool low_rows = i == 0 || i == 1 || i == 4 || i == 5;
  return {low_rows ? group_of(lane) : group_of(lane) + 8, i < 4 ? tig_of(lane) * 2 + (i & 1) : tig_of(lane) * 2 + 8 + (i & 1)};
}
// B (16×8, col): element b_i, i in 0..3 (row is k, column is n).
Pos b_pos(int lane, int i) { return {i < 2 ? tig_of(lane) * 2 + (i & 1) : tig_of(lane) * 2 + 8 + (i & 1), group_of(lane)}; }
// C and D (16×8): element c_i, i in 0..3.
Pos c_pos(int lane, int i) { return {i < 2 ? group_of(lane) : group_of(lane) + 8, tig_of(lane) * 2 + (i & 1)}; }

// ---- device side ----

template <bool BF16, bool IN_PLACE>
__global__ void mma_kernel(const uint32_t* a, const uint32_t* b, const float* c, float* d) {
  const int lane = static_cast<int>(threadIdx.x);
  uint32_t ra[4], rb[2];
  float rc[4], rd[4];
  for (int i = 0; i < 4; ++i) ra[i] = a[lane * 4 + i];
  for (int i = 0; i < 2; ++i) rb[i] = b[lane * 2 + i];
  for (int i = 0; i < 4; ++i) rc[i] = c[lane * 4 + i];
  if constexpr (IN_PLACE) {
    minidl::cuda::wm::mma_m16n8k16<BF16>(rc, ra, rb, rc);
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = rc[i];
  } else {
    minidl::cuda::wm::mma_m16n8k16<BF16>(rd, ra, rb, rc);
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = rd[i];
  }
}

// 32 rows of 8 elements: row s of `rows` goes to shared slot s; lane l addresses slot slot_of[l].
// out[l * 7 + j]: registers of x1, x2 (2), x4 (4) in that order.
template <bool TRANS>
__global__ void ldmatrix_kernel(const uint16_t* rows, const int* slot_of, uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[32 * 8];
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = 0; e < 8; ++e) tile[lane * 8 + e] = rows[lane * 8 + e];
  __syncthreads();
  const uint16_t* row = tile + slot_of[lane] * 8;
  uint32_t r1[1], r2[2], r4[4];
  minidl::cuda::wm::ldmatrix<1, TRANS>(r1, row);
  minidl::cuda::wm::ldmatrix<2, TRANS>(r2, row);
  minidl::cuda::wm::ldmatrix<4, TRANS>(r4, row);
  uint32_t* o = out + lane * 7;
  o[0] = r1[0];
  o[1] = r2[0];
  o[2] = r2[1];
  for (int i = 0; i < 4; ++i) o[3 + i] = r4[i];
}

// Thread t copies 16 bytes from src + 16·t with src-size 2·(t % 9) (0..16), in group 0, then
// 16 bytes from src + 16·(t + 32) (full) in group 1. It records its two destinations after
// wait_group 1 and after wait_group 0: out[t][0..3] group 0 after wait 1, [4..7] group 1 after
// wait 1 (on the simulated device only), [8..11] group 1 after wait 0 (uint32 words).
__global__ void cp_async_kernel(const uint32_t* src, uint32_t* out) {
  __shared__ __align__(16) uint32_t dst[64 * 4];
  const int t = static_cast<int>(threadIdx.x);
  minidl::cuda::wm::cp_async_16(dst + t * 4, src + t * 4, 2 * (t % 9));
  minidl::cuda::wm::cp_async_commit();
  minidl::cuda::wm::cp_async_16(dst + (t + 32) * 4, src + (t + 32) * 4, 16);
  minidl::cuda::wm::cp_async_commit();
  minidl::cuda::wm::cp_async_wait<1>();
  for (int i = 0; i < 4; ++i) out[t * 12 + i] = dst[t * 4 + i];
#if defined(MINIDL_CUDA_SIM)
  // Group 1 is still in flight: on a GPU this read would race with the copy (racecheck would say
  // so), on the simulated device it reads the poison the model promises.
  for (int i = 0; i < 4; ++i) out[t * 12 + 4 + i] = dst[(t + 32) * 4 + i];
#endif
  minidl::cuda::wm::cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) out[t * 12 + 8 + i] = dst[(t + 32) * 4 + i];
}

// ---- host side ----

uint16_t to_bits(bool bf16, float v) {
  return bf16 ? minidl::float_to_bfloat16_bits(v) : minidl::float_to_float16_bits(v);
}
float from_bits(bool bf16, uint16_t b) {
  return bf16 ? minidl::bfloat16_bits_to_float(b) : minidl::float16_bits_to_float(b);
}

template <bool BF16, bool IN_PLACE>
void check_mma(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  // A and B as 16-bit values (rounded once here: the reference uses the rounded values).
  uint16_t A[16][16], B[16][8];
  float C[16][8];
  for (auto& row : A)
    for (auto& v : row) v = to_bits(BF16, dist(rng));
  for (auto& row : B)
    for (auto& v : row) v = to_bits(BF16, dist(rng));
  for (auto& row : C)
    for (auto& v : row) v = dist(rng);
  std::vector<uint32_t> a(32 * 4), b(32 * 2);
  std::vector<float> c(32 * 4);
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      const Pos lo = a_pos(lane, 2 * r), hi = a_pos(lane, 2 * r + 1);
      a[lane * 4 + r] = pack_b16(A[lo.row][lo.col], A[hi.row][hi.col]);
    }
    for (int r = 0; r < 2; ++r) {
      const Pos lo = b_pos(lane, 2 * r), hi = b_pos(lane, 2 * r + 1);
      b[lane * 2 + r] = pack_b16(B[lo.row][lo.col], B[hi.row][hi.col]);
    }
    for (int i = 0; i < 4; ++i) c[lane * 4 + i] = C[c_pos(lane, i).row][c_pos(lane, i).col];
  }
  DeviceArray<uint32_t> da(a), db(b);
  DeviceArray<float> dc(c), dd(std::vector<float>(32 * 4, -1.0f));
  launch(&mma_kernel<BF16, IN_PLACE>, 1, 32, da.get(), db.get(), dc.get(), dd.get());
  const std::vector<float> d = dd.read();
  int checked = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const Pos p = c_pos(lane, i);
      double exact = C[p.row][p.col], magnitude = std::fabs(exact);
      for (int k = 0; k < 16; ++k) {
        const double term = static_cast<double>(from_bits(BF16, A[p.row][k])) * from_bits(BF16, B[k][p.col]);
        exact += term;
        magnitude += std::fabs(term);
      }
      // Each product of two 16-bit values is exact in float32; the 17-term float32 sum may round
      // (or, on tensor cores, truncate) at each step: at most 17 units of 2^-23 of the magnitude.
      INFO("lane " << lane << " d[" << i << "] = D[" << p.row << "][" << p.col << "]");
      CHECK(std::fabs(d[lane * 4 + i] - exact) <= 17 * std::ldexp(magnitude, -23));
      ++checked;
    }
  CHECK(checked == 128);  // every element of D, each once
}

}  // namespace

TEST_CASE("warp matrix: mma.sync m16n8k16 fragments follow the PTX ISA's layout", "[cuda][warp-matrix]") {
  MINIDL_CUDA_CHECK(cudaSetDevice(0));
  SECTION("bf16") { check_mma<true, false>(11); }
  SECTION("f16") { check_mma<false, false>(12); }
  SECTION("bf16, D in place of C") { check_mma<true, true>(13); }
  SECTION("f16, D in place of C") { check_mma<false, true>(14); }
}

TEST_CASE("warp matrix: ldmatrix x1/x2/x4, plain and .trans, follow the PTX ISA's layout", "[cuda][warp-matrix]") {
  MINIDL_CUDA_CHECK(cudaSetDevice(0));
  // Element (m, r, c) of matrix m is m·64 + r·8 + c. Row r of matrix m sits at shared slot
  // (5·(8m + r) + 3) % 32 (a permutation: 5 is odd), so each lane's address matters.
  auto slot = [](int m, int r) { return (5 * (8 * m + r) + 3) % 32; };
  std::vector<uint16_t> rows(32 * 8);
  std::vector<int> slot_of(32);
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 8; ++c) rows[slot(m, r) * 8 + c] = static_cast<uint16_t>(m * 64 + r * 8 + c);
      slot_of[8 * m + r] = slot(m, r);  // lane 8m + r addresses row r of matrix m
    }
  DeviceArray<uint16_t> drows(rows);
  DeviceArray<int> dslots(slot_of);
  for (const bool trans : {false, true}) {
    DeviceArray<uint32_t> dout(std::vector<uint32_t>(32 * 7, 0xdeadbeefu));
    if (trans) launch(&ldmatrix_kernel<true>, 1, 32, drows.get(), dslots.get(), dout.get());
    else launch(&ldmatrix_kernel<false>, 1, 32, drows.get(), dslots.get(), dout.get());
    const std::vector<uint32_t> out = dout.read();
    for (int lane = 0; lane < 32; ++lane) {
      // The table: register m holds M_m[group][2·tig], M_m[group][2·tig+1]; with .trans
      // M_m[2·tig][group], M_m[2·tig+1][group].
      auto expected = [&](int m) {
        const int g = group_of(lane), t2 = 2 * tig_of(lane);
        const int lo = trans ? m * 64 + t2 * 8 + g : m * 64 + g * 8 + t2;
        const int hi = trans ? m * 64 + (t2 + 1) * 8 + g : m * 64 + g * 8 + t2 + 1;
        return pack_b16(static_cast<uint16_t>(lo), static_cast<uint16_t>(hi));
      };
      INFO("lane " << lane << (trans ? " .trans" : ""));
      CHECK(out[lane * 7 + 0] == expected(0));  // x1
      CHECK(out[lane * 7 + 1] == expected(0));  // x2
      CHECK(out[lane * 7 + 2] == expected(1));
      for (int m = 0; m < 4; ++m) CHECK(out[lane * 7 + 3 + m] == expected(m));  // x4
    }
  }
}

TEST_CASE("warp matrix: cp.async copies src-size bytes, zero-fills the rest, and lands by group",
          "[cuda][warp-matrix]") {
  MINIDL_CUDA_CHECK(cudaSetDevice(0));
  std::vector<uint32_t> src(64 * 4);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0x01020304u * static_cast<uint32_t>(i + 1);
  DeviceArray<uint32_t> dsrc(src), dout(std::vector<uint32_t>(32 * 12, 0));
  launch(&cp_async_kernel, 1, 32, dsrc.get(), dout.get());
  const std::vector<uint32_t> out = dout.read();
  for (int t = 0; t < 32; ++t) {
    INFO("thread " << t);
    // Group 0, after wait_group 1: landed, src_bytes = 2·(t % 9) of the source, then zeros.
    const int src_bytes = 2 * (t % 9);
    unsigned char want[16] = {}, got[16];
    std::memcpy(want, src.data() + t * 4, static_cast<size_t>(src_bytes));
    std::memcpy(got, out.data() + t * 12, 16);
    CHECK(std::memcmp(want, got, 16) == 0);
    // Group 1 after wait_group 0: the whole source.
    for (int i = 0; i < 4; ++i) CHECK(out[t * 12 + 8 + i] == src[(t + 32) * 4 + i]);
#if defined(MINIDL_CUDA_SIM)
    // Group 1 after wait_group 1 was still in flight: on the simulated device it reads as poison.
    for (int i = 0; i < 4; ++i) CHECK(out[t * 12 + 4 + i] == 0xffffffffu);
#endif
  }
}

#if defined(MINIDL_CUDA_SIM)
namespace {
__global__ void misaligned_ldmatrix_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[16 * 8 + 8];
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = 0; e < 4; ++e) tile[lane * 4 + e] = 0;
  __syncthreads();
  uint32_t r[1];
  minidl::cuda::wm::ldmatrix<1, false>(r, tile + 1 + (lane % 8) * 8);  // 2 bytes off a 16-byte row
  out[lane] = r[0];
}
}  // namespace

TEST_CASE("warp matrix (simulated device): a misaligned ldmatrix row is a misaligned-address fault",
          "[cuda][warp-matrix]") {
  MINIDL_CUDA_CHECK(cudaSetDevice(0));
  DeviceArray<uint32_t> dout(std::vector<uint32_t>(32, 0));
  const cudaError_t launched = [&] {
    ::cudasim_launch_at(__FILE__, __LINE__, &misaligned_ldmatrix_kernel, dim3(1), dim3(32), 0, nullptr, dout.get());
    return cudaGetLastError();
  }();
  const cudaError_t synced = cudaDeviceSynchronize();
  (void)cudaDeviceReset();  // clears the sticky fault for the cases after this one
  CHECK((launched == cudaErrorMisalignedAddress || synced == cudaErrorMisalignedAddress));
}
#endif

#endif  // __CUDACC__ || MINIDL_CUDA_SIM
