// The autograd engine: counts how many gradients each node will receive, then runs nodes in
// reverse creation order once all their gradients have arrived, summing gradients that meet
// at one output of a node, and accumulating into leaf .grad (firing gradient-ready hooks).
#include "core/autograd.h"

#include <atomic>
#include <optional>
#include <queue>

#include "core/autocast.h"
#include "core/backend.h"
#include "core/ops/elementwise.h"
#include "core/profiler.h"

namespace minidl {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
thread_local bool grad_mode = true;
// The callback queue of the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* backward_callbacks = nullptr;
}  // namespace

Node::Node(uint32_t num_outputs)
    : sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)), num_outputs_(num_outputs) {}

std::vector<Tensor> MultiOutputNode::apply(const Tensor& grad_output) {
  MINIDL_CHECK(num_outputs() == 1, name(), ": a node with ", num_outputs(),
               " outputs takes one gradient per output (apply_outputs), got one gradient");
  return apply_outputs({grad_output});
}

bool grad_mode_enabled() { return grad_mode; }
void set_grad_mode(bool enabled) { grad_mode = enabled; }

// Note [stealing the first gradient]
// The first gradient that reaches a leaf becomes its .grad without a copy when nothing else
// holds it (the usual case: a fresh kernel output). When it is shared — the same tensor was
// passed to two inputs, e.g. by AddBackward — it is cloned, because later accumulations and
// all-reduces write .grad in place and must not change another tensor.
std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  TensorImpl& leaf = *leaf_;
  Tensor g = grad_output;
  if (g.dtype() != leaf.dtype || g.device() != leaf.storage.device()) g = g.to(leaf.storage.device(), leaf.dtype);
  if (!leaf.grad.defined()) {
    const bool exclusive = g.impl_ptr().use_count() <= 2 && g.storage().use_count() == 1 && g.is_contiguous() &&
                           g.offset() == 0 && g.shape() == leaf.shape;
    leaf.grad = exclusive ? g : g.reshape(leaf.shape).clone();
  } else if (leaf.grad.is_contiguous()) {
    backend_for(leaf.storage.device()).binary(BinaryOp::Add, leaf.grad, g.reshape(leaf.shape).contiguous(), leaf.grad);
  } else {  // a strided .grad the user set: the kernels write contiguous outputs, so add, then copy back in place
    Backend& be = backend_for(leaf.storage.device());
    Tensor sum = empty(leaf.grad.shape(), leaf.grad.options());
    be.binary(BinaryOp::Add, leaf.grad, g.reshape(leaf.shape).contiguous(), sum);
    be.strided_copy(sum, leaf.grad);
  }
  for (const GradHook& hook : leaf.hooks) hook(leaf.grad);
  return {};
}

namespace autograd {

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return Edge{};
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return Edge{impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return Edge{};
  std::shared_ptr<Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return Edge{acc};
}

void attach(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs, Tensor& output) {
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(gradient_edge(*t));
  output.impl()->grad_fn = node;
  output.impl()->output_nr = 0;  // the node's one output, whatever the tensor was before
}

void attach_outputs(const std::shared_ptr<MultiOutputNode>& node, std::initializer_list<const Tensor*> inputs,
                    std::vector<Tensor>& outputs) {
  MINIDL_INTERNAL_ASSERT(outputs.size() == node->num_outputs(), node->name(), " has ", node->num_outputs(),
                         " outputs, attached to ", outputs.size());
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(gradient_edge(*t));
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i].impl()->grad_fn = node;
    outputs[i].impl()->output_nr = static_cast<uint32_t>(i);
  }
}

}  // namespace autograd

class Engine {
 public:
  static void run(const Tensor& root, const Tensor& grad, bool retain_graph);

 private:
  static void run_graph(const Tensor& root, const Tensor& grad, bool retain_graph);
};

// Gives one backward pass its own callback queue (a hook may start a nested backward, which
// gets its own) and runs the queued callbacks once the graph is done. When the graph or a
// callback throws, the callbacks not yet run are dropped with the queue.
void Engine::run(const Tensor& root, const Tensor& grad, bool retain_graph) {
  std::vector<std::function<void()>> callbacks;
  struct QueueScope {
    std::vector<std::function<void()>>* previous;
    ~QueueScope() { backward_callbacks = previous; }
  } scope{backward_callbacks};
  backward_callbacks = &callbacks;
  run_graph(root, grad, retain_graph);
  NoGradGuard no_grad;  // like the nodes and hooks they follow, callbacks record nothing
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> callback = std::move(callbacks[i]);  // callbacks may grow the queue
    callback();
  }
}

