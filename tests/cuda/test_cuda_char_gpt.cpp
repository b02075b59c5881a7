// The whole GPT of samples/char_gpt on cuda:0 against the CPU: the same weights (drawn on the
// CPU, then moved), the same batch, the same dropout masks (Philox counters of a generator
// seeded alike on both sides), and one training step compared — the loss, and the gradient of
// every parameter, the tied token embedding included. Every kernel of a transformer step runs
// here at once: embedding, layer norm, the fused qkv linear on [B, T, C], attention on strided
// head views, GELU, the tied output projection, cross-entropy over [B·T, V], and backward
// through all of them, then clip_grad_norm_ and AdamW with its two parameter groups.
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/autograd.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "samples/char_gpt/model.h"
#include "samples/char_gpt/text_data.h"

using namespace minidl;
using namespace minidl::cuda_test;
using namespace minidl::char_gpt;

namespace {

// T = 21 crosses the CUDA attention's 16-row query tiles and is no multiple of 32-key tiles;
// head size 12 is no power of two; two layers put a block's output into the next block.
GPTConfig tiny_config(double dropout) {
  return GPTConfig{.vocab_size = 29, .block_size = 24, .n_layer = 2, .n_head = 2, .n_embd = 24, .dropout = dropout};
}

struct StepResult {
  double loss = 0;
  std::map<std::string, Tensor> grads;   // on the CPU
  std::map<std::string, Tensor> params;  // after clipping and one AdamW step, on the CPU
  double grad_norm = 0;
};

// Builds the model from seed 5 on the CPU, moves it to `device`, and runs one training step on
// the batch (x, y) with the forward's dropout drawn from seed 11.
StepResult one_step(Device device, const GPTConfig& config, const Tensor& x, const Tensor& y) {
  manual_seed(5);
  GPT model(config);
  model.to(device);
  model.train();
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamW opt(std::vector<optim::ParamGroup>{{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                   optim::AdamWOptions{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  manual_seed(11);
  const Tensor logits = model(x.to(device));  // [B, T, V]
  const Tensor loss = ops::softmax_cross_entropy(logits.reshape({-1, config.vocab_size}), y.to(device).reshape({-1}));
  loss.backward();
  StepResult r;
  r.loss = loss.item();
  for (const auto& [name, p] : model.named_parameters()) r.grads[name] = p.grad().to(Device::cpu()).clone();
  r.grad_norm = nn::clip_grad_norm_(model.parameters(), 0.5).item();  // 0.5 < the norm: it clips
  opt.step();
  for (const auto& [name, p] : model.named_parameters()) r.params[name] = p.to(Device::cpu()).clone();
  return r;
}

}  // namespace

TEST_CASE("a GPT training step on cuda gives the CPU's loss, gradients and AdamW update", "[cuda][char_gpt][e2e]") {
  const std::string text = "When shall we three meet again\nIn thunder, lightning, or in rain?\n";
  const TextData data = make_text_data(text + text + text);
  REQUIRE(data.vocab.size() <= 29);
  Generator g(3);
  const Batch batch = get_batch(data.train, 3, 21, g);  // x, y [3, 21]

  for (double dropout : {0.0, 0.2}) {
    INFO("dropout " << dropout);
    const GPTConfig config = tiny_config(dropout);
    const StepResult cpu = one_step(Device::cpu(), config, batch.x, batch.y);
    const StepResult gpu = one_step(kGpu, config, batch.x, batch.y);
    // float32 on both sides, summed in different orders (tiled GEMMs, warp trees, the online
    // softmax's rescalings): each op's result differs by a few ulps of its magnitudes, which
    // two blocks and their backward compound to well under 1e-4 of the loss (~3.4) and of the
    // largest gradient entry of each tensor.
    CHECK(std::abs(gpu.loss - cpu.loss) <= 1e-4 * std::abs(cpu.loss));
    CHECK(std::abs(gpu.grad_norm - cpu.grad_norm) <= 1e-4 * cpu.grad_norm);
    REQUIRE(gpu.grads.size() == cpu.grads.size());
    for (const auto& [name, want] : cpu.grads) {
      const std::vector<float> w = want.to_vector<float>();
      double scale = 0;
      for (float v : w) scale = std::max(scale, static_cast<double>(std::abs(v)));
      check_close(gpu.grads.at(name), want, 1e-4 * scale + 1e-7, 0, "grad " + name);
    }
    // One AdamW step moves each entry by about lr = 1e-2 (sign of m/√v): a gradient entry near 0
    // can flip that sign between the backends' roundings, so compare the updates to lr·1e-2 and
    // let the few entries whose gradient is tiny differ by at most the whole step (2·lr).
    for (const auto& [name, want] : cpu.params) {
      const std::vector<float> w = want.to_vector<float>(), got = gpu.params.at(name).to_vector<float>();
      REQUIRE(got.size() == w.size());
      double worst = 0;
      size_t close = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        const double d = std::abs(static_cast<double>(got[i]) - w[i]);
        worst = std::max(worst, d);
        close += d <= 1e-4 ? 1 : 0;
      }
      INFO("param " << name << ": largest difference " << worst << ", " << close << " of " << w.size() << " within 1e-4");
      CHECK(worst <= 2.1e-2);
      CHECK(static_cast<double>(close) >= 0.95 * static_cast<double>(w.size()));
    }
  }
}
