// char_gpt: trains a character-level GPT on a text (by default eight of Shakespeare's plays,
// fetched by scripts/setup-deps), nanoGPT's shakespeare_char recipe scaled to a CPU, and samples
// from it. The flags map one to one onto TrainerConfig and SampleOptions (trainer.h), where the
// defaults are chosen; this file only parses them. Examples:
//   char_gpt                                           # 2000 iterations of the small model, CPU
//   char_gpt --checkpoint run.safetensors --sample 500 # save at every evaluation, then sample
//   char_gpt --resume run.safetensors --checkpoint run.safetensors   # continue that run
//   char_gpt --from run.safetensors --sample 500 --top-k 10 --prompt "ROMEO:"   # sample only
//   mpirun -n 2 char_gpt                               # one process per device, each its own batches
//   char_gpt --iters 1 --dump-grads step.safetensors   # one step's gradients (bench/char_gpt_parity.py)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "parallel/process_group.h"
#include "samples/char_gpt/trainer.h"
#include "samples/common/flags.h"
#include "samples/common/input_files.h"
#include "samples/common/parallel_model.h"
#include "samples/common/precision.h"

using namespace minidl;
using namespace minidl::char_gpt;

namespace {

// The sampling flags, checked before any training so that a typo does not cost a whole run:
// the numbers always, the prompt's characters once the vocabulary is known (the text's, or
// with --from the checkpoint's). generate() checks the same again.
void check_sample_options(const SampleOptions& s, const Vocabulary* vocab) {
  MINIDL_CHECK(std::isfinite(s.temperature) && s.temperature > 0, "char_gpt: --temperature must be a finite number > 0, got ",
               s.temperature);
  MINIDL_CHECK(s.top_k >= 0, "char_gpt: --top-k must be >= 0 (0: all characters), got ", s.top_k);
  if (vocab != nullptr) vocab->encode(s.prompt, "--prompt");  // an error naming the first foreign character
}

// A checkpoint is read into memory whole: one larger than the memory available cannot load.
void check_checkpoint_file(const std::string& path, const std::string& flag) {
  const uint64_t available = samples::available_memory_bytes();
  samples::check_input_file(path, flag, available > 0 ? available : UINT64_MAX,
                            "the memory available: a checkpoint is read whole");
}

// The processes of this job on this machine, from the launcher's environment (1 when none
// says): each holds a whole run's memory, so they share what is available.
uint64_t processes_on_this_machine() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && std::atoi(value) > 1) return static_cast<uint64_t>(std::atoi(value));
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minidl: train a character-level GPT on a text (nanoGPT's shakespeare_char) and sample from it"};
  TrainerConfig c;
  SampleOptions s;
  std::string progress = "auto", from, dump_grads, dtype = "fp32";
  int64_t sample = 0;
  app.add_option("--data", c.data, "the text file to learn")->default_str(default_data_path());
  app.add_option("--n-layer", c.n_layer, "transformer blocks")->check(samples::positive_integer<int64_t>())->capture_default_str();
  app.add_option("--n-head", c.n_head, "attention heads per block")->check(samples::positive_integer<int64_t>())->capture_default_str();
  app.add_option("--n-embd", c.n_embd, "embedding width (a multiple of --n-head)")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--block-size", c.block_size, "context length in characters")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "sequences per micro-batch (per process)")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--iters", c.iters, "optimizer steps")->check(samples::non_negative_integer<int64_t>())->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate (after the warm-up)")->check(samples::non_negative_real())->capture_default_str();
  app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine decay")
      ->check(samples::non_negative_real())
      ->capture_default_str();
  app.add_option("--warmup", c.warmup, "linear warm-up iterations")->check(samples::non_negative_integer<int64_t>())->capture_default_str();
  app.add_option("--lr-decay-iters", c.lr_decay_iters, "iteration where the cosine reaches --min-lr (default: --iters)")
      ->check(samples::positive_integer<int64_t>());
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay of the weight matrices and embeddings")
      ->check(samples::non_negative_real())
      ->capture_default_str();
  app.add_option("--beta2", c.beta2, "AdamW beta2")->check(samples::non_negative_real())->capture_default_str();
  app.add_option("--grad-clip", c.grad_clip, "clip the gradients' global norm to this (0: off)")
      ->check(samples::non_negative_real())
      ->capture_default_str();
  app.add_option("--dropout", c.dropout, "dropout probability")->check(samples::non_negative_real())->capture_default_str();
  app.add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--eval-interval", c.eval_interval, "evaluate (and checkpoint) every N iterations")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--eval-iters", c.eval_iters, "batches per split in an evaluation")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--device", c.device, "cpu, cuda, cuda:N or auto (CUDA when available)")->capture_default_str();
  app.add_option("--dtype", dtype, "fp32, bf16 or fp16: the forward under autocast in that precision, float32 master "
                                   "weights (fp16 with loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the weights, the batches and the sampling")
      ->check(samples::seed_value())
      ->capture_default_str();
  app.add_option("--checkpoint", c.checkpoint, "save a safetensors checkpoint here at every evaluation (atomically)");
  app.add_option("--resume", c.resume, "continue the run saved in this checkpoint (same flags)");
  app.add_option("--stop-after", c.stop_after, "stop after N iterations in this process, saving the checkpoint first")
      ->check(samples::non_negative_integer<int64_t>());
  app.add_option("--profile", c.profile.trace,
                 "profile --profile-steps iterations after 5 warm-up iterations: print the per-op table and write a "
                 "Chrome trace (Perfetto, chrome://tracing) to this file");
  app.add_option("--profile-steps", c.profile.steps, "iterations the profiler records")
      ->check(samples::positive_integer<int64_t>())
      ->capture_default_str();
  app.add_flag("--profile-group-by-shape", c.profile.group_by_shape,
               "one table row per op and input shapes (torch.profiler's group_by_input_shape)");
  app.add_option("--progress", progress, "auto (a bar on a terminal, else the evaluation lines), bar, lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  app.add_option("--sample", sample, "after training (or with --from), generate this many characters")
      ->check(samples::non_negative_integer<int64_t>());
  app.add_option("--temperature", s.temperature, "sampling temperature (> 0; checked before training)")
      ->check(samples::non_negative_real())
      ->capture_default_str();
  app.add_option("--top-k", s.top_k, "sample among the k most likely characters (0: all)")
      ->check(samples::non_negative_integer<int64_t>())
      ->capture_default_str();
  app.add_option("--prompt", s.prompt, "text to continue (default: a newline)");
  app.add_option("--from", from, "sample from this checkpoint without training (its sizes and vocabulary)");
  app.add_option("--dump-grads", dump_grads,
                 "debug: one step of the initial model on the first batch; write the batch, loss, initial weights, "
                 "gradients and stepped weights to this safetensors file and exit (bench/char_gpt_parity.py)");
  app.footer("The number of threads is OMP_NUM_THREADS (default: every CPU). Over several processes (mpirun) each "
             "draws its own batches (seed + rank) and the gradients are averaged; rank 0 evaluates and saves.");
  if (const int status = samples::parse_flags(app, argc, argv, "char_gpt"); status >= 0) return status;

  int world = 1, rank = 0;
  std::string doing = "checking the flags";  // what an out-of-memory error says was under way
  try {
    c.dtype = samples::parse_precision(dtype);
    if (progress == "auto") c.progress = isatty(STDOUT_FILENO) ? ProgressStyle::Bar : ProgressStyle::Lines;
    else if (progress == "bar") c.progress = ProgressStyle::Bar;
    else if (progress == "lines") c.progress = ProgressStyle::Lines;
    else c.progress = ProgressStyle::Quiet;
    s.length = sample;
    s.seed = c.seed;

    // Every file and size is checked here, on every process, before anything is read or built:
    // inputs are regular readable files (never a FIFO, which would block), no output overwrites
    // an input, the sampling flags are sane. --checkpoint X --resume X continues a run in place.
    // (--data itself is checked by read_text_file, whose error for the missing default corpus says
    // how to fetch it.)
    check_sample_options(s, nullptr);
    const std::string path = c.data.empty() ? default_data_path() : c.data;
    for (const auto& [flag, output] : {std::pair{"--checkpoint", c.checkpoint}, std::pair{"--profile", c.profile.trace},
                                       std::pair{"--dump-grads", dump_grads}})
      samples::check_output_file(output, flag);
    samples::check_no_alias({{"--checkpoint", c.checkpoint}, {"--profile", c.profile.trace}, {"--dump-grads", dump_grads}},
                            {{"--data", path}, {"--from", from}});
    samples::check_no_alias({{"--profile", c.profile.trace}, {"--dump-grads", dump_grads}}, {{"--resume", c.resume}});
    if (!from.empty()) {  // sampling only
      check_checkpoint_file(from, "--from");
      doing = "loading the model of --from";
      const LoadedModel m = load_model(from, c.device);
      check_sample_options(s, &m.vocab);
      doing = "sampling";
      std::cout << generate(*m.model, m.vocab, s) << "\n";
      return 0;
    }
    if (!c.resume.empty()) check_checkpoint_file(c.resume, "--resume");
    doing = "reading --data";
    const TextData data = make_text_data(read_text_file(path));
    check_sample_options(s, &data.vocab);
    // The sizes' products and the memory the run needs, before the model is built. On a GPU the
    // micro-batches run in the device's memory, which its allocator checks.
    const bool on_gpu = c.device.rfind("cuda", 0) == 0 || (c.device == "auto" && cuda_is_available());
    check_run_fits(model_config(c, data.vocab.size()), c.batch_size, c.grad_accum,
                   samples::available_memory_bytes() / processes_on_this_machine(), !on_gpu);
    doing = "building the model and its optimizer";
    if (!dump_grads.empty()) {
      dump_one_step(c, data, dump_grads);
      return 0;
    }
    if (parallel::launched_with_several_processes()) {
      c.group = samples::process_group_for(c.device);  // --device honoured: cpu, cuda (cuda:<local rank>) or auto
      world = c.group->world_size();
      rank = c.group->rank();
      if (rank != 0) c.progress = ProgressStyle::Quiet;
    }
    if (c.progress != ProgressStyle::Quiet) {
      const GPTConfig g = model_config(c, data.vocab.size());
      std::cout << path << ": " << data.train.size() + data.val.size() << " characters, vocabulary of "
                << data.vocab.size() << "; " << data.train.size() << " train, " << data.val.size() << " val\n"
                << "GPT: " << g.n_layer << " layers, " << g.n_head << " heads, " << g.n_embd << " wide, context "
                << g.block_size << ", " << GPT::parameter_count(g) / 1e6 << "M parameters\n";
      if (world > 1) std::cout << world << " processes (" << c.group->backend_name() << "), each its own batches\n";
    }
    doing = "training";
    const TrainingResult result = train(c, data, std::cout);
    doing = "sampling";
    if (sample > 0 && rank == 0) std::cout << generate(*result.model, result.vocab, s) << "\n";
  } catch (...) {
    // One line whatever was thrown (samples/common/flags.h), exit status 1. Over several
    // processes an error may be this rank's alone while the others wait in a collective: end
    // the whole job (Note [a failed rank] in parallel/process_group.h).
    const std::string shown =
        samples::failure_line("char_gpt", doing, "lower --n-layer, --n-embd, --batch-size or --block-size");
    if (world > 1 || parallel::launched_with_several_processes())
      parallel::abort_job(1, shown + " (rank " + std::to_string(rank) + ")");
    std::cerr << shown << "\n";
    return 1;
  }
  return 0;
}
