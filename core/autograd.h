// Autograd: the graph of Nodes that records how each tensor was made, and the engine that
// walks it backwards. Each differentiable op attaches one Node to its output; the Node keeps
// what backward needs (saved tensors) and one Edge per input pointing at the input's Node
// (its grad_fn, or the AccumulateGrad node of a leaf that requires grad).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl {

struct Edge {
  std::shared_ptr<Node> fn;  // null when the input needs no gradient
  bool valid() const { return static_cast<bool>(fn); }
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradient of the loss w.r.t. this node's output in, gradients w.r.t. each input out
  // (one per next_edges entry; an undefined Tensor where an input needs none).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Called instead of apply() on the root when backward() created the gradient itself (a
  // one-element output seeded with 1). A node whose forward already computed the gradient for
  // a unit seed overrides it to skip the multiplication by 1 (see Note [fused cross-entropy]).
  virtual std::vector<Tensor> apply_unit_seed(const Tensor& ones) { return apply(ones); }
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool released() const { return released_; }
  void mark_released() { released_ = true; }

 private:
  uint64_t sequence_nr_;  // creation order: the engine runs later nodes first
  bool released_ = false;

  friend class Engine;
  // Scratch state of one backward pass (the engine owns it while it runs).
  int pending_ = 0;
  uint64_t visit_epoch_ = 0;
  Tensor grad_buffer_;
};

// The node at a leaf: adds incoming gradients into the leaf's .grad and fires its hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// Grad mode: whether ops record graphs. Thread-local, like PyTorch's.
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

// Sets this thread's grad mode for a scope and restores the previous one at its end. The mode
// is per thread, so a thread that runs work for another (a DataParallel replica thread) takes
// the caller's mode with GradModeGuard(caller_mode).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(grad_mode_enabled()) { set_grad_mode(enabled); }
  ~GradModeGuard() { set_grad_mode(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// GradModeGuard(false) under the name PyTorch readers know (torch.no_grad()).
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

namespace autograd {

// True when grad mode is on and any input requires grad: the op must attach a node.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
// The edge through which gradient flows into `t` (its grad_fn, its AccumulateGrad, or none).
Edge gradient_edge(const Tensor& t);
// Sets node->next_edges from inputs and makes `output` the node's output.
void attach(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs, Tensor& output);
// Runs backward from `root` with seed gradient `grad` (see Engine in autograd.cpp).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);
// Queues `callback` to run after the backward pass running on this thread has processed its
// whole graph, before backward() returns; callbacks run in queue order and may queue more.
// Callable only while a backward runs (from a node or a gradient-ready hook), a clear error
// otherwise. Like PyTorch's queue_callback: parallel/ waits for its all-reduces from one.
void queue_callback(std::function<void()> callback);

}  // namespace autograd

}  // namespace minidl
