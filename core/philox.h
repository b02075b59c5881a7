// Philox4x32-10: a counter-based random number generator (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11). Output block i depends only on (key, counter i), so
// element i of a random tensor can be computed independently by any thread on any device, and
// the same seed gives the same numbers on the CPU and on the GPU. Header-only so that CUDA
// kernels can include it (MINIDL_HOST_DEVICE expands to __host__ __device__ under nvcc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MINIDL_HOST_DEVICE __host__ __device__
#else
#define MINIDL_HOST_DEVICE
#endif

namespace minidl::philox {

struct Block {
  uint32_t x[4];
};

MINIDL_HOST_DEVICE inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Ten rounds of the Philox4x32 bijection of the 128-bit counter (ctr) under the 64-bit key.
MINIDL_HOST_DEVICE inline Block philox4x32_10(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi) {
  uint32_t c0 = static_cast<uint32_t>(ctr_lo), c1 = static_cast<uint32_t>(ctr_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(ctr_hi), c3 = static_cast<uint32_t>(ctr_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  // Unrolled on the host, so that a loop over counters vectorises (kernels/cpu/dropout.cpp):
  // GCC's vectoriser takes no loop inside the loop it vectorises. (nvcc knows no GCC pragma,
  // and unrolls a loop of ten by itself.)
#if !defined(__CUDACC__)
#pragma GCC unroll 10
#endif
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;  // the golden-ratio Weyl sequence of the key schedule
    k1 += 0xBB67AE85u;
  }
  return Block{{c0, c1, c2, c3}};
}

// Element `i` of a random tensor drawn at generator offset `offset` uses counter offset + i.
MINIDL_HOST_DEVICE inline Block block_for(uint64_t seed, uint64_t offset, uint64_t i) {
  return philox4x32_10(seed, offset + i, 0);
}

// Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
MINIDL_HOST_DEVICE inline float uniform_float(const Block& b) { return static_cast<float>(b.x[0] >> 8) * (1.0f / 16777216.0f); }
MINIDL_HOST_DEVICE inline double uniform_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

// A 64-bit random integer from the block's first two words.
MINIDL_HOST_DEVICE inline uint64_t bits64(const Block& b) { return (static_cast<uint64_t>(b.x[0]) << 32) | b.x[1]; }

}  // namespace minidl::philox
