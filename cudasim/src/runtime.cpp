// The simulated CUDA runtime: devices, memory, streams, events, copies, launches and stream
// capture, with the semantics the CUDA Runtime API documents (cuda_runtime.h lists what is
// modelled). The parts a kernel sees are in block_runner.cpp.
//
// Streams. Each stream is an in-order queue run by a host thread of its own, so work runs
// asynchronously to the host and to other streams: a missing cudaStreamWaitEvent, or a host
// read before cudaStreamSynchronize, shows up as wrong data (MINIDL_SIM_STREAM_DELAY_US holds
// every operation back that many microseconds, to make it likely) or, under ThreadSanitizer,
// as a reported race. The legacy default stream (stream 0) of each device waits for the
// blocking streams of its device and they for it, as CUDA's legacy stream does.
//
// Memory. Device allocations are host memory, registered so that every copy, memset and kernel
// argument is checked: a copy whose kind does not match where its pointers live, a range that
// runs past its allocation, or a kernel given a pointer to pageable host memory (or to another
// device's memory) is an error, as on the GPU. New device memory is filled with 0xff bytes
// (NaN as float, -1 as integers), so a kernel that reads what nobody wrote gets garbage. Each
// device has a memory budget (MINIDL_SIM_DEVICE_MEMORY, default 16 GiB): past it cudaMalloc
// fails with cudaErrorMemoryAllocation. Copies to and from pageable host memory behave as
// CUDA documents: a host-to-device copy stages the source before returning, a device-to-host
// copy returns once the data has arrived; copies to and from pinned memory are asynchronous.
//
// Errors. The last error is per host thread (cudaGetLastError reads and clears it); a fault in
// queued work (a kernel's illegal address, a divergent barrier) is sticky for its device: every
// later call on it returns the fault, as a GPU context is lost after one.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <functional>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "block_runner.h"
#include "runtime_internal.h"

// The handles are these runtime objects.
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

namespace cudasim {
namespace {

using Clock = std::chrono::steady_clock;

// ---- settings ----

long long env_integer(const char* name, long long fallback, long long lo, long long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (end != v && *end != '\0' && end[1] == '\0') {  // one suffix letter: K, M, G
    switch (*end) {
      case 'K': case 'k': x <<= 10; ++end; break;
      case 'M': case 'm': x <<= 20; ++end; break;
      case 'G': case 'g': x <<= 30; ++end; break;
      default: break;
    }
  }
  if (end == v || *end != '\0' || x < lo || x > hi) {
    std::fprintf(stderr, "cudasim: ignoring %s=%s (expected an integer in [%lld, %lld])\n", name, v, lo, hi);
    return fallback;
  }
  return x;
}

struct Settings {
  int devices = static_cast<int>(env_integer("MINIDL_SIM_DEVICES", 2, 0, 64));
  size_t memory = static_cast<size_t>(env_integer("MINIDL_SIM_DEVICE_MEMORY", 16LL << 30, 1 << 20, 1LL << 50));
  int sm_count = static_cast<int>(env_integer("MINIDL_SIM_SM_COUNT", 132, 1, 1024));
  long long stream_delay_us = env_integer("MINIDL_SIM_STREAM_DELAY_US", 0, 0, 10'000'000);
  bool fill = env_integer("MINIDL_SIM_FILL", 1, 0, 1) != 0;
};
const Settings& settings() {
  static const Settings* s = new Settings();
  return *s;
}

// The H200 (sm_90) profile the launch limits and attributes report.
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDimZ = 64;
constexpr unsigned kMaxGridDimX = 0x7fffffffu;
constexpr unsigned kMaxGridDimYZ = 65535;
constexpr int kSharedPerBlock = 48 * 1024;
constexpr int kSharedPerBlockOptin = 227 * 1024;
constexpr int kSharedPerSm = 228 * 1024;
constexpr int kMaxThreadsPerSm = 2048;
constexpr int kMaxBlocksPerSm = 32;

// ---- errors ----

thread_local cudaError_t tl_last_error = cudaSuccess;

struct DeviceState {
  std::atomic<int> sticky{cudaSuccess};  // a fault in queued work: every later call returns it
  std::atomic<size_t> used{0};           // bytes of device memory allocated
};
std::vector<DeviceState>& device_states() {
  static auto* v = new std::vector<DeviceState>(static_cast<size_t>(std::max(settings().devices, 1)));
  return *v;
}

thread_local int tl_device = 0;

cudaError_t fail(cudaError_t code) { return set_last_error(code); }

cudaError_t sticky_of(int device) {
  if (device < 0 || device >= settings().devices) return cudaSuccess;
  return static_cast<cudaError_t>(device_states()[static_cast<size_t>(device)].sticky.load());
}

// Every call that touches the current device starts here.
cudaError_t check_context() {
  if (settings().devices == 0) return fail(cudaErrorNoDevice);
  const cudaError_t sticky = sticky_of(tl_device);
  return sticky != cudaSuccess ? fail(sticky) : cudaSuccess;
}

// ---- memory registry ----

struct Allocation {
  size_t bytes;
  int device;  // -1: pinned host memory
};

std::shared_mutex& memory_mutex() {
  static auto* m = new std::shared_mutex();
  return *m;
}
std::map<uintptr_t, Allocation>& allocations() {
  static auto* m = new std::map<uintptr_t, Allocation>();
  return *m;
}

enum class Where { Pageable, Pinned, Device, Straddles };
struct Located {
  Where where = Where::Pageable;
  int device = -1;
};

// Where [p, p + bytes) lives. A range that starts in an allocation and runs past its end (or
// one that ends in an allocation it does not start in) straddles.
Located locate(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::shared_lock<std::shared_mutex> lock(memory_mutex());
  auto& m = allocations();
  auto it = m.upper_bound(a);
  if (it != m.begin()) {
    auto prev = std::prev(it);
    const uintptr_t base = prev->first, end = base + prev->second.bytes;
    if (a >= base && a <= end && (a < end || bytes == 0)) {
      if (a + bytes > end) return {Where::Straddles, prev->second.device};
      return prev->second.device >= 0 ? Located{Where::Device, prev->second.device} : Located{Where::Pinned, -1};
    }
  }
  if (bytes > 0 && it != m.end() && it->first < a + bytes) return {Where::Straddles, it->second.device};
  return {};
}

// ---- streams ----

struct Event;

struct Op {
  std::string what;
  std::function<void()> work;
};

struct Capture;

}  // namespace
}  // namespace cudasim

