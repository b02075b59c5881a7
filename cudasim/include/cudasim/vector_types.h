// CUDA's small vector types for the simulated device: dim3 and uint3 (launch shapes and thread
// indices) and the float/int/uint vectors with CUDA's alignment. A float4 is 16-byte aligned, and on
// the GPU a float4 load or store through a misaligned address is a device fault
// (cudaErrorMisalignedAddress); here too: every copy of a vector, which is what a load
// `v = p[i]` and a store `p[i] = v` compile to, checks the address it reads or writes and traps
// the simulated thread if it is misaligned. (The UndefinedBehaviorSanitizer build also reports it.)
#pragma once

#include <cstdint>

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit, as in CUDA
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

namespace cudasim {

// Traps the calling simulated thread with cudaErrorMisalignedAddress (defined with the block
// runner; outside a kernel it reports that instead).
[[noreturn]] void misaligned_vector_access(const void* address, unsigned alignment, bool store);

inline void check_vector_alignment(const void* p, unsigned alignment, bool store) {
  auto address = reinterpret_cast<std::uintptr_t>(p);
  // The compiler may assume a T& is aligned for T and fold the test below to false; the empty
  // asm makes the address opaque so the test is really made.
  __asm__("" : "+r"(address));
  if (address % alignment != 0) misaligned_vector_access(p, alignment, store);
}

// One vector type: N values of T in one aligned unit. Copies check both addresses.
#define CUDASIM_VECTOR_COPIES(Name)                                              \
  Name() = default;                                                              \
  Name(const Name& o) {                                                          \
    ::cudasim::check_vector_alignment(&o, alignof(Name), false);                \
    copy_from(o);                                                                \
  }                                                                              \
  Name& operator=(const Name& o) {                                               \
    ::cudasim::check_vector_alignment(&o, alignof(Name), false);                \
    ::cudasim::check_vector_alignment(this, alignof(Name), true);               \
    copy_from(o);                                                                \
    return *this;                                                                \
  }

}  // namespace cudasim

struct alignas(8) float2 {
  float x, y;
  CUDASIM_VECTOR_COPIES(float2)
  constexpr float2(float vx, float vy) : x(vx), y(vy) {}

 private:
  void copy_from(const float2& o) { x = o.x, y = o.y; }
};
struct alignas(16) float4 {
  float x, y, z, w;
  CUDASIM_VECTOR_COPIES(float4)
  constexpr float4(float vx, float vy, float vz, float vw) : x(vx), y(vy), z(vz), w(vw) {}

 private:
  void copy_from(const float4& o) { x = o.x, y = o.y, z = o.z, w = o.w; }
};
struct alignas(8) int2 {
  int x, y;
  CUDASIM_VECTOR_COPIES(int2)
  constexpr int2(int vx, int vy) : x(vx), y(vy) {}

 private:
  void copy_from(const int2& o) { x = o.x, y = o.y; }
};
struct alignas(16) int4 {
  int x, y, z, w;
  CUDASIM_VECTOR_COPIES(int4)
  constexpr int4(int vx, int vy, int vz, int vw) : x(vx), y(vy), z(vz), w(vw) {}

 private:
  void copy_from(const int4& o) { x = o.x, y = o.y, z = o.z, w = o.w; }
};
// The 8-byte word of the GEMM's 16-bit operand loads and output stores (4 bfloat16 / float16 values).
struct alignas(8) uint2 {
  unsigned x, y;
  CUDASIM_VECTOR_COPIES(uint2)
  constexpr uint2(unsigned vx, unsigned vy) : x(vx), y(vy) {}

 private:
  void copy_from(const uint2& o) { x = o.x, y = o.y; }
};
// The 16-byte word of vectorised 16-bit kernels (8 bfloat16 / float16 values per load or store).
struct alignas(16) uint4 {
  unsigned x, y, z, w;
  CUDASIM_VECTOR_COPIES(uint4)
  constexpr uint4(unsigned vx, unsigned vy, unsigned vz, unsigned vw) : x(vx), y(vy), z(vz), w(vw) {}

 private:
  void copy_from(const uint4& o) { x = o.x, y = o.y, z = o.z, w = o.w; }
};
struct alignas(16) double2 {
  double x, y;
  CUDASIM_VECTOR_COPIES(double2)
  constexpr double2(double vx, double vy) : x(vx), y(vy) {}

 private:
  void copy_from(const double2& o) { x = o.x, y = o.y; }
};
#undef CUDASIM_VECTOR_COPIES

inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline int2 make_int2(int x, int y) { return int2{x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline constexpr uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
