// samples/seed_train, the program itself, on the CPU: it exits 0 and prints the tutorial's ten
// loss lines ("[epoch,     i] loss: x.xxx", one per epoch of ten batches), each finite and equal
// to the line the same training loop prints when it runs in this process with the same seed
// and the same model class (samples/common/seed_model.h). So a change to the sample's loop, its
// defaults or its output format fails here, and so does a change to the library that makes the
// program disagree with the in-process run.
#include <catch2/catch.hpp>

#ifdef MINIDL_SEED_TRAIN_BINARY  // set by tests/CMakeLists.txt when the samples are built

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "samples/common/seed_model.h"

using namespace minidl;

namespace {

struct ProgramRun {
  int exit_code = -1;
  std::vector<std::string> lines;
};

ProgramRun run_program(const std::string& command) {
  ProgramRun run;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string line;
  for (int c = std::fgetc(pipe); c != EOF; c = std::fgetc(pipe)) {
    if (c == '\n') {
      run.lines.push_back(line);
      line.clear();
    } else {
      line.push_back(static_cast<char>(c));
    }
  }
  if (!line.empty()) run.lines.push_back(line);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// seed_train's loop and print, with its defaults (10 epochs, batch 10, SGD lr 0.01), in this
// process on the CPU.
std::vector<std::string> seed_train_lines_in_process(uint64_t seed) {
  manual_seed(seed);
  samples::SimpleModel model;
  auto dataset = data::make_random_classification(100, 10, 2, seed);
  data::DataLoader loader(dataset, data::DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = seed});
  nn::CrossEntropyLoss criterion;
  optim::SGD optimizer(model.parameters(), optim::SGDOptions{.lr = 0.01});
  std::vector<std::string> lines;
  for (int epoch = 0; epoch < 10; ++epoch) {
    double running_loss = 0.0;
    int i = 0;
    for (data::Batch& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = criterion(model(batch.x), batch.y);
      loss.backward();
      optimizer.step();
      running_loss += loss.item();
      if (i % 10 == 9) {
        char text[64];
        std::snprintf(text, sizeof(text), "[%d, %5d] loss: %.3f", epoch + 1, i + 1, running_loss / 10);
        lines.emplace_back(text);
        running_loss = 0.0;
      }
      ++i;
    }
  }
  return lines;
}

}  // namespace

TEST_CASE("seed_train on the cpu prints ten finite loss lines equal to the in-process seed model's", "[samples][seed_train]") {
  constexpr uint64_t kSeed = 3;
  const ProgramRun run =
      run_program(std::string("'") + MINIDL_SEED_TRAIN_BINARY + "' --device cpu --seed " + std::to_string(kSeed));
  INFO("seed_train printed " << run.lines.size() << " lines");
  REQUIRE(run.exit_code == 0);
  REQUIRE(!run.lines.empty());
  CHECK(run.lines.back() == "Finished Training");

  const std::regex loss_line(R"(\[(\d+), +(\d+)\] loss: (\S+))");
  std::vector<std::string> losses;
  for (const std::string& line : run.lines) {
    std::smatch m;
    if (!std::regex_match(line, m, loss_line)) continue;
    INFO(line);
    CHECK(std::stoi(m[1].str()) == static_cast<int>(losses.size()) + 1);  // epochs 1..10 in order
    CHECK(m[2].str() == "10");                                            // after the 10th batch
    CHECK(std::regex_match(m[3].str(), std::regex(R"(\d+\.\d{3})")));     // %.3f: no nan, no inf
    CHECK(std::isfinite(std::stod(m[3].str())));
    losses.push_back(line);
  }
  REQUIRE(losses.size() == 10);
  // The same code on the same device with the same seed: the same bits, so the same text.
  CHECK(losses == seed_train_lines_in_process(kSeed));
}

#endif  // MINIDL_SEED_TRAIN_BINARY
