// NCCL of the simulated device (cudasim): collectives between the simulated devices of ONE
// process, with NCCL's names, types, enum values, return codes and stream semantics, implemented
// on the CPU (cudasim/src/nccl.cpp). A MINIDL_CUDA_SIM build puts cudasim/include first on the
// include path, so parallel/nccl compiles and runs unchanged.
//
// Simulated faithfully:
//   - communicators: ncclCommInitAll (one rank per listed device), ncclCommInitRank (the ranks
//     meet by the unique id: each on a host thread of its own, or several from one thread
//     inside ncclGroupStart/ncclGroupEnd), a rank per device (a device twice is ncclInvalidUsage);
//   - collectives are asynchronous: a call checks its arguments (an error is returned at once,
//     as NCCL's argument checks do), then the work is queued on the given stream, in order with
//     the kernels around it. On that stream's host thread it waits for the same collective (the
//     n-th call on each rank's communicator) of every other rank; the last rank to arrive
//     computes the result for all. In-place calls (sendbuff == recvbuff; for ncclAllGather
//     sendbuff == recvbuff + rank·count, for ncclReduceScatter recvbuff == sendbuff + rank·count)
//     work. Reductions add in rank order; ncclAvg scales each input by 1/nranks before the sum
//     for floating types (as NCCL's pre-multiplied sum does) and divides the sum for integers;
//     half and bfloat16 are reduced in float and rounded to nearest even after every step. An
//     empty call (count 0) is checked and does nothing, as NCCL skips it;
//   - groups: calls between ncclGroupStart and ncclGroupEnd (nested) are only checked and kept;
//     the outermost ncclGroupEnd queues them all, or none when one of them failed (it returns
//     that error). Since every rank's collective runs on its own stream's thread, one host
//     thread issuing all ranks' calls cannot deadlock, in a group or not;
//   - errors: ncclGetErrorString, ncclGetLastError (the words on the last failure: the newer of
//     the communicator's and the calling thread's), NCCL_DEBUG=WARN prints them to stderr;
//     ncclCommAbort on any rank wakes every peer stuck in a collective of the same clique — their
//     work ends without touching memory and ncclCommGetAsyncError reports ncclRemoteError on them.
//     A rank destroyed while its peers wait for it, a collective its device dropped unrun (a
//     device that faulted runs nothing more), a buffer freed before the collective ran (that
//     device faults), and ranks that call different collectives (op, type, count or root) as
//     their n-th also end the clique with an asynchronous error rather than a hang or garbage.
// Not simulated: processes. The unique id holds a number of this process; ncclCommInitRank with
// an id from another process is ncclInvalidUsage, saying that the simulated NCCL joins ranks of
// one process only, and a rank whose peers never arrive (they run in other processes, or never
// call) gives up after MINIDL_SIM_NCCL_INIT_TIMEOUT seconds (default 30) with ncclSystemError
// and that explanation. Also not simulated: NCCL's algorithms (rings, trees) and their summation
// order, point-to-point ncclSend/ncclRecv, user reduction ops, communicator splitting, the
// non-blocking configuration, and stream capture (a collective on a capturing stream is
// ncclInvalidUsage). Buffers are checked to be device memory of the communicator's device (or
// pinned host memory) when the call is made, as NCCL_CHECK_POINTERS=1 does.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 5
#define NCCL_SUFFIX ""
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE 22105
#define MINIDL_CUDASIM_NCCL 1

struct ncclComm;
typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclNumTypes = 10
} ncclDataType_t;

extern "C" {

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);

// Blocks until all `nranks` ranks of `commId` have joined (see the file comment for the timeout).
// The rank's device is the calling thread's current device.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
// ndev communicators, rank i on devlist[i] (devlist nullptr: devices 0 .. ndev-1).
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
// Waits for the rank's queued collectives, then frees it.
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
// Frees the communicator at once; peers waiting in a collective of its clique are released with
// an asynchronous error.
ncclResult_t ncclCommAbort(ncclComm_t comm);

const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

}  // extern "C"
