// The simulated device's execution of a grid.
//
// Blocks: the grid's blocks, in an order shuffled per launch (seeded by MINIDL_SIM_SEED and the
// launch's number, so a failure repeats), are taken one at a time by the host threads of a pool
// (MINIDL_SIM_WORKERS, default 4, plus the stream's own thread). A kernel that assumes block 0
// runs first, or that two blocks never run at once, sees that assumption fail.
//
// Threads: the threads of a block are fibers (Boost.Context's fcontext: a stack each, switched
// in a few nanoseconds) on the one host thread running the block, run in turn until each
// finishes or waits:
//   - at __syncthreads(): the barrier opens when every live thread of the block has arrived at
//     the same call site (a thread that has returned is no longer live, as on the GPU); threads
//     waiting at two different __syncthreads() are a divergent barrier, a device fault;
//   - at a warp collective: it completes when every lane named in the mask has arrived with the
//     same operation and mask; then each lane's result is computed from the values all lanes
//     brought, as if they had run in lock-step. A mask that names a lane which has exited, does
//     not exist (a partial last warp) or never arrives is a device fault, as is a shuffle that
//     reads a lane outside the mask.
// When no thread can go on but some have not finished, the block is deadlocked: the fault names
// what each thread waits for. A fault stops the block (the other threads are unwound at their
// next wait), the grid stops starting blocks, and the launch fails with a sticky error.
//
// `__shared__` variables are `static thread_local` (cudasim/include/cudasim/device.h): one copy
// per host thread, which runs one block at a time.
#include "block_runner.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "sanitizer_hooks.h"

namespace bctx = boost::context::detail;

