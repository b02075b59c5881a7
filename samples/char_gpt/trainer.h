// The char_gpt trainer behind samples/char_gpt/main.cpp, as a library the tests link: nanoGPT's
// train.py for shakespeare_char, on one device or one process per device (mpirun):
//
//   for it in 0 .. iters:
//     every eval_interval iterations and at the end: mean loss over eval_iters random batches
//       of train and val (rank 0; model.eval(), no autograd), "step N: train loss X, val loss Y",
//       and the checkpoint
//     grad_accum micro-batches: loss / grad_accum, backward (gradients reduced on the last)
//     clip the gradients' global norm to grad_clip (0: off); AdamW step; the lr of it+1
//
// AdamW (betas 0.9 / beta2, eps 1e-8) in two groups: weight decay on the parameters of rank >= 2
// (Linear and Embedding weights), none on biases and LayerNorms. The lr follows nanoGPT's
// get_lr per iteration (optim::WarmupCosineLR: linear warm-up over `warmup`, cosine down to
// min_lr at lr_decay_iters). Batches come from a Generator seeded with seed + rank, so each
// process draws its own (data-parallel training over processes sees world x batch_size windows
// per micro-step, as nanoGPT under torchrun); evaluation batches from a fixed stream of their own,
// the same at every evaluation, so evaluating never changes the run.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "samples/char_gpt/model.h"
#include "samples/char_gpt/text_data.h"
#include "samples/common/profile_window.h"
#include "samples/common/progress.h"

namespace minidl::parallel {
class ProcessGroup;
}

namespace minidl::char_gpt {

using samples::ProgressStyle;  // Bar, Lines, Quiet (samples/common/progress.h)

struct TrainerConfig {
  // The small CPU recipe (bench/char_gpt_torch.py has the same defaults).
  std::string data;  // a text file; empty: default_data_path()
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64;
  double dropout = 0.0;
  int64_t batch_size = 12;
  int64_t iters = 2000;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 100;
  // Where the cosine reaches min_lr. 0: --iters in a new run (at least warmup + 1), and in a
  // resumed run the horizon it was started with (Note [a longer run keeps its schedule] in
  // samples/common/train_loop.cpp); a value set here replaces a resumed run's horizon too.
  int64_t lr_decay_iters = 0;
  double weight_decay = 0.1, beta2 = 0.99;
  double grad_clip = 1.0;      // max global gradient norm; 0: no clipping
  int64_t grad_accum = 1;      // micro-batches per optimizer step
  int64_t eval_interval = 250, eval_iters = 20;
  std::string device = "auto";  // cpu, cuda, cuda:N, auto
  DType dtype = DType::Float32;  // --dtype: fp32, or bf16/fp16 autocast (samples/common/precision.h)
  uint64_t seed = 1337;

  std::string checkpoint;  // saved (atomically) at every evaluation when set
  std::string resume;      // continue the run saved here (same flags; a larger --iters continues it)
  // Stop after this many iterations in this process, saving the checkpoint first (0: never):
  // splits a run in pieces that --resume joins (the resume test uses it).
  int64_t stop_after = 0;
  ProgressStyle progress = ProgressStyle::Lines;
  // Several processes (mpirun): rank 0 evaluates, prints and saves; every rank resumes.
  std::shared_ptr<parallel::ProcessGroup> group;
  // --profile: record profile.steps iterations after profile.warmup (the table on `out`, the
  // Chrome trace to profile.trace; samples/common/profile_window.h). Rank 0's only.
  samples::ProfileOptions profile;
};

struct EvalPoint {
  int64_t iter = 0;
  double train_loss = 0, val_loss = 0;
};

struct TrainingResult {
  std::vector<EvalPoint> history;  // every evaluation, those before a resume included
  int64_t iterations = 0;          // iterations done (the checkpoint's position)
  bool finished = false;           // all iters done (false when stop_after cut it)
  double ms_per_iter = 0;          // mean wall time of this process's iterations
  std::shared_ptr<GPT> model;
  Vocabulary vocab;
};

// The model's sizes from the flags and the vocabulary.
GPTConfig model_config(const TrainerConfig& c, int64_t vocab_size);

// Checks the config, trains on `data` (the text's split), writes progress to `out`.
TrainingResult train(const TrainerConfig& config, const TextData& data, std::ostream& out);

// --dump-grads: one training step of the initial model on the first training batch, with none of
// the run's evaluation, written to `path` (safetensors) for bench/char_gpt_parity.py:
//   x, y                 the batch, int64 [B, T]
//   loss                 [1] float32, the batch's mean cross-entropy
//   init.<name>          each parameter before the step (the tied weight once, as transformer.wte.weight)
//   grad.<name>          its gradient (before clipping)
//   step.<name>          its value after the step (clipping, AdamW with the two groups, lr of iteration 0)
//   grad_norm            [1] float32, the global gradient norm clip_grad_norm_ returned
// One micro-batch (grad_accum is ignored); dropout must be 0 for the step to be comparable.
void dump_one_step(const TrainerConfig& config, const TextData& data, const std::string& path);

struct SampleOptions {
  int64_t length = 500;      // characters to generate
  double temperature = 1.0;  // > 0; < 1 sharper, > 1 flatter
  int64_t top_k = 0;         // keep the k most likely characters (0: all)
  std::string prompt{};      // "" starts from "\n" (nanoGPT's start), or from character 0 without one
  uint64_t seed = 1337;
};

// Autoregressive sampling: the context cropped to the last block_size tokens, the last
// position's logits / temperature, the top_k largest (ops::topk), one draw from the softmax of
// the kept ones (ops::multinomial). Returns the prompt followed by `length` generated characters.
// Deterministic for a seed on the CPU.
std::string generate(GPT& model, const Vocabulary& vocab, const SampleOptions& options);

// A model and its vocabulary from a char_gpt checkpoint (its sizes from the checkpoint's
// metadata), on `device`: what sampling from a saved run needs.
struct LoadedModel {
  std::shared_ptr<GPT> model;
  Vocabulary vocab;
  int64_t iterations = 0;
};
LoadedModel load_model(const std::string& checkpoint, const std::string& device = "cpu");

}  // namespace minidl::char_gpt
