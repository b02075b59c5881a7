// samples/char_gpt: a run stopped and resumed from its checkpoint trains the same weights, bit
// for bit on the CPU (with dropout and gradient accumulation too: Note [what a bit-identical
// resume needs] in samples/char_gpt/trainer.cpp); a checkpoint of other hyperparameters is
// refused; a saved model samples what the trained one does; --dump-grads writes one step.
#include <catch2/catch.hpp>

#include <sstream>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "samples/char_gpt/trainer.h"
#include "tests/error_message.h"
#include "tests/temp_dir.h"

using namespace minidl;
using namespace minidl::char_gpt;
using minidl::testing::error_message;

namespace {

const TextData& small_text() {
  static const TextData d = make_text_data(read_text_file(std::string(MINIDL_SOURCE_DIR) +
                                                          "/tests/samples/data/char_gpt_text.txt"));
  return d;
}

TrainerConfig small_config() {
  TrainerConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 8, c.batch_size = 4;
  c.iters = 12, c.warmup = 2, c.eval_interval = 5, c.eval_iters = 2;
  c.device = "cpu";
  c.progress = ProgressStyle::Quiet;
  c.seed = 4;
  return c;
}

TrainingResult run(const TrainerConfig& c) {
  std::ostringstream log;
  return train(c, small_text(), log);
}

void check_same_bits(const nn::StateDict& a, const nn::StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    CHECK(t.to_vector<float>() == b.at(name).to_vector<float>());
  }
}

}  // namespace

TEST_CASE("char_gpt: a run stopped and resumed equals the run straight through, bit for bit", "[samples][char-gpt]") {
  minidl::testing::TempDir dir;
  const double dropout = GENERATE(0.0, 0.2);
  const int64_t accum = GENERATE(1, 2);
  const int64_t stop = GENERATE(5, 7);  // at an evaluation (saved after it) and between two
  INFO("dropout " << dropout << ", grad_accum " << accum << ", stop after " << stop);
  TrainerConfig straight = small_config();
  straight.dropout = dropout;
  straight.grad_accum = accum;
  const TrainingResult a = run(straight);
  REQUIRE(a.finished);
  REQUIRE(a.history.size() == 4);  // 0, 5, 10, 12

  TrainerConfig first = straight;
  first.checkpoint = dir.path() + "/run.safetensors";
  first.stop_after = stop;
  const TrainingResult b1 = run(first);
  CHECK_FALSE(b1.finished);
  CHECK(b1.iterations == stop);

  TrainerConfig second = straight;
  second.resume = first.checkpoint;
  second.checkpoint = first.checkpoint;
  const TrainingResult b2 = run(second);
  CHECK(b2.finished);
  check_same_bits(a.model->state_dict(), b2.model->state_dict());
  REQUIRE(b2.history.size() == a.history.size());
  for (size_t i = 0; i < a.history.size(); ++i) {
    CHECK(a.history[i].iter == b2.history[i].iter);
    CHECK(a.history[i].train_loss == b2.history[i].train_loss);
    CHECK(a.history[i].val_loss == b2.history[i].val_loss);
  }

  // The final checkpoint holds the vocabulary and the model; a model loaded from it samples
  // what the trained one does.
  const LoadedModel m = load_model(first.checkpoint);
  CHECK(m.vocab == small_text().vocab);
  CHECK(m.iterations == 12);
  check_same_bits(a.model->state_dict(), m.model->state_dict());
  SampleOptions o;
  o.length = 12;
  o.top_k = 5;
  CHECK(generate(*m.model, m.vocab, o) == generate(*a.model, a.vocab, o));
}

TEST_CASE("char_gpt: a checkpoint of other hyperparameters or another text is refused", "[samples][char-gpt]") {
  minidl::testing::TempDir dir;
  TrainerConfig first = small_config();
  first.checkpoint = dir.path() + "/run.safetensors";
  first.stop_after = 3;
  run(first);

  TrainerConfig other = small_config();
  other.resume = first.checkpoint;
  other.lr = 2e-3;
  other.n_embd = 32;
  CHECK_THAT(error_message([&] { run(other); }),
             Catch::Contains("it was trained with other hyperparameters (lr 0.001 in the checkpoint, 0.002 here; "
                             "n_embd 16 in the checkpoint, 32 here)"));
  TrainerConfig same = small_config();
  same.resume = first.checkpoint;
  // Another text: one character more, another vocabulary.
  const std::string text = read_text_file(std::string(MINIDL_SOURCE_DIR) + "/tests/samples/data/char_gpt_text.txt");
  const TextData other_text = make_text_data(text + "~");
  std::ostringstream log;
  CHECK_THAT(error_message([&] { train(same, other_text, log); }),
             Catch::Contains("(vocab_size " + std::to_string(small_text().vocab.size()) + " in the checkpoint, " +
                             std::to_string(small_text().vocab.size() + 1) + " here)"));
}

TEST_CASE("char_gpt: --dump-grads writes the batch, the loss, the gradients and one step", "[samples][char-gpt]") {
  minidl::testing::TempDir dir;
  TrainerConfig c = small_config();
  const std::string path = dir.path() + "/step.safetensors";
  dump_one_step(c, small_text(), path);
  const io::SafetensorsFile f = io::load_safetensors(path);
  CHECK(f.tensors.at("x").shape() == Shape{4, 8});
  CHECK(f.tensors.at("y").shape() == Shape{4, 8});
  CHECK(f.tensors.at("loss").item() == Approx(std::log(static_cast<double>(small_text().vocab.size()))).epsilon(0.05));
  const auto& w = f.tensors.at("init.transformer.wte.weight");
  CHECK(w.shape() == Shape{small_text().vocab.size(), 16});
  CHECK(f.tensors.count("grad.transformer.h.1.mlp.c_fc.bias") == 1);
  CHECK(f.tensors.at("step.transformer.wte.weight").to_vector<float>() != w.to_vector<float>());
  CHECK(f.metadata.at("vocab") == small_text().vocab.serialize());
  c.dropout = 0.1;
  CHECK_THAT(error_message([&] { dump_one_step(c, small_text(), path); }), Catch::Contains("--dump-grads needs --dropout 0"));
}

