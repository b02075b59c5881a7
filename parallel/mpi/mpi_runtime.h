// The MPI runtime of a minidl process: MPI initialised once, on first use, finalised once at
// exit, and the one thread that makes MPI's calls. Internal to parallel/ (it includes mpi.h,
// which no public header does); built only with MPI (MINIDL_WITH_MPI).
//
// Note [MPI's thread level]: every MPI call of the process — MPI_Init_thread, each collective,
// MPI_Finalize — runs on one thread, the MPI thread, in the order the calls were submitted.
// A collective launched from a gradient hook thus runs while backward goes on in the caller's
// thread (the overlap DataParallel's buckets are for), and MPI never sees two threads: the level
// the design needs is MPI_THREAD_FUNNELED (only the thread that initialised MPI calls it), and
// initialisation fails with a clear error when the library provides less. The one call from
// another thread is abort_job's MPI_Abort (Note [a failed rank] in parallel/process_group.h),
// made while the MPI thread may be blocked in a collective; it is the process's last call, and
// Open MPI and MPICH end the job from any thread.
//
// Finalising: an exit handler (atexit, registered at initialisation) runs MPI_Finalize on the
// MPI thread and joins it — once, whether main() returned 0 or an error status. A process that
// ends by an uncaught exception or a signal does not finalise: the launcher sees it die and ends
// the job (Note [a failed rank]).
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

#include <functional>
#include <string>

namespace minidl::parallel::mpi {

// Starts the MPI thread and initialises MPI on it (once per process; later calls return at
// once). Throws minidl::Error when MPI_Init_thread fails, provides less than
// MPI_THREAD_FUNNELED, or MPI was already finalised.
void ensure_initialized();

// Queues `job` on the MPI thread (after everything queued before it) and returns at once. The
// job must not throw (it reports through what it captures). ensure_initialized() first.
void submit(std::function<void()> job);
// Runs `job` on the MPI thread and waits for it; its exception is rethrown here.
void run(const std::function<void()>& job);

// Throws minidl::Error "<call> failed: <MPI's error string>" when rc is not MPI_SUCCESS.
void check(int rc, const char* call);

// Whether MPI_Init_thread succeeded in this process and MPI_Finalize has not run.
bool active();

}  // namespace minidl::parallel::mpi

#define MINIDL_MPI_CHECK(call) ::minidl::parallel::mpi::check((call), #call)
