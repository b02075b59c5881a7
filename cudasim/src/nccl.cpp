// NCCL of the simulated device: communicators over the simulated devices of one process and
// their collectives (cudasim/include/nccl.h says what is simulated and what is not).
//
// The model. A clique is the set of communicators made together (one ncclCommInitAll, or the
// ncclCommInitRank calls of one unique id); it holds, per rank, the device, the number of
// collectives issued so far, the number still queued, and the asynchronous error. The
// communicator handle (ncclComm_t) is only a key into a registry of live handles, so a handle
// that was destroyed or aborted is an ncclInvalidArgument, not a use after free.
//
// Note [matching collectives]: the n-th collective issued on each rank's communicator is the
// same collective (NCCL's rule: every rank calls the same collectives in the same order). A call
// takes the next sequence number of its rank when it is queued on the stream (cudasim::enqueue).
// When it runs on that stream's host thread, it registers its buffers under that number in the
// clique and waits; the last rank to arrive checks that all called the same thing (operation,
// type, count, op, root), computes the result for everyone from a staging copy of the inputs
// (so in-place calls and any aliasing are fine) and wakes the others. The waiting happens on
// stream threads, never on the caller's, so one host thread may issue every rank's call — in a
// group or not — and the ranks still meet. The clique's mutex orders the writes of the last
// rank before the reads that follow on each woken stream.
//
// Note [breaking a clique]: a clique whose ranks can no longer meet is broken once, with a
// message: ncclCommAbort on any rank; a rank destroyed while its peers wait in a collective it
// will never join; ranks that called different collectives as their n-th; a collective that
// could not be queued, or that its device dropped unrun (a device that faulted runs nothing
// more); a buffer that is no longer device memory when the collective runs (that rank's device
// also faults, as NCCL's kernel would); no host memory for the staging copy.
// Every waiter wakes and its work ends without touching memory; every live rank's
// ncclCommGetAsyncError reports the failure (ncclRemoteError on the ranks that did not cause
// it), and later calls on them return it at once, as NCCL does for a communicator in error.
//
// Note [joining by unique id]: the id carries a number drawn once per process, the process id
// and a serial. ncclCommInitRank with an id of another process fails at once (ncclInvalidUsage):
// the simulated NCCL joins ranks of one process only. Ranks of this process meet in a table
// keyed by the id; each waits until all `nranks` have joined, for at most
// MINIDL_SIM_NCCL_INIT_TIMEOUT seconds (default 30): a lone rank — its peers are in other
// processes, or never call — then fails with ncclSystemError saying so, and so do the ranks
// that joined with it and any that come later with the same id.
//
// Lock order: the rendezvous table, then the handle registry, then a clique's mutex; runtime
// calls (enqueue, device lookups, device faults) are never made while a clique's mutex is held,
// since queued work dropped by the runtime takes that mutex in its destructor.
#include <nccl.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime_internal.h"

// A handle is only an address: the registry holds its state.
struct ncclComm {
  char unused = 0;
};

namespace {

// ---- names ----

enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "ncclAllReduce";
    case Kind::Broadcast: return "ncclBroadcast";
    case Kind::Reduce: return "ncclReduce";
    case Kind::AllGather: return "ncclAllGather";
    case Kind::ReduceScatter: return "ncclReduceScatter";
  }
  return "ncclCollective";
}

bool is_reduction(Kind k) { return k == Kind::AllReduce || k == Kind::Reduce || k == Kind::ReduceScatter; }
bool is_rooted(Kind k) { return k == Kind::Broadcast || k == Kind::Reduce; }

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* type_name(int t) {
  static const char* const names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",   "ncclInt64",
                                      "ncclUint64",  "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
  return t >= 0 && t < ncclNumTypes ? names[t] : "an invalid type";
}