namespace cudasim {

thread_local const ThreadIndices* tl_current = nullptr;

namespace {

// ---- settings ----

long env_long(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < lo || x > hi) {
    std::fprintf(stderr, "cudasim: ignoring %s=%s (expected an integer in [%ld, %ld])\n", name, v, lo, hi);
    return fallback;
  }
  return x;
}

// Each fiber's stack. Kernels keep a few hundred bytes of locals; the sanitizers need more.
constexpr size_t kStackBytes = (sanitizer::kAsan || sanitizer::kTsan) ? 256 * 1024 : 64 * 1024;

// ---- fiber stacks: mmap'd, with a guard page below so an overflow faults instead of corrupting ----

struct FiberStack {
  char* base = nullptr;  // the guard page; the usable stack is above it
  size_t bytes = 0;
  void* tsan_fiber = nullptr;

  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  void* bottom() const { return base + page(); }
  size_t usable() const { return bytes - page(); }
  void* top() const { return base + bytes; }
};

FiberStack make_stack() {
  FiberStack s;
  s.bytes = kStackBytes + FiberStack::page();
  void* p = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  s.base = static_cast<char*>(p);
  (void)mprotect(s.base, FiberStack::page(), PROT_NONE);
  s.tsan_fiber = sanitizer::create_fiber();
  return s;
}

// ---- the state of one block ----

struct DeviceFault {  // thrown inside a simulated thread: the launch fails
  cudaError_t code;
  std::string message;
};
struct Unwind {};  // thrown inside a simulated thread after another thread of its block faulted

enum class State { NotStarted, Ready, AtBarrier, AtWarp, Exited };
enum class BarrierKind { Plain, Count, And, Or };

struct Site {  // a __syncthreads() call in the source
  const char* file = nullptr;
  int line = 0;
  bool operator==(const Site& o) const { return line == o.line && (file == o.file || std::strcmp(file, o.file) == 0); }
};

std::string site_str(const Site& s) { return std::string(s.file != nullptr ? s.file : "?") + ":" + std::to_string(s.line); }

struct Block;

struct SimThread {
  ThreadIndices idx{};
  int linear = 0;  // x + y * bx + z * bx * by: the lane is linear % 32, the warp linear / 32
  State state = State::NotStarted;
  bctx::fcontext_t fctx = nullptr;
  Block* block = nullptr;
  FiberStack* stack = nullptr;
  void* fake_stack = nullptr;  // AddressSanitizer's fake stack of this fiber while switched out
  uint64_t result = 0;         // what the last barrier or warp collective gave this thread
  AsyncCopies async;           // its cp.async copies not yet waited for (warp_matrix.cpp)
};

struct WarpState {
  WarpOp op = WarpOp::SyncWarp;
  unsigned mask = 0, arrived = 0;
  int width = 32;
  WarpExchangeFn exchange = nullptr;  // WarpOp::Exchange: the instruction's model, and its name
  const char* exchange_name = nullptr;
  uint64_t values[32] = {};
  int args[32] = {};
};

struct GridRun;

struct Block {
  const LaunchSpec* spec = nullptr;
  GridRun* grid = nullptr;
  uint3 block_idx{};
  std::vector<SimThread>* threads = nullptr;
  int count = 0;  // threads in the block
  int live = 0;   // threads that have not returned
  std::deque<int> ready;
  // __syncthreads
  int barrier_waiting = 0;
  Site barrier_site;
  BarrierKind barrier_kind = BarrierKind::Plain;
  int barrier_votes = 0;
  char barrier_token = 0;  // ThreadSanitizer's sync object for the barrier
  std::vector<WarpState> warps;
  // faults
  bool faulted = false;
  DeviceFault fault{cudaSuccess, {}};
  // the scheduler's (the host thread's own) context, while a fiber runs
  bctx::fcontext_t scheduler = nullptr;
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
  void* scheduler_tsan_fiber = nullptr;
};

// Per host thread that runs blocks: fiber stacks (kept), the thread vector (kept), the fiber
// now running, and ThreadSanitizer's tokens. Every thread of a block acquires `start` (released
// by the scheduler before the block: the launch, and the blocks this host thread ran before,
// which used the same `__shared__` memory) and releases `end` (acquired by the scheduler after
// the block). No thread of a block acquires what another releases, so ThreadSanitizer sees the
// threads of a block, and blocks run by different host threads, as concurrent.
struct Worker {
  std::vector<FiberStack> stacks;
  std::vector<SimThread> threads;
  SimThread* current = nullptr;
  char start_token = 0, end_token = 0;
};
thread_local Worker tl_worker;

// ---- a grid in flight ----

struct GridRun {
  const LaunchSpec* spec = nullptr;
  std::vector<uint32_t> order;  // linear block ids in the order they are handed out
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable done;
  int active = 0;  // host threads inside work_on
  GridOutcome outcome;
};

std::string dim_str(uint3 d) {
  std::ostringstream os;
  os << "(" << d.x << "," << d.y << "," << d.z << ")";
  return os.str();
}

std::string where(const Block& b, const SimThread* t) {
  std::ostringstream os;
  os << "kernel launched at " << (b.spec->file != nullptr ? b.spec->file : "?") << ":" << b.spec->line
     << ", block " << dim_str(b.block_idx);
  if (t != nullptr) os << ", thread " << dim_str(t->idx.thread_idx);
  return os.str();
}

SimThread& current_thread(const char* what) {
  SimThread* t = tl_worker.current;
  if (t == nullptr) {
    std::fprintf(stderr, "cudasim: %s called outside a kernel\n", what);
    throw DeviceFault{cudaErrorLaunchFailure, std::string(what) + " called outside a kernel"};
  }
  return *t;
}

[[noreturn]] void fault_here(const SimThread& t, cudaError_t code, const std::string& what) {
  throw DeviceFault{code, what + " (" + where(*t.block, &t) + ")"};
}

// ---- switching ----

// From a fiber back to the scheduler; returns when the scheduler resumes this fiber.
CUDASIM_SWITCHES_FIBERS void yield_to_scheduler(SimThread& t) {
  Block& b = *t.block;
  const bctx::fcontext_t to = b.scheduler;  // read before the switch: after it, ThreadSanitizer sees another fiber
  sanitizer::start_switch(&t.fake_stack, b.scheduler_stack_bottom, b.scheduler_stack_size);
  sanitizer::switch_to_fiber(b.scheduler_tsan_fiber);
  const bctx::transfer_t back = bctx::jump_fcontext(to, nullptr);
  b.scheduler = back.fctx;
  sanitizer::finish_switch(t.fake_stack, &b.scheduler_stack_bottom, &b.scheduler_stack_size);
}

void release_waiters_of_barrier(Block& b, SimThread& self) {
  int votes = b.barrier_votes;
  uint64_t result = 0;
  switch (b.barrier_kind) {
    case BarrierKind::Plain: break;
    case BarrierKind::Count: result = static_cast<uint64_t>(votes); break;
    case BarrierKind::And: result = votes == b.barrier_waiting ? 1 : 0; break;
    case BarrierKind::Or: result = votes > 0 ? 1 : 0; break;
  }
  for (SimThread& t : *b.threads) {
    if (t.state != State::AtBarrier) continue;
    t.state = State::Ready;
    t.result = result;
    if (&t != &self) b.ready.push_back(t.linear);
  }
  b.barrier_waiting = 0;
  b.barrier_votes = 0;
}

int barrier(Site site, BarrierKind kind, int predicate) {
  sanitizer::IgnoreAccesses ignored;
  SimThread& t = current_thread("__syncthreads()");
  Block& b = *t.block;
  if (b.barrier_waiting == 0) {
    b.barrier_site = site;
    b.barrier_kind = kind;
  } else if (!(b.barrier_site == site)) {
    std::ostringstream os;
    os << "divergent __syncthreads(): this thread waits at " << site_str(site) << ", while " << b.barrier_waiting
       << " thread(s) of its block wait at " << site_str(b.barrier_site);
    fault_here(t, cudaErrorLaunchFailure, os.str());
  }
  if (predicate != 0) ++b.barrier_votes;
  sanitizer::release(&b.barrier_token);
  t.state = State::AtBarrier;
  ++b.barrier_waiting;
  if (b.barrier_waiting == b.live) release_waiters_of_barrier(b, t);
  if (t.state == State::AtBarrier) yield_to_scheduler(t);
  if (b.faulted) throw Unwind{};
  sanitizer::acquire(&b.barrier_token);
  return static_cast<int>(t.result);
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::SyncWarp: return "__syncwarp";
    case WarpOp::Exchange: return "a warp-level matrix instruction";
  }
  return "?";
}

