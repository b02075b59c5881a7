// The profiler: where a step's time goes, op by op, like torch.profiler. While it records,
// every op's forward (core/ops), every autograd node's backward (the engine), module calls
// (nn::Module::operator(), by their registered names: fc1, conv2, ...), the optimizer's step
// and the DataLoader's batches are ranges, nested as they ran, each with its inputs' shapes,
// dtype and device, its host (CPU wall) time, the bytes it allocated, the kernel launches it
// made and, on CUDA, its device time. The result prints as a table (key_averages, as PyTorch
// calls it) and writes a Chrome trace (trace-event JSON) that Perfetto and chrome://tracing
// open: a track per host thread and, on CUDA, a track per stream.
//
// Why in core/: ops, the autograd engine, storage allocation and the modules above all record
// into it, and core/ is the one layer all of them see (no folder includes one above it: the
// Layout section of README.md). The device half (timestamps queued on a stream, NVTX) goes
// through Backend::record_timestamp and the NVTX header, so core/ names no device runtime.
//
// Cost when off: each recording point tests one relaxed atomic flag (active()) and does
// nothing else. Cost when on: two clock reads and a small record per range; on CUDA two
// events per op, recorded on the op's stream and read only when recording stops (no host
// synchronisation per op). bench_train_step --profile measures it (bench/RESULTS.md).
//
//   minidl::profiler::Profiler prof;                        // or start()/stop() by hand
//   prof.start();
//   for (...) train_step();
//   minidl::profiler::Profile p = prof.stop();
//   std::cout << p.table();
//   p.write_chrome_trace("trace.json");
#pragma once

#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace minidl {
class Tensor;
}

namespace minidl::profiler {

// What a range stands for.
enum class Kind : uint8_t {
  Op,          // an op's forward (core/ops): gelu, matmul, linear, ...
  Backward,    // an autograd node's apply: GeluBackward, ...
  Module,      // nn::Module::operator(): its registered name and type, "fc1 (Linear)"
  Optimizer,   // Optimizer.step#SGD.step
  DataLoader,  // DataLoader.next: one batch assembled (or taken from a worker)
  User,        // a RecordScope of the program's own ("train_step")
};
const char* kind_name(Kind kind);

namespace detail {
// Bit 0: the profiler records; bit 1: NVTX ranges are emitted (set_nvtx).
extern std::atomic<unsigned> g_flags;
}  // namespace detail

// Whether anything is listening: the one test a recording point makes when profiling is off.
inline bool active() noexcept { return detail::g_flags.load(std::memory_order_relaxed) != 0; }

// Emits NVTX ranges (push/pop, the names the profiler records) even while it does not record,
// for Nsight Systems (nsys profile ...). On by default when MINIDL_NVTX=1 is in the environment
// at start-up; a no-op where minidl was built without the CUDA toolkit's NVTX header.
void set_nvtx(bool enabled);
bool nvtx_available();

// One recorded range.
struct Event {
  std::string name;
  Kind kind = Kind::Op;
  std::vector<Shape> shapes;  // the inputs' shapes (undefined inputs skipped)
  std::string dtype;          // the first input's dtype ("" when none)
  Device device;              // the first input's device (the CPU when none)
  int thread = 0;             // host thread, numbered from 0 in order of first record
  int depth = 0;              // nesting on its thread (0: outermost)
  int64_t parent = -1;        // index of the enclosing range on its thread, -1 at the top
  int64_t start_ns = 0, end_ns = 0;  // host wall clock, from the profiler's start
  int64_t bytes = 0;                 // bytes allocated while the range ran (nested ranges included)
  int64_t launches = 0;              // device kernel launches (and library calls) it made, nested included
  // Device time on the op's stream (CUDA ops only; -1 elsewhere), in ns on the host clock
  // (aligned at the profiler's start), and the stream's number (its track in the trace).
  int64_t device_start_ns = -1, device_end_ns = -1;
  int stream = -1;

