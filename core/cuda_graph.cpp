// CUDAGraph (core/cuda_graph.h): the user-facing capture and replay over the backend's
// begin_capture / end_capture (kernels/cuda/graph.cu on a CUDA device).
#include "core/cuda_graph.h"

#include <utility>

#include "core/error.h"
#include "core/profiler.h"

namespace minidl {

CUDAGraph::~CUDAGraph() { capture_abort(); }

CUDAGraph::CUDAGraph(CUDAGraph&& other) noexcept
    : device_(other.device_), capturing_(std::exchange(other.capturing_, false)), graph_(std::move(other.graph_)) {}

CUDAGraph& CUDAGraph::operator=(CUDAGraph&& other) noexcept {
  if (this != &other) {
    capture_abort();
    device_ = other.device_;
    capturing_ = std::exchange(other.capturing_, false);
    graph_ = std::move(other.graph_);
  }
  return *this;
}

void CUDAGraph::capture_begin(Device device) {
  MINIDL_CHECK(!capturing_, "CUDAGraph::capture_begin: this graph is already capturing on ", device_,
               "; end that capture first");
  reset();
  backend_for(device).begin_capture();
  device_ = device;
  capturing_ = true;
}

void CUDAGraph::capture_end() {
  MINIDL_CHECK(capturing_, "CUDAGraph::capture_end: this graph is not capturing; call capture_begin first");
  capturing_ = false;
  graph_ = backend_for(device_).end_capture();
}

void CUDAGraph::capture_abort() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  try {
    backend_for(device_).abort_capture();
  } catch (...) {
    // backend_for of a device that was captured on cannot fail; nothing else to undo
  }
}

void CUDAGraph::capture(Device device, const std::function<void()>& step) {
  capture_begin(device);
  try {
    profiler::RecordScope scope("cuda_graph.capture", profiler::Kind::User);
    step();
  } catch (const Error& e) {
    capture_abort();
    throw Error(detail::make_message("CUDAGraph::capture on ", device, ": the step cannot be captured: ", e.what()));
  } catch (...) {
    capture_abort();
    throw;
  }
  capture_end();
}

void CUDAGraph::replay() {
  MINIDL_CHECK(graph_ != nullptr, "CUDAGraph::replay: ",
               capturing_ ? "the graph is still capturing; call capture_end first" : "nothing has been captured");
  profiler::RecordScope scope("cuda_graph.replay", profiler::Kind::User);
  graph_->replay();
}

void CUDAGraph::reset() {
  capture_abort();
  graph_.reset();
}

int64_t CUDAGraph::nodes() const { return graph_ ? graph_->nodes() : 0; }

}  // namespace minidl