std::string op_name(const WarpState& w) {
  return w.op == WarpOp::Exchange && w.exchange_name != nullptr ? w.exchange_name : op_name(w.op);
}

std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Every lane of the mask has arrived: compute each one's result, as in lock-step.
void complete_warp(Block& b, int warp, SimThread& self) {
  WarpState& w = b.warps[static_cast<size_t>(warp)];
  std::vector<SimThread>& threads = *b.threads;
  if (w.op == WarpOp::Exchange) {  // the instruction's model reads and writes every lane's operands
    void* lanes[32] = {};
    for (int l = 0; l < 32; ++l)
      if (((w.mask >> l) & 1u) != 0) lanes[l] = from_bits<void*>(w.values[l]);
    w.exchange(lanes, w.mask);
  }
  unsigned votes = 0;
  for (int l = 0; l < 32; ++l)
    if (((w.mask >> l) & 1u) != 0 && w.values[l] != 0) votes |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    if (((w.mask >> l) & 1u) == 0) continue;
    SimThread& t = threads[static_cast<size_t>(warp * 32 + l)];
    const int seg = l & ~(w.width - 1);  // first lane of this lane's width-wide segment
    int src = l;
    switch (w.op) {
      case WarpOp::ShflIdx: src = seg + (w.args[l] & (w.width - 1)); break;
      case WarpOp::ShflUp: src = l - w.args[l] >= seg ? l - w.args[l] : l; break;
      case WarpOp::ShflDown: src = l + w.args[l] < seg + w.width ? l + w.args[l] : l; break;
      case WarpOp::ShflXor: src = (l ^ w.args[l]) < seg + w.width ? (l ^ w.args[l]) : l; break;
      default: break;
    }
    if (src < 0 || src > 31 || ((w.mask >> src) & 1u) == 0) {
      std::ostringstream os;
      os << op_name(w.op) << ": lane " << l << " reads lane " << src << ", which is not in the mask " << hex(w.mask)
         << " (its value is undefined on the GPU)";
      fault_here(self, cudaErrorLaunchFailure, os.str());
    }
    switch (w.op) {
      case WarpOp::Ballot: t.result = votes; break;
      case WarpOp::Any: t.result = votes != 0 ? 1 : 0; break;
      case WarpOp::All: t.result = votes == w.mask ? 1 : 0; break;
      case WarpOp::SyncWarp: t.result = 0; break;
      case WarpOp::Exchange: t.result = 0; break;
      default: t.result = w.values[src]; break;
    }
    t.state = State::Ready;
    if (&t != &self) b.ready.push_back(t.linear);
  }
  w.arrived = 0;
}