const char* op_name(int op) {
  static const char* const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
  return op >= 0 && op < ncclNumOps ? names[op] : "an invalid op";
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

// ---- errors ----

// Every message gets a stamp from one counter, so that ncclGetLastError can give the newer of a
// communicator's last failure and the calling thread's (NCCL keeps one process-wide last error).
std::atomic<uint64_t> g_error_stamp{0};
uint64_t next_stamp() { return ++g_error_stamp; }

thread_local std::string tl_last_error;  // the calling thread's last failure, in words
thread_local uint64_t tl_last_stamp = 0;
thread_local std::string tl_returned;  // what ncclGetLastError handed out last on this thread

void set_thread_error(std::string msg) {
  tl_last_error = std::move(msg);
  tl_last_stamp = next_stamp();
}

bool debug_warn() {
  const char* v = std::getenv("NCCL_DEBUG");
  if (v == nullptr) return false;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s == "WARN" || s == "INFO" || s == "TRACE";
}

void warn(const std::string& msg) noexcept {
  if (debug_warn()) std::fprintf(stderr, "cudasim NCCL WARN %s\n", msg.c_str());
}

// ---- cliques ----

struct Args {
  Kind kind = Kind::AllReduce;
  size_t count = 0;
  int type = 0;
  int op = -1;    // reductions only
  int root = -1;  // ncclBroadcast and ncclReduce only
  bool operator==(const Args&) const = default;
};

std::string describe(const Args& a) {
  std::string s = std::string(kind_name(a.kind)) + "(count " + std::to_string(a.count) + ", " + type_name(a.type);
  if (is_reduction(a.kind)) s += std::string(", ") + op_name(a.op);
  if (is_rooted(a.kind)) s += ", root " + std::to_string(a.root);
  return s + ")";
}

struct RankSlot {
  int device = -1;
  uint64_t next_seq = 0;  // collectives issued (Note [matching collectives])
  int pending = 0;        // issued and not yet finished on their stream
  bool live = true;       // the handle is neither destroyed nor aborted
  ncclResult_t async = ncclSuccess;
  std::string last_error;
  uint64_t last_stamp = 0;
};

// One collective while its ranks arrive.
struct PendingOp {
  explicit PendingOp(int nranks)
      : send(static_cast<size_t>(nranks), nullptr), recv(static_cast<size_t>(nranks), nullptr),
        arrived(static_cast<size_t>(nranks), 0) {}
  Args args;
  int first_rank = -1;  // whose args the others are compared with
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<char> arrived;
  int arrived_count = 0;
  bool done = false;
};

struct Clique {
  explicit Clique(const std::vector<int>& devices) : nranks(static_cast<int>(devices.size())) {
    ranks.resize(devices.size());
    for (size_t r = 0; r < devices.size(); ++r) ranks[r].device = devices[r];
  }

  const int nranks;
  std::mutex m;
  std::condition_variable cv;
  std::vector<RankSlot> ranks;
  bool broken = false;
  std::string broken_msg;
  std::map<uint64_t, std::shared_ptr<PendingOp>> ops;  // collectives some rank has reached

  // Note [breaking a clique]. `origin` (if any) caused it and gets `origin_code`; every other
  // rank gets `code`.
  void break_locked(ncclResult_t code, const std::string& msg, int origin = -1,
                    ncclResult_t origin_code = ncclSuccess) noexcept {
    if (broken) return;
    broken = true;
    try {
      broken_msg = msg;
    } catch (...) {
    }
    const uint64_t stamp = next_stamp();
    for (int r = 0; r < nranks; ++r) {
      RankSlot& slot = ranks[static_cast<size_t>(r)];
      const ncclResult_t c = r == origin ? origin_code : code;
      if (c == ncclSuccess || slot.async != ncclSuccess) continue;
      slot.async = c;
      try {
        slot.last_error = msg;
        slot.last_stamp = stamp;
      } catch (...) {
      }
    }
    warn(msg);
    cv.notify_all();
  }
};

// ---- the handle registry ----

struct CommInfo {
  std::shared_ptr<Clique> clique;  // nullptr until a grouped ncclCommInitRank completes
  int rank = -1;
  int nranks = 0;
  int device = -1;
  ncclResult_t init_error = ncclSuccess;  // a grouped ncclCommInitRank that failed
  std::string init_msg;
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<ncclComm*, CommInfo>& registry() {
  static auto* r = new std::unordered_map<ncclComm*, CommInfo>();  // never freed: used until exit
  return *r;
}

bool lookup(ncclComm* comm, CommInfo* out) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(comm);
  if (it == registry().end()) return false;
  *out = it->second;
  return true;
}

ncclComm* register_handle(CommInfo info) {
  auto* h = new ncclComm;
  try {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().emplace(h, std::move(info));
  } catch (...) {
    delete h;
    throw;
  }
  return h;
}

void set_info(ncclComm* comm, CommInfo info) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(comm);
  if (it != registry().end()) it->second = std::move(info);
}

void unregister_handle(ncclComm* comm) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(comm);
  }
  delete comm;
}

// Records a failure: the thread's last error, the communicator's (when it is known), stderr
// under NCCL_DEBUG=WARN. Returns `code`.
ncclResult_t fail(ncclResult_t code, const std::string& msg, const CommInfo* info = nullptr) noexcept {
  try {
    set_thread_error(msg);
    if (info != nullptr && info->clique != nullptr) {
      std::lock_guard<std::mutex> lock(info->clique->m);
      RankSlot& slot = info->clique->ranks[static_cast<size_t>(info->rank)];
      slot.last_error = msg;
      slot.last_stamp = tl_last_stamp;
    }
  } catch (...) {
  }
  warn(msg);
  return code;
}

// Runs an API function's body: no exception leaves the C API.
template <class F>
ncclResult_t guarded(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(ncclSystemError, std::string(fn) + ": out of host memory");
  } catch (const std::exception& e) {
    return fail(ncclInternalError, std::string(fn) + ": " + e.what());
  } catch (...) {
    return fail(ncclInternalError, std::string(fn) + ": unknown failure");
  }
}

// ---- unique ids and the rendezvous (Note [joining by unique id]) ----

constexpr char kIdMagic[16] = "cudasim-ncclid";  // 15 bytes and its NUL
constexpr size_t kNonceOffset = 16, kSerialOffset = 24, kPidOffset = 32;

uint64_t process_nonce() {
  static const uint64_t nonce = [] {
    uint64_t v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    v ^= static_cast<uint64_t>(::getpid()) << 32;
    v ^= reinterpret_cast<uintptr_t>(&v);
    try {
      std::random_device rd;
      v ^= (static_cast<uint64_t>(rd()) << 32) ^ rd();
    } catch (...) {
    }
    return v == 0 ? 1 : v;
  }();
  return nonce;
}

struct IdKey {
  uint64_t nonce = 0, serial = 0;
  bool operator<(const IdKey& o) const { return nonce != o.nonce ? nonce < o.nonce : serial < o.serial; }
};

struct Rendezvous {
  explicit Rendezvous(int n) : nranks(n), devices(static_cast<size_t>(n), -1) {}
  const int nranks;
  std::vector<int> devices;  // -1: not joined yet
  int joined = 0;
  bool complete = false;
  ncclResult_t error = ncclSuccess;
  std::string error_msg;
  std::shared_ptr<Clique> clique;
};

std::mutex& rendezvous_mutex() {
  static std::mutex m;
  return m;
}
std::condition_variable& rendezvous_cv() {
  static std::condition_variable cv;
  return cv;
}
std::map<IdKey, std::shared_ptr<Rendezvous>>& rendezvous_table() {
  static auto* t = new std::map<IdKey, std::shared_ptr<Rendezvous>>();  // never freed: used until exit
  return *t;
}

void fail_rendezvous_locked(Rendezvous& rv, ncclResult_t code, const std::string& msg) {
  if (rv.complete || rv.error != ncclSuccess) return;
  rv.error = code;
  rv.error_msg = msg;
  rendezvous_cv().notify_all();
}

double init_timeout_seconds() {
  const char* v = std::getenv("MINIDL_SIM_NCCL_INIT_TIMEOUT");
  if (v != nullptr) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end != v && s > 0) return std::min(s, 1e7);
  }
  return 30.0;
}

