// NcclCommunicator: the Communicator of parallel/ for the CUDA devices of one process, through
// NCCL. Built only when CMake finds NCCL (MINIDL_WITH_NCCL); make_cuda_communicator() in
// parallel/communicator.cpp is the one caller.
//
// Setup: ncclCommInitAll gives one NCCL communicator per device, rank i on devices()[i], and
// each device gets a communication stream of its own (non-blocking), so that one bucket's
// all-reduce runs while backward goes on computing the next gradients on the compute stream.
//
// Note [one collective on two streams]: for device i,
//   compute_i : ... producers of the tensors ... record(ready_i)          ... wait(done_i) consumers
//   comm_i    :                               wait(ready_i) NCCL-call record(done_i)
// The NCCL calls of every device (and of every group) are issued by one host thread between
// ncclGroupStart and ncclGroupEnd, so all ranks see the collectives in the same order. wait()
// only makes compute_i wait for done_i: the host does not block, and later kernels that read
// the results are queued behind the collective. The memory of each tensor is marked with
// Backend::record_stream(t, comm_i), so a tensor freed before the collective finished is not
// handed out again until comm_i is past it (Note [stream-aware frees]).
//
// Note [NCCL errors]: every NCCL return code is checked (MINIDL_NCCL_CHECK, with NCCL's own
// last-error text). A failure NCCL finds while a collective runs (a peer that died, a network
// error in a multi-process setting) is asynchronous: is_completed() and wait() poll it with
// ncclCommGetAsyncError, and when one is reported the communicators are aborted (ncclCommAbort
// frees a hung collective) and that call and every later one throw a minidl::Error saying so.
// A CUDA failure after the NCCL calls were issued aborts them the same way (some devices may
// be running a collective the caller was told failed). Errors are seen when someone polls: a
// collective that hangs without NCCL reporting an error blocks whoever synchronizes.
//
// The comm streams are taken from a pool and never destroyed (Note [comm streams live
// forever] in the .cpp): the caching allocator may still name them after the communicator
// is gone.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace minidl::parallel {

// Checks the device list (CUDA devices, each once, all present) and creates the NCCL
// communicators; NCCL's failure is a minidl::Error naming the devices.
std::shared_ptr<Communicator> make_nccl_communicator(const std::vector<Device>& devices);

}  // namespace minidl::parallel