// Called when `t` has exited or is about to wait elsewhere: a warp collective still waiting for
// it can never complete.
void check_pending_warp(Block& b, const SimThread& t, const char* why) {
  const int lane = t.linear % 32, warp = t.linear / 32;
  const WarpState& w = b.warps[static_cast<size_t>(warp)];
  if (w.arrived != 0 && ((w.mask >> lane) & 1u) != 0 && ((w.arrived >> lane) & 1u) == 0) {
    std::ostringstream os;
    os << op_name(w) << " with mask " << hex(w.mask) << " waits for lane " << lane << ", which " << why;
    if (!b.faulted) {
      b.faulted = true;
      b.fault = DeviceFault{cudaErrorLaunchFailure, os.str() + " (" + where(b, &t) + ")"};
    }
  }
}

// ---- the fiber's life ----

void run_thread_body(SimThread& t) {
  Block& b = *t.block;
  sanitizer::acquire(&tl_worker.start_token);
  try {
    sanitizer::ObserveAccesses observed;  // the kernel itself
    b.spec->body();
  } catch (const Unwind&) {
  } catch (const DeviceFault& f) {
    if (!b.faulted) {
      b.faulted = true;
      b.fault = f;
    }
  } catch (const std::exception& e) {
    if (!b.faulted) {
      b.faulted = true;
      b.fault = DeviceFault{cudaErrorLaunchFailure, std::string("a C++ exception escaped the kernel: ") + e.what() +
                                                        " (" + where(b, &t) + ")"};
    }
  } catch (...) {
    if (!b.faulted) {
      b.faulted = true;
      b.fault = DeviceFault{cudaErrorLaunchFailure, "a C++ exception escaped the kernel (" + where(b, &t) + ")"};
    }
  }
  sanitizer::release(&tl_worker.end_token);
}

CUDASIM_SWITCHES_FIBERS void fiber_entry(bctx::transfer_t from) {
  sanitizer::IgnoreAccesses::begin();  // the bookkeeping of this fiber (never ended: the fiber ends)
  SimThread& t = *static_cast<SimThread*>(from.data);
  Block& b = *t.block;
  b.scheduler = from.fctx;
  sanitizer::finish_switch(nullptr, &b.scheduler_stack_bottom, &b.scheduler_stack_size);
  run_thread_body(t);
  // Returned: no longer live. A barrier the others wait at may now be complete; a warp
  // collective waiting for this lane never will be.
  t.state = State::Exited;
  --b.live;
  check_pending_warp(b, t, "has exited");
  if (b.barrier_waiting > 0 && b.barrier_waiting == b.live) release_waiters_of_barrier(b, t);
  const bctx::fcontext_t to = b.scheduler;
  void* const to_fiber = b.scheduler_tsan_fiber;
  sanitizer::start_switch(nullptr, b.scheduler_stack_bottom, b.scheduler_stack_size);
  sanitizer::IgnoreAccesses::end();  // balanced: the TSan fiber is reused by the next block
  sanitizer::switch_to_fiber(to_fiber);
  bctx::jump_fcontext(to, nullptr);  // never resumed
  std::abort();  // unreachable: the scheduler never jumps back into an exited fiber
}