struct CUstream_st {
  int device = 0;
  unsigned flags = 0;
  bool legacy = false;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<cudasim::Op> queue;
  uint64_t enqueued = 0, done = 0;  // operations queued and finished, ever
  std::shared_ptr<cudasim::Capture> capture;  // set while the stream is being captured
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t recorded = 0, completed = 0;  // generation of the last record, and of the last that ran
  cudasim::Clock::time_point when{};
};

struct CUgraph_st {
  std::vector<cudasim::Op> ops;  // in capture order; replayed in that order on one stream
};

struct CUgraphExec_st {
  std::vector<cudasim::Op> ops;
};

namespace cudasim {
namespace {

struct Capture {
  cudaStream_t origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  std::unique_ptr<CUgraph_st> graph = std::make_unique<CUgraph_st>();
  bool invalidated = false;
  std::vector<cudaStream_t> joined;  // other streams drawn into the capture by an event wait
};

struct Registry {
  std::mutex mutex;
  std::set<cudaStream_t> streams;
  // Events by handle. Work queued on a stream holds its own reference, so an event destroyed
  // while a record or wait on it is still queued lives until that work has run, then is freed.
  std::unordered_map<cudaEvent_t, std::shared_ptr<CUevent_st>> events;
  std::vector<cudaStream_t> legacy;  // per device, created on first use
  std::vector<std::shared_ptr<Capture>> captures;
  std::unordered_map<const void*, int> max_dynamic_shared;  // cudaFuncSetAttribute
  uint64_t launches = 0;
};
Registry& registry() {
  static auto* r = new Registry();  // never destroyed: stream threads outlive main
  return *r;
}

// The stream whose queued operation this host thread is running, and whether that operation has
// already counted itself done (see count_done_with).
thread_local cudaStream_t tl_running_stream = nullptr;
thread_local bool tl_counted_done = false;

// For an operation whose effect other host threads observe (an event record): counts it done on
// its stream and applies `update` under `other` in one step, holding both locks, so no host thread
// sees the event complete while its stream still reports that operation pending, or the reverse.
void count_done_with(std::mutex& other, const std::function<void()>& update) {
  cudaStream_t s = tl_running_stream;
  if (s == nullptr) {
    std::lock_guard<std::mutex> lock(other);
    update();
    return;
  }
  {
    std::scoped_lock lock(s->mutex, other);
    ++s->done;
    update();
  }
  tl_counted_done = true;
  s->changed.notify_all();
}

void stream_loop(cudaStream_t s) {
  tl_device = s->device;
  tl_running_stream = s;  // the work it runs (and the faults it reports) belongs to the stream's device
  while (true) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(s->mutex);
      s->changed.wait(lock, [&] { return !s->queue.empty(); });
      op = std::move(s->queue.front());
      s->queue.pop_front();
    }
    if (settings().stream_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(settings().stream_delay_us));
    // After a fault the device runs nothing more (its context is lost), but the stream still
    // drains, so waiters wake up and see the sticky error.
    tl_counted_done = false;
    if (sticky_of(s->device) == cudaSuccess) {
      try {
        op.work();
      } catch (const std::exception& e) {
        device_fault(cudaErrorLaunchFailure, op.what + " failed: " + e.what());
      }
    }
    if (!tl_counted_done) {
      std::lock_guard<std::mutex> lock(s->mutex);
      ++s->done;
    }
    s->changed.notify_all();
  }
}

