// The profiler's recording, its table and its Chrome trace (core/profiler.h says what it records).
//
// Recording: each host thread appends to a buffer of its own (registered with the recording
// the first time the thread records in it), so threads never share an event; a buffer's mutex
// is taken only by its own thread and by stop(), which collects the buffers. Bytes and launches
// are per-thread running counters: a range notes them at its start and end, and the
// difference is what it and its nested ranges did. A device op takes two timestamps on its
// stream (Backend::record_timestamp); the first device op of a recording on each device waits
// once for the device to be idle and queues a base timestamp at a known host time, and stop()
// places every device time on the host clock as base + (device time since the base).
#include "core/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"

#if defined(MINIDL_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace minidl::profiler {

namespace detail {
std::atomic<unsigned> g_flags{0};
}  // namespace detail

namespace {

constexpr unsigned kRecording = 1u, kNvtx = 2u;

using Clock = std::chrono::steady_clock;

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

struct Stamps {
  std::shared_ptr<DeviceTimestamp> start, end;
};

struct ThreadBuffer {
  std::mutex mutex;
  int thread = 0;
  bool closed = false;             // stop() has collected it
  // Deques, not vectors: a recording of thousands of steps grows to hundreds of thousands of
  // events, and a vector's regrowth would copy them all (and fault in fresh pages) mid-step.
  std::deque<Event> events;
  std::deque<Stamps> stamps;       // parallel to events
  std::vector<int64_t> open;       // indices of the ranges open on this thread, innermost last
  int64_t bytes = 0, launches = 0;  // running counters
};

struct DeviceBase {
  std::shared_ptr<DeviceTimestamp> stamp;
  int64_t host_ns = 0;
};

struct Recording {
  uint64_t generation = 0;
  Clock::time_point start;
  std::mutex mutex;  // buffers, bases
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::map<std::pair<int, int>, DeviceBase> bases;  // by (device type, index)
  std::atomic<int64_t> steps{0};
};

std::mutex g_recording_mutex;                 // g_recording, g_generation
std::shared_ptr<Recording> g_recording;       // the one running, or null
std::atomic<uint64_t> g_generation{0};        // of the latest recording

struct ThreadState {
  uint64_t generation = 0;
  std::shared_ptr<ThreadBuffer> buffer;
  std::shared_ptr<Recording> recording;
};
thread_local ThreadState t_state;

// This thread's buffer in the running recording (registering it), or null when none runs.
ThreadBuffer* thread_buffer(std::shared_ptr<Recording>* recording_out = nullptr) {
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (t_state.generation != generation || !t_state.buffer) {
    std::shared_ptr<Recording> rec;
    {
      std::lock_guard<std::mutex> lock(g_recording_mutex);
      rec = g_recording;
    }
    if (!rec || rec->generation != generation) return nullptr;
    auto buffer = std::make_shared<ThreadBuffer>();
    {
      std::lock_guard<std::mutex> lock(rec->mutex);
      buffer->thread = static_cast<int>(rec->buffers.size());
      rec->buffers.push_back(buffer);
    }
    t_state = ThreadState{generation, std::move(buffer), std::move(rec)};
  }
  if (recording_out) *recording_out = t_state.recording;
  return t_state.buffer.get();
}

bool nvtx_from_environment() {
  const char* v = std::getenv("MINIDL_NVTX");
  return v != nullptr && std::string(v) == "1";
}

struct NvtxFromEnvironment {
  NvtxFromEnvironment() {
    if (nvtx_from_environment()) set_nvtx(true);
  }
} g_nvtx_from_environment;

void nvtx_push(const std::string& name) {
#if defined(MINIDL_WITH_NVTX)
  nvtxRangePushA(name.c_str());
#else
  (void)name;
#endif
}

void nvtx_pop() {
#if defined(MINIDL_WITH_NVTX)
  nvtxRangePop();
#endif
}

std::string format_ns(int64_t ns) {
  std::ostringstream os;
  os << std::fixed;
  if (ns < 10'000) os << std::setprecision(2) << ns / 1e3 << " us";
  else if (ns < 10'000'000) os << std::setprecision(3) << ns / 1e6 << " ms";
  else if (ns < 10'000'000'000) os << std::setprecision(1) << ns / 1e6 << " ms";
  else os << std::setprecision(2) << ns / 1e9 << " s";
  return os.str();
}

std::string format_bytes(int64_t b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1);
  if (b < 1024) os << b << " B";
  else if (b < 1024 * 1024) os << b / 1024.0 << " KiB";
  else os << b / (1024.0 * 1024.0) << " MiB";
  return os.str();
}

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::ostringstream os;
  for (size_t i = 0; i < shapes.size(); ++i) os << (i ? ", " : "") << shapes[i];
  return os.str();
}

// A JSON string literal.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Microseconds with nanosecond digits, as the trace-event format's ts and dur expect.
std::string json_us(int64_t ns) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << ns / 1e3;
  return os.str();
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Op: return "op";
    case Kind::Backward: return "backward";
    case Kind::Module: return "module";
    case Kind::Optimizer: return "optimizer";
    case Kind::DataLoader: return "dataloader";
    case Kind::User: return "user";
  }
  return "?";
}

