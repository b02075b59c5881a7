// samples/char_gpt: the character data (vocabulary, encoding, the 90/10 split, batches), the
// GPT (shapes, the parameter count formula, the tied output projection), sampling (deterministic
// for a seed, top-k keeping the k most likely) and the trainer's errors. Tiny models on a short
// text of their own (tests/samples/data/char_gpt_text.txt), so the whole file runs in seconds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "samples/char_gpt/model.h"
#include "samples/char_gpt/text_data.h"
#include "samples/char_gpt/trainer.h"
#include "tests/error_message.h"

using namespace minidl;
using namespace minidl::char_gpt;
using minidl::testing::error_message;

namespace {

const TextData& small_text() {
  static const TextData d = make_text_data(read_text_file(std::string(MINIDL_SOURCE_DIR) +
                                                          "/tests/samples/data/char_gpt_text.txt"));
  return d;
}

GPTConfig tiny_config(int64_t vocab_size) {
  return GPTConfig{.vocab_size = vocab_size, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

}  // namespace

TEST_CASE("char_gpt: the vocabulary is the sorted distinct characters and encoding round-trips", "[samples][char-gpt]") {
  const Vocabulary v = Vocabulary::from_text("hello world");
  CHECK(v.chars() == " dehlorw");
  CHECK(v.size() == 8);
  CHECK(v.encode("hello") == std::vector<int64_t>{3, 2, 4, 4, 5});
  CHECK(v.decode(v.encode("world hello")) == "world hello");
  CHECK(Vocabulary::deserialize(v.serialize()) == v);
  CHECK(v.serialize() == "32,100,101,104,108,111,114,119");
  CHECK(error_message([&] { v.encode("hi!", "--prompt"); }) ==
        "char_gpt: --prompt: character 105 ('i') at position 1 is not in the vocabulary of 8 characters of the text "
        "the model is trained on");
  CHECK_THAT(error_message([] { Vocabulary::from_text(""); }), Catch::Contains("the text is empty"));
  CHECK_THAT(error_message([] { Vocabulary::deserialize("32,10"); }), Catch::Contains("expected increasing byte values"));
}

TEST_CASE("char_gpt: the text splits 90/10 like nanoGPT, in order", "[samples][char-gpt]") {
  const TextData d = make_text_data("abcdefghijk");  // 11 characters: int(0.9 * 11) = 9
  CHECK(d.train == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(d.val == std::vector<int64_t>{9, 10});
  const TextData& s = small_text();
  CHECK(s.train.size() == static_cast<size_t>(0.9 * static_cast<double>(s.train.size() + s.val.size())));
  CHECK(s.vocab.decode(s.train).substr(0, 9) == "THE KEEPE");
}

TEST_CASE("char_gpt: a batch is random windows, y shifted by one, the same for a seed", "[samples][char-gpt]") {
  const std::vector<int64_t>& data = small_text().train;
  Generator g1(5), g2(5), g3(6);
  const Batch a = get_batch(data, 4, 8, g1), b = get_batch(data, 4, 8, g2), c = get_batch(data, 4, 8, g3);
  CHECK(a.x.shape() == Shape{4, 8});
  CHECK(a.y.shape() == Shape{4, 8});
  CHECK(a.x.dtype() == DType::Int64);
  CHECK(a.x.to_vector<int64_t>() == b.x.to_vector<int64_t>());
  CHECK(a.x.to_vector<int64_t>() != c.x.to_vector<int64_t>());
  const auto x = a.x.to_vector<int64_t>(), y = a.y.to_vector<int64_t>();
  for (int row = 0; row < 4; ++row) {
    // The row is a window of the data, and y is the same window one character later.
    const auto start = std::search(data.begin(), data.end(), x.begin() + row * 8, x.begin() + row * 8 + 8);
    REQUIRE(start != data.end());
    CHECK(std::equal(y.begin() + row * 8, y.begin() + row * 8 + 8, start + 1));
  }
  CHECK(g1.state() == g2.state());  // one draw per row
  CHECK_THAT(error_message([] {
               Generator g(0);
               get_batch({1, 2, 3}, 2, 3, g, "validation");
             }),
             Catch::Contains("the validation split holds 3 characters; a window of --block-size 3 needs at least 4"));
}

TEST_CASE("char_gpt: the GPT's logits are [B, T, vocab] and its parameters match the formula", "[samples][char-gpt]") {
  manual_seed(0);
  const GPTConfig c = tiny_config(11);
  GPT model(c);
  const Tensor logits = model(from_vector(std::vector<int64_t>(2 * 5, 3), Shape{2, 5}));
  CHECK(logits.shape() == Shape{2, 5, 11});
  // V·C + T·C + L·(12·C² + 13·C) + 2·C = 176 + 128 + 2·(3072 + 208) + 32
  CHECK(GPT::parameter_count(c) == 176 + 128 + 2 * (12 * 256 + 13 * 16) + 32);
  CHECK(model.num_parameters() == GPT::parameter_count(c));
  CHECK(model.num_parameters(true) == GPT::parameter_count(c) - 8 * 16);
  GPTConfig no_bias = c;
  no_bias.bias = false;
  CHECK(GPT(no_bias).num_parameters() == GPT::parameter_count(no_bias));
  // nanoGPT's names; the output projection is not a parameter of its own.
  std::set<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.insert(name);
  CHECK(names.count("transformer.wte.weight") == 1);
  CHECK(names.count("transformer.h.1.attn.c_attn.weight") == 1);
  CHECK(names.count("transformer.h.0.mlp.c_proj.bias") == 1);
  CHECK(names.count("transformer.ln_f.weight") == 1);
  CHECK(names.size() == model.state_dict().size());
  CHECK_THAT(error_message([&] { model(from_vector(std::vector<int64_t>(9, 0), Shape{1, 9})); }),
             Catch::Contains("a sequence of 9 tokens is longer than block_size 8"));
  CHECK_THAT(error_message([] { GPT(GPTConfig{.vocab_size = 5, .n_head = 3, .n_embd = 16}); }),
             Catch::Contains("--n-embd (16) must be a positive multiple of --n-head (3)"));
}

TEST_CASE("char_gpt: the initialisation is GPT-2's", "[samples][char-gpt]") {
  manual_seed(1);
  GPT model(GPTConfig{.vocab_size = 64, .block_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 64});
  auto stddev = [](const Tensor& t) {
    const auto v = t.to_vector<float>();
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += static_cast<double>(x) * x;
    const double n = static_cast<double>(v.size()), mean = s / n;
    return std::sqrt(s2 / n - mean * mean);
  };
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    const bool residual = name.find("c_proj.weight") != std::string::npos;
    if (name.find("ln_") != std::string::npos) {
      const auto v = p.to_vector<float>();
      const float want = name.find("weight") != std::string::npos ? 1.0f : 0.0f;
      CHECK(std::all_of(v.begin(), v.end(), [&](float x) { return x == want; }));
    } else if (name.find("bias") != std::string::npos) {
      const auto v = p.to_vector<float>();
      CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    } else {
      // >= 4096 draws: the sample std is within a few percent of the true one.
      CHECK(stddev(p) == Approx(residual ? 0.02 / std::sqrt(4.0) : 0.02).epsilon(0.06));
    }
  }
}

TEST_CASE("char_gpt: the output projection is the token embedding and gets the gradient of both uses",
          "[samples][char-gpt]") {
  manual_seed(2);
  GPT model(tiny_config(11));
  const Tensor& w = model.lm_head_weight();
  int64_t listed = 0;
  for (const Tensor& p : model.parameters()) listed += p.same(w) ? 1 : 0;
  CHECK(listed == 1);

  const Tensor idx = from_vector(std::vector<int64_t>{1, 2, 3, 1, 2, 5, 5, 6}, Shape{2, 4});
  const Tensor y = from_vector(std::vector<int64_t>{2, 3, 1, 2, 5, 5, 6, 0}, Shape{8});
  auto loss_of = [&](const Tensor& logits) { return ops::softmax_cross_entropy(logits.reshape({8, 11}), y); };
  loss_of(model(idx)).backward();
  const auto total = w.grad().to_vector<float>();
  model.zero_grad();
  loss_of(ops::linear(model.hidden(idx).detach(), w)).backward();  // through the output projection only
  const auto head = w.grad().to_vector<float>();
  model.zero_grad();
  loss_of(ops::linear(model.hidden(idx), w.detach())).backward();  // through the embedding only
  const auto embed = w.grad().to_vector<float>();
  for (size_t i = 0; i < total.size(); ++i) {
    INFO("element " << i << " (row " << i / 16 << ")");
    // The same sums in another order: float32 rounding of values ~1e-2.
    CHECK(total[i] == Approx(head[i] + embed[i]).margin(1e-6));
  }
  // Rows of characters absent from the input (0, 4, 7..10) get the projection's part only.
  for (int64_t row : {0, 4, 7}) CHECK(embed[static_cast<size_t>(row * 16)] == 0.0f);
  CHECK(embed[16] != 0.0f);
  CHECK(head[0] != 0.0f);
}

TEST_CASE("char_gpt: a few training steps lower the loss on a small text", "[samples][char-gpt]") {
  TrainerConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.block_size = 16, c.batch_size = 8;
  c.iters = 60, c.lr = 3e-3, c.min_lr = 3e-4, c.warmup = 5, c.eval_interval = 30, c.eval_iters = 4;
  c.device = "cpu";
  c.progress = ProgressStyle::Quiet;
  std::ostringstream log;
  const TrainingResult r = train(c, small_text(), log);
  REQUIRE(r.history.size() == 3);  // steps 0, 30, 60
  CHECK(r.finished);
  CHECK(r.history[0].iter == 0);
  CHECK(r.history[2].iter == 60);
  // At the start every character is about equally likely: ln(vocab).
  CHECK(r.history[0].train_loss == Approx(std::log(static_cast<double>(small_text().vocab.size()))).epsilon(0.05));
  CHECK(r.history[2].train_loss < r.history[0].train_loss - 0.8);
  CHECK(r.history[2].val_loss < r.history[0].val_loss - 0.5);
}

TEST_CASE("char_gpt: sampling is deterministic for a seed and top-k keeps the k most likely", "[samples][char-gpt]") {
  const TextData& d = small_text();
  manual_seed(3);
  GPT model(tiny_config(d.vocab.size()));
  SampleOptions o;
  o.length = 20;
  o.prompt = "KEEPER:";
  o.seed = 9;
  const std::string a = generate(model, d.vocab, o), b = generate(model, d.vocab, o);
  CHECK(a == b);
  CHECK(a.size() == 27);
  CHECK(a.substr(0, 7) == "KEEPER:");
  o.seed = 10;
  CHECK(generate(model, d.vocab, o) != a);
  CHECK(model.is_training());  // generate() puts the training flag back

  // Every generated character is among the k largest logits of its context (cropped to 8).
  for (int64_t k : {1, 3}) {
    INFO("top-k " << k);
    o.top_k = k;
    o.temperature = 2.0;  // flatter: without the cut, characters outside the top k would come up
    const std::vector<int64_t> tokens = d.vocab.encode(generate(model, d.vocab, o));
    NoGradGuard no_grad;
    model.eval();
    for (size_t i = 7; i < tokens.size(); ++i) {
      const auto len = static_cast<int64_t>(std::min<size_t>(i, 8));
      const std::vector<int64_t> ctx(tokens.begin() + static_cast<int64_t>(i) - len, tokens.begin() + static_cast<int64_t>(i));
      const auto logits = model(from_vector(ctx, Shape{1, len})).narrow(1, len - 1, 1).reshape({-1}).to_vector<float>();
      const float chosen = logits[static_cast<size_t>(tokens[i])];
      const auto larger = std::count_if(logits.begin(), logits.end(), [&](float v) { return v > chosen; });
      CHECK(larger < k);
    }
    model.train();
  }
  CHECK_THAT(error_message([&] { generate(model, d.vocab, SampleOptions{.temperature = 0.0}); }),
             Catch::Contains("--temperature must be > 0"));
  CHECK_THAT(error_message([&] { generate(model, d.vocab, SampleOptions{.prompt = "~"}); }),
             Catch::Contains("--prompt: character 126 ('~')"));
}

TEST_CASE("char_gpt: bad trainer settings are errors that name the flag", "[samples][char-gpt]") {
  auto tiny = [] {
    TrainerConfig c;
    c.device = "cpu";
    c.progress = ProgressStyle::Quiet;
    c.n_layer = 1, c.n_embd = 8, c.n_head = 2, c.block_size = 8, c.iters = 2, c.warmup = 0;
    return c;
  };
  auto message = [](const TrainerConfig& c) {
    std::ostringstream log;
    return error_message([&] { train(c, small_text(), log); });
  };
  TrainerConfig c = tiny();
  c.warmup = 5, c.lr_decay_iters = 5;
  CHECK_THAT(message(c), Catch::Contains("--lr-decay-iters (5) must be greater than --warmup (5)"));
  c = tiny();
  c.warmup = c.iters;  // all warm-up: the horizon defaults to --iters, but never before the warm-up ends
  std::ostringstream log;
  CHECK(train(c, small_text(), log).finished);
  c = tiny();
  c.min_lr = 1.0;
  CHECK_THAT(message(c), Catch::Contains("--min-lr must be in [0, --lr 0.001], got 1"));
  c = tiny();
  c.n_head = 3;
  CHECK_THAT(message(c), Catch::Contains("--n-embd (8) must be a positive multiple of --n-head (3)"));
  c = tiny();
  c.checkpoint = "/nonexistent-folder/run.safetensors";
  CHECK_THAT(message(c), Catch::Contains("the folder /nonexistent-folder does not exist"));
  c = tiny();
  c.resume = "/nonexistent-folder/run.safetensors";
  CHECK_THAT(message(c), Catch::Contains("/nonexistent-folder/run.safetensors"));
  c = tiny();
  c.block_size = 400;  // longer than the validation split (278 characters)
  CHECK_THAT(message(c), Catch::Contains("the validation split holds 278 characters"));
  CHECK_THAT(error_message([] { read_text_file("/nonexistent-folder/input.txt"); }),
             Catch::Contains("cannot read /nonexistent-folder/input.txt (check --data)"));
}
