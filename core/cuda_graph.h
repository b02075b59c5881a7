// CUDAGraph: record a whole stretch of a device's work — a training step's forward, backward and
// optimizer update — once, then replay it with one launch, as torch.cuda.CUDAGraph does. A
// small model's step is hundreds of tiny kernels whose launches cost the host more than the GPU
// spends on them; a replay queues all of them at once.
//
//   CUDAGraph graph;
//   graph.capture(Device::cuda(0), [&] { loss = step(static_x, static_y); });  // records, runs nothing
//   for (each batch) {
//     static_x.copy_(x); static_y.copy_(y);  // new data into the tensors the graph reads
//     graph.replay();                        // the whole step; `loss` holds its result
//   }
//
// What a replay does is fixed at capture: the same kernels on the same addresses with the same
// arguments. So (as in PyTorch):
//   - inputs are "static": tensors created before the capture that the step reads; give them new
//     values in place (copy_) before each replay. Outputs (the loss, the gradients, anything the
//     step created and the caller kept) are static too: each replay writes them again.
//   - memory the capture allocates comes from a pool that the graph keeps until it is destroyed
//     (Note [graph pools] in kernels/cuda/caching_allocator.h), so no eager op can be handed a
//     block a replay writes.
//   - host-side values are frozen: the learning rate, a scheduler's changes, a host counter.
//     Capture after warm-up steps (SGD's first step with momentum initialises its buffers and
//     refuses a capture), and capture again when such a value changes.
//   - what a replay cannot repeat throws a minidl::Error naming the op during the capture: a
//     host wait (item(), .to(cpu), printing, synchronize), a copy from pageable host memory,
//     random numbers (dropout), Adam's host-side step count. The capture is then abandoned, the
//     graph stays empty, and the device works as before.
//   - a copy from pinned host memory is captured, and every replay reads that memory again: treat
//     the pinned tensor as a static input (keep it alive; change it in place between replays).
//   - the targets of a captured cross-entropy are not checked (a bad one gives its row a NaN loss).
// Where ops run synchronously (the CPU) there is nothing to capture: capture() throws.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/backend.h"
#include "core/device.h"

namespace minidl {

class CUDAGraph {
 public:
  CUDAGraph() = default;
  ~CUDAGraph();
  CUDAGraph(CUDAGraph&&) noexcept;
  CUDAGraph& operator=(CUDAGraph&&) noexcept;
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  // Records what `step` queues on `device` into this graph (replacing what it held), running
  // nothing; waits for the device's earlier work first. If `step` throws, the capture is
  // abandoned and the Error says which op could not be captured; the graph is then empty.
  void capture(Device device, const std::function<void()>& step);
  // The same in two calls, as torch.cuda.CUDAGraph's capture_begin / capture_end. Between them
  // every op on `device` is recorded. capture_abort() abandons a capture (never throws).
  void capture_begin(Device device);
  void capture_end();
  void capture_abort() noexcept;

  // Queues the recorded work on the device as one launch; returns without waiting, like an op.
  void replay();
  // Drops the recorded graph and gives its memory pool back.
  void reset();

  bool captured() const { return graph_ != nullptr; }
  bool capturing() const { return capturing_; }
  Device device() const { return device_; }
  // Kernels, copies and fills in the graph (0 before a capture).
  int64_t nodes() const;

 private:
  Device device_ = Device::cpu();
  bool capturing_ = false;
  std::unique_ptr<CapturedGraph> graph_;
};

}  // namespace minidl