// Checks the id; fills `key`.
ncclResult_t decode_id(const ncclUniqueId& id, IdKey* key) {
  if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0)
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: the unique id was not made by ncclGetUniqueId of the simulated NCCL (cudasim)");
  std::memcpy(&key->nonce, id.internal + kNonceOffset, sizeof(key->nonce));
  std::memcpy(&key->serial, id.internal + kSerialOffset, sizeof(key->serial));
  if (key->nonce != process_nonce()) {
    int32_t pid = 0;
    std::memcpy(&pid, id.internal + kPidOffset, sizeof(pid));
    return fail(ncclInvalidUsage,
                "ncclCommInitRank: the unique id was made by another process (pid " + std::to_string(pid) +
                    "; this is pid " + std::to_string(::getpid()) +
                    "): the simulated NCCL (cudasim) joins ranks of one process only, each calling "
                    "ncclCommInitRank on a host thread of its own or together inside ncclGroupStart/ncclGroupEnd; "
                    "one process per GPU (MPI) needs real NCCL on real GPUs");
  }
  return ncclSuccess;
}

// Joins rank `rank` to the rendezvous of `key` without waiting.
ncclResult_t join(const IdKey& key, int nranks, int rank, int device, std::shared_ptr<Rendezvous>* out) {
  std::lock_guard<std::mutex> lock(rendezvous_mutex());
  auto& table = rendezvous_table();
  std::shared_ptr<Rendezvous>& slot = table[key];
  if (slot == nullptr) slot = std::make_shared<Rendezvous>(nranks);
  Rendezvous& rv = *slot;
  if (rv.error != ncclSuccess)
    return fail(rv.error, "ncclCommInitRank: rank " + std::to_string(rank) +
                              " joined a unique id whose ranks already failed: " + rv.error_msg);
  if (rv.nranks != nranks)
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " says nranks = " +
                                      std::to_string(nranks) + " but the ranks before it said " +
                                      std::to_string(rv.nranks) + " for the same unique id");
  if (rv.devices[static_cast<size_t>(rank)] != -1)
    return fail(ncclInvalidUsage,
                "ncclCommInitRank: rank " + std::to_string(rank) + " joined the same unique id twice");
  rv.devices[static_cast<size_t>(rank)] = device;
  ++rv.joined;
  *out = slot;
  if (rv.joined < rv.nranks) return ncclSuccess;
  // The last rank: NCCL's one-rank-per-GPU rule, then the clique.
  for (int a = 0; a < rv.nranks; ++a)
    for (int b = a + 1; b < rv.nranks; ++b)
      if (rv.devices[static_cast<size_t>(a)] == rv.devices[static_cast<size_t>(b)]) {
        const std::string msg = "ncclCommInitRank: duplicate GPU detected: rank " + std::to_string(a) + " and rank " +
                                std::to_string(b) + " both on CUDA device " +
                                std::to_string(rv.devices[static_cast<size_t>(a)]);
        fail_rendezvous_locked(rv, ncclInvalidUsage, msg);
        return fail(ncclInvalidUsage, msg);
      }
  rv.clique = std::make_shared<Clique>(rv.devices);
  rv.complete = true;
  table.erase(key);  // a failed rendezvous stays, so that late ranks fail at once
  rendezvous_cv().notify_all();
  return ncclSuccess;
}

// Waits until the rendezvous completes or fails, or `deadline` passes (then it fails).
ncclResult_t await(Rendezvous& rv, int rank, std::chrono::steady_clock::time_point deadline, double timeout_s) {
  std::unique_lock<std::mutex> lock(rendezvous_mutex());
  rendezvous_cv().wait_until(lock, deadline, [&] { return rv.complete || rv.error != ncclSuccess; });
  if (rv.complete) return ncclSuccess;
  if (rv.error == ncclSuccess) {
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%g", timeout_s);
    fail_rendezvous_locked(
        rv, ncclSystemError,
        "ncclCommInitRank: " + std::to_string(rv.joined) + " of " + std::to_string(rv.nranks) +
            " ranks joined the unique id within " + secs +
            " s (MINIDL_SIM_NCCL_INIT_TIMEOUT); the simulated NCCL (cudasim) joins ranks of one process only, each "
            "calling ncclCommInitRank on a host thread of its own or together inside ncclGroupStart/ncclGroupEnd — "
            "ranks in other processes never arrive");
  }
  return fail(rv.error, "rank " + std::to_string(rank) + ": " + rv.error_msg);
}

// ---- reductions ----

struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
    return sign != 0 ? -v : v;
  }
  if (exp == 31) u = sign | 0x7f800000u | (mant << 13);
  else u = sign | ((exp + 112u) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Round to nearest even.
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u)  // Inf, NaN (kept quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u | ((x >> 13) & 0x3ffu) : 0u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (x < 0x38800000u) {  // below 2^-14: a subnormal half (or zero); exact scaling, then rint
    float a;
    std::memcpy(&a, &x, sizeof(a));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t mant = x & 0x7fffffu;
  uint32_t h = (((x >> 23) - 112u) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN stays NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

template <class S>
struct Num {  // integers, float, double: computed in their own type
  using C = S;
  static C up(S v) { return v; }
  static S down(C v) { return v; }
};
template <>
struct Num<Half> {
  using C = float;
  static float up(Half v) { return half_to_float(v.bits); }
  static Half down(float v) { return Half{float_to_half(v)}; }
};
template <>
struct Num<Bf16> {
  using C = float;
  static float up(Bf16 v) { return bf16_to_float(v.bits); }
  static Bf16 down(float v) { return Bf16{float_to_bf16(v)}; }
};

template <class S>
S combine(int op, S a, S b) {
  if constexpr (std::is_integral_v<S>) {
    using U = std::make_unsigned_t<S>;
    switch (op) {
      case ncclProd: return static_cast<S>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));  // wraps
      case ncclMax: return std::max(a, b);
      case ncclMin: return std::min(a, b);
      default: return static_cast<S>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));  // sum, avg: wraps
    }
  } else {
    using N = Num<S>;
    using C = typename N::C;
    const C x = N::up(a), y = N::up(b);
    switch (op) {
      case ncclProd: return N::down(x * y);
      case ncclMax: return N::down(std::fmax(x, y));
      case ncclMin: return N::down(std::fmin(x, y));
      default: return N::down(x + y);
    }
  }
}