cudaStream_t new_stream(int device, unsigned flags, bool legacy) {
  auto* s = new CUstream_st();  // never freed (see cudaStreamDestroy)
  s->device = device;
  s->flags = flags;
  s->legacy = legacy;
  std::thread(stream_loop, s).detach();
  return s;
}

cudaStream_t legacy_stream(int device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.legacy.empty()) r.legacy.assign(static_cast<size_t>(settings().devices), nullptr);
  cudaStream_t& s = r.legacy[static_cast<size_t>(device)];
  if (s == nullptr) {
    s = new_stream(device, cudaStreamDefault, true);
    r.streams.insert(s);
  }
  return s;
}

// The stream a handle names (nullptr: the current device's legacy stream), or nullptr.
cudaStream_t resolve(cudaStream_t stream) {
  if (stream == nullptr) return settings().devices > 0 ? legacy_stream(tl_device) : nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.streams.count(stream) != 0 ? stream : nullptr;
}

uint64_t tail_of(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->enqueued;
}

void wait_for(cudaStream_t s, uint64_t count) {
  std::unique_lock<std::mutex> lock(s->mutex);
  s->changed.wait(lock, [&] { return s->done >= count; });
}

void push(cudaStream_t s, Op op) {
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->queue.push_back(std::move(op));
    ++s->enqueued;
  }
  s->changed.notify_all();
}

// The legacy stream's implicit synchronisation: work on it waits for the device's blocking
// streams, and work on a blocking stream waits for the legacy stream.
std::vector<std::pair<cudaStream_t, uint64_t>> implicit_waits(cudaStream_t s) {
  std::vector<std::pair<cudaStream_t, uint64_t>> waits;
  if ((s->flags & cudaStreamNonBlocking) != 0) return waits;
  std::vector<cudaStream_t> others;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (cudaStream_t o : r.streams)
      if (o != s && o->device == s->device && (o->flags & cudaStreamNonBlocking) == 0 && (s->legacy || o->legacy))
        others.push_back(o);
  }
  for (cudaStream_t o : others) waits.emplace_back(o, tail_of(o));
  return waits;
}

std::shared_ptr<Capture> capture_of(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->capture;
}

// Ends every capture (they become invalid) on a prohibited call during capture.
void invalidate_captures(bool only_this_thread) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& c : r.captures)
    if (!only_this_thread || c->thread == std::this_thread::get_id()) c->invalidated = true;
}

// This thread's capture interaction mode (cudaThreadExchangeStreamCaptureMode); global by default.
thread_local cudaStreamCaptureMode tl_capture_mode = cudaStreamCaptureModeGlobal;

// Whether a call that cannot be captured (a synchronisation, an allocation, the legacy
// stream) is prohibited now: this thread captures, or another thread captures in global mode;
// never for a thread that has made itself relaxed.
bool capture_prohibits() {
  if (tl_capture_mode == cudaStreamCaptureModeRelaxed) return false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& c : r.captures) {
    if (c->invalidated) continue;
    if (c->thread == std::this_thread::get_id() && c->mode != cudaStreamCaptureModeRelaxed) return true;
    if (c->thread != std::this_thread::get_id() && c->mode == cudaStreamCaptureModeGlobal) return true;
  }
  return false;
}

cudaError_t refuse_during_capture() {
  invalidate_captures(false);
  return fail(cudaErrorStreamCaptureUnsupported);
}

}  // namespace

// ---- the internal interface (runtime_internal.h) ----

cudaError_t set_last_error(cudaError_t code) {
  if (code != cudaSuccess) tl_last_error = code;
  return code;
}

int device_count() { return settings().devices; }
int current_device() { return tl_device; }

int device_of(const void* p, size_t bytes) {
  const Located l = locate(p, bytes);
  return l.where == Where::Device ? l.device : -1;
}

bool device_accessible(const void* p, size_t bytes) {
  const Where w = locate(p, bytes).where;
  return w == Where::Device || w == Where::Pinned;
}

