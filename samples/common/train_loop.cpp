// samples::TrainLoop: resume, the step loop with its evaluations, checkpoints, divergence stop,
// profiler window and progress.
//
// Note [a diverged run stops]: the first NaN or infinite loss (training or evaluation) ends the
// run with an error naming where, before anything else is saved, so the checkpoint keeps its
// last save, taken while every number was finite (save_checkpoint also refuses non-finite
// weights). Going on would only overwrite it with weights no resume can use.
//
// Note [a longer run keeps its schedule]: a run resumed with a larger --iters/--epochs
// continues; its learning-rate schedule is the one it was started with (the horizon stored with
// the scheduler's state) unless the program's flag for the horizon sets a new one. A smaller
// count than the checkpoint's step is an error naming both numbers.
#include "samples/common/train_loop.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "core/memory.h"
#include "core/profiler.h"
#include "samples/common/precision.h"

namespace minidl::samples {

TrainLoop::TrainLoop(LoopOptions options, TrainingTask& task, std::ostream& out)
    : options_(std::move(options)), task_(task), out_(out), progress_(out, options_.lead ? options_.progress
                                                                                         : ProgressStyle::Quiet) {
  const LoopOptions& o = options_;
  MINIDL_CHECK(!o.program.empty(), "TrainLoop: options.program is empty");
  MINIDL_CHECK(o.steps >= 0, prefix(), o.steps_flag, " gives ", o.steps, " steps; expected >= 0");
  MINIDL_CHECK(o.steps_per_epoch >= 0 && o.eval_every >= 0 && o.checkpoint_every >= 0 && o.stop_after >= 0,
               prefix(), "negative loop interval (steps per epoch ", o.steps_per_epoch, ", eval every ", o.eval_every,
               ", checkpoint every ", o.checkpoint_every, ", stop after ", o.stop_after, ")");
  MINIDL_CHECK(o.checkpoint_every == 0 || !o.checkpoint.empty(), prefix(),
               "--checkpoint-every needs --checkpoint PATH to save to");
}

void TrainLoop::resume() {
  if (options_.resume.empty()) return;
  const std::string& path = options_.resume;
  io::Checkpoint ck = io::load_checkpoint(path, options_.program);
  std::vector<std::string> differ;
  const std::map<std::string, std::string> here = task_.hyperparameters();
  for (const auto& [key, value] : here) {
    auto it = ck.metadata.find("hp." + key);
    const std::string saved = it == ck.metadata.end() ? "(none)" : it->second;
    if (saved != value) differ.push_back(key + " " + saved + " in the checkpoint, " + value + " here");
  }
  // And the reverse for the precision: a float32 run records no dtype (its checkpoints keep the
  // keys they always had), so a bf16/fp16 checkpoint resumed in fp32 shows only as a dtype
  // the checkpoint has and this run lacks. (Other keys a checkpoint may carry that this run no
  // longer reports, such as a version-1 file's iters, are not settings a resume must match.)
  if (auto it = ck.metadata.find("hp.dtype"); it != ck.metadata.end() && !here.count("dtype"))
    differ.push_back("dtype " + it->second + " in the checkpoint, fp32 here");
  if (!differ.empty()) {
    std::string list;
    for (size_t i = 0; i < differ.size(); ++i) (list += i ? "; " : "") += differ[i];
    throw Error(prefix() + "refusing to resume from " + path + ": it was trained with other hyperparameters (" + list +
                "); resume with the flags it was started with, or start without --resume");
  }
  MINIDL_CHECK(ck.step <= options_.steps, prefix(), "refusing to resume from ", path, ": it is at ",
               task_.where(ck.step), ", beyond this run's end at ", task_.where(options_.steps), " (",
               options_.steps_flag, "); resume with a larger ", options_.steps_flag);
  if (options_.steps_per_epoch > 0) {
    io::MetadataReader r(ck.metadata, path);
    epoch_loss_sum_ = r.has("epoch.loss_sum") ? r.real("epoch.loss_sum") : 0.0;
    epoch_examples_ = r.has("epoch.samples") ? r.integer("epoch.samples", 0) : 0;
  }
  task_.prepare_resume(ck);  // Note [a longer run keeps its schedule]
  io::restore_training_state(task_.training_state(), ck, path);
  task_.load_state(ck);
  step_ = ck.step;
  resumed_ = true;
  if (options_.lead && options_.progress != ProgressStyle::Quiet) {
    out_ << "resumed from " << path << " at " << task_.where(step_) << "\n";
    if (step_ >= options_.steps) out_ << "nothing to train: the checkpoint is at the run's end\n";
  }
}

void TrainLoop::save() {
  if (options_.checkpoint.empty()) return;
  // Every process records where the last save was (for the divergence message); the lead writes.
  if (options_.lead) {
    io::Checkpoint ck;
    ck.program = options_.program;
    ck.step = step_;
    io::capture_training_state(task_.training_state(), ck);
    for (const auto& [k, v] : task_.hyperparameters()) ck.metadata["hp." + k] = v;
    if (options_.steps_per_epoch > 0) {
      ck.metadata["epoch.loss_sum"] = io::format_exact(epoch_loss_sum_);
      ck.metadata["epoch.samples"] = std::to_string(epoch_examples_);
    }
    task_.save_state(ck);
    try {
      io::save_checkpoint(ck, options_.checkpoint);
    } catch (const Error& e) {  // refused (non-finite weights: the last step diverged) or not writable
      throw Error(prefix() + e.what() +
                  (last_save_.empty() ? std::string("; this run wrote no checkpoint before")
                                      : "; it keeps the state saved at " + last_save_));
    }
  }
  last_save_ = task_.where(step_);
  saved_at_ = step_;
}

void TrainLoop::diverged(const std::string& what, double value, const std::string& where) const {
  std::ostringstream os;
  const char* shown = std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf";
  os << prefix() << "the " << what << " is " << shown << " " << where << " (lr " << task_.lr()
     << "): the run diverged and stops here. ";
  if (options_.checkpoint.empty()) os << "No checkpoint was asked for";
  else if (last_save_.empty()) os << options_.checkpoint << " was not written by this run";
  else os << options_.checkpoint << " keeps the state saved at " << last_save_ << ", before the divergence";
  os << "; a smaller --lr may train.";
  throw Error(os.str());
}

void TrainLoop::evaluate(EvalAt at) {
  profiler::RecordScope scope("evaluate", profiler::Kind::User);
  const NamedValues values = options_.lead ? task_.evaluate(at) : NamedValues{};
  for (const auto& [name, v] : values)
    if (!std::isfinite(v)) diverged(name, v, at.epoch >= 0 ? "after epoch " + std::to_string(at.epoch + 1) : "at " + task_.where(at.step));
  progress_.print(task_.record(at, values));
  save();
}

LoopResult TrainLoop::run() {
  const LoopOptions& o = options_;
  const int64_t per_epoch = o.steps_per_epoch;
  LoopResult result;
  ProfileWindow profile(o.lead ? o.profile : ProfileOptions{}, out_);
  if (o.eval_every > 0 && step_ == 0 && !resumed_) evaluate(EvalAt{.step = 0});

  double epoch_seconds = 0, epoch_lr = task_.lr();
  int64_t epoch_examples_here = 0;
  bool phase_open = false;
  while (step_ < o.steps) {
    if (!phase_open || (per_epoch > 0 && step_ % per_epoch == 0)) {  // a new phase: the run, or an epoch
      if (per_epoch > 0) {
        progress_.begin("epoch " + std::to_string(step_ / per_epoch + 1) + "/" + std::to_string(o.steps / per_epoch),
                        step_ % per_epoch, per_epoch);
      } else {
        progress_.begin("iter", step_, o.steps);
      }
      epoch_seconds = 0;
      epoch_examples_here = 0;
      epoch_lr = task_.lr();
      phase_open = true;
    }
    const auto start = std::chrono::steady_clock::now();
    const StepResult r = task_.train_step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    profile.step_done();
    ++step_;
    ++result.run_here;
    result.seconds += seconds;
    if (!std::isfinite(r.loss)) diverged("training loss", r.loss, "at " + task_.where(step_));  // Note [a diverged run stops]
    const int64_t weight = r.examples > 0 ? r.examples : 1;
    epoch_loss_sum_ += r.loss * static_cast<double>(weight);
    epoch_examples_ += weight;
    epoch_seconds += seconds;
    epoch_examples_here += r.examples;
    const double running = epoch_loss_sum_ / static_cast<double>(epoch_examples_);
    if (per_epoch > 0) progress_.update(step_ % per_epoch == 0 ? per_epoch : step_ % per_epoch, running, epoch_examples_here);
    else progress_.update(step_, r.loss);

    bool saved = false;
    if (per_epoch > 0 && step_ % per_epoch == 0) {  // the epoch's end
      const int64_t epoch = step_ / per_epoch - 1;
      task_.end_epoch(epoch);
      EvalAt at{.step = step_, .epoch = epoch, .train_loss = running, .lr = epoch_lr, .seconds = epoch_seconds,
                .examples = epoch_examples_here};
      epoch_loss_sum_ = 0;
      epoch_examples_ = 0;
      evaluate(at);
      saved = true;
    } else if (per_epoch == 0 && o.eval_every > 0 && (step_ % o.eval_every == 0 || step_ == o.steps)) {
      evaluate(EvalAt{.step = step_});
      saved = true;
    } else if (o.checkpoint_every > 0 && (per_epoch > 0 ? step_ % per_epoch : step_) % o.checkpoint_every == 0) {
      save();
      saved = true;
    }
    if (o.stop_after > 0 && result.run_here >= o.stop_after && step_ < o.steps) {
      if (!saved) save();
      progress_.print("stopped after " + std::to_string(result.run_here) + " steps at " + task_.where(step_) +
                      (o.checkpoint.empty() ? "" : "; checkpoint " + o.checkpoint));
      break;
    }
  }
  profile.finish();
  if (step_ >= o.steps && saved_at_ != step_) save();  // the run's end is always in the checkpoint
  result.step = step_;
  result.finished = step_ >= o.steps;
  if (o.print_speed && result.run_here > 0) {
    constexpr double kMiB = 1024.0 * 1024.0;
    char buf[224];
    const int len = std::snprintf(buf, sizeof buf,
                                  "%lld iterations in %.1f s, %.2f ms/iter, peak resident memory %.1f MiB",
                                  static_cast<long long>(result.run_here), result.seconds, result.ms_per_step(),
                                  static_cast<double>(peak_resident_bytes()) / kMiB);
    // The tensors' own peak, from the device's allocator: without what its caches hold.
    if (o.device && len > 0 && static_cast<size_t>(len) < sizeof buf)
      std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), ", peak in tensors %.1f MiB on %s",
                    static_cast<double>(memory_stats(*o.device).peak_allocated_bytes) / kMiB, o.device->str().c_str());
    progress_.print(buf);
  }
  return result;
}

LoopResult run_training(LoopOptions options, TrainingTask& task, std::ostream& out) {
  TrainLoop loop(std::move(options), task, out);
  loop.resume();
  return loop.run();
}

}  // namespace minidl::samples