// dst[i] = op over ranks (in rank order) of srcs[r][i]; see nccl.h for ncclAvg.
template <class S>
void reduce_typed(const std::vector<const unsigned char*>& srcs, unsigned char* dst, size_t n, int op) {
  const size_t nr = srcs.size();
  const bool avg = op == ncclAvg;
  S scale{};
  if constexpr (!std::is_integral_v<S>) {
    using N = Num<S>;
    scale = N::down(static_cast<typename N::C>(1) / static_cast<typename N::C>(nr));
  }
  auto load = [&](size_t r, size_t i) {
    S v;
    std::memcpy(&v, srcs[r] + i * sizeof(S), sizeof(S));
    if constexpr (!std::is_integral_v<S>) {
      if (avg) v = Num<S>::down(Num<S>::up(v) * Num<S>::up(scale));  // NCCL's pre-multiplied sum
    }
    return v;
  };
  for (size_t i = 0; i < n; ++i) {
    S acc = load(0, i);
    for (size_t r = 1; r < nr; ++r) acc = combine<S>(op, acc, load(r, i));
    if constexpr (std::is_integral_v<S>) {
      if (avg) acc = static_cast<S>(acc / static_cast<S>(nr));
    }
    std::memcpy(dst + i * sizeof(S), &acc, sizeof(S));
  }
}

void reduce_into(int type, int op, const std::vector<const unsigned char*>& srcs, unsigned char* dst, size_t n) {
  switch (type) {
    case ncclInt8: return reduce_typed<int8_t>(srcs, dst, n, op);
    case ncclUint8: return reduce_typed<uint8_t>(srcs, dst, n, op);
    case ncclInt32: return reduce_typed<int32_t>(srcs, dst, n, op);
    case ncclUint32: return reduce_typed<uint32_t>(srcs, dst, n, op);
    case ncclInt64: return reduce_typed<int64_t>(srcs, dst, n, op);
    case ncclUint64: return reduce_typed<uint64_t>(srcs, dst, n, op);
    case ncclFloat16: return reduce_typed<Half>(srcs, dst, n, op);
    case ncclFloat32: return reduce_typed<float>(srcs, dst, n, op);
    case ncclFloat64: return reduce_typed<double>(srcs, dst, n, op);
    case ncclBfloat16: return reduce_typed<Bf16>(srcs, dst, n, op);
    default: return;
  }
}

// The result of a complete collective, for every rank (Note [matching collectives]). Throws
// std::bad_alloc when the staging copy does not fit.
void compute(const PendingOp& op, int nranks) {
  const Args& a = op.args;
  const size_t ts = type_size(static_cast<ncclDataType_t>(a.type));
  const size_t bytes = a.count * ts;
  const size_t nr = static_cast<size_t>(nranks);
  std::vector<const unsigned char*> srcs(nr);
  for (size_t r = 0; r < nr; ++r) srcs[r] = static_cast<const unsigned char*>(op.send[r]);
  auto out = [&](size_t r) { return static_cast<unsigned char*>(op.recv[r]); };
  std::vector<unsigned char> staged;
  switch (a.kind) {
    case Kind::AllReduce:
    case Kind::Reduce:
      staged.resize(bytes);
      reduce_into(a.type, a.op, srcs, staged.data(), a.count);
      for (size_t r = 0; r < nr; ++r)
        if (a.kind == Kind::AllReduce || static_cast<int>(r) == a.root) std::memcpy(out(r), staged.data(), bytes);
      break;
    case Kind::ReduceScatter:
      staged.resize(bytes * nr);
      reduce_into(a.type, a.op, srcs, staged.data(), a.count * nr);
      for (size_t r = 0; r < nr; ++r) std::memcpy(out(r), staged.data() + r * bytes, bytes);
      break;
    case Kind::Broadcast:
      staged.assign(srcs[static_cast<size_t>(a.root)], srcs[static_cast<size_t>(a.root)] + bytes);
      for (size_t r = 0; r < nr; ++r) std::memcpy(out(r), staged.data(), bytes);
      break;
    case Kind::AllGather:
      staged.resize(bytes * nr);
      for (size_t r = 0; r < nr; ++r) std::memcpy(staged.data() + r * bytes, srcs[r], bytes);
      for (size_t r = 0; r < nr; ++r) std::memcpy(out(r), staged.data(), bytes * nr);
      break;
  }
}

// ---- one rank's queued collective ----

// Which buffers a rank passes, and how many bytes of each the collective touches.
size_t send_bytes(const Args& a, int rank, int nranks) {
  if (a.kind == Kind::Broadcast && rank != a.root) return 0;  // not read
  const size_t b = a.count * type_size(static_cast<ncclDataType_t>(a.type));
  return a.kind == Kind::ReduceScatter ? b * static_cast<size_t>(nranks) : b;
}
size_t recv_bytes(const Args& a, int rank, int nranks) {
  if (a.kind == Kind::Reduce && rank != a.root) return 0;  // not written
  const size_t b = a.count * type_size(static_cast<ncclDataType_t>(a.type));
  return a.kind == Kind::AllGather ? b * static_cast<size_t>(nranks) : b;
}

struct Job {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  Args args;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t seq = 0;
  bool counted = false;  // in the rank's pending count; guarded by the clique's mutex

  void finish_locked() {
    if (!counted) return;
    counted = false;
    --clique->ranks[static_cast<size_t>(rank)].pending;
    clique->cv.notify_all();
  }
  // Still counted here means the job never ran: the runtime dropped it (its device had faulted
  // before, and a device whose context is lost runs nothing more) or it could not be queued.
  // Its peers would wait for it forever: the clique is broken (Note [breaking a clique]).
  ~Job() {
    if (clique == nullptr) return;
    std::lock_guard<std::mutex> lock(clique->m);
    if (!counted) return;
    std::string msg;
    try {
      msg = std::string(kind_name(args.kind)) + " #" + std::to_string(seq) + " on rank " + std::to_string(rank) +
            " (cuda device " + std::to_string(clique->ranks[static_cast<size_t>(rank)].device) +
            ") never ran: its device dropped it after an earlier fault (the device's context is lost)";
    } catch (...) {
    }
    clique->break_locked(ncclRemoteError, msg, rank, ncclUnhandledCudaError);
    finish_locked();
  }
};

std::string job_name(const Job& job, int device) {
  return std::string(kind_name(job.args.kind)) + " #" + std::to_string(job.seq) + " on rank " +
         std::to_string(job.rank) + " (cuda device " + std::to_string(device) + ")";
}

