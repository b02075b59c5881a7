// The GPT's modules: construction (the GPT-2 initialisation) and forward passes.
#include "samples/char_gpt/model.h"

#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "core/ops.h"
#include "core/ops/attention.h"
#include "nn/init.h"

namespace minidl::char_gpt {

namespace {

constexpr double kInitStd = 0.02;  // GPT-2's

// GPT-2's Linear init: weight ~ N(0, std), bias 0.
std::shared_ptr<nn::Linear> make_linear(int64_t in, int64_t out, bool bias, double std) {
  auto l = std::make_shared<nn::Linear>(in, out, bias);
  nn::init::normal_(l->weight, 0.0, std);
  if (l->bias.defined()) l->bias.zero_();
  return l;
}

}  // namespace

void check_config(const GPTConfig& c) {
  MINIDL_CHECK(c.vocab_size > 0, "char_gpt: vocab_size must be positive, got ", c.vocab_size);
  MINIDL_CHECK(c.block_size > 0, "char_gpt: --block-size must be positive, got ", c.block_size);
  MINIDL_CHECK(c.n_layer > 0, "char_gpt: --n-layer must be positive, got ", c.n_layer);
  MINIDL_CHECK(c.n_head > 0, "char_gpt: --n-head must be positive, got ", c.n_head);
  MINIDL_CHECK(c.n_embd > 0 && c.n_embd % c.n_head == 0, "char_gpt: --n-embd (", c.n_embd,
               ") must be a positive multiple of --n-head (", c.n_head, "): each head gets n_embd / n_head channels");
  MINIDL_CHECK(c.dropout >= 0 && c.dropout < 1, "char_gpt: --dropout must be in [0, 1), got ", c.dropout);
}

namespace {

// a * b, or an error naming every size when it does not fit in int64.
int64_t checked_mul(int64_t a, int64_t b, const GPTConfig& c, int64_t batch_size, int64_t grad_accum,
                    const char* what) {
  int64_t r = 0;
  MINIDL_CHECK(!__builtin_mul_overflow(a, b, &r), "char_gpt: ", what, " overflows a 64-bit integer with --n-layer ",
               c.n_layer, ", --n-head ", c.n_head, ", --n-embd ", c.n_embd, ", --block-size ", c.block_size,
               ", --batch-size ", batch_size, ", --grad-accum ", grad_accum, " (vocabulary ", c.vocab_size,
               "); lower them");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const GPTConfig& c, int64_t batch_size, int64_t grad_accum,
                    const char* what) {
  int64_t r = 0;
  MINIDL_CHECK(!__builtin_add_overflow(a, b, &r), "char_gpt: ", what, " overflows a 64-bit integer with --n-layer ",
               c.n_layer, ", --n-head ", c.n_head, ", --n-embd ", c.n_embd, ", --block-size ", c.block_size,
               ", --batch-size ", batch_size, ", --grad-accum ", grad_accum, "; lower them");
  return r;
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

// How the estimate is made (float32, 4 bytes a value):
//   state        16 bytes a parameter: the weight, its gradient, AdamW's exp_avg and exp_avg_sq.
//   activations  what autograd keeps of one micro-batch of B x T tokens, C wide: per block about
//                20·B·T·C values (the residual input, ln_1, the fused qkv 3·BTC, the attention
//                output and its merged copy, c_proj, the residual, ln_2, c_fc 4·BTC, GELU 4·BTC,
//                mlp.c_proj, the residual, with a little slack for the gradients backward
//                holds at once); the fused attention never stores the T x T scores. Then the
//                embeddings' 2·B·T·C and the logits, their softmax and gradient, 3·B·T·V.
// grad_accum adds no memory (micro-batches run one after another) but its product with the
// batch, the tokens of one step, must fit in int64 too. The allocator's caching and a step's
// short-lived temporaries come on top, so this is a floor: a run refused by it cannot fit.
RunMemory estimate_run_memory(const GPTConfig& c, int64_t batch_size, int64_t grad_accum) {
  check_config(c);
  MINIDL_CHECK(batch_size > 0, "char_gpt: --batch-size must be positive, got ", batch_size);
  MINIDL_CHECK(grad_accum > 0, "char_gpt: --grad-accum must be positive, got ", grad_accum);
  auto mul = [&](int64_t a, int64_t b, const char* what) { return checked_mul(a, b, c, batch_size, grad_accum, what); };
  auto add = [&](int64_t a, int64_t b, const char* what) { return checked_add(a, b, c, batch_size, grad_accum, what); };
  const int64_t V = c.vocab_size, T = c.block_size, L = c.n_layer, C = c.n_embd, B = batch_size;
  // GPT::parameter_count's formula, each step checked.
  const int64_t per_block = add(mul(12, mul(C, C, "--n-embd squared"), "a block's parameter count"),
                                mul(13, C, "a block's parameter count"), "a block's parameter count");
  int64_t params = add(mul(V, C, "the token embedding's size"), mul(T, C, "the position embedding's size"), "the parameter count");
  params = add(params, mul(L, per_block, "the blocks' parameter count"), "the parameter count");
  params = add(params, mul(2, C, "the final LayerNorm's size"), "the parameter count");
  const int64_t tokens = mul(B, T, "--batch-size × --block-size (tokens of a micro-batch)");
  mul(tokens, grad_accum, "--batch-size × --block-size × --grad-accum (tokens of a step)");
  const int64_t btc = mul(tokens, C, "--batch-size × --block-size × --n-embd (a micro-batch's activation count)");
  const int64_t per_layer = mul(20, btc, "a block's activation count");
  int64_t values = add(mul(L, per_layer, "the blocks' activation count"), mul(2, btc, "the embeddings' activation count"),
                       "the activation count");
  values = add(values, mul(3, mul(tokens, V, "the logits' size"), "the logits' size"), "the activation count");
  RunMemory m;
  m.parameters = params;
  m.state_bytes = 16.0 * static_cast<double>(params);
  m.activation_bytes = 4.0 * static_cast<double>(values);
  return m;
}

void check_run_fits(const GPTConfig& c, int64_t batch_size, int64_t grad_accum, uint64_t available_bytes,
                    bool activations_on_host) {
  const RunMemory m = estimate_run_memory(c, batch_size, grad_accum);
  if (available_bytes == 0) return;  // unknown: nothing to compare with
  const double available = static_cast<double>(available_bytes);
  char text[512];
  if (activations_on_host) {
    if (m.total_bytes() <= available) return;
    std::snprintf(text, sizeof text,
                  "char_gpt: this run needs about %.2f GiB (%lld parameters with their gradients and AdamW's two "
                  "moments: %.2f GiB; one micro-batch's activations: %.2f GiB) but %.2f GiB of memory is available; "
                  "lower --n-layer, --n-embd, --batch-size or --block-size",
                  gib(m.total_bytes()), static_cast<long long>(m.parameters), gib(m.state_bytes),
                  gib(m.activation_bytes), gib(available));
  } else {
    const double weights = m.state_bytes / 4;  // built on the host, then moved
    if (weights <= available) return;
    std::snprintf(text, sizeof text,
                  "char_gpt: the model's %lld parameters need %.2f GiB on the host before they move to the device "
                  "but %.2f GiB of memory is available; lower --n-layer or --n-embd",
                  static_cast<long long>(m.parameters), gib(weights), gib(available));
  }
  throw Error(text);
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : n_head_(c.n_head), n_embd_(c.n_embd), dropout_(c.dropout) {
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  c_attn = register_module("c_attn", make_linear(c.n_embd, 3 * c.n_embd, c.bias, kInitStd));
  c_proj = register_module("c_proj", make_linear(c.n_embd, c.n_embd, c.bias, proj_std));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(c.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = n_embd_, H = n_head_;
  // nanoGPT splits the fused projection into q, k, v [B, T, C] and views each as [B, T, H, hs];
  // the same slices come from one view [B, T, 3, H, hs] of the whole output, which needs no copy
  // (a slice of the last dim cannot be viewed with split heads without one: view() refuses it).
  const Tensor qkv = (*c_attn)(x).view({B, T, 3, H, C / H});
  // q, k, v: [B, T, H, hs] each, by one unbind, whose backward writes the three gradients into
  // one [B, T, 3, H, hs] buffer (three narrows would each zero-fill a buffer of that size).
  const std::vector<Tensor> q_k_v = qkv.unbind(2);
  // [B, T, H, hs] -> [B, H, T, hs], a strided view with a contiguous last dim.
  auto heads = [&](size_t i) { return q_k_v[i].transpose(1, 2); };
  const Tensor y = ops::scaled_dot_product_attention(heads(0), heads(1), heads(2), /*causal=*/true,
                                                     is_training() ? dropout_ : 0.0);  // [B, H, T, hs]
  const Tensor merged = y.transpose(1, 2).contiguous().view({B, T, C});             // heads side by side
  return (*resid_dropout)((*c_proj)(merged));
}

MLP::MLP(const GPTConfig& c) {
  const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  c_fc = register_module("c_fc", make_linear(c.n_embd, 4 * c.n_embd, c.bias, kInitStd));
  c_proj = register_module("c_proj", make_linear(4 * c.n_embd, c.n_embd, c.bias, proj_std));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
}

// gelu(c_fc(x)) in one op: the GELU runs in c_fc's GEMM epilogue (ops::linear_gelu), same bits.
Tensor MLP::forward(const Tensor& x) { return (*dropout)((*c_proj)(c_fc->forward_gelu(x))); }

Block::Block(const GPTConfig& c) {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd, 1e-5, true, c.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd, 1e-5, true, c.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(c));
}

Tensor Block::forward(const Tensor& x) {
  const Tensor h = x + (*attn)((*ln_1)(x));
  return h + (*mlp)((*ln_2)(h));
}

GPT::GPT(const GPTConfig& c) : config_(c) {
  check_config(c);
  transformer_ = register_module("transformer", std::make_shared<nn::Module>());
  wte_ = transformer_->register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
  wpe_ = transformer_->register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
  nn::init::normal_(wte_->weight, 0.0, kInitStd);
  nn::init::normal_(wpe_->weight, 0.0, kInitStd);
  drop_ = transformer_->register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  auto h = transformer_->register_module("h", std::make_shared<nn::Module>());
  for (int64_t i = 0; i < c.n_layer; ++i)
    blocks_.push_back(h->register_module(std::to_string(i), std::make_shared<Block>(c)));
  ln_f_ = transformer_->register_module("ln_f", std::make_shared<nn::LayerNorm>(c.n_embd, 1e-5, true, c.bias));
  // lm_head registers nothing: forward multiplies by wte_->weight (the tying, top of model.h).
}

Tensor GPT::forward(const Tensor& idx) {
  return ops::linear(hidden(idx), wte_->weight);  // [B, T, V]: the tied lm_head, no bias
}

Tensor GPT::hidden(const Tensor& idx) {
  MINIDL_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64, "GPT: expected int64 token indices [B, T], got ",
               idx.dtype(), " ", idx.shape());
  const int64_t T = idx.size(1);
  MINIDL_CHECK(T <= config_.block_size, "GPT: a sequence of ", T, " tokens is longer than block_size ",
               config_.block_size);
  const Tensor pos = arange(T, TensorOptions(DType::Int64, idx.device()));  // [T]
  Tensor x = (*drop_)((*wte_)(idx) + (*wpe_)(pos));                          // [B, T, C] + [T, C]
  for (const auto& block : blocks_) x = (*block)(x);
  return (*ln_f_)(x);
}

int64_t GPT::num_parameters(bool non_embedding) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();  // parameters() lists the tied weight once
  return non_embedding ? n - wpe_->weight.numel() : n;
}

int64_t GPT::parameter_count(const GPTConfig& c) {
  const int64_t V = c.vocab_size, T = c.block_size, L = c.n_layer, C = c.n_embd;
  return c.bias ? V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C : V * C + T * C + L * (12 * C * C + 2 * C) + C;
}

}  // namespace minidl::char_gpt