  int64_t host_ns() const { return end_ns - start_ns; }
  int64_t device_ns() const { return device_start_ns < 0 ? -1 : device_end_ns - device_start_ns; }
};

// One row of the table: every range of one name (and kind) summed; with group_by_input_shape,
// every range of one name, kind and list of input shapes. In a recording where some op ran in a
// 16-bit dtype (mixed precision: bfloat16/float16), rows are also told
// apart by their first input's dtype, shown in a Dtype column: a linear in bfloat16 and the same
// linear's float32 weight cast are two rows.
struct Summary {
  std::string name;
  Kind kind = Kind::Op;
  std::string dtype;                // the first input's dtype when rows are split by it, else empty
  std::vector<Shape> input_shapes;  // the row's inputs' shapes when grouped by them, else empty
  int64_t calls = 0;
  int64_t self_ns = 0;    // host time minus the time of the ranges nested directly inside
  int64_t total_ns = 0;   // host time, nested ranges included
  int64_t device_ns = 0;  // device time (CUDA), summed over its calls; 0 when none ran there
  int64_t device_calls = 0;
  int64_t launches = 0;   // launches made directly (not by nested ranges)
  int64_t self_bytes = 0;  // bytes allocated directly (not by nested ranges)
};

// What a recording captured.
class Profile {
 public:
  Profile() = default;
  Profile(std::vector<Event> events, std::vector<std::string> stream_names, int64_t wall_ns, int64_t steps);

  const std::vector<Event>& events() const { return events_; }
  // Host wall time from start() to stop().
  int64_t wall_ns() const { return wall_ns_; }
  // step() calls while recording (0 when the program marks none).
  int64_t steps() const { return steps_; }

  // Rows by name and kind, the most self host time first (ties: by name, then shapes). With
  // group_by_input_shape (torch.profiler's key_averages(group_by_input_shape=True)) a row per
  // name, kind and input shapes: a linear over [128, 784] and one over [32, 784] are two rows.
  std::vector<Summary> key_averages(bool group_by_input_shape = false) const;
  // Whether some range's first input was 16-bit (the table then splits rows by dtype and shows a
  // Dtype column).
  bool mixed_precision() const;
  // key_averages() as text, at most `rows` rows (0: all): name, kind, calls, self and total
  // host time, self as a % of all self time, mean per call, device time and launches (when
  // there are any), bytes, and the input shapes when grouped by them; then the wall time, and
  // per step when steps were marked.
  std::string table(size_t rows = 0, bool group_by_input_shape = false) const;
  // The trace-event JSON object ({"traceEvents": [...]}): complete ("X") events on a track per
  // host thread (pid 1) and per device stream (pid 2 + device index), timestamps in µs, and
  // metadata ("M") events naming the processes and threads.
  std::string chrome_trace() const;
  // Writes chrome_trace() to `path` (replacing it); a minidl::Error naming the path when it
  // cannot be written.
  void write_chrome_trace(const std::string& path) const;

 private:
  std::vector<Event> events_;
  std::vector<std::string> stream_names_;
  int64_t wall_ns_ = 0;
  int64_t steps_ = 0;
};

// Starts and stops a recording; at most one records at a time in the process.
class Profiler {
 public:
  Profiler() = default;
  ~Profiler();  // stops a recording still running (its events are dropped)
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // A minidl::Error when a recording already runs (this one or another).
  void start();
  // Ends the recording: waits for the devices' timestamps, and returns what was recorded. A
  // minidl::Error when this profiler is not recording. Ranges still open on some thread are
  // closed at the stop time.
  Profile stop();
  bool recording() const { return recording_; }

 private:
  bool recording_ = false;
};

// Counts a training step (Profile::steps; the table's per-step line). Trainers call it once
// per step; nothing happens while the profiler is off.
void step();

// A range for as long as the object lives. Ops write
//   profiler::RecordScope scope("gelu", profiler::Kind::Op, {&x});
// at their top; nothing is recorded (one flag test) while the profiler is off.
class RecordScope {
 public:
  RecordScope(const char* name, Kind kind, std::initializer_list<const Tensor*> inputs = {}) {
    if (active()) begin(std::string(name), kind, inputs);
  }
  RecordScope(const std::string& name, Kind kind, std::initializer_list<const Tensor*> inputs = {}) {
    if (active()) begin(name, kind, inputs);
  }
  ~RecordScope() {
    if (open_) end();
  }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  void begin(const std::string& name, Kind kind, std::initializer_list<const Tensor*> inputs);
  void end() noexcept;
  bool open_ = false;
  bool nvtx_ = false;
  int64_t index_ = -1;      // the event in this thread's buffer (-1: NVTX only)
  uint64_t generation_ = 0;  // the recording the event belongs to
};

// Called by the allocation path (core/storage.cpp) and the kernel launchers (kernels/cuda):
// counted into the ranges open on the calling thread while the profiler records.
void note_allocation(size_t bytes) noexcept;
void note_launch() noexcept;

}  // namespace minidl::profiler