// On the stream's host thread (Note [matching collectives]).
void run_job(Job& job) noexcept {
  Clique& c = *job.clique;
  const int device = c.ranks[static_cast<size_t>(job.rank)].device;  // set once, never changed
  {
    std::lock_guard<std::mutex> lock(c.m);
    if (c.broken) {  // nothing to do, nothing to touch
      job.finish_locked();
      return;
    }
  }
  // This rank's buffers, checked outside the clique's mutex (runtime calls): freed since the call?
  const size_t sb = send_bytes(job.args, job.rank, c.nranks), rb = recv_bytes(job.args, job.rank, c.nranks);
  const char* bad = nullptr;
  const void* bad_ptr = nullptr;
  size_t bad_bytes = 0;
  if (sb > 0 && !cudasim::device_accessible(job.send, sb)) bad = "sendbuff", bad_ptr = job.send, bad_bytes = sb;
  else if (rb > 0 && !cudasim::device_accessible(job.recv, rb)) bad = "recvbuff", bad_ptr = job.recv, bad_bytes = rb;
  if (bad != nullptr) {
    std::string msg;
    try {
      msg = job_name(job, device) + ": " + bad + " " + hex(bad_ptr) + " (" + std::to_string(bad_bytes) +
            " bytes) is not device memory when the collective runs (freed after the call?): illegal address";
    } catch (...) {
    }
    cudasim::device_fault(cudaErrorIllegalAddress, msg);
    std::lock_guard<std::mutex> lock(c.m);
    c.break_locked(ncclRemoteError, msg, job.rank, ncclUnhandledCudaError);
    job.finish_locked();
    return;
  }

  std::unique_lock<std::mutex> lock(c.m);
  try {
    if (c.broken) {
      job.finish_locked();
      return;
    }
    std::shared_ptr<PendingOp>& slot = c.ops[job.seq];
    if (slot == nullptr) slot = std::make_shared<PendingOp>(c.nranks);
    const std::shared_ptr<PendingOp> op = slot;
    if (op->first_rank < 0) {
      op->args = job.args;
      op->first_rank = job.rank;
    } else if (!(op->args == job.args)) {
      c.break_locked(ncclInvalidUsage, "collective #" + std::to_string(job.seq) + ": rank " +
                                           std::to_string(op->first_rank) + " called " + describe(op->args) +
                                           " but rank " + std::to_string(job.rank) + " called " +
                                           describe(job.args) +
                                           "; every rank must call the same collectives in the same order");
      job.finish_locked();
      return;
    }
    op->send[static_cast<size_t>(job.rank)] = job.send;
    op->recv[static_cast<size_t>(job.rank)] = job.recv;
    op->arrived[static_cast<size_t>(job.rank)] = 1;
    ++op->arrived_count;
    // A rank that is gone with nothing queued never arrives.
    for (int r = 0; r < c.nranks; ++r) {
      const RankSlot& s = c.ranks[static_cast<size_t>(r)];
      if (op->arrived[static_cast<size_t>(r)] == 0 && !s.live && s.pending == 0) {
        c.break_locked(ncclRemoteError, job_name(job, device) + " waits for rank " + std::to_string(r) +
                                            ", whose communicator was destroyed before it joined the collective");
        job.finish_locked();
        return;
      }
    }
    if (op->arrived_count == c.nranks) {
      compute(*op, c.nranks);
      op->done = true;
      c.ops.erase(job.seq);
      c.cv.notify_all();
    } else {
      c.cv.wait(lock, [&] { return op->done || c.broken; });
    }
    job.finish_locked();
  } catch (const std::bad_alloc&) {
    c.break_locked(ncclSystemError, job_name(job, device) + ": out of host memory for the simulated collective");
    job.finish_locked();
  } catch (...) {
    c.break_locked(ncclInternalError, job_name(job, device) + ": the simulated collective failed");
    job.finish_locked();
  }
}

// Queues one rank's collective on its stream (Note [matching collectives]).
ncclResult_t launch(const std::shared_ptr<Clique>& clique, int rank, const Args& args, const void* send, void* recv,
                    cudaStream_t stream) {
  auto job = std::make_shared<Job>();
  std::function<void()> work = [job] { run_job(*job); };
  Clique& c = *clique;
  const int device = c.ranks[static_cast<size_t>(rank)].device;
  {
    std::lock_guard<std::mutex> lock(c.m);
    RankSlot& slot = c.ranks[static_cast<size_t>(rank)];
    if (slot.async != ncclSuccess) {  // broken since the call was made (in a group)
      set_thread_error(std::string(kind_name(args.kind)) + " on rank " + std::to_string(rank) +
                       ": the communicator has an asynchronous error: " + c.broken_msg);
      return slot.async;
    }
    if (!slot.live) {
      set_thread_error(std::string(kind_name(args.kind)) + ": the communicator of rank " + std::to_string(rank) +
                       " was destroyed before ncclGroupEnd");
      return ncclInvalidArgument;
    }
    job->clique = clique;
    job->rank = rank;
    job->args = args;
    job->send = send;
    job->recv = recv;
    job->seq = slot.next_seq++;
    job->counted = true;
    ++slot.pending;
  }
  // The legacy default stream is the communicator's device's, as NCCL launches with it current.
  const int previous = cudasim::current_device();
  cudaError_t status = cudaSuccess;
  if (stream == nullptr && previous != device) status = cudaSetDevice(device);
  if (status == cudaSuccess) {
    try {
      status = cudasim::enqueue(stream, kind_name(args.kind), std::move(work));
    } catch (...) {
      status = cudaErrorMemoryAllocation;
    }
    if (stream == nullptr && previous != device) (void)cudaSetDevice(previous);
  }
  if (status == cudaSuccess) return ncclSuccess;
  cudasim::set_last_error(status);
  const std::string msg = std::string(kind_name(args.kind)) + " #" + std::to_string(job->seq) + " on rank " +
                          std::to_string(rank) + " (cuda device " + std::to_string(device) +
                          ") could not be queued on its stream: " + cudaGetErrorName(status);
  {
    std::lock_guard<std::mutex> lock(c.m);
    c.break_locked(ncclRemoteError, msg, rank, ncclUnhandledCudaError);
  }
  job.reset();  // no longer pending
  return fail(ncclUnhandledCudaError, msg);
}