void Engine::run_graph(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  check_defined(root, "backward", "self");
  MINIDL_CHECK(root.requires_grad(), "backward: the tensor of shape ", root.shape(),
               " does not require grad and has no grad_fn (did an input have requires_grad=true? was it computed "
               "under NoGradGuard?)");
  Tensor grad = grad_in;
  const bool unit_seed = !grad.defined();
  if (unit_seed) {
    MINIDL_CHECK(root.numel() == 1, "backward: a gradient can be created implicitly only for a one-element output, "
                 "got shape ", root.shape(), "; pass grad explicitly");
    grad = ones(root.shape(), root.options());
  }
  MINIDL_CHECK(grad.shape() == root.shape(), "backward: gradient shape ", grad.shape(), " does not match output shape ",
               root.shape());
  MINIDL_CHECK(grad.device() == root.device() && grad.dtype() == root.dtype(), "backward: gradient is ", grad.dtype(),
               " on ", grad.device(), ", output is ", root.dtype(), " on ", root.device());

  NoGradGuard no_grad;  // backward itself records nothing (no higher-order gradients)
  // Nor does it autocast: each gradient is computed in the dtype its op saw in forward (a
  // backward called inside an autocast scope must not send a 16-bit gradient through float32).
  const autocast::Scope no_autocast{autocast::State{}};
  const Edge root_edge = autograd::gradient_edge(root);

  // Pass 1: count the gradients each node will receive (one per incoming edge).
  // Each pass takes a fresh epoch; a node is visited once per epoch.
  static std::atomic<uint64_t> epochs{0};
  const uint64_t epoch = epochs.fetch_add(1, std::memory_order_relaxed) + 1;
  auto mark_seen = [epoch](Node* n) {
    if (n->visit_epoch_ == epoch) return false;
    n->visit_epoch_ = epoch;
    n->pending_ = 0;
    n->grad_buffers_.assign(n->num_outputs(), Tensor());
    return true;
  };
  std::vector<Node*> stack{root_edge.fn.get()};
  mark_seen(root_edge.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      Node* child = e.fn.get();
      if (mark_seen(child)) stack.push_back(child);
      ++child->pending_;
    }
  }

  // Pass 2: run nodes whose gradients are complete, latest-created first (deterministic order).
  auto later_first = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  root_edge.fn->grad_buffers_[root_edge.output_nr] = grad;
  ready.push(root_edge.fn.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    const std::vector<Tensor> grads = std::move(n->grad_buffers_);  // one per output of n
    n->grad_buffers_.clear();
    const Tensor* first_grad = nullptr;  // a node that received no gradient at all does not run
    for (const Tensor& g : grads)
      if (!first_grad && g.defined()) first_grad = &g;
    std::vector<Tensor> input_grads;
    if (first_grad) {
      MINIDL_CHECK(!n->released(), "backward: trying to backward through the graph a second time (", n->name(),
                   " has already freed its saved tensors); pass retain_graph=true to the first backward() if you need "
                   "to call it twice");
      std::optional<profiler::RecordScope> profile_scope;  // the node's name is built only while profiling
      if (profiler::active())
        profile_scope.emplace(n->name(), profiler::Kind::Backward, std::initializer_list<const Tensor*>{first_grad});
      const bool seeded_root = unit_seed && n == root_edge.fn.get() && n->num_outputs() == 1;
      input_grads = seeded_root ? n->apply_unit_seed(grads[0]) : n->apply_outputs(grads);
      profile_scope.reset();
      if (!retain_graph && n->single_use()) {
        n->release_saved();
        n->mark_released();
      }
    }
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& edge = n->next_edges[i];
      Node* child = edge.fn.get();
      if (!child) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        // Note [why grads are summed here]: a tensor used twice receives one gradient per
        // use; the total derivative is their sum. Each output of a node has its own slot
        // (Note [one node for several outputs]), so only gradients of one tensor meet here.
        Tensor& buf = child->grad_buffers_[edge.output_nr];
        buf = buf.defined() ? ops::add(buf, input_grads[i]) : std::move(input_grads[i]);
      }
      if (--child->pending_ == 0) ready.push(child);
    }
  }
}

namespace autograd {
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) { Engine::run(root, grad, retain_graph); }

void queue_callback(std::function<void()> callback) {
  MINIDL_CHECK(backward_callbacks != nullptr, "queue_callback: no backward pass is running on this thread (call it "
               "from a gradient-ready hook or a node while backward() runs)");
  MINIDL_CHECK(static_cast<bool>(callback), "queue_callback: got an empty callback");
  backward_callbacks->push_back(std::move(callback));
}
}  // namespace autograd

}  // namespace minidl