void set_nvtx(bool enabled) {
  if (enabled && nvtx_available()) detail::g_flags.fetch_or(kNvtx, std::memory_order_relaxed);
  else detail::g_flags.fetch_and(~kNvtx, std::memory_order_relaxed);
}

bool nvtx_available() {
#if defined(MINIDL_WITH_NVTX)
  return true;
#else
  return false;
#endif
}

// ---- recording ----

void RecordScope::begin(const std::string& name, Kind kind, std::initializer_list<const Tensor*> inputs) {
  const unsigned flags = detail::g_flags.load(std::memory_order_relaxed);
  if (flags & kNvtx) {
    nvtx_push(name);
    nvtx_ = true;
    open_ = true;
  }
  if (!(flags & kRecording)) return;
  std::shared_ptr<Recording> rec;
  ThreadBuffer* buf = thread_buffer(&rec);
  if (buf == nullptr) return;

  Event e;
  e.name = name;
  e.kind = kind;
  const Tensor* first = nullptr;
  for (const Tensor* t : inputs) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) first = t;
    e.shapes.push_back(t->shape());
  }
  if (first != nullptr) {
    e.dtype = dtype_name(first->dtype());
    e.device = first->device();
  }
  Stamps stamps;
  if (first != nullptr && !first->device().is_cpu()) {
    try {
      Backend& backend = backend_for(first->device());
      const std::pair<int, int> key{static_cast<int>(first->device().type), first->device().index};
      std::unique_lock<std::mutex> lock(rec->mutex);
      if (rec->bases.find(key) == rec->bases.end()) {
        // The first op on this device in the recording: a base timestamp whose host time is
        // known. The host waits for the device to be idle (once per device and recording),
        // notes the time and queues the base, which the idle device reaches at once: device
        // times placed by it are early by at most that latency, never late, so no device range
        // appears to end after the host has seen it end.
        lock.unlock();
        DeviceBase base;
        backend.synchronize();
        base.host_ns = ns_since(rec->start);
        base.stamp = backend.record_timestamp();
        lock.lock();
        rec->bases.emplace(key, std::move(base));
      }
      lock.unlock();
      stamps.start = backend.record_timestamp();
    } catch (const std::exception&) {
      // No backend or a failed device: the op reports it in its own words; no device time here.
      stamps.start.reset();
    }
  }
  std::lock_guard<std::mutex> lock(buf->mutex);
  if (buf->closed) return;
  e.thread = buf->thread;
  e.depth = static_cast<int>(buf->open.size());
  e.parent = buf->open.empty() ? -1 : buf->open.back();
  e.bytes = buf->bytes;        // the counters at the start; end() turns them into differences
  e.launches = buf->launches;
  e.start_ns = ns_since(rec->start);
  e.end_ns = -1;
  index_ = static_cast<int64_t>(buf->events.size());
  buf->events.push_back(std::move(e));
  buf->stamps.push_back(std::move(stamps));
  buf->open.push_back(index_);
  generation_ = rec->generation;
  open_ = true;
}

