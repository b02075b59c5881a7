// The GPT's modules: construction (the GPT-2 initialisation) and forward passes.
#include "samples/char_gpt/model.h"

#include <cmath>
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
  // q, k or v: [B, T, H, hs] -> [B, H, T, hs], a strided view with a contiguous last dim.
  auto heads = [&](int64_t i) { return qkv.narrow(2, i, 1).squeeze(2).transpose(1, 2); };
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

Tensor MLP::forward(const Tensor& x) { return (*dropout)((*c_proj)(ops::gelu((*c_fc)(x)))); }

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
