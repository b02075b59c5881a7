// samples/char_gpt on the CPU allocator (Note [the CPU block cache] in core/storage.cpp): once a
// few steps have filled the caches, a training step takes every tensor it needs from them and
// asks the system for none. A narrow model on the tests' short text, so the case runs in well
// under a second, but six layers deep: more activations of one size are alive at once than a
// thread's list of free blocks holds, the case the spill into the process-wide cache is for.
// Under AddressSanitizer the caches are off (every block goes back to the system, so that a use
// after free is caught) and the case has nothing to check.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/memory.h"
#include "core/ops.h"
#include "nn/clip_grad.h"
#include "optim/optim.h"
#include "samples/char_gpt/model.h"
#include "samples/char_gpt/text_data.h"

using namespace minidl;
using namespace minidl::char_gpt;

TEST_CASE("char_gpt: a training step after the warm-up asks the system for no memory", "[samples][char-gpt]") {
#if defined(__SANITIZE_ADDRESS__)
  SUCCEED("the CPU allocator's caches are off under AddressSanitizer");
  return;
#endif
  const TextData d = make_text_data(read_text_file(std::string(MINIDL_SOURCE_DIR) +
                                                   "/tests/samples/data/char_gpt_text.txt"));
  manual_seed(5);
  GPT model(GPTConfig{.vocab_size = d.vocab.size(), .block_size = 16, .n_layer = 6, .n_head = 2, .n_embd = 32});
  // The trainer's optimizer (samples/char_gpt/trainer.cpp): AdamW, weight decay on rank >= 2.
  const std::vector<Tensor> params = model.parameters();
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamW optimizer(std::vector<optim::ParamGroup>{{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                         optim::AdamWOptions{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1});
  Generator gen(7);
  // The trainer's step: zero_grad, forward, mean cross-entropy, backward, the loss read on the
  // host, clipping of the global gradient norm, AdamW.
  auto step = [&] {
    optimizer.zero_grad();
    const Batch b = get_batch(d.train, 8, 16, gen, "training");  // x, y int64 [8, 16]
    const Tensor logits = model(b.x);                            // [8, 16, vocab]
    const Tensor loss = ops::softmax_cross_entropy(logits.reshape({-1, d.vocab.size()}), b.y.reshape({-1}));
    loss.backward();
    (void)loss.item();
    nn::clip_grad_norm_(params, 1.0);
    optimizer.step();
  };
  for (int i = 0; i < 3; ++i) step();  // the first steps create AdamW's state and fill the caches

  const MemoryStats before = memory_stats(Device::cpu());
  for (int i = 0; i < 3; ++i) step();
  const MemoryStats after = memory_stats(Device::cpu());
  CHECK(after.device_allocations == before.device_allocations);  // on the CPU: blocks from the system
  CHECK(after.cache_hits > before.cache_hits);                   // the step did allocate, from the caches
  CHECK(after.allocated_bytes == before.allocated_bytes);        // and freed all it took
}