TEST_CASE("char_gpt: a larger --iters continues the run on the schedule it was started with", "[samples][char-gpt]") {
  minidl::testing::TempDir dir;
  TrainerConfig first = small_config();
  first.iters = 6;
  first.checkpoint = dir.path() + "/run.safetensors";
  run(first);

  TrainerConfig longer = small_config();  // --iters 12, resumed: the cosine still ends at 6
  longer.resume = first.checkpoint;
  const TrainingResult b = run(longer);
  CHECK(b.finished);
  CHECK(b.iterations == 12);

  TrainerConfig straight = small_config();  // the same run in one piece
  straight.lr_decay_iters = 6;
  const TrainingResult a = run(straight);
  check_same_bits(a.model->state_dict(), b.model->state_dict());

  // A horizon given on resume replaces the stored one: another schedule, other weights.
  TrainerConfig new_horizon = longer;
  new_horizon.lr_decay_iters = 12;
  const TrainingResult c = run(new_horizon);
  CHECK(c.model->state_dict().at("transformer.wte.weight").to_vector<float>() !=
        b.model->state_dict().at("transformer.wte.weight").to_vector<float>());
}

TEST_CASE("char_gpt: resuming with an --iters below the checkpoint's step names both numbers", "[samples][char-gpt]") {
  minidl::testing::TempDir dir;
  TrainerConfig first = small_config();
  first.checkpoint = dir.path() + "/run.safetensors";
  first.stop_after = 7;
  run(first);
  TrainerConfig shorter = small_config();
  shorter.iters = 5;
  shorter.resume = first.checkpoint;
  std::ostringstream log;
  CHECK_THAT(error_message([&] { train(shorter, small_text(), log); }),
             Catch::Contains("it is at iteration 7, beyond this run's end at iteration 5 (--iters)"));
  CHECK(log.str().empty());
}

TEST_CASE("char_gpt: --iters 0 evaluates the initial model once and trains nothing", "[samples][char-gpt]") {
  minidl::testing::TempDir dir;
  TrainerConfig c = small_config();
  c.iters = 0;
  c.checkpoint = dir.path() + "/run.safetensors";
  const TrainingResult r = run(c);
  CHECK(r.finished);
  CHECK(r.iterations == 0);
  REQUIRE(r.history.size() == 1);
  CHECK(r.history[0].iter == 0);
  CHECK(load_model(c.checkpoint).iterations == 0);
}

TEST_CASE("char_gpt: a step that makes the weights non-finite writes no checkpoint", "[samples][char-gpt]") {
  minidl::testing::TempDir dir;
  TrainerConfig c = small_config();
  c.lr = 1e300;
  c.warmup = 0;
  c.stop_after = 1;
  c.eval_interval = 100;
  c.checkpoint = dir.path() + "/run.safetensors";
  // Step 1's loss is finite (it is computed before the update), its weights are not: the save
  // after it is refused, naming the tensor and the save that stays, the evaluation's at step 0.
  const std::string message = error_message([&] { run(c); });
  CHECK_THAT(message, Catch::Contains("refusing to save") && Catch::Contains("NaN or infinite value") &&
                          Catch::Contains("it keeps the state saved at iteration 0"));
  CHECK(load_model(c.checkpoint).iterations == 0);
}

TEST_CASE("char_gpt --dtype bf16/fp16: float32 master weights, a run resumed bit for bit, the scaler in the checkpoint",
          "[samples][char-gpt][half]") {
  minidl::testing::TempDir dir;
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  INFO(dtype);
  TrainerConfig straight = small_config();
  straight.dtype = dtype;
  straight.dropout = 0.1;
  const TrainingResult a = run(straight);
  REQUIRE(a.finished);
  for (const auto& [name, t] : a.model->state_dict()) {
    INFO(name);
    CHECK(t.dtype() == DType::Float32);  // the master weights
  }
  // Autocast changes the numbers: not the float32 run's weights.
  TrainerConfig fp32 = small_config();
  fp32.dropout = 0.1;
  const TrainingResult f = run(fp32);
  CHECK(f.model->state_dict().at("transformer.wte.weight").to_vector<float>() !=
        a.model->state_dict().at("transformer.wte.weight").to_vector<float>());
  // Stopped and resumed: the same bits as straight through.
  TrainerConfig first = straight;
  first.checkpoint = dir.path() + "/run.safetensors";
  first.stop_after = 7;
  run(first);
  const io::Checkpoint ck = io::load_checkpoint(first.checkpoint, "char_gpt");
  CHECK(ck.grad_scaler.has_value() == (dtype == DType::Float16));
  CHECK(ck.metadata.at("hp.dtype") == (dtype == DType::Float16 ? "fp16" : "bf16"));
  TrainerConfig second = straight;
  second.resume = first.checkpoint;
  const TrainingResult b = run(second);
  CHECK(b.finished);
  check_same_bits(a.model->state_dict(), b.model->state_dict());
  // A checkpoint is continued only in the precision it was written in.
  TrainerConfig other = straight;
  other.dtype = DType::Float32;
  other.resume = first.checkpoint;
  CHECK_THAT(error_message([&] { run(other); }), Catch::Contains("dtype"));
}