void RecordScope::end() noexcept {
  if (nvtx_) nvtx_pop();
  open_ = false;
  if (index_ < 0) return;
  if (t_state.generation != generation_ || !t_state.buffer) return;  // the recording has ended
  ThreadBuffer* buf = t_state.buffer.get();
  const Recording& rec = *t_state.recording;
  std::lock_guard<std::mutex> lock(buf->mutex);
  if (buf->closed) return;
  Event& e = buf->events[index_];
  e.end_ns = ns_since(rec.start);
  e.bytes = buf->bytes - e.bytes;
  e.launches = buf->launches - e.launches;
  if (buf->stamps[index_].start) {
    try {
      buf->stamps[index_].end = backend_for(e.device).record_timestamp();
    } catch (...) {
      // The device has failed: the op's own error is on its way; its device time is lost.
    }
  }
  if (!buf->open.empty() && buf->open.back() == index_) buf->open.pop_back();
}

void note_allocation(size_t bytes) noexcept {
  if (!(detail::g_flags.load(std::memory_order_relaxed) & kRecording)) return;
  if (t_state.generation != g_generation.load(std::memory_order_relaxed) || !t_state.buffer) {
    try {
      if (thread_buffer() == nullptr) return;
    } catch (...) {
      return;
    }
  }
  std::lock_guard<std::mutex> lock(t_state.buffer->mutex);
  t_state.buffer->bytes += static_cast<int64_t>(bytes);
}

void note_launch() noexcept {
  if (!(detail::g_flags.load(std::memory_order_relaxed) & kRecording)) return;
  if (t_state.generation != g_generation.load(std::memory_order_relaxed) || !t_state.buffer) {
    try {
      if (thread_buffer() == nullptr) return;
    } catch (...) {
      return;
    }
  }
  std::lock_guard<std::mutex> lock(t_state.buffer->mutex);
  t_state.buffer->launches += 1;
}

void step() {
  if (!(detail::g_flags.load(std::memory_order_relaxed) & kRecording)) return;
  std::lock_guard<std::mutex> lock(g_recording_mutex);
  if (g_recording) g_recording->steps.fetch_add(1, std::memory_order_relaxed);
}

Profiler::~Profiler() {
  if (!recording_) return;
  try {
    (void)stop();
  } catch (...) {
    // A device error while reading the timestamps: the recording is dropped either way.
  }
}

void Profiler::start() {
  std::lock_guard<std::mutex> lock(g_recording_mutex);
  MINIDL_CHECK(!g_recording, "profiler: start() while a recording is already running (one at a time per process; "
                             "stop() it first)");
  auto rec = std::make_shared<Recording>();
  rec->generation = g_generation.load(std::memory_order_relaxed) + 1;
  rec->start = Clock::now();
  g_recording = rec;
  g_generation.store(rec->generation, std::memory_order_release);
  detail::g_flags.fetch_or(kRecording, std::memory_order_relaxed);
  recording_ = true;
}

