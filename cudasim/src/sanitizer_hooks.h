// The sanitizer annotations the simulator needs, as no-ops when no sanitizer is built in:
//   - AddressSanitizer must be told when execution moves to another stack (each simulated
//     thread runs on a fiber stack of its own), or it mistakes the switch for a stack overflow
//     and reports false errors when a C++ exception unwinds a fiber;
//   - ThreadSanitizer sees each simulated thread as a fiber of its own, switched to without
//     synchronisation, so two threads of a block that touch the same shared or global word
//     between two barriers are a data race it reports; barriers, warp collectives and the
//     launch itself are the happens-before edges CUDA guarantees (release/acquire on a token).
// cudasim's own sources are instrumented too (its host threads synchronise through mutexes and
// atomics ThreadSanitizer must see), but the scheduler's bookkeeping, which the fibers of one
// host thread take turns to touch, runs with memory accesses ignored (IgnoreAccesses) while a
// simulated thread executes it; the kernel's own accesses are never ignored. MINIDL_SIM_TSAN
// says that the program is built with ThreadSanitizer and the hooks are live.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDASIM_ASAN 1
#endif
#endif

#if defined(CUDASIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(MINIDL_SIM_TSAN)
#include <sanitizer/tsan_interface.h>
extern "C" {  // ThreadSanitizer's dynamic annotations (no public header declares them)
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

// For the functions that switch fibers: ThreadSanitizer keeps a shadow call stack per fiber,
// so an instrumented function entered on one fiber and left on another would unbalance both;
// never inlined, or the caller's instrumentation would cover them again.
#if defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define CUDASIM_SWITCHES_FIBERS __attribute__((disable_sanitizer_instrumentation, noinline))
#endif
#endif
#if !defined(CUDASIM_SWITCHES_FIBERS)
#define CUDASIM_SWITCHES_FIBERS __attribute__((no_sanitize("thread"), noinline))
#endif

namespace cudasim::sanitizer {

constexpr bool kAsan =
#if defined(CUDASIM_ASAN)
    true;
#else
    false;
#endif
constexpr bool kTsan =
#if defined(MINIDL_SIM_TSAN)
    true;
#else
    false;
#endif

// AddressSanitizer: before a switch to the stack [bottom, bottom + size); `fake_stack` saves
// the current fiber's fake stack (nullptr when the current fiber is finishing for good).
__attribute__((always_inline)) inline void start_switch(void** fake_stack, const void* bottom, size_t size) {
#if defined(CUDASIM_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}
// ... and right after landing; reports the stack we came from.
__attribute__((always_inline)) inline void finish_switch(void* fake_stack, const void** old_bottom, size_t* old_size) {
#if defined(CUDASIM_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, old_bottom, old_size);
#else
  (void)fake_stack, (void)old_bottom, (void)old_size;
#endif
}

// ThreadSanitizer fibers and happens-before edges.
inline void* current_fiber() {
#if defined(MINIDL_SIM_TSAN)
  return __tsan_get_current_fiber();
#else
  return nullptr;
#endif
}
inline void* create_fiber() {
#if defined(MINIDL_SIM_TSAN)
  return __tsan_create_fiber(0);
#else
  return nullptr;
#endif
}
inline void destroy_fiber(void* fiber) {
#if defined(MINIDL_SIM_TSAN)
  if (fiber != nullptr) __tsan_destroy_fiber(fiber);
#else
  (void)fiber;
#endif
}
__attribute__((always_inline)) inline void switch_to_fiber(void* fiber) {
#if defined(MINIDL_SIM_TSAN)
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
#else
  (void)fiber;
#endif
}
inline void release(void* token) {
#if defined(MINIDL_SIM_TSAN)
  __tsan_release(token);
#else
  (void)token;
#endif
}
inline void acquire(void* token) {
#if defined(MINIDL_SIM_TSAN)
  __tsan_acquire(token);
#else
  (void)token;
#endif
}

// While one lives, ThreadSanitizer records no reads or writes of the calling fiber.
class IgnoreAccesses {
 public:
  IgnoreAccesses() { begin(); }
  ~IgnoreAccesses() { end(); }
  IgnoreAccesses(const IgnoreAccesses&) = delete;
  IgnoreAccesses& operator=(const IgnoreAccesses&) = delete;

  __attribute__((always_inline)) static void begin() {
#if defined(MINIDL_SIM_TSAN)
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
  }
  __attribute__((always_inline)) static void end() {
#if defined(MINIDL_SIM_TSAN)
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
  }
};

// The opposite, inside an IgnoreAccesses: the kernel's own code runs observed.
class ObserveAccesses {
 public:
  ObserveAccesses() { IgnoreAccesses::end(); }
  ~ObserveAccesses() { IgnoreAccesses::begin(); }
  ObserveAccesses(const ObserveAccesses&) = delete;
  ObserveAccesses& operator=(const ObserveAccesses&) = delete;
};

}  // namespace cudasim::sanitizer
