// Autograd: the graph of Nodes that records how each tensor was made, and the engine that
// walks it backwards. Each differentiable op attaches one Node to its output; the Node keeps
// what backward needs (saved tensors) and one Edge per input pointing at the input's Node
// (its grad_fn, or the AccumulateGrad node of a leaf that requires grad). An op that returns
// several views at once (split, chunk, unbind) attaches one MultiOutputNode to all of them.
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
  uint32_t output_nr = 0;    // which of fn's outputs the input is (0 unless fn is a MultiOutputNode)
  bool valid() const { return static_cast<bool>(fn); }
};

class Node {
 public:
  Node() : Node(1) {}
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradient of the loss w.r.t. this node's output in, gradients w.r.t. each input out
  // (one per next_edges entry; an undefined Tensor where an input needs none).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // What the engine calls: grad_outputs[i] is the gradient w.r.t. output i of the forward op,
  // undefined where none arrived (at least one did). A node with one output — nearly every
  // node — hands its one gradient to apply(); a MultiOutputNode overrides this.
  virtual std::vector<Tensor> apply_outputs(const std::vector<Tensor>& grad_outputs) { return apply(grad_outputs[0]); }
  // Called instead of apply() on the root when backward() created the gradient itself (a
  // one-element output seeded with 1). A node whose forward already computed the gradient for
  // a unit seed overrides it to skip the multiplication by 1 (see Note [fused cross-entropy]).
  virtual std::vector<Tensor> apply_unit_seed(const Tensor& ones) { return apply(ones); }
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  // Whether a backward without retain_graph uses this node up (after it, running the node
  // again is the "backward through the graph a second time" error). A node that keeps nothing
  // that backward frees may answer false, and then runs in every backward that reaches it, as
  // in PyTorch: a leaf's AccumulateGrad, and SplitBackward, so that the parts of one split can
  // each be backpropagated on their own, as they could when each part had a node of its own.
  virtual bool single_use() const { return true; }

  std::vector<Edge> next_edges;
  // How many tensors the forward op returned with this node as their grad_fn.
  uint32_t num_outputs() const { return num_outputs_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool released() const { return released_; }
  void mark_released() { released_ = true; }

 protected:
  explicit Node(uint32_t num_outputs);  // several outputs: MultiOutputNode only

 private:
  uint64_t sequence_nr_;  // creation order: the engine runs later nodes first
  uint32_t num_outputs_;
  bool released_ = false;

  friend class Engine;
  // Scratch state of one backward pass (the engine owns it while it runs).
  int pending_ = 0;
  uint64_t visit_epoch_ = 0;
  std::vector<Tensor> grad_buffers_;  // one per output: the sum of the gradients that reached it
};

// Note [one node for several outputs]
// split, chunk and unbind return several views of one tensor. Recorded as one narrow per part,
// each part's backward would allocate a zero-filled gradient the size of the whole input and
// copy its window in, and the engine would then add those whole-size gradients together: k
// zero fills, k copies and k - 1 whole-size adds to build what is one buffer written once.
// Instead the op attaches one MultiOutputNode to all its parts: part i's TensorImpl records
// output_nr i, so the Edge into it (autograd::gradient_edge) carries i; the engine keeps one
// gradient slot per output (a part used twice has its two gradients summed there, at the
// part's size) and, once every edge into any output has delivered, calls apply_outputs() once
// with all the slots. SplitBackward writes each gradient into its window of one buffer and
// zero-fills only windows that received none. PyTorch does the same (Edge::input_nr, its
// engine's InputBuffer, SplitBackward).
class MultiOutputNode : public Node {
 public:
  explicit MultiOutputNode(uint32_t num_outputs) : Node(num_outputs) {}
  std::vector<Tensor> apply_outputs(const std::vector<Tensor>& grad_outputs) override = 0;
  // The engine calls apply_outputs(); this one-gradient entry serves only a node with one output.
  std::vector<Tensor> apply(const Tensor& grad_output) final;
};

// The node at a leaf: adds incoming gradients into the leaf's .grad and fires its hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }
  bool single_use() const override { return false; }  // it accumulates in every backward

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
// The same for a MultiOutputNode: outputs[i] becomes its output i (outputs.size() == num_outputs()).
void attach_outputs(const std::shared_ptr<MultiOutputNode>& node, std::initializer_list<const Tensor*> inputs,
                    std::vector<Tensor>& outputs);
// Runs backward from `root` with seed gradient `grad` (see Engine in autograd.cpp).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);
// Queues `callback` to run after the backward pass running on this thread has processed its
// whole graph, before backward() returns; callbacks run in queue order and may queue more.
// Callable only while a backward runs (from a node or a gradient-ready hook), a clear error
// otherwise. Like PyTorch's queue_callback: parallel/ waits for its all-reduces from one.
void queue_callback(std::function<void()> callback);

}  // namespace autograd

}  // namespace minidl