// From the scheduler into fiber `t`, until it waits or exits.
CUDASIM_SWITCHES_FIBERS void resume(Block& b, SimThread& t) {
  if (t.state == State::NotStarted) {
    t.fctx = bctx::make_fcontext(t.stack->top(), t.stack->usable(), &fiber_entry);
    t.state = State::Ready;
  }
  tl_worker.current = &t;
  tl_current = &t.idx;
  const bctx::fcontext_t to = t.fctx;  // read before the switch: after it, ThreadSanitizer sees the fiber
  sanitizer::start_switch(&b.scheduler_fake_stack, t.stack->bottom(), t.stack->usable());
  sanitizer::switch_to_fiber(t.stack->tsan_fiber);
  const bctx::transfer_t back = bctx::jump_fcontext(to, &t);
  sanitizer::finish_switch(b.scheduler_fake_stack, nullptr, nullptr);
  if (t.state != State::Exited) t.fctx = back.fctx;
  tl_worker.current = nullptr;
  tl_current = nullptr;
}

std::string describe_deadlock(const Block& b) {
  std::ostringstream os;
  os << "deadlock: no thread of the block can go on; ";
  int at_barrier = 0;
  for (const SimThread& t : *b.threads) at_barrier += t.state == State::AtBarrier;
  if (at_barrier > 0)
    os << at_barrier << " of " << b.live << " live thread(s) wait at __syncthreads() at " << site_str(b.barrier_site)
       << " for the others";
  for (size_t w = 0; w < b.warps.size(); ++w) {
    const WarpState& ws = b.warps[w];
    if (ws.arrived == 0) continue;
    os << "; warp " << w << " waits in " << op_name(ws) << " with mask " << hex(ws.mask) << " for lanes "
       << hex(ws.mask & ~ws.arrived);
  }
  os << " — a barrier or warp collective that some thread never reaches";
  return os.str();
}

void run_block(GridRun& g, uint32_t linear_block) {
  const LaunchSpec& spec = *g.spec;
  Worker& w = tl_worker;
  const int count = static_cast<int>(spec.block.x * spec.block.y * spec.block.z);
  while (w.stacks.size() < static_cast<size_t>(count)) w.stacks.push_back(make_stack());
  w.threads.assign(static_cast<size_t>(count), SimThread{});

  Block b;
  b.spec = &spec;
  b.grid = &g;
  b.block_idx = uint3{linear_block % spec.grid.x, (linear_block / spec.grid.x) % spec.grid.y,
                      linear_block / (spec.grid.x * spec.grid.y)};
  b.threads = &w.threads;
  b.count = b.live = count;
  b.warps.assign(static_cast<size_t>((count + 31) / 32), WarpState{});
  b.scheduler_tsan_fiber = sanitizer::current_fiber();
  for (int i = 0; i < count; ++i) {
    SimThread& t = w.threads[static_cast<size_t>(i)];
    t.linear = i;
    t.idx.thread_idx = uint3{static_cast<unsigned>(i) % spec.block.x, (static_cast<unsigned>(i) / spec.block.x) % spec.block.y,
                             static_cast<unsigned>(i) / (spec.block.x * spec.block.y)};
    t.idx.block_idx = b.block_idx;
    t.idx.block_dim = spec.block;
    t.idx.grid_dim = spec.grid;
    t.block = &b;
    t.stack = &w.stacks[static_cast<size_t>(i)];
    b.ready.push_back(i);
  }

  sanitizer::release(&w.start_token);
  while (true) {
    while (!b.ready.empty()) {
      SimThread& t = w.threads[static_cast<size_t>(b.ready.front())];
      b.ready.pop_front();
      if (b.faulted && t.state == State::NotStarted) {  // never started: nothing to unwind
        t.state = State::Exited;
        --b.live;
        continue;
      }
      resume(b, t);
      if (t.state == State::Ready) b.ready.push_back(t.linear);  // cannot happen today: threads only stop to wait
    }
    if (b.live == 0) break;
    // Nobody can run, yet some have not returned.
    if (!b.faulted) {
      b.faulted = true;
      b.fault = DeviceFault{cudaErrorLaunchFailure, describe_deadlock(b) + " (" + where(b, nullptr) + ")"};
    }
    for (SimThread& t : w.threads) {  // unwind the waiting ones
      if (t.state == State::AtBarrier || t.state == State::AtWarp) {
        t.state = State::Ready;
        b.ready.push_back(t.linear);
      }
    }
  }
  sanitizer::acquire(&w.end_token);
  if (b.faulted) {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.outcome.code == cudaSuccess) g.outcome = GridOutcome{b.fault.code, b.fault.message};
    g.stop.store(true, std::memory_order_relaxed);
  }
}

