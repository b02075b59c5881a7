// MpiProcessGroup: the ProcessGroup of CPU tensors, through MPI over every process of the job.
//
// Each collective is checked on the caller's thread, then queued as one job on the MPI thread
// (Note [MPI's thread level] in mpi_runtime.h), which makes the blocking MPI call and completes
// the work; wait() blocks until then. Jobs run in launch order, so a process that launches the
// same collectives in the same order as the others (the rule of every process group) matches
// them up. MPI_COMM_WORLD is duplicated, so minidl's collectives never mix with a program's own
// MPI traffic; errors are return codes (MPI_ERRORS_RETURN), rethrown by wait() as minidl::Error.
//
// Note [blocking calls on the MPI thread]: each collective is one blocking MPI call
// (MPI_Allreduce, MPI_Bcast, MPI_Allgather, MPI_Barrier). The caller does not wait in it — it
// runs on the MPI thread while the caller's backward goes on (except a small collective run
// inline, Note [small collectives run inline]) — so nothing is gained by the nonblocking forms
// (MPI_Iallreduce, ...), and much is lost: Open MPI runs those through a
// separate, generic schedule (libnbc) that advances only while someone calls MPI_Test, and
// polling them with sleeps between tests measured at 20-40% of the bandwidth of the blocking
// call, polling without sleeps at 40-65% (bench_process_group, 2 processes on a 2-core VM).
// The price of the blocking call is that MPI polls its progress engine while it waits for the
// other ranks, keeping a core busy; see docs/distributed.md for what that costs when every
// core also runs a process's computation.
//
// all_reduce(average) is MPI_SUM, then a division by the world size on this process; int64
// has no average (as in NCCL). MPI counts are int: a tensor of more than 2^30 elements is
// reduced and broadcast in pieces of 2^30.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>

#include "parallel/host_collective_work.h"
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/process_group.h"

namespace minidl::parallel {
namespace {

constexpr int64_t kMaxPiece = int64_t{1} << 30;  // elements per MPI call

MPI_Datatype mpi_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::BFloat16:
    case DType::Float16:
      // MPI has no 16-bit floating type to sum; mixed-precision training keeps its gradients in
      // float32 (the master weights'), so only a 16-bit tensor a user hands in directly gets here.
      throw Error(detail::make_message("mpi process group: ", dtype,
                                       " tensors cannot be communicated over MPI (it has no 16-bit floating type); "
                                       "convert them to float32 with .to(DType::Float32) first"));
  }
  throw Error("mpi process group: unknown dtype");
}

// call(pointer, count) for each piece of at most kMaxPiece elements of t, in order.
template <typename Call>
void for_each_piece(const Tensor& t, Call&& call) {
  auto* base = static_cast<char*>(t.raw_data());
  const size_t item = dtype_size(t.dtype());
  for (int64_t start = 0; start < t.numel(); start += kMaxPiece)
    call(base + static_cast<size_t>(start) * item, static_cast<int>(std::min(kMaxPiece, t.numel() - start)));
}