int stream_device(cudaStream_t stream) {
  const cudaStream_t s = resolve(stream);
  return s != nullptr ? s->device : -1;
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  const cudaStream_t s = resolve(stream);
  if (s == nullptr) return fail(settings().devices == 0 ? cudaErrorNoDevice : cudaErrorInvalidResourceHandle);
  const cudaError_t sticky = sticky_of(s->device);
  if (sticky != cudaSuccess) return fail(sticky);
  if (std::shared_ptr<Capture> c = capture_of(s)) {
    if (c->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    std::lock_guard<std::mutex> lock(registry().mutex);
    c->graph->ops.push_back(Op{what, std::move(work)});
    return cudaSuccess;
  }
  if (s->legacy && capture_prohibits()) return fail((invalidate_captures(false), cudaErrorStreamCaptureImplicit));
  auto waits = implicit_waits(s);
  if (!waits.empty()) {
    push(s, Op{"implicit synchronisation with the legacy default stream", [waits] {
                 for (const auto& [other, count] : waits) wait_for(other, count);
               }});
  }
  push(s, Op{what, std::move(work)});
  return cudaSuccess;
}

void device_fault(cudaError_t code, const std::string& message) {
  std::fprintf(stderr, "cudasim: device fault (%s): %s\n", cudaGetErrorName(code), message.c_str());
  std::fflush(stderr);
  const int device = [] {
    // Queued work runs on a stream thread, whose current device is that of the stream it serves.
    return tl_device;
  }();
  int expected = cudaSuccess;
  if (device >= 0 && device < settings().devices)
    device_states()[static_cast<size_t>(device)].sticky.compare_exchange_strong(expected, code);
}

// ---- kernel launch ----

void launch(LaunchSpec&& spec) {
  if (check_context() != cudaSuccess) return;
  const dim3 g = spec.grid, b = spec.block;
  const uint64_t threads = static_cast<uint64_t>(b.x) * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > kMaxGridDimX || g.y > kMaxGridDimYZ || g.z > kMaxGridDimYZ ||
      b.x == 0 || b.y == 0 || b.z == 0 || b.x > static_cast<unsigned>(kMaxThreadsPerBlock) ||
      b.y > static_cast<unsigned>(kMaxThreadsPerBlock) || b.z > static_cast<unsigned>(kMaxBlockDimZ) ||
      threads > static_cast<uint64_t>(kMaxThreadsPerBlock)) {
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  int shared_limit = kSharedPerBlock;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.max_dynamic_shared.find(spec.kernel);
    if (it != r.max_dynamic_shared.end()) shared_limit = it->second;
  }
  if (spec.shared_bytes > static_cast<size_t>(shared_limit)) {
    fail(cudaErrorInvalidValue);
    return;
  }
  const cudaStream_t s = resolve(spec.stream);
  if (s == nullptr) {
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  uint64_t sequence = 0;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    sequence = ++r.launches;
  }
  const int device = s->device;
  auto shared_spec = std::make_shared<LaunchSpec>(std::move(spec));
  (void)enqueue(s, "kernel launch", [shared_spec, sequence, device] {
    const LaunchSpec& ls = *shared_spec;
    // Every pointer argument must be memory this device can reach.
    for (size_t i = 0; i < ls.pointer_args.size(); ++i) {
      const void* p = ls.pointer_args[i];
      if (p == nullptr) continue;
      const Located l = locate(p, 0);
      if (l.where == Where::Pinned || (l.where == Where::Device && l.device == device)) continue;
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "kernel launched at %s:%d on device %d: pointer argument %p is %s, which the kernel cannot access",
                    ls.file != nullptr ? ls.file : "?", ls.line, device, p,
                    l.where == Where::Device ? "another device's memory" : "host memory (not cudaMalloc'd)");
      device_fault(cudaErrorIllegalAddress, buf);
      return;
    }
    const GridOutcome outcome = run_grid(ls, sequence);
    if (outcome.code != cudaSuccess) device_fault(outcome.code, outcome.message);
  });
}

}  // namespace cudasim

using cudasim::fail;

// ---- errors ----