// Takes blocks of `g` until none is left (or the grid stopped).
void work_on(GridRun& g) {
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    ++g.active;
  }
  // Relaxed: handing out block numbers must not order one block before another for
  // ThreadSanitizer, or races between blocks would go unseen.
  while (!g.stop.load(std::memory_order_relaxed)) {
    const size_t i = g.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= g.order.size()) break;
    run_block(g, g.order[i]);
  }
  std::lock_guard<std::mutex> lock(g.mutex);
  if (--g.active == 0) g.done.notify_all();
}

// ---- the pool of host threads that run blocks ----

class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool();  // never destroyed: streams may run grids during exit
    return *pool;
  }

  // Runs `g` on the pool and on the calling thread; returns when every block is done.
  void run(const std::shared_ptr<GridRun>& g) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(g);
    }
    wake_.notify_all();
    work_on(*g);
    std::unique_lock<std::mutex> lock(g->mutex);
    g->done.wait(lock, [&] { return g->active == 0; });
  }

 private:
  Pool() {
    const long n = env_long("MINIDL_SIM_WORKERS", 4, 0, 256);
    for (long i = 0; i < n; ++i) std::thread([this] { loop(); }).detach();
  }

  void loop() {
    while (true) {
      std::shared_ptr<GridRun> g;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return !queue_.empty(); });
        g = queue_.front();
        // A grid whose blocks are all handed out leaves the queue.
        if (g->next.load(std::memory_order_relaxed) >= g->order.size() || g->stop.load(std::memory_order_relaxed)) {
          queue_.pop_front();
          continue;
        }
      }
      work_on(*g);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<GridRun>> queue_;
};

uint64_t base_seed() {
  static const uint64_t seed = static_cast<uint64_t>(env_long("MINIDL_SIM_SEED", 1, 0, 1L << 62));
  return seed;
}

}  // namespace

GridOutcome run_grid(const LaunchSpec& spec, uint64_t sequence) {
  auto g = std::make_shared<GridRun>();
  g->spec = &spec;
  const uint64_t blocks = static_cast<uint64_t>(spec.grid.x) * spec.grid.y * spec.grid.z;
  g->order.resize(blocks);
  std::iota(g->order.begin(), g->order.end(), 0u);
  std::mt19937_64 rng(base_seed() * 0x9E3779B97F4A7C15ull + sequence);
  std::shuffle(g->order.begin(), g->order.end(), rng);
  Pool::instance().run(g);
  // Blocks finished; leave the grid in the pool's queue only as long as it has blocks to hand out.
  std::lock_guard<std::mutex> lock(g->mutex);
  return g->outcome;
}

void device_trap(int code, const char* what) {
  sanitizer::IgnoreAccesses ignored;
  SimThread& t = current_thread(what);
  fault_here(t, static_cast<cudaError_t>(code), what);
}

void misaligned_vector_access(const void* address, unsigned alignment, bool store) {
  char what[160];
  std::snprintf(what, sizeof what, "misaligned %u-byte vector %s at address %p", alignment, store ? "store" : "load",
                address);
  device_trap(cudaErrorMisalignedAddress, what);
}

