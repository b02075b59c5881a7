// The GPT of samples/char_gpt, nanoGPT's model.py as nn::Modules (same structure, names and
// initialisation, so a state dict maps one to one onto nanoGPT's and bench/char_gpt_torch.py's):
//
//   idx [B, T] -> wte(idx) + wpe(0..T-1) -> dropout                      [B, T, C]
//     -> n_layer x Block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))    pre-LN residual blocks
//     -> ln_f -> logits = x · wteᵀ                                       [B, T, vocab]
//
//   attn: c_attn (one fused Linear C -> 3C), split into q, k, v, each [B, T, H, hs] (slices of
//         one view [B, T, 3, H, hs]) transposed to [B, H, T, hs]; causal scaled_dot_product_attention (dropout in
//         training); heads merged back to [B, T, C]; c_proj (C -> C); residual dropout.
//   mlp:  c_fc (C -> 4C), exact GELU, c_proj (4C -> C), dropout.
//
// Weight tying: the output projection (lm_head) is the token embedding's weight itself, one
// Tensor used twice, so its gradient is the sum of both uses' and parameters(), the state dict
// and the optimizer see it once, as "transformer.wte.weight" (nanoGPT's state dict also lists
// it as lm_head.weight; the twin script maps the two).
// Initialisation (GPT-2's, as nanoGPT): every Linear and Embedding weight ~ N(0, 0.02), biases
// 0, and the two residual projections (attn.c_proj, mlp.c_proj) ~ N(0, 0.02 / sqrt(2·n_layer)),
// which keeps the residual stream's variance from growing with depth. LayerNorms: weight 1, bias 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace minidl::char_gpt {

struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;  // the longest context (positions of wpe)
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;     // C; a multiple of n_head
  double dropout = 0.0;
  bool bias = true;         // biases in the Linears and LayerNorms (nanoGPT's default)
};

// An error naming the field for sizes that cannot build a model.
void check_config(const GPTConfig& c);

// A training run's memory, estimated from the sizes alone (model.cpp says how). Every product
// of the sizes is checked: one that overflows int64 is an error naming the flags.
struct RunMemory {
  int64_t parameters = 0;       // GPT::parameter_count
  double state_bytes = 0;       // the weights, their gradients and AdamW's two moments
  double activation_bytes = 0;  // what one micro-batch's forward and backward hold
  double total_bytes() const { return state_bytes + activation_bytes; }
};
RunMemory estimate_run_memory(const GPTConfig& c, int64_t batch_size, int64_t grad_accum = 1);

// Before anything is built: refuses sizes whose products overflow int64, and a run whose
// estimate exceeds `available_bytes` (this process's share of the memory; 0: unknown, not
// compared), with a message giving both in GiB and the flags to lower. `activations_on_host`: the micro-batches run on the CPU; on a
// GPU only the model built on the host before its move is compared (the device's allocator
// reports its own shortage).
void check_run_fits(const GPTConfig& c, int64_t batch_size, int64_t grad_accum, uint64_t available_bytes,
                    bool activations_on_host = true);

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  std::string name() const override { return "CausalSelfAttention"; }
  std::shared_ptr<nn::Linear> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;

 private:
  int64_t n_head_, n_embd_;
  double dropout_;
};

class MLP : public nn::Module {
 public:
  explicit MLP(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  std::string name() const override { return "MLP"; }
  std::shared_ptr<nn::Linear> c_fc, c_proj;
  std::shared_ptr<nn::Dropout> dropout;
};

class Block : public nn::Module {
 public:
  explicit Block(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  std::string name() const override { return "Block"; }
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

class GPT : public nn::Module {
 public:
  // Draws the initial weights from the default generator.
  explicit GPT(const GPTConfig& c);
  // idx int64 [B, T] with T <= block_size -> logits [B, T, vocab_size]: hidden(idx) · wteᵀ.
  Tensor forward(const Tensor& idx) override;
  // The last LayerNorm's output [B, T, n_embd], before the tied output projection.
  Tensor hidden(const Tensor& idx);
  std::string name() const override { return "GPT"; }
  const GPTConfig& config() const { return config_; }
  // The output projection's weight [vocab_size, n_embd]: the token embedding's weight itself.
  const Tensor& lm_head_weight() const { return wte_->weight; }
  // Every parameter counted once (the tied weight once); non_embedding leaves out the position
  // embedding, as nanoGPT's get_num_params reports.
  int64_t num_parameters(bool non_embedding = false) const;
  // The same count from the sizes alone (V vocab, T block, L layers, C width). With biases:
  // V·C + T·C + L·(12·C² + 13·C) + 2·C (a block: two LayerNorms 4C, c_attn 3C² + 3C,
  // attn.c_proj C² + C, c_fc 4C² + 4C, mlp.c_proj 4C² + C; ln_f 2C). Without:
  // V·C + T·C + L·(12·C² + 2·C) + C.
  static int64_t parameter_count(const GPTConfig& c);

 private:
  GPTConfig config_;
  std::shared_ptr<nn::Module> transformer_;  // wte, wpe, drop, h.<i>, ln_f: nanoGPT's names
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
};

}  // namespace minidl::char_gpt