cudaError_t cudaGetLastError() {
  const cudaError_t sticky = cudasim::sticky_of(cudasim::tl_device);
  if (sticky != cudaSuccess) return sticky;
  const cudaError_t e = cudasim::tl_last_error;
  cudasim::tl_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = cudasim::sticky_of(cudasim::tl_device);
  return sticky != cudaSuccess ? sticky : cudasim::tl_last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define CUDASIM_NAME(e) \
  case e: return #e;
    CUDASIM_NAME(cudaSuccess)
    CUDASIM_NAME(cudaErrorInvalidValue)
    CUDASIM_NAME(cudaErrorMemoryAllocation)
    CUDASIM_NAME(cudaErrorInitializationError)
    CUDASIM_NAME(cudaErrorInvalidConfiguration)
    CUDASIM_NAME(cudaErrorInvalidDevicePointer)
    CUDASIM_NAME(cudaErrorInvalidMemcpyDirection)
    CUDASIM_NAME(cudaErrorNoDevice)
    CUDASIM_NAME(cudaErrorInvalidDevice)
    CUDASIM_NAME(cudaErrorInvalidResourceHandle)
    CUDASIM_NAME(cudaErrorIllegalState)
    CUDASIM_NAME(cudaErrorNotReady)
    CUDASIM_NAME(cudaErrorIllegalAddress)
    CUDASIM_NAME(cudaErrorLaunchOutOfResources)
    CUDASIM_NAME(cudaErrorAssert)
    CUDASIM_NAME(cudaErrorMisalignedAddress)
    CUDASIM_NAME(cudaErrorLaunchFailure)
    CUDASIM_NAME(cudaErrorNotSupported)
    CUDASIM_NAME(cudaErrorStreamCaptureUnsupported)
    CUDASIM_NAME(cudaErrorStreamCaptureInvalidated)
    CUDASIM_NAME(cudaErrorStreamCaptureMerge)
    CUDASIM_NAME(cudaErrorStreamCaptureUnmatched)
    CUDASIM_NAME(cudaErrorStreamCaptureUnjoined)
    CUDASIM_NAME(cudaErrorStreamCaptureIsolation)
    CUDASIM_NAME(cudaErrorStreamCaptureImplicit)
    CUDASIM_NAME(cudaErrorCapturedEvent)
    CUDASIM_NAME(cudaErrorStreamCaptureWrongThread)
    CUDASIM_NAME(cudaErrorUnknown)
#undef CUDASIM_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

// ---- devices ----

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = cudasim::settings().devices;
  return *count == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = cudasim::tl_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= cudasim::settings().devices) return fail(cudaErrorInvalidDevice);
  cudasim::tl_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (cudasim::capture_prohibits()) return cudasim::refuse_during_capture();
  if (cudaError_t e = cudasim::check_context(); e != cudaSuccess) return e;
  std::vector<cudaStream_t> streams;
  {
    auto& r = cudasim::registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (cudaStream_t s : r.streams)
      if (s->device == cudasim::tl_device) streams.push_back(s);
  }
  for (cudaStream_t s : streams) cudasim::wait_for(s, cudasim::tail_of(s));
  const cudaError_t sticky = cudasim::sticky_of(cudasim::tl_device);
  return sticky != cudaSuccess ? fail(sticky) : cudaSuccess;
}

cudaError_t cudaDeviceReset() {
  (void)cudaDeviceSynchronize();
  cudasim::device_states()[static_cast<size_t>(cudasim::tl_device)].sticky.store(cudaSuccess);
  cudasim::tl_last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  using namespace cudasim;
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= settings().devices) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimZ: *value = kMaxBlockDimZ; break;
    case cudaDevAttrMaxGridDimX: *value = static_cast<int>(kMaxGridDimX); break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *value = static_cast<int>(kMaxGridDimYZ); break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = kSharedPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSharedPerBlockOptin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = kSharedPerSm; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = 65536; break;
    case cudaDevAttrClockRate: *value = 1980000; break;
    case cudaDevAttrMultiProcessorCount: *value = settings().sm_count; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = kMaxThreadsPerSm; break;
    case cudaDevAttrL2CacheSize: *value = 60 * 1024 * 1024; break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  using namespace cudasim;
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= settings().devices) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "cudasim simulated GPU (H200 profile, runs on the CPU)");
  prop->totalGlobalMem = settings().memory;
  prop->sharedMemPerBlock = kSharedPerBlock;
  prop->sharedMemPerBlockOptin = kSharedPerBlockOptin;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = kMaxThreadsPerBlock;
  prop->maxThreadsDim[2] = kMaxBlockDimZ;
  prop->maxGridSize[0] = static_cast<int>(kMaxGridDimX);
  prop->maxGridSize[1] = prop->maxGridSize[2] = static_cast<int>(kMaxGridDimYZ);
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = settings().sm_count;
  prop->maxThreadsPerMultiProcessor = kMaxThreadsPerSm;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  const int n = cudasim::settings().devices;
  if (can == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= n || peer < 0 || peer >= n) return fail(cudaErrorInvalidDevice);
  *can = device != peer ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (peer < 0 || peer >= cudasim::settings().devices || peer == cudasim::tl_device) return fail(cudaErrorInvalidDevice);
  return cudaSuccess;  // kernels are still held to their own device's memory (see launch)
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return fail(cudaErrorInvalidValue);
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > cudasim::kSharedPerBlockOptin)
    return fail(cudaErrorInvalidValue);
  auto& r = cudasim::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.max_dynamic_shared[func] = value;
  return cudaSuccess;
}