template <typename T>
void divide(T* data, int64_t n, int divisor) {
  for (int64_t i = 0; i < n; ++i) data[i] /= static_cast<T>(divisor);
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(MPI_Comm comm, int rank, int world, int local_rank, int local_world)
      : ProcessGroup(Device::cpu(), rank, world, local_rank, local_world), comm_(comm) {}

  // Waits for the collectives still queued (they are the job's; a process that stopped taking
  // part would leave the others waiting), then frees the communicator.
  ~MpiProcessGroup() override {
    if (!mpi::active()) return;  // at exit, after MPI_Finalize: nothing left to free
    try {
      MPI_Comm comm = comm_;
      mpi::run([comm]() mutable { MPI_Comm_free(&comm); });
    } catch (...) {  // no exceptions out of a destructor
    }
  }

  std::string backend_name() const override { return "mpi"; }

  std::shared_ptr<CollectiveWork> all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) override {
    check_groups(groups, "all_reduce");
    for (const DeviceTensors& g : groups) {
      (void)mpi_dtype(g[0].dtype());
      MINIDL_CHECK(op == ReduceOp::Sum || g[0].dtype() != DType::Int64, "mpi process group all_reduce: average of ",
                   g[0].dtype(), " tensors is not defined; sum them, or average floating-point tensors");
    }
    const int world = world_size();
    return launch("all_reduce(" + std::string(reduce_op_name(op)) + ")", groups, [groups, op, world](MPI_Comm comm) {
      for (const DeviceTensors& g : groups) {
        const Tensor& t = g[0];
        for_each_piece(t, [&](void* piece, int count) {
          MINIDL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, piece, count, mpi_dtype(t.dtype()), MPI_SUM, comm));
        });
        if (op == ReduceOp::Average) {
          if (t.dtype() == DType::Float32) divide(t.data<float>(), t.numel(), world);
          else divide(t.data<double>(), t.numel(), world);
        }
      }
    });
  }

  std::shared_ptr<CollectiveWork> broadcast_grouped(std::vector<DeviceTensors> groups, int root) override {
    check_groups(groups, "broadcast");
    check_root_rank(root, "broadcast");
    for (const DeviceTensors& g : groups) (void)mpi_dtype(g[0].dtype());
    return launch("broadcast(root " + std::to_string(root) + ")", groups, [groups, root](MPI_Comm comm) {
      for (const DeviceTensors& g : groups) {
        const Tensor& t = g[0];
        for_each_piece(t, [&](void* piece, int count) {
          MINIDL_MPI_CHECK(MPI_Bcast(piece, count, mpi_dtype(t.dtype()), root, comm));
        });
      }
    });
  }

  std::shared_ptr<CollectiveWork> all_gather(const Tensor& input, const Tensor& output) override {
    check_all_gather(input, output);
    (void)mpi_dtype(input.dtype());
    MINIDL_CHECK(input.numel() <= INT_MAX, "mpi process group all_gather: ", input.numel(),
                 " elements per rank is more than one MPI call carries (", INT_MAX, ")");
    return launch("all_gather", {{input}, {output}}, [input, output](MPI_Comm comm) {
      const int count = static_cast<int>(input.numel());
      MINIDL_MPI_CHECK(MPI_Allgather(input.raw_data(), count, mpi_dtype(input.dtype()), output.raw_data(), count,
                                     mpi_dtype(input.dtype()), comm));
    });
  }

  std::shared_ptr<CollectiveWork> barrier() override {
    return launch("barrier", {}, [](MPI_Comm comm) {
      MINIDL_MPI_CHECK(MPI_Barrier(comm));
    });
  }

 private:
  // Queues `call` on the MPI thread; the work completes when it returns (or threw). The groups'
  // tensors are captured by `call`, which keeps their storage alive until then.
  template <typename Call>
  std::shared_ptr<CollectiveWork> launch(const std::string& what, const std::vector<DeviceTensors>& groups,
                                         Call call) {
    MINIDL_CHECK(mpi::active(), "mpi process group ", what, ": MPI was finalised (the program is exiting)");
    auto work = std::make_shared<HostCollectiveWork>("mpi " + what + " of " + std::to_string(groups.size()) +
                                                     " tensor(s) on rank " + std::to_string(rank()) + " of " +
                                                     std::to_string(world_size()));
    MPI_Comm comm = comm_;
    auto job = [work, call = std::move(call), comm] {
      std::exception_ptr error;
      try {
        call(comm);
      } catch (...) {
        error = std::current_exception();
      }
      work->complete(error);
    };
    size_t bytes = 0;
    for (const DeviceTensors& g : groups) bytes += static_cast<size_t>(g[0].numel()) * dtype_size(g[0].dtype());
    if (bytes <= mpi::kInlineBytes && mpi::try_run_inline(job)) return work;  // Note [small collectives run inline]
    mpi::submit(std::move(job));
    return work;
  }

  MPI_Comm comm_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_process_group() {
  mpi::ensure_initialized();
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  mpi::run([&] {
    MINIDL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    MINIDL_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MINIDL_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MINIDL_MPI_CHECK(MPI_Comm_size(comm, &world));
    // The processes that share memory with this one: those on its machine.
    MPI_Comm node = MPI_COMM_NULL;
    MINIDL_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    MINIDL_MPI_CHECK(MPI_Comm_rank(node, &local_rank));
    MINIDL_MPI_CHECK(MPI_Comm_size(node, &local_world));
    MINIDL_MPI_CHECK(MPI_Comm_free(&node));
  });
  return std::make_shared<MpiProcessGroup>(comm, rank, world, local_rank, local_world);
}

}  // namespace minidl::parallel