Profile Profiler::stop() {
  MINIDL_CHECK(recording_, "profiler: stop() without a recording running on this profiler (call start() first)");
  recording_ = false;
  std::shared_ptr<Recording> rec;
  {
    std::lock_guard<std::mutex> lock(g_recording_mutex);
    rec = std::move(g_recording);
    g_recording.reset();
    detail::g_flags.fetch_and(~kRecording, std::memory_order_relaxed);
  }
  const int64_t wall_ns = ns_since(rec->start);

  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::map<std::pair<int, int>, DeviceBase> bases;
  {
    std::lock_guard<std::mutex> lock(rec->mutex);
    buffers = rec->buffers;
    bases = rec->bases;
  }
  // Collect each thread's events; ranges still open end now.
  std::vector<Event> events;
  std::vector<Stamps> stamps;
  for (const auto& buf : buffers) {
    std::lock_guard<std::mutex> lock(buf->mutex);
    buf->closed = true;
    const int64_t offset = static_cast<int64_t>(events.size());
    for (size_t i = 0; i < buf->events.size(); ++i) {
      Event e = std::move(buf->events[i]);
      if (e.end_ns < 0) {
        e.end_ns = wall_ns;
        e.bytes = buf->bytes - e.bytes;
        e.launches = buf->launches - e.launches;
      }
      if (e.parent >= 0) e.parent += offset;
      events.push_back(std::move(e));
      stamps.push_back(std::move(buf->stamps[i]));
    }
    buf->events.clear();
    buf->stamps.clear();
  }
  // Device times on the host clock, and a track number per stream.
  std::map<std::pair<std::pair<int, int>, void*>, int> stream_ids;
  std::vector<std::string> stream_names;
  for (size_t i = 0; i < events.size(); ++i) {
    Event& e = events[i];
    if (!stamps[i].start || !stamps[i].end) continue;
    const std::pair<int, int> dev{static_cast<int>(e.device.type), e.device.index};
    const auto base = bases.find(dev);
    if (base == bases.end() || !base->second.stamp) continue;
    const double start_ms = stamps[i].start->ms_since(*base->second.stamp);
    const double end_ms = stamps[i].end->ms_since(*base->second.stamp);
    e.device_start_ns = base->second.host_ns + static_cast<int64_t>(start_ms * 1e6);
    e.device_end_ns = base->second.host_ns + static_cast<int64_t>(end_ms * 1e6);
    const auto key = std::make_pair(dev, stamps[i].start->stream());
    auto it = stream_ids.find(key);
    if (it == stream_ids.end()) {
      const int id = static_cast<int>(stream_names.size());
      std::ostringstream name;
      name << e.device << " stream " << id;
      stream_names.push_back(name.str());
      it = stream_ids.emplace(key, id).first;
    }
    e.stream = it->second;
  }
  return Profile(std::move(events), std::move(stream_names), wall_ns, rec->steps.load());
}

// ---- results ----

Profile::Profile(std::vector<Event> events, std::vector<std::string> stream_names, int64_t wall_ns, int64_t steps)
    : events_(std::move(events)), stream_names_(std::move(stream_names)), wall_ns_(wall_ns), steps_(steps) {}

std::vector<Summary> Profile::key_averages(bool group_by_input_shape) const {
  // What the ranges nested directly inside each range took, to subtract for "self".
  std::vector<int64_t> child_ns(events_.size(), 0), child_bytes(events_.size(), 0), child_launches(events_.size(), 0);
  for (const Event& e : events_) {
    if (e.parent < 0) continue;
    child_ns[e.parent] += e.host_ns();
    child_bytes[e.parent] += e.bytes;
    child_launches[e.parent] += e.launches;
  }
  // The key: name, kind, the dtype where the recording mixes precisions, and (grouping by shape)
  // the shapes as the table prints them.
  const bool by_dtype = mixed_precision();
  std::map<std::tuple<std::string, Kind, std::string, std::string>, Summary> rows;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    const std::string dtype = by_dtype ? e.dtype : std::string();
    Summary& s = rows[{e.name, e.kind, dtype, group_by_input_shape ? shapes_text(e.shapes) : std::string()}];
    s.name = e.name;
    s.kind = e.kind;
    s.dtype = dtype;
    if (group_by_input_shape) s.input_shapes = e.shapes;
    s.calls += 1;
    s.total_ns += e.host_ns();
    s.self_ns += std::max<int64_t>(0, e.host_ns() - child_ns[i]);
    s.self_bytes += e.bytes - child_bytes[i];
    s.launches += e.launches - child_launches[i];
    if (e.device_ns() >= 0) {
      s.device_ns += e.device_ns();
      s.device_calls += 1;
    }
  }
  std::vector<Summary> out;
  out.reserve(rows.size());
  for (auto& [key, s] : rows) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(), [](const Summary& a, const Summary& b) {
    if (a.self_ns != b.self_ns) return a.self_ns > b.self_ns;
    if (a.name != b.name) return a.name < b.name;
    if (a.dtype != b.dtype) return a.dtype < b.dtype;
    return shapes_text(a.input_shapes) < shapes_text(b.input_shapes);
  });
  return out;
}