// Blocks per multiprocessor from the thread and shared-memory limits alone (the simulator
// does not know a kernel's register count, which also limits it on a GPU).
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                          size_t dynamic_shared_bytes) {
  using namespace cudasim;
  if (blocks == nullptr || func == nullptr || block_size <= 0 || block_size > kMaxThreadsPerBlock)
    return fail(cudaErrorInvalidValue);
  const int warps = (block_size + 31) / 32;
  int n = std::min(kMaxBlocksPerSm, kMaxThreadsPerSm / (warps * 32));
  if (dynamic_shared_bytes > 0) n = std::min(n, static_cast<int>(kSharedPerSm / dynamic_shared_bytes));
  *blocks = n;
  return cudaSuccess;
}

// ---- memory ----

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  using namespace cudasim;
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (capture_prohibits()) return refuse_during_capture();
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  DeviceState& d = device_states()[static_cast<size_t>(tl_device)];
  size_t used = d.used.load();
  do {
    if (bytes > settings().memory || used > settings().memory - bytes) return fail(cudaErrorMemoryAllocation);
  } while (!d.used.compare_exchange_weak(used, used + bytes));
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) {  // 256-byte aligned, as cudaMalloc's
    d.used -= bytes;
    return fail(cudaErrorMemoryAllocation);
  }
  if (settings().fill) std::memset(p, 0xff, bytes);
  {
    std::unique_lock<std::shared_mutex> lock(memory_mutex());
    allocations()[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, tl_device};
  }
  *ptr = p;
  return cudaSuccess;
}

namespace {
// Removes a registered allocation of the wanted kind; returns false if `p` is not one.
bool unregister(void* p, bool pinned, cudasim::Allocation* out) {
  using namespace cudasim;
  std::unique_lock<std::shared_mutex> lock(memory_mutex());
  auto it = allocations().find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations().end() || (it->second.device < 0) != pinned) return false;
  *out = it->second;
  allocations().erase(it);
  return true;
}
}  // namespace