// ---- groups ----

struct QueuedCollective {
  std::shared_ptr<Clique> clique;
  int rank;
  Args args;
  const void* send;
  void* recv;
  cudaStream_t stream;
};
struct QueuedInit {
  ncclComm* handle;
  IdKey key;
  int nranks, rank, device;
};
struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;  // the first failure inside the group
  std::vector<QueuedCollective> collectives;
  std::vector<QueuedInit> inits;
};
thread_local GroupState tl_group;

ncclResult_t group_error(ncclResult_t code) {
  if (tl_group.depth > 0 && tl_group.error == ncclSuccess) tl_group.error = code;
  return code;
}

// ---- collectives ----

// The checks NCCL makes when a collective is called, then the launch (or the group's queue).
ncclResult_t collective(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t datatype, int op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = kind_name(kind);
  if (comm == nullptr) return group_error(fail(ncclInvalidArgument, std::string(fn) + ": comm is NULL"));
  CommInfo info;
  if (!lookup(comm, &info))
    return group_error(fail(ncclInvalidArgument, std::string(fn) + ": comm " + hex(comm) +
                                                     " is not a live communicator (destroyed or aborted?)"));
  if (info.clique == nullptr) {
    if (info.init_error != ncclSuccess)
      return group_error(fail(info.init_error, std::string(fn) + ": the communicator failed to initialize: " +
                                                   info.init_msg));
    return group_error(fail(ncclInvalidUsage, std::string(fn) + ": the communicator is not initialized yet (its "
                                                                "ncclCommInitRank completes at ncclGroupEnd)"));
  }
  {
    std::unique_lock<std::mutex> lock(info.clique->m);
    const RankSlot& slot = info.clique->ranks[static_cast<size_t>(info.rank)];
    if (slot.async != ncclSuccess) {  // as NCCL: a communicator in error refuses new work
      const ncclResult_t code = slot.async;
      const std::string msg = std::string(fn) + ": the communicator has an asynchronous error (" +
                              ncclGetErrorString(code) + "): " + info.clique->broken_msg;
      lock.unlock();
      return group_error(fail(code, msg, &info));
    }
  }
  Args args;
  args.kind = kind;
  args.count = count;
  args.type = static_cast<int>(datatype);
  if (datatype < 0 || datatype >= ncclNumTypes)
    return group_error(fail(ncclInvalidArgument, std::string(fn) + ": invalid type " +
                                                     std::to_string(static_cast<int>(datatype)), &info));
  if (is_reduction(kind)) {
    if (op < 0 || op >= ncclNumOps)
      return group_error(
          fail(ncclInvalidArgument, std::string(fn) + ": invalid reduction operation " + std::to_string(op), &info));
    args.op = op;
  }
  if (is_rooted(kind)) {
    if (root < 0 || root >= info.nranks)
      return group_error(fail(ncclInvalidArgument, std::string(fn) + ": invalid root " + std::to_string(root) +
                                                       " (root should be in the 0.." +
                                                       std::to_string(info.nranks - 1) + " range)", &info));
    args.root = root;
  }
  if (count == 0) return ncclSuccess;  // nothing to do, as NCCL skips empty collectives
  const size_t ts = type_size(datatype);
  if (count > SIZE_MAX / ts / static_cast<size_t>(info.nranks))
    return group_error(fail(ncclInvalidArgument, std::string(fn) + ": count " + std::to_string(count) + " is too large",
                            &info));
  // Buffers: device memory of the communicator's device, or pinned host memory.
  struct Buffer {
    const char* name;
    const void* p;
    size_t bytes;
  };
  const Buffer buffers[] = {{"sendbuff", send, send_bytes(args, info.rank, info.nranks)},
                            {"recvbuff", recv, recv_bytes(args, info.rank, info.nranks)}};
  for (const Buffer& b : buffers) {
    if (b.bytes == 0) continue;
    if (b.p == nullptr)
      return group_error(fail(ncclInvalidArgument, std::string(fn) + ": " + b.name + " is NULL", &info));
    const int on = cudasim::device_of(b.p, b.bytes);
    if (on >= 0 && on != info.device)
      return group_error(fail(ncclInvalidArgument, std::string(fn) + ": " + b.name + " " + hex(b.p) +
                                                       " allocated on device " + std::to_string(on) +
                                                       " mismatches with NCCL device " + std::to_string(info.device),
                              &info));
    if (on < 0 && !cudasim::device_accessible(b.p, b.bytes))
      return group_error(fail(ncclInvalidArgument, std::string(fn) + ": " + b.name + " " + hex(b.p) + " (" +
                                                       std::to_string(b.bytes) +
                                                       " bytes) is not device memory (nor pinned host memory)",
                              &info));
  }
  if (stream != nullptr) {
    const int sd = cudasim::stream_device(stream);
    if (sd != info.device) {
      cudasim::set_last_error(cudaErrorInvalidResourceHandle);
      return group_error(fail(ncclUnhandledCudaError,
                              std::string(fn) + ": stream " + hex(stream) +
                                  (sd < 0 ? std::string(" is not a live stream")
                                          : " belongs to cuda device " + std::to_string(sd) +
                                                ", the communicator's device is " + std::to_string(info.device)) +
                                  ": cudaErrorInvalidResourceHandle",
                              &info));
    }
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;  // (the legacy stream is never captured)
  if (stream != nullptr && cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone)
    return group_error(fail(ncclInvalidUsage, std::string(fn) +
                                                  ": the stream is being captured; the simulated NCCL (cudasim) "
                                                  "does not support collectives in CUDA graphs",
                            &info));
  if (tl_group.depth > 0) {
    tl_group.collectives.push_back(QueuedCollective{info.clique, info.rank, args, send, recv, stream});
    return ncclSuccess;
  }
  const ncclResult_t status = launch(info.clique, info.rank, args, send, recv, stream);
  if (status != ncclSuccess) return fail(status, tl_last_error, &info);
  return ncclSuccess;
}

// Removes a communicator: `abort` breaks its clique at once (Note [breaking a clique]);
// otherwise its queued collectives finish first.
ncclResult_t remove_comm(ncclComm_t comm, bool abort) {
  const char* fn = abort ? "ncclCommAbort" : "ncclCommDestroy";
  if (comm == nullptr) return ncclSuccess;
  CommInfo info;
  if (!lookup(comm, &info))
    return fail(ncclInvalidArgument,
                std::string(fn) + ": comm " + hex(comm) + " is not a live communicator (destroyed or aborted?)");
  if (info.clique != nullptr) {
    Clique& c = *info.clique;
    std::unique_lock<std::mutex> lock(c.m);
    RankSlot& slot = c.ranks[static_cast<size_t>(info.rank)];
    if (abort) {
      slot.live = false;
      c.break_locked(ncclRemoteError, "rank " + std::to_string(info.rank) + " (cuda device " +
                                          std::to_string(info.device) + ") aborted its communicator (ncclCommAbort)",
                     info.rank, ncclSuccess);
    } else {
      c.cv.wait(lock, [&] { return slot.pending == 0; });
      slot.live = false;
      if (!c.ops.empty())  // collectives this rank never joined: they cannot complete now
        c.break_locked(ncclRemoteError, "rank " + std::to_string(info.rank) + " (cuda device " +
                                            std::to_string(info.device) + ") destroyed its communicator while "
                                            "other ranks wait for it in collective #" +
                                            std::to_string(c.ops.begin()->first),
                       info.rank, ncclSuccess);
    }
  }
  unregister_handle(comm);
  return ncclSuccess;
}

// ncclCommCount, ncclCommCuDevice, ncclCommUserRank.
template <class F>
ncclResult_t query(const char* fn, ncclComm_t comm, int* out, F get) {
  return guarded(fn, [&] {
    if (comm == nullptr) return fail(ncclInvalidArgument, std::string(fn) + ": comm is NULL");
    if (out == nullptr) return fail(ncclInvalidArgument, std::string(fn) + ": the output pointer is NULL");
    CommInfo info;
    if (!lookup(comm, &info))
      return fail(ncclInvalidArgument, std::string(fn) + ": comm " + hex(comm) + " is not a live communicator");
    *out = get(info);
    return ncclSuccess;
  });
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded("ncclGetUniqueId", [&] {
    if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    static std::atomic<uint64_t> serial{0};
    std::memset(uniqueId->internal, 0, sizeof(uniqueId->internal));
    std::memcpy(uniqueId->internal, kIdMagic, sizeof(kIdMagic));
    const uint64_t nonce = process_nonce(), s = ++serial;
    const int32_t pid = static_cast<int32_t>(::getpid());
    std::memcpy(uniqueId->internal + kNonceOffset, &nonce, sizeof(nonce));
    std::memcpy(uniqueId->internal + kSerialOffset, &s, sizeof(s));
    std::memcpy(uniqueId->internal + kPidOffset, &pid, sizeof(pid));
    return ncclSuccess;
  });
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guarded("ncclCommInitAll", [&] {
    if (comms == nullptr) return fail(ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
    if (ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: invalid ndev " + std::to_string(ndev));
    const int count = cudasim::device_count();
    std::vector<int> devices(static_cast<size_t>(ndev));
    for (int i = 0; i < ndev; ++i) {
      const int d = devlist != nullptr ? devlist[i] : i;
      if (d < 0 || d >= count)
        return fail(ncclInvalidArgument, "ncclCommInitAll: invalid device " + std::to_string(d) + " (there are " +
                                             std::to_string(count) + " devices)");
      for (int j = 0; j < i; ++j)
        if (devices[static_cast<size_t>(j)] == d)
          return fail(ncclInvalidUsage, "ncclCommInitAll: duplicate device " + std::to_string(d) + " in the list");
      devices[static_cast<size_t>(i)] = d;
    }
    auto clique = std::make_shared<Clique>(devices);
    std::vector<ncclComm*> made;
    made.reserve(static_cast<size_t>(ndev));
    try {
      for (int i = 0; i < ndev; ++i) {
        CommInfo info;
        info.clique = clique;
        info.rank = i;
        info.nranks = ndev;
        info.device = devices[static_cast<size_t>(i)];
        made.push_back(register_handle(std::move(info)));
      }
    } catch (...) {
      for (ncclComm* h : made) unregister_handle(h);
      throw;
    }
    for (int i = 0; i < ndev; ++i) comms[i] = made[static_cast<size_t>(i)];
    return ncclSuccess;
  });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return guarded("ncclCommInitRank", [&] {
    if (comm == nullptr) return group_error(fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL"));
    *comm = nullptr;
    if (nranks < 1)
      return group_error(fail(ncclInvalidArgument, "ncclCommInitRank: invalid nranks " + std::to_string(nranks)));
    if (rank < 0 || rank >= nranks)
      return group_error(fail(ncclInvalidArgument, "ncclCommInitRank: invalid rank " + std::to_string(rank) +
                                                       " (nranks " + std::to_string(nranks) + ")"));
    IdKey key;
    if (const ncclResult_t s = decode_id(commId, &key); s != ncclSuccess) return group_error(s);
    const int device = cudasim::current_device();
    CommInfo pending;
    pending.rank = rank;
    pending.nranks = nranks;
    pending.device = device;
    ncclComm* handle = register_handle(pending);
    if (tl_group.depth > 0) {  // joins at ncclGroupEnd
      try {
        tl_group.inits.push_back(QueuedInit{handle, key, nranks, rank, device});
      } catch (...) {
        unregister_handle(handle);
        throw;
      }
      *comm = handle;
      return ncclSuccess;
    }
    std::shared_ptr<Rendezvous> rv;
    const double timeout = init_timeout_seconds();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout));
    ncclResult_t status = join(key, nranks, rank, device, &rv);
    if (status == ncclSuccess) status = await(*rv, rank, deadline, timeout);
    if (status != ncclSuccess) {
      unregister_handle(handle);
      return status;
    }
    CommInfo info = pending;
    info.clique = rv->clique;
    set_info(handle, std::move(info));
    *comm = handle;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded("ncclCommFinalize", [&] {
    if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    CommInfo info;
    if (!lookup(comm, &info))
      return fail(ncclInvalidArgument, "ncclCommFinalize: comm " + hex(comm) + " is not a live communicator");
    if (info.clique != nullptr) {
      std::unique_lock<std::mutex> lock(info.clique->m);
      const RankSlot& slot = info.clique->ranks[static_cast<size_t>(info.rank)];
      info.clique->cv.wait(lock, [&] { return slot.pending == 0; });
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded("ncclCommDestroy", [&] { return remove_comm(comm, false); });
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded("ncclCommAbort", [&] { return remove_comm(comm, true); });
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (ncclGetLastError has the details)";
    case ncclSystemError: return "unhandled system error (ncclGetLastError has the details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError has the details)";
    case ncclInvalidUsage: return "invalid usage (ncclGetLastError has the details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  try {
    // The newer of the communicator's last failure and the calling thread's.
    std::string s = tl_last_error;
    CommInfo info;
    if (comm != nullptr && lookup(comm, &info)) {
      if (info.clique != nullptr) {
        std::lock_guard<std::mutex> lock(info.clique->m);
        const RankSlot& slot = info.clique->ranks[static_cast<size_t>(info.rank)];
        if (!slot.last_error.empty() && (s.empty() || slot.last_stamp > tl_last_stamp)) s = slot.last_error;
      } else if (s.empty()) {
        s = info.init_msg;
      }
    }
    tl_returned = std::move(s);
    return tl_returned.c_str();
  } catch (...) {
    return "";
  }
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded("ncclCommGetAsyncError", [&] {
    if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm is NULL");
    if (asyncError == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    CommInfo info;
    if (!lookup(comm, &info))
      return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm " + hex(comm) + " is not a live communicator");
    if (info.clique == nullptr) {
      *asyncError = info.init_error != ncclSuccess ? info.init_error : ncclInProgress;
      return ncclSuccess;
    }
    std::lock_guard<std::mutex> lock(info.clique->m);
    *asyncError = info.clique->ranks[static_cast<size_t>(info.rank)].async;
    return ncclSuccess;
  });
}


ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return query("ncclCommCount", comm, count, [](const CommInfo& i) { return i.nranks; });
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return query("ncclCommCuDevice", comm, device, [](const CommInfo& i) { return i.device; });
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return query("ncclCommUserRank", comm, rank, [](const CommInfo& i) { return i.rank; });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclReduce", [&] {
    return collective(Kind::Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return guarded("ncclBcast", [&] {
    return collective(Kind::Broadcast, buff, buff, count, datatype, -1, root, comm, stream);
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclBroadcast", [&] {
    return collective(Kind::Broadcast, sendbuff, recvbuff, count, datatype, -1, root, comm, stream);
  });
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclAllReduce", [&] {
    return collective(Kind::AllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclReduceScatter", [&] {
    return collective(Kind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream);
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclAllGather", [&] {
    return collective(Kind::AllGather, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream);
  });
}

ncclResult_t ncclGroupStart(void) {
  ++tl_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  return guarded("ncclGroupEnd", [&] {
    if (tl_group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group call (no ncclGroupStart)");
    if (--tl_group.depth > 0) return ncclSuccess;
    GroupState group = std::move(tl_group);
    tl_group = GroupState{};
    ncclResult_t result = group.error;
    if (result != ncclSuccess) {
      // A call in the group failed: none of it is launched (its error text is the thread's last).
      const std::string msg = "ncclGroupEnd: a call inside the group failed, nothing of the group was launched: " +
                              tl_last_error;
      for (const QueuedInit& init : group.inits) {
        CommInfo info;
        if (!lookup(init.handle, &info)) continue;
        info.init_error = result;
        info.init_msg = msg;
        set_info(init.handle, std::move(info));
      }
      return fail(result, msg);
    }
    // Grouped ncclCommInitRank calls: join all, then wait for all.
    if (!group.inits.empty()) {
      const double timeout = init_timeout_seconds();
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(timeout));
      std::vector<std::shared_ptr<Rendezvous>> rvs(group.inits.size());
      std::vector<ncclResult_t> status(group.inits.size(), ncclSuccess);
      std::vector<std::string> msgs(group.inits.size());
      for (size_t i = 0; i < group.inits.size(); ++i) {
        const QueuedInit& q = group.inits[i];
        status[i] = join(q.key, q.nranks, q.rank, q.device, &rvs[i]);
        if (status[i] != ncclSuccess) msgs[i] = tl_last_error;
      }
      bool any_failed = false;
      for (ncclResult_t s : status) any_failed |= s != ncclSuccess;
      if (any_failed) {  // the others of this group would wait for it in vain
        std::lock_guard<std::mutex> lock(rendezvous_mutex());
        for (const auto& rv : rvs)
          if (rv != nullptr)
            fail_rendezvous_locked(*rv, ncclInvalidUsage,
                                   "another rank of the same ncclGroupStart/ncclGroupEnd failed to join");
      }
      for (size_t i = 0; i < group.inits.size(); ++i) {
        const QueuedInit& q = group.inits[i];
        if (status[i] == ncclSuccess) {
          status[i] = await(*rvs[i], q.rank, deadline, timeout);
          if (status[i] != ncclSuccess) msgs[i] = tl_last_error;
        }
        CommInfo info;
        if (!lookup(q.handle, &info)) continue;
        if (status[i] == ncclSuccess) {
          info.clique = rvs[i]->clique;
        } else {
          info.init_error = status[i];
          info.init_msg = msgs[i];
          if (result == ncclSuccess) result = status[i];
        }
        set_info(q.handle, std::move(info));
      }
      if (result != ncclSuccess) {
        for (size_t i = 0; i < msgs.size(); ++i)
          if (status[i] != ncclSuccess) return fail(result, msgs[i]);
      }
    }
    // Collectives, in the order they were called.
    std::string first_msg;
    for (const QueuedCollective& q : group.collectives) {
      const ncclResult_t s = launch(q.clique, q.rank, q.args, q.send, q.recv, q.stream);
      if (s != ncclSuccess && result == ncclSuccess) {
        result = s;
        first_msg = tl_last_error;
      }
    }
    if (result != ncclSuccess) return fail(result, first_msg);
    return ncclSuccess;
  });
}

}  // extern "C"