bool Profile::mixed_precision() const {
  for (const Event& e : events_)
    if (e.dtype == dtype_name(DType::BFloat16) || e.dtype == dtype_name(DType::Float16)) return true;
  return false;
}

std::string Profile::table(size_t max_rows, bool group_by_input_shape) const {
  const std::vector<Summary> rows = key_averages(group_by_input_shape);
  int64_t all_self = 0, all_launches = 0;
  bool any_device = false;
  for (const Summary& s : rows) {
    all_self += s.self_ns;
    all_launches += s.launches;
    any_device = any_device || s.device_calls > 0;
  }
  const bool any_launch = all_launches > 0;  // the columns of a device: hidden for a CPU-only recording
  size_t name_width = 4;
  const size_t shown = max_rows == 0 ? rows.size() : std::min(rows.size(), max_rows);
  for (size_t i = 0; i < shown; ++i) name_width = std::max(name_width, std::min<size_t>(rows[i].name.size(), 44));
  std::ostringstream os;
  auto cell = [&](const std::string& text, int width) { os << std::setw(width) << text; };
  os << std::left << std::setw(static_cast<int>(name_width)) << "Name" << std::right;
  cell("Kind", 11);
  const bool dtypes = mixed_precision();
  if (dtypes) cell("Dtype", 10);
  cell("Calls", 7);
  cell("Self host", 12);
  cell("Self %", 8);
  cell("Total host", 12);
  cell("Host mean", 11);
  if (any_device) {
    cell("Device", 12);
    cell("Dev mean", 11);
  }
  if (any_launch) cell("Launches", 9);
  cell("Self alloc", 12);
  // The shapes come last, left-aligned and never cut: they are what tells two rows of one op apart.
  if (group_by_input_shape) os << "  Input shapes";
  os << '\n' << std::string(name_width + 11 + (dtypes ? 10 : 0) + 7 + 12 + 8 + 12 + 11 + (any_device ? 23 : 0) + (any_launch ? 9 : 0) + 12 +
                                (group_by_input_shape ? 14 : 0),
                            '-')
     << '\n';
  for (size_t i = 0; i < shown; ++i) {
    const Summary& s = rows[i];
    std::string name = s.name.size() > 44 ? s.name.substr(0, 41) + "..." : s.name;
    os << std::left << std::setw(static_cast<int>(name_width)) << name << std::right;
    cell(kind_name(s.kind), 11);
    if (dtypes) cell(s.dtype.empty() ? "-" : s.dtype, 10);
    cell(std::to_string(s.calls), 7);
    cell(format_ns(s.self_ns), 12);
    std::ostringstream pct;
    pct << std::fixed << std::setprecision(1) << (all_self > 0 ? 100.0 * s.self_ns / all_self : 0.0) << '%';
    cell(pct.str(), 8);
    cell(format_ns(s.total_ns), 12);
    cell(format_ns(s.total_ns / std::max<int64_t>(1, s.calls)), 11);
    if (any_device) {
      cell(s.device_calls ? format_ns(s.device_ns) : "-", 12);
      cell(s.device_calls ? format_ns(s.device_ns / s.device_calls) : "-", 11);
    }
    if (any_launch) cell(std::to_string(s.launches), 9);
    cell(format_bytes(s.self_bytes), 12);
    if (group_by_input_shape) os << "  " << (s.input_shapes.empty() ? "-" : shapes_text(s.input_shapes));
    os << '\n';
  }
  if (shown < rows.size()) os << "... " << rows.size() - shown << " more rows\n";
  os << "Wall time " << format_ns(wall_ns_) << ", self time in ranges " << format_ns(all_self);
  if (any_launch) os << ", " << all_launches << " launches";
  if (steps_ > 0) {
    os << "; over " << steps_ << " steps: " << format_ns(wall_ns_ / steps_) << " per step";
    if (any_launch) os << " and " << all_launches / steps_ << (all_launches % steps_ ? "+" : "") << " launches per step";
  }
  os << '\n';
  return os.str();
}