cudaError_t cudaFree(void* ptr) {
  using namespace cudasim;
  if (ptr == nullptr) return cudaSuccess;
  if (capture_prohibits()) return refuse_during_capture();
  // cudaFree waits for the device, so no queued work still uses the memory.
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return e;
  Allocation a{};
  if (!unregister(ptr, false, &a)) return fail(cudaErrorInvalidValue);
  device_states()[static_cast<size_t>(a.device)].used -= a.bytes;
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  using namespace cudasim;
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  const size_t used = device_states()[static_cast<size_t>(tl_device)].used.load();
  *total_bytes = settings().memory;
  *free_bytes = settings().memory - std::min(used, settings().memory);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  using namespace cudasim;
  if (ptr == nullptr || flags > (cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
    return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (capture_prohibits()) return refuse_during_capture();
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return fail(cudaErrorMemoryAllocation);
  {
    std::unique_lock<std::shared_mutex> lock(memory_mutex());
    allocations()[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, -1};
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  using namespace cudasim;
  if (ptr == nullptr) return cudaSuccess;
  if (capture_prohibits()) return refuse_during_capture();
  for (int d = 0; d < settings().devices; ++d) {  // pinned memory may be in use by any device's queued copies
    const int saved = tl_device;
    tl_device = d;
    (void)cudaDeviceSynchronize();
    tl_device = saved;
  }
  Allocation a{};
  if (!unregister(ptr, true, &a)) return fail(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}

namespace {

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "?";
}

// A copy's pointers must live where its kind says (cudaMemcpyDefault: anywhere registered).
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  using namespace cudasim;
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  const Located d = locate(dst, bytes), s = locate(src, bytes);
  if (d.where == Where::Straddles || s.where == Where::Straddles) return fail(cudaErrorInvalidValue);
  const bool dst_dev = d.where == Where::Device, src_dev = s.where == Where::Device;
  bool ok = false;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_dev && !src_dev; break;
    case cudaMemcpyDeviceToHost: ok = src_dev && !dst_dev; break;
    case cudaMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    case cudaMemcpyHostToHost: ok = !dst_dev && !src_dev; break;
    case cudaMemcpyDefault: ok = true; break;
    default: return fail(cudaErrorInvalidMemcpyDirection);
  }
  if (!ok) {
    std::fprintf(stderr, "cudasim: %s of %zu bytes from %s to %s memory refused\n", kind_name(kind), bytes,
                 src_dev ? "device" : "host", dst_dev ? "device" : "host");
    return fail(cudaErrorInvalidValue);
  }
  const cudaStream_t st = resolve(stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  const bool pageable_src = s.where == Where::Pageable, pageable_dst = d.where == Where::Pageable;
  if ((pageable_src || pageable_dst) && capture_of(st) != nullptr) return refuse_during_capture();
  if (pageable_src) {
    // Staged: the caller may reuse its pageable buffer as soon as the call returns.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    if (cudaError_t e = enqueue(st, "cudaMemcpyAsync", [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
        e != cudaSuccess)
      return e;
  } else if (cudaError_t e = enqueue(st, "cudaMemcpyAsync", [dst, src, bytes] { std::memmove(dst, src, bytes); });
             e != cudaSuccess) {
    return e;
  }
  if (sync || pageable_dst) {  // a copy into pageable memory returns once the data is there
    if (capture_prohibits() && !sync) return refuse_during_capture();
    wait_for(st, tail_of(st));
    const cudaError_t sticky = sticky_of(st->device);
    if (sticky != cudaSuccess) return fail(sticky);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudasim::capture_prohibits()) return cudasim::refuse_during_capture();
  return copy(dst, src, bytes, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  using namespace cudasim;
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  const int n = settings().devices;
  if (dst_device < 0 || dst_device >= n || src_device < 0 || src_device >= n) return fail(cudaErrorInvalidDevice);
  if (device_of(dst, bytes) != dst_device || device_of(src, bytes) != src_device) return fail(cudaErrorInvalidValue);
  return enqueue(stream, "cudaMemcpyPeerAsync", [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  using namespace cudasim;
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  if (device_of(dst, bytes) < 0) return fail(cudaErrorInvalidValue);
  return enqueue(stream, "cudaMemsetAsync", [dst, value, bytes] { std::memset(dst, value, bytes); });
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  using namespace cudasim;
  if (capture_prohibits()) return refuse_during_capture();
  if (cudaError_t e = cudaMemsetAsync(dst, value, bytes, nullptr); e != cudaSuccess) return e;
  const cudaStream_t s = legacy_stream(tl_device);
  wait_for(s, tail_of(s));
  const cudaError_t sticky = sticky_of(tl_device);
  return sticky != cudaSuccess ? fail(sticky) : cudaSuccess;
}

// ---- streams ----

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  using namespace cudasim;
  if (stream == nullptr || flags > cudaStreamNonBlocking) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  const cudaStream_t s = new_stream(tl_device, flags, false);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.streams.insert(s);
  }
  *stream = s;
  return cudaSuccess;
}

// The handle dies at once; work already queued still runs. The stream object itself is kept
// (a few hundred bytes), so a stale handle is reported as invalid rather than crashing.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  using namespace cudasim;
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (stream->legacy || r.streams.erase(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  using namespace cudasim;
  const cudaStream_t s = resolve(stream);
  if (s == nullptr) return fail(settings().devices == 0 ? cudaErrorNoDevice : cudaErrorInvalidResourceHandle);
  if (capture_of(s) != nullptr || capture_prohibits()) return refuse_during_capture();
  wait_for(s, tail_of(s));
  const cudaError_t sticky = sticky_of(s->device);
  return sticky != cudaSuccess ? fail(sticky) : cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  using namespace cudasim;
  const cudaStream_t s = resolve(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (capture_of(s) != nullptr) return refuse_during_capture();
  const cudaError_t sticky = sticky_of(s->device);
  if (sticky != cudaSuccess) return fail(sticky);
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->done >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  const int d = cudasim::stream_device(stream);
  if (d < 0) return fail(cudaErrorInvalidResourceHandle);
  *device = d;
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return fail(cudaErrorInvalidValue);
  return cudasim::enqueue(stream, "cudaLaunchHostFunc", [fn, user_data] { fn(user_data); });
}

// ---- events ----

namespace {
// The event behind a handle, or null for a handle that is not a live event.
std::shared_ptr<CUevent_st> live_event(cudaEvent_t e) {
  auto& r = cudasim::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = e == nullptr ? r.events.end() : r.events.find(e);
  return it == r.events.end() ? nullptr : it->second;
}
}  // namespace

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  using namespace cudasim;
  if (event == nullptr || flags > (cudaEventBlockingSync | cudaEventDisableTiming)) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  auto e = std::make_shared<CUevent_st>();
  e->device = tl_device;
  e->flags = flags;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.events.emplace(e.get(), e);
  }
  *event = e.get();
  return cudaSuccess;
}

// The handle dies at once; the object lives on while queued work still refers to it (see Registry).
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  auto& r = cudasim::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (event == nullptr || r.events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t stream) {
  using namespace cudasim;
  const std::shared_ptr<CUevent_st> event = live_event(handle);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    generation = ++event->recorded;
  }
  return enqueue(stream, "cudaEventRecord", [event, generation] {
    // Done on the stream and complete at once: a host that has synchronised on the event finds the
    // stream idle up to the record, as on the GPU.
    count_done_with(event->mutex, [&] {
      event->completed = std::max(event->completed, generation);
      event->when = Clock::now();
    });
    event->changed.notify_all();
  });
}

cudaError_t cudaEventQuery(cudaEvent_t handle) {
  using namespace cudasim;
  const std::shared_ptr<CUevent_st> event = live_event(handle);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  const cudaError_t sticky = sticky_of(event->device);
  if (sticky != cudaSuccess) return fail(sticky);
  std::lock_guard<std::mutex> lock(event->mutex);
  return event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t handle) {
  using namespace cudasim;
  const std::shared_ptr<CUevent_st> event = live_event(handle);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (capture_prohibits()) return refuse_during_capture();
  {
    std::unique_lock<std::mutex> lock(event->mutex);
    const uint64_t target = event->recorded;
    event->changed.wait(lock, [&] { return event->completed >= target || sticky_of(event->device) != cudaSuccess; });
  }
  const cudaError_t sticky = sticky_of(event->device);
  return sticky != cudaSuccess ? fail(sticky) : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t handle, unsigned flags) {
  using namespace cudasim;
  if (flags != 0) return fail(cudaErrorInvalidValue);
  const std::shared_ptr<CUevent_st> event = live_event(handle);
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  uint64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    target = event->recorded;  // the record queued before this call; later records do not count
  }
  if (target == 0) return cudaSuccess;  // never recorded: nothing to wait for
  return enqueue(stream, "cudaStreamWaitEvent", [event, target] {
    std::unique_lock<std::mutex> lock(event->mutex);
    event->changed.wait(lock, [&] { return event->completed >= target || sticky_of(event->device) != cudaSuccess; });
  });
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start_handle, cudaEvent_t end_handle) {
  using namespace cudasim;
  if (ms == nullptr) return fail(cudaErrorInvalidValue);
  const std::shared_ptr<CUevent_st> start = live_event(start_handle), end = live_event(end_handle);
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  if (((start->flags | end->flags) & cudaEventDisableTiming) != 0) return fail(cudaErrorInvalidResourceHandle);
  // One event may be both ends (0 ms); locking its mutex twice would deadlock.
  std::unique_lock<std::mutex> start_lock(start->mutex, std::defer_lock), end_lock(end->mutex, std::defer_lock);
  if (end == start) start_lock.lock(); else std::lock(start_lock, end_lock);
  if (start->recorded == 0 || end->recorded == 0) return fail(cudaErrorInvalidResourceHandle);
  if (start->completed < start->recorded || end->completed < end->recorded) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

// ---- stream capture and graphs ----
// Captured work is recorded in order into one list and replayed in that order on the stream
// the graph is launched on; a graph keeps the arguments it was captured with, as CUDA's does.

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  using namespace cudasim;
  if (stream == nullptr) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  const cudaStream_t s = resolve(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t e = check_context(); e != cudaSuccess) return e;
  auto c = std::make_shared<Capture>();
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    if (s->capture != nullptr) return fail(cudaErrorIllegalState);
    s->capture = c;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.captures.push_back(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  using namespace cudasim;
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  *graph = nullptr;
  const cudaStream_t s = resolve(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Capture> c = capture_of(s);
  if (c == nullptr) return fail(cudaErrorIllegalState);
  if (c->origin != s) return fail(cudaErrorStreamCaptureUnmatched);
  if (c->mode == cudaStreamCaptureModeThreadLocal && c->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->capture.reset();
  }
  for (cudaStream_t other : c->joined) {
    std::lock_guard<std::mutex> lock(other->mutex);
    other->capture.reset();
  }
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.captures.erase(std::remove(r.captures.begin(), r.captures.end(), c), r.captures.end());
  }
  if (c->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = c->graph.release();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  using namespace cudasim;
  if (status == nullptr) return fail(cudaErrorInvalidValue);
  const cudaStream_t s = resolve(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<Capture> c = capture_of(s);
  *status = c == nullptr ? cudaStreamCaptureStatusNone
                         : (c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive);
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  using namespace cudasim;
  if (mode == nullptr) return fail(cudaErrorInvalidValue);
  std::swap(*mode, tl_capture_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (exec == nullptr || graph == nullptr || flags != 0) return fail(cudaErrorInvalidValue);
  auto* e = new CUgraphExec_st();
  e->ops = graph->ops;
  *exec = e;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  using namespace cudasim;
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  for (const Op& op : exec->ops)
    if (cudaError_t e = enqueue(stream, op.what.c_str(), op.work); e != cudaSuccess) return e;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (graph == nullptr || count == nullptr) return fail(cudaErrorInvalidValue);
  if (nodes == nullptr) {
    *count = graph->ops.size();
    return cudaSuccess;
  }
  return fail(cudaErrorNotSupported);  // node handles are not modelled; only their number is
}
