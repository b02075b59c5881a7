// Graph capture and replay on one CUDA device (Backend::begin_capture; users see
// minidl::CUDAGraph, core/cuda_graph.h).
//
// Capture: the device's one compute stream is put in capture mode (cudaStreamBeginCapture,
// global mode), so every kernel, copy and fill the ops queue on it is recorded into a graph
// instead of run. Allocations meanwhile come from a pool of the caching allocator that the graph
// owns (Note [graph pools], caching_allocator.h); cudaMalloc and cudaHostAlloc are made in
// relaxed mode (RelaxedCaptureMode), as a capture would otherwise refuse them. An op that a
// replay could not repeat refuses before it queues anything (refuse_in_capture): a host wait
// (synchronize, a copy to the host), a copy from pageable host memory (the graph would read the
// address again at each replay, long after the caller reused it), random numbers (their Philox
// counters are kernel arguments: every replay would draw the same ones), Adam's step count (its
// bias correction is computed on the host). The target check of the cross-entropy losses, a
// deferred host-side error (Note [deferred target errors]), is left out of a capture.
//
// End: cudaStreamEndCapture returns the graph, cudaGraphInstantiate makes it launchable.
// Replay: one cudaGraphLaunch on the same stream, ordered with the eager work around it like
// any op. The graph holds its pool until it is destroyed; then the pool's blocks return to the
// shared cache (stream-ordered, as every block: Note [stream-aware frees]).
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/profiler.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace minidl::cuda {

namespace {

// The CUDA side of a CapturedGraph: what cudaStreamEndCapture recorded from this device's compute
// stream, its instantiated form (the cudaGraphExec_t a replay launches), and the pool and host
// tensors its replays use. Named for the stream it was captured from and is replayed on, apart
// from minidl::CUDAGraph, the public class that holds one.
class StreamGraph final : public CapturedGraph {
 public:
  StreamGraph(CudaBackend& be, cudaGraph_t graph, cudaGraphExec_t exec, CachingAllocator::PoolId pool,
            std::vector<Tensor> keep, int64_t nodes)
      : be_(be), graph_(graph), exec_(exec), pool_(pool), keep_(std::move(keep)), nodes_(nodes) {}
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  ~StreamGraph() override {
    QuietDeviceGuard guard(be_.device_index());
    // A replay may still be running, and it reads keep_'s host memory, which is not
    // stream-ordered: wait for it before that memory can be reused.
    (void)cudaStreamSynchronize(be_.stream());
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGraphDestroy(graph_);
    (void)cudaGetLastError();
    keep_.clear();
    be_.caching_allocator().release_pool(pool_);
  }

  void replay() override {
    MINIDL_CHECK(!be_.capturing(), "CUDAGraph::replay on ", be_.device(),
                 ": the device is capturing a graph; replay graphs outside a capture");
    profiler::note_launch();
    DeviceGuard guard(be_.device_index());
    MINIDL_CUDA_CHECK(cudaGraphLaunch(exec_, be_.stream()));
  }

  int64_t nodes() const override { return nodes_; }

 private:
  CudaBackend& be_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  CachingAllocator::PoolId pool_;
  std::vector<Tensor> keep_;  // host memory the graph's copies read
  int64_t nodes_;
};

}  // namespace

void CudaBackend::begin_capture() {
  MINIDL_CHECK(!capturing(), "CUDAGraph::capture_begin on ", device(),
               ": a capture is already under way on this device; one capture at a time per device");
  synchronize();  // earlier work done, and its deferred errors raised, before anything is recorded
  DeviceGuard guard(device_);
  const CachingAllocator::PoolId pool = allocator_->new_pool();
  allocator_->begin_pool(pool);
  const cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    allocator_->end_pool();
    allocator_->release_pool(pool);
    MINIDL_CUDA_CHECK(status);
  }
  capture_pool_ = pool;
  capture_keep_.clear();
  capturing_.store(true, std::memory_order_release);
}

std::unique_ptr<CapturedGraph> CudaBackend::end_capture() {
  MINIDL_CHECK(capturing(), "CUDAGraph::capture_end on ", device(), ": no capture is under way on this device");
  DeviceGuard guard(device_);
  capturing_.store(false, std::memory_order_release);
  allocator_->end_pool();
  const CachingAllocator::PoolId pool = std::exchange(capture_pool_, 0);
  std::vector<Tensor> keep = std::move(capture_keep_);
  capture_keep_.clear();
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    allocator_->release_pool(pool);
    throw Error(detail::make_message(
        "CUDAGraph::capture_end on ", device(), ": the capture failed (", cudaGetErrorName(status), ": ",
        cudaGetErrorString(status),
        "): a call during it that a graph cannot record (a wait for the device, a copy from pageable host memory, "
        "a CUDA call from outside minidl) ended it; nothing was recorded"));
  }
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) {
    (void)cudaGetLastError();
    nodes = 0;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    (void)cudaGraphDestroy(graph);
    allocator_->release_pool(pool);
    MINIDL_CUDA_CHECK(inst);
  }
  return std::make_unique<StreamGraph>(*this, graph, exec, pool, std::move(keep), static_cast<int64_t>(nodes));
}

void CudaBackend::abort_capture() noexcept {
  if (!capturing()) return;
  QuietDeviceGuard guard(device_);
  capturing_.store(false, std::memory_order_release);
  allocator_->end_pool();
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // an invalidated capture reports an error here: nothing ran, nothing to keep
  capture_keep_.clear();
  allocator_->release_pool(std::exchange(capture_pool_, 0));
}

void CudaBackend::refuse_in_capture(const char* op, const char* why) const {
  if (!capturing()) return;
  throw Error(detail::make_message(op, " on ", device(), " cannot be captured in a CUDA graph: ", why,
                                   "; keep it out of the captured step"));
}

void CudaBackend::keep_for_graph(Tensor host) { capture_keep_.push_back(std::move(host)); }

}  // namespace minidl::cuda
