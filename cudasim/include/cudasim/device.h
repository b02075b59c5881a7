// What a kernel sees on the simulated device: CUDA's keywords, the built-in indices, barriers,
// warp collectives, atomics and the math intrinsics the kernels use, for kernels/cuda/*.cu
// compiled as plain C++ (MINIDL_CUDA_SIM builds).
//
// The model (docs/simulated-gpu.md has the whole story):
//   - every thread of a block is a fiber on one host thread, so the block's threads run
//     concurrently with respect to each other and __syncthreads() is a real barrier; blocks run
//     on a pool of host threads in a shuffled order;
//   - `__shared__` is `static thread_local`: one copy per host thread of the pool, which runs one
//     block at a time, so it is per block (its contents are undefined at block start, as on the
//     GPU: they hold whatever the previous block on that host thread left);
//   - warps are 32 lanes; a warp collective (__shfl_*_sync, __ballot_sync, __any_sync, ...) waits
//     until every lane of its mask has reached it, then every lane reads the others' values, as
//     in lock-step. A mask naming a lane that has exited or never arrives, and a __syncthreads()
//     that some live thread of the block never reaches, are device faults (the launch fails).
// Everything here only works inside a kernel launched through cudasim_launch
// (cudasim/include/cudasim/launch.h).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cudasim/vector_types.h"

// ---- keywords: device code is ordinary C++ here ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __constant__ static

namespace cudasim {

// The indices of the simulated thread now running on this host thread (set at every switch).
struct ThreadIndices {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
extern thread_local const ThreadIndices* tl_current;

// Warp collectives, evaluated over the lanes of `mask` once all of them have arrived. Values
// travel as their bits (at most 8 bytes).
enum class WarpOp : int { ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp, Exchange };
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t bits, int arg, int width);

// A warp collective whose operands are more than a value each: every lane of `mask` passes a
// pointer to its own operands (which stay put while it waits); when the last one arrives,
// `model(lanes, mask)` runs once, reads every lane's inputs through lanes[l] and writes every
// lane's outputs there, as the warp's lanes would see them after the instruction in lock-step.
// The warp-level matrix instructions (cudasim/warp_matrix.h) are built on it. `name` is the
// instruction, for the faults (lanes that disagree, a lane that exits or never arrives).
using WarpExchangeFn = void (*)(void* const* lanes, unsigned mask);
void warp_exchange(const char* name, unsigned mask, void* lane_operands, WarpExchangeFn model);

// Stops the calling simulated thread with a device fault (the launch fails with `code` and the
// message goes to stderr). For device-side checks such as an assert.
[[noreturn]] void device_trap(int code, const char* what);

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp collectives move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
inline T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace cudasim

#define threadIdx (::cudasim::tl_current->thread_idx)
#define blockIdx (::cudasim::tl_current->block_idx)
#define blockDim (::cudasim::tl_current->block_dim)
#define gridDim (::cudasim::tl_current->grid_dim)
inline constexpr int warpSize = 32;

// ---- barriers ----
// The default arguments name the call site, so that threads of one block waiting at two
// different __syncthreads() are reported as a divergent barrier (compilers may duplicate a call
// when they optimise, so its return address would not do).
void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE());
int __syncthreads_count(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE());
int __syncthreads_and(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE());
int __syncthreads_or(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE());
void __threadfence();
void __threadfence_block();