std::string Profile::chrome_trace() const {
  std::ostringstream os;
  os << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto sep = [&]() {
    if (!first) os << ",\n";
    first = false;
  };
  // Tracks: pid 1 the host, one tid per thread; pid 2 + device index per device, one tid per stream.
  int threads = 0;
  for (const Event& e : events_) threads = std::max(threads, e.thread + 1);
  sep();
  os << R"({"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "host"}})";
  for (int t = 0; t < threads; ++t) {
    sep();
    os << R"({"name": "thread_name", "ph": "M", "pid": 1, "tid": )" << t << R"(, "args": {"name": "thread )" << t
       << "\"}}";
  }
  std::map<int, int> stream_pid;  // stream -> pid
  for (const Event& e : events_) {
    if (e.stream < 0 || stream_pid.count(e.stream)) continue;
    const int pid = 2 + e.device.index;
    stream_pid[e.stream] = pid;
    std::ostringstream dev;
    dev << e.device;
    sep();
    os << R"({"name": "process_name", "ph": "M", "pid": )" << pid << R"(, "tid": 0, "args": {"name": )"
       << json_string(dev.str()) << "}}";
    sep();
    os << R"({"name": "thread_name", "ph": "M", "pid": )" << pid << R"(, "tid": )" << e.stream
       << R"(, "args": {"name": )" << json_string(stream_names_[e.stream]) << "}}";
  }
  for (const Event& e : events_) {
    std::ostringstream args;
    std::ostringstream dev;
    dev << e.device;
    args << R"("shapes": )" << json_string(shapes_text(e.shapes)) << R"(, "dtype": )" << json_string(e.dtype)
         << R"(, "device": )" << json_string(dev.str()) << R"(, "bytes": )" << e.bytes << R"(, "launches": )"
         << e.launches;
    sep();
    os << R"({"name": )" << json_string(e.name) << R"(, "cat": ")" << kind_name(e.kind) << R"(", "ph": "X", "ts": )"
       << json_us(e.start_ns) << R"(, "dur": )" << json_us(e.host_ns()) << R"(, "pid": 1, "tid": )" << e.thread
       << ", \"args\": {" << args.str() << "}}";
    if (e.stream >= 0) {
      sep();
      os << R"({"name": )" << json_string(e.name) << R"(, "cat": "device", "ph": "X", "ts": )"
         << json_us(e.device_start_ns) << R"(, "dur": )" << json_us(std::max<int64_t>(0, e.device_ns()))
         << R"(, "pid": )" << stream_pid[e.stream] << R"(, "tid": )" << e.stream << ", \"args\": {" << args.str()
         << "}}";
    }
  }
  os << "\n]}\n";
  return os.str();
}

void Profile::write_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MINIDL_CHECK(out.good(), "profiler: cannot open '", path, "' to write the Chrome trace");
  out << text;
  out.flush();
  MINIDL_CHECK(out.good(), "profiler: writing the Chrome trace to '", path, "' failed");
}

}  // namespace minidl::profiler
