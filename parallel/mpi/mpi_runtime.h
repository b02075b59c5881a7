// The MPI runtime of a minidl process: MPI initialised once, on first use, finalised once at
// exit, and the one thread that makes MPI's calls. Internal to parallel/ (it includes mpi.h,
// which no public header does); built only with MPI (MINIDL_WITH_MPI).
//
// Note [MPI's thread level]: MPI_Init_thread, MPI_Finalize and every collective run on one
// thread, the MPI thread, in the order they were submitted. A collective launched from a
// gradient hook thus runs while backward goes on in the caller's thread (the overlap
// DataParallel's buckets are for). The exception is a small collective launched while the MPI
// thread is idle (Note [small collectives run inline]): the launching thread makes that call
// itself. So MPI is called from more than one thread, but never from two at once (the queue's
// `busy` flag orders them): the level the design needs is MPI_THREAD_SERIALIZED, and
// initialisation fails with a clear error when the library provides less. The one unordered call
// is abort_job's MPI_Abort (Note [a failed rank] in parallel/process_group.h), made while the MPI
// thread is usually inside a blocking collective. That is legal only at MPI_THREAD_MULTIPLE, so
// minidl asks for MULTIPLE and makes do with SERIALIZED where the library offers no more (Open
// MPI and MPICH end the job from any thread even then; MULTIPLE cost no measurable bandwidth in
// bench_process_group on Open MPI 4.1).
//
// Note [small collectives run inline]: handing a collective to the MPI thread and its result
// back costs two thread wake-ups — tens of microseconds on a quiet machine, a scheduler slice
// (milliseconds) on a busy one, far more than an all-reduce of a few kilobytes. A collective of
// at most kInlineBytes, launched while nothing is queued or running, is therefore made by the
// launching thread itself and returns completed, in the same order among the process's
// collectives as if it had been queued.
//
// Finalising: an exit handler (atexit, registered at initialisation) runs MPI_Finalize on the
// MPI thread and joins it — once, whether main() returned 0 or an error status. A process that
// ends by an uncaught exception or a signal does not finalise: the launcher sees it die and ends
// the job (Note [a failed rank]).
//
// Why a queue of its own: kernels/cpu's ThreadPool and parallel::ReplicaThreads are synchronous
// fork-joins over several threads, and the CpuCommunicator's workers each take a part of every
// job. This is one thread for the life of the process (MPI_Init_thread to MPI_Finalize), taking
// opaque jobs in FIFO order, submitted without waiting (submit) or waited for (run), with a
// `busy` flag that lets a small job run inline and keeps MPI's calls serialised.
#pragma once

// The MPI C API only: Open MPI's and MPICH's deprecated C++ bindings stay out (they do not build
// warning-free).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <functional>
#include <string>

namespace minidl::parallel::mpi {

// Starts the MPI thread and initialises MPI on it (once per process; later calls return at
// once). Throws minidl::Error when MPI_Init_thread fails, provides less than
// MPI_THREAD_SERIALIZED, or MPI was already finalised.
void ensure_initialized();

// Queues `job` on the MPI thread (after everything queued before it) and returns at once. The
// job must not throw (it reports through what it captures). ensure_initialized() first.
void submit(std::function<void()> job);
// Runs `job` on this thread if nothing is queued or running on the MPI thread (Note [small
// collectives run inline]), holding MPI meanwhile; returns false, running nothing, otherwise.
// The job must not throw.
bool try_run_inline(const std::function<void()>& job);
constexpr size_t kInlineBytes = size_t{64} << 10;
// Runs `job` on the MPI thread and waits for it; its exception is rethrown here.
void run(const std::function<void()>& job);

// Throws minidl::Error "<call> failed: <MPI's error string>" when rc is not MPI_SUCCESS.
void check(int rc, const char* call);

// Whether MPI_Init_thread succeeded in this process and MPI_Finalize has not run.
bool active();

}  // namespace minidl::parallel::mpi

#define MINIDL_MPI_CHECK(call) ::minidl::parallel::mpi::check((call), #call)