// ---- warp collectives ----
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)cudasim::warp_collective(cudasim::WarpOp::SyncWarp, mask, 0, 0, warpSize);
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize) {
  return cudasim::from_bits<T>(cudasim::warp_collective(cudasim::WarpOp::ShflIdx, mask, cudasim::to_bits(v), src_lane, width));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return cudasim::from_bits<T>(
      cudasim::warp_collective(cudasim::WarpOp::ShflUp, mask, cudasim::to_bits(v), static_cast<int>(delta), width));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return cudasim::from_bits<T>(
      cudasim::warp_collective(cudasim::WarpOp::ShflDown, mask, cudasim::to_bits(v), static_cast<int>(delta), width));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  return cudasim::from_bits<T>(cudasim::warp_collective(cudasim::WarpOp::ShflXor, mask, cudasim::to_bits(v), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(cudasim::warp_collective(cudasim::WarpOp::Ballot, mask, predicate != 0, 0, warpSize));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(cudasim::warp_collective(cudasim::WarpOp::Any, mask, predicate != 0, 0, warpSize));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(cudasim::warp_collective(cudasim::WarpOp::All, mask, predicate != 0, 0, warpSize));
}

// ---- atomics: relaxed, as CUDA's are; real host atomics, since blocks run on several host threads ----
// Under ThreadSanitizer they are acquire-release instead. The CUDA idiom "write, __threadfence(),
// atomicAdd a ticket; the block that draws the last ticket reads every block's writes" is correct
// (fence-to-fence synchronisation through the relaxed atomic), but TSan does not model standalone
// fences and would report it as a race. Carried by the atomic itself, the same ordering is one TSan
// follows. On x86 a read-modify-write is the same locked instruction for either order.
namespace cudasim {
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif
#else
inline constexpr bool kTsan = false;
#endif
inline constexpr std::memory_order kAtomicOrder = kTsan ? std::memory_order_acq_rel : std::memory_order_relaxed;
inline constexpr std::memory_order kAtomicLoadOrder = kTsan ? std::memory_order_acquire : std::memory_order_relaxed;

template <class T, class F>
inline T atomic_update(T* address, F f) {  // read-modify-write by compare-and-swap; returns the old value
  std::atomic_ref<T> ref(*address);
  T old = ref.load(kAtomicLoadOrder);
  while (!ref.compare_exchange_weak(old, f(old), kAtomicOrder, kAtomicLoadOrder)) {
  }
  return old;
}
}  // namespace cudasim

template <class T>
inline T atomicAdd(T* address, T v) {
  if constexpr (std::is_floating_point_v<T>) return cudasim::atomic_update(address, [v](T x) { return x + v; });
  else return std::atomic_ref<T>(*address).fetch_add(v, cudasim::kAtomicOrder);
}
template <class T>
inline T atomicSub(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_sub(v, cudasim::kAtomicOrder);
}
template <class T>
inline T atomicExch(T* address, T v) {
  return std::atomic_ref<T>(*address).exchange(v, cudasim::kAtomicOrder);
}
template <class T>
inline T atomicMin(T* address, T v) {
  return cudasim::atomic_update(address, [v](T x) { return v < x ? v : x; });
}
template <class T>
inline T atomicMax(T* address, T v) {
  return cudasim::atomic_update(address, [v](T x) { return v > x ? v : x; });
}
template <class T>
inline T atomicCAS(T* address, T compare, T v) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, v, cudasim::kAtomicOrder, cudasim::kAtomicLoadOrder);
  return compare;  // the old value, whether or not it was replaced
}
template <class T>
inline T atomicAnd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_and(v, cudasim::kAtomicOrder);
}
template <class T>
inline T atomicOr(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_or(v, cudasim::kAtomicOrder);
}
template <class T>
inline T atomicXor(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_xor(v, cudasim::kAtomicOrder);
}

// ---- loads and math intrinsics, with CUDA's meaning (the fast-math ones at full accuracy,
// which is within their documented error bounds) ----
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }  // NaN -> 0, as CUDA
inline float __int_as_float(int v) { return cudasim::from_bits<float>(static_cast<uint32_t>(v)); }
inline int __float_as_int(float v) { return static_cast<int>(static_cast<uint32_t>(cudasim::to_bits(v))); }
inline float __uint_as_float(unsigned v) { return cudasim::from_bits<float>(v); }
inline unsigned __float_as_uint(float v) { return static_cast<unsigned>(cudasim::to_bits(v)); }
inline double __longlong_as_double(long long v) { return cudasim::from_bits<double>(static_cast<uint64_t>(v)); }
inline long long __double_as_longlong(double v) { return static_cast<long long>(cudasim::to_bits(v)); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
// CUDA's math functions live in the global namespace.
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;

// CUDA's global min and max overloads for device code.
#define CUDASIM_MIN_MAX(T)                                 \
  inline T min(T a, T b) { return b < a ? b : a; }         \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDASIM_MIN_MAX(int)
CUDASIM_MIN_MAX(unsigned)
CUDASIM_MIN_MAX(long)
CUDASIM_MIN_MAX(unsigned long)
CUDASIM_MIN_MAX(long long)
CUDASIM_MIN_MAX(unsigned long long)
#undef CUDASIM_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(static_cast<unsigned>(v)); }
inline int __ffs(int v) { return __builtin_ffs(v); }