namespace {

// A warp collective of any kind; `exchange` and `name` only for WarpOp::Exchange.
uint64_t collective(WarpOp op, unsigned mask, uint64_t bits, int arg, int width, WarpExchangeFn exchange,
                    const char* name) {
  sanitizer::IgnoreAccesses ignored;
  const char* const what = op == WarpOp::Exchange ? name : op_name(op);
  SimThread& t = current_thread(what);
  Block& b = *t.block;
  const int lane = t.linear % 32, warp = t.linear / 32;
  WarpState& w = b.warps[static_cast<size_t>(warp)];
  if (((mask >> lane) & 1u) == 0)
    fault_here(t, cudaErrorLaunchFailure,
               std::string(what) + ": lane " + std::to_string(lane) + " passes mask " + hex(mask) +
                   ", which does not name the lane itself");
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fault_here(t, cudaErrorLaunchFailure, std::string(what) + ": width " + std::to_string(width) +
                                              " is not a power of two in [1, 32]");
  for (int l = 0; l < 32; ++l) {
    if (((mask >> l) & 1u) == 0) continue;
    const int other = warp * 32 + l;
    if (other >= b.count)
      fault_here(t, cudaErrorLaunchFailure,
                 std::string(what) + ": mask " + hex(mask) + " names lane " + std::to_string(l) +
                     ", which this block of " + std::to_string(b.count) + " threads does not have");
    if ((*b.threads)[static_cast<size_t>(other)].state == State::Exited)
      fault_here(t, cudaErrorLaunchFailure, std::string(what) + ": mask " + hex(mask) + " names lane " +
                                                std::to_string(l) + ", which has exited");
  }
  if (w.arrived == 0) {
    w.op = op;
    w.mask = mask;
    w.width = width;
    w.exchange = exchange;
    w.exchange_name = name;
  } else if (w.op != op || w.mask != mask || w.width != width || w.exchange != exchange) {
    fault_here(t, cudaErrorLaunchFailure,
               std::string("lanes of warp ") + std::to_string(warp) + " disagree: some wait in " + op_name(w) +
                   " with mask " + hex(w.mask) + ", this one calls " + what + " with mask " + hex(mask));
  }
  w.values[lane] = bits;
  w.args[lane] = arg;
  w.arrived |= 1u << lane;
  // Only __syncwarp orders memory between lanes (CUDA promises no more of shuffles and votes,
  // whose values pass here, not through memory). It also keeps ThreadSanitizer's global reset
  // rare: every release costs an epoch of its fixed budget, and shuffles were most of them.
  const bool orders_memory = op == WarpOp::SyncWarp;
  if (orders_memory) sanitizer::release(&w);
  t.state = State::AtWarp;
  if (w.arrived == w.mask) complete_warp(b, warp, t);
  if (t.state == State::AtWarp) yield_to_scheduler(t);
  if (b.faulted) throw Unwind{};
  if (orders_memory) sanitizer::acquire(&w);
  return t.result;
}

}  // namespace

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t bits, int arg, int width) {
  return collective(op, mask, bits, arg, width, nullptr, nullptr);
}

void warp_exchange(const char* name, unsigned mask, void* lane_operands, WarpExchangeFn model) {
  (void)collective(WarpOp::Exchange, mask, to_bits(lane_operands), 0, 32, model, name);
}

AsyncCopies& current_async_copies(const char* what) { return current_thread(what).async; }

}  // namespace cudasim

// ---- the barrier functions kernels call ----

void __syncthreads(const char* file, int line) {
  (void)cudasim::barrier({file, line}, cudasim::BarrierKind::Plain, 0);
}
int __syncthreads_count(int predicate, const char* file, int line) {
  return cudasim::barrier({file, line}, cudasim::BarrierKind::Count, predicate);
}
int __syncthreads_and(int predicate, const char* file, int line) {
  return cudasim::barrier({file, line}, cudasim::BarrierKind::And, predicate);
}
int __syncthreads_or(int predicate, const char* file, int line) {
  return cudasim::barrier({file, line}, cudasim::BarrierKind::Or, predicate);
}
void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
