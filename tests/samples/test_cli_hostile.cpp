// The samples' command lines given what a careless or hostile user might pass: a folder, a
// device or a FIFO as an input, an output that names an input, absurd sizes, sampling flags
// that can only fail after training. Each must end at once with exit status 1 (not an abort's
// 134 nor a timeout's 124), exactly one line on stderr naming the flag and the path or value,
// and every input file as it was. The programs run on a few-KB text of their own with a tiny
// model, under `timeout`, so a hang fails the case instead of stalling the suite. Then the
// checks themselves in-process: samples/common/input_files.h, failure_line (flags.h), the
// char_gpt size and memory checks (model.h) and get_batch's overflow check.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/generator.h"
#include "samples/char_gpt/model.h"
#include "samples/char_gpt/text_data.h"
#include "samples/common/flags.h"
#include "samples/common/input_files.h"
#include "tests/error_message.h"
#include "tests/temp_dir.h"

using namespace minidl;
using minidl::testing::error_message;
using minidl::testing::read_bytes;
using minidl::testing::TempDir;
using minidl::testing::write_bytes;

namespace {

// A few KB of text over a small alphabet (lower-case letters, space, newline, ':'), so
// a prompt with an upper-case letter is outside its vocabulary.
std::string small_text() {
  std::string text;
  const char* words[] = {"to be or not to be", "that is the question", "whether tis nobler in the mind",
                         "romeo: what light through yonder window breaks"};
  for (int i = 0; i < 60; ++i) (text += words[i % 4]) += '\n';
  return text;
}

void make_fifo(const std::string& path) { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); }

}  // namespace

// ---- samples/common/input_files.h ----

TEST_CASE("check_input_file accepts a regular readable file within the size limit", "[samples][input-files]") {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "hello");
  CHECK_NOTHROW(samples::check_input_file(dir.file("a.txt"), "--data"));
  CHECK_NOTHROW(samples::check_input_file(dir.file("a.txt"), "--data", 5));
  std::filesystem::create_symlink(dir.file("a.txt"), dir.file("link.txt"));
  CHECK_NOTHROW(samples::check_input_file(dir.file("link.txt"), "--data"));
}

TEST_CASE("check_input_file refuses a missing file, a folder, a device and a FIFO naming the flag and the path", "[samples][input-files]") {
  TempDir dir;
  const std::string missing = dir.file("missing.txt");
  CHECK_THAT(error_message([&] { samples::check_input_file(missing, "--data"); }),
             Catch::Equals("--data " + missing + " does not exist; expected a readable file"));
  CHECK_THAT(error_message([&] { samples::check_input_file(dir.path(), "--data"); }),
             Catch::Equals("--data " + dir.path() + " is a folder; expected a regular file"));
  CHECK_THAT(error_message([&] { samples::check_input_file("/dev/zero", "--resume"); }),
             Catch::Equals("--resume /dev/zero is a character device; expected a regular file"));
  // A FIFO with no writer: opening it for reading would block; the check must not.
  make_fifo(dir.file("fifo"));
  CHECK_THAT(error_message([&] { samples::check_input_file(dir.file("fifo"), "--from"); }),
             Catch::Equals("--from " + dir.file("fifo") + " is a FIFO (named pipe); expected a regular file"));
  std::filesystem::create_symlink(dir.file("fifo"), dir.file("fifo-link"));
  CHECK_THAT(error_message([&] { samples::check_input_file(dir.file("fifo-link"), "--data"); }),
             Catch::Contains("is a FIFO (named pipe)"));
  CHECK_THAT(error_message([&] { samples::check_input_file("", "--data"); }),
             Catch::Equals("--data: the path is empty; expected a file name"));
}

TEST_CASE("check_input_file refuses a file over the limit, giving its size and the limit's reason", "[samples][input-files]") {
  TempDir dir;
  write_bytes(dir.file("big.txt"), std::string(2048, 'x'));
  CHECK_THAT(error_message([&] { samples::check_input_file(dir.file("big.txt"), "--data", 1024, "a test limit"); }),
             Catch::Equals("--data " + dir.file("big.txt") +
                           " is 2.0 KiB (2048 bytes); expected at most 1.0 KiB (a test limit)"));
}

TEST_CASE("check_output_file accepts a new path or a regular file and refuses a FIFO, a folder or a device", "[samples][input-files]") {
  TempDir dir;
  CHECK_NOTHROW(samples::check_output_file(dir.file("new.st"), "--checkpoint"));
  CHECK_NOTHROW(samples::check_output_file("", "--checkpoint"));
  write_bytes(dir.file("old.st"), "x");
  CHECK_NOTHROW(samples::check_output_file(dir.file("old.st"), "--checkpoint"));
  make_fifo(dir.file("fifo"));
  CHECK_THAT(error_message([&] { samples::check_output_file(dir.file("fifo"), "--profile"); }),
             Catch::Equals("--profile " + dir.file("fifo") +
                           " is a FIFO (named pipe); expected a regular file to replace or a new path"));
  CHECK_THAT(error_message([&] { samples::check_output_file(dir.path(), "--metrics"); }), Catch::Contains("is a folder"));
  CHECK_THAT(error_message([&] { samples::check_output_file("/dev/null", "--checkpoint"); }),
             Catch::Equals("--checkpoint /dev/null is a character device; expected a regular file to replace or a new path"));
}

TEST_CASE("check_no_alias refuses an output naming an input by the same, a relative, a linked or a hard-linked path", "[samples][input-files]") {
  TempDir dir;
  const std::string data = dir.file("data.txt");
  write_bytes(data, "text");
  const std::string expected = "--checkpoint " + data + " names the same file as --data " + data +
                               "; an output must not overwrite an input (give --checkpoint another path)";
  CHECK_THAT(error_message([&] { samples::check_no_alias({{"--checkpoint", data}}, {{"--data", data}}); }),
             Catch::Equals(expected));
  const std::string dotted = dir.path() + "/./sub/../data.txt";
  std::filesystem::create_directory(dir.file("sub"));
  CHECK_THAT(error_message([&] { samples::check_no_alias({{"--checkpoint", dotted}}, {{"--data", data}}); }),
             Catch::Contains("names the same file as --data"));
  std::filesystem::create_symlink(data, dir.file("link.txt"));
  CHECK_THAT(error_message([&] { samples::check_no_alias({{"--profile", dir.file("link.txt")}}, {{"--data", data}}); }),
             Catch::Contains("--profile " + dir.file("link.txt") + " names the same file as --data " + data));
  std::filesystem::create_hard_link(data, dir.file("hard.txt"));
  CHECK_THAT(error_message([&] { samples::check_no_alias({{"--metrics", dir.file("hard.txt")}}, {{"--resume", data}}); }),
             Catch::Contains("--metrics " + dir.file("hard.txt") + " names the same file as --resume"));
  // An output that does not exist yet, through a linked folder: the normalised paths agree.
  std::filesystem::create_directory_symlink(dir.path(), dir.file("dirlink"));
  CHECK_THAT(error_message([&] {
               samples::check_no_alias({{"--plot", dir.file("new.png")}}, {{"--data", dir.file("dirlink") + "/new.png"}});
             }),
             Catch::Contains("--plot " + dir.file("new.png") + " names the same file as --data"));
}

TEST_CASE("check_no_alias refuses two outputs naming one file and accepts distinct or empty paths", "[samples][input-files]") {
  TempDir dir;
  write_bytes(dir.file("data.txt"), "text");
  CHECK_THAT(error_message([&] {
               samples::check_no_alias({{"--checkpoint", dir.file("run.st")}, {"--profile", dir.file("run.st")}}, {});
             }),
             Catch::Equals("--profile " + dir.file("run.st") + " names the same file as --checkpoint " +
                           dir.file("run.st") + "; each output needs a file of its own (give --profile another path)"));
  CHECK_NOTHROW(samples::check_no_alias({{"--checkpoint", dir.file("run.st")}, {"--profile", ""}, {"--plot", ""}},
                                        {{"--data", dir.file("data.txt")}, {"--from", ""}}));
  // --checkpoint X --resume X continues a run in place: the callers leave that pair out.
  CHECK_NOTHROW(samples::check_no_alias({{"--profile", dir.file("trace.json")}}, {{"--resume", dir.file("run.st")}}));
}

TEST_CASE("available_memory_bytes reads a positive amount and format_bytes picks the unit", "[samples][input-files]") {
  CHECK(samples::available_memory_bytes() > 0);
  CHECK(samples::format_bytes(12) == "12 bytes");
  CHECK(samples::format_bytes(1536) == "1.5 KiB");
  CHECK(samples::format_bytes(3.0 * 1024 * 1024 * 1024) == "3.0 GiB");
}

// ---- failure_line (samples/common/flags.h) ----

namespace {

template <typename F>
std::string line_of(F&& f, const std::string& doing = "", const std::string& hint = "") {
  try {
    f();
  } catch (...) {
    return samples::failure_line("prog", doing, hint);
  }
  return "<nothing thrown>";
}

}  // namespace

TEST_CASE("failure_line gives one line for a minidl Error, bad_alloc, another exception and an unknown one", "[samples][flags]") {
  CHECK(line_of([] { throw Error("--data x is a folder"); }) == "prog: --data x is a folder");
  CHECK(line_of([] { throw Error("prog: already named"); }) == "prog: already named");
  CHECK(line_of([] { throw Error("first\nsecond\n"); }) == "prog: first; second");
  CHECK(line_of([] { throw std::bad_alloc(); }, "building the model", "lower --n-layer") ==
        "prog: out of memory while building the model (std::bad_alloc); lower --n-layer");
  CHECK(line_of([] { throw OutOfMemory("cpu allocator: failed to allocate 64 bytes"); }, "training", "lower --n-layer") ==
        "prog: out of memory while training (cpu allocator: failed to allocate 64 bytes); lower --n-layer");
  CHECK(line_of([] { throw std::out_of_range("vector::at"); }, "training") ==
        "prog: unexpected error while training: vector::at");
  CHECK(line_of([] { throw 42; }) == "prog: unexpected error (an exception of unknown type)");
}

// ---- char_gpt's sizes (model.h) and batches (text_data.h) ----

TEST_CASE("char_gpt check_run_fits refuses products that overflow int64 naming the flags", "[samples][char-gpt]") {
  char_gpt::GPTConfig c{.vocab_size = 30, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16};
  CHECK_NOTHROW(char_gpt::check_run_fits(c, 2, 1, uint64_t{1} << 30));
  CHECK_THAT(error_message([&] { char_gpt::check_run_fits(c, std::numeric_limits<int64_t>::max(), 1, 0); }),
             Catch::Contains("overflows a 64-bit integer") && Catch::Contains("--batch-size 9223372036854775807"));
  CHECK_THAT(error_message([&] { char_gpt::check_run_fits(c, 1 << 20, int64_t{1} << 50, 0); }),
             Catch::Contains("--grad-accum") && Catch::Contains("overflows"));
  char_gpt::GPTConfig deep = c;
  deep.n_layer = std::numeric_limits<int64_t>::max();
  CHECK_THAT(error_message([&] { char_gpt::check_run_fits(deep, 2, 1, 0); }),
             Catch::Contains("overflows a 64-bit integer with --n-layer 9223372036854775807"));
  char_gpt::GPTConfig wide = c;
  wide.n_embd = wide.n_head = int64_t{1} << 40;
  CHECK_THAT(error_message([&] { char_gpt::check_run_fits(wide, 2, 1, 0); }), Catch::Contains("--n-embd"));
}

TEST_CASE("char_gpt check_run_fits refuses a run whose estimate exceeds the memory available, in GiB", "[samples][char-gpt]") {
  char_gpt::GPTConfig c{.vocab_size = 65, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  const char_gpt::RunMemory m = char_gpt::estimate_run_memory(c, 12);
  CHECK(m.parameters == char_gpt::GPT::parameter_count(c));
  CHECK(m.state_bytes == 16.0 * static_cast<double>(m.parameters));
  // 4 blocks of 20·B·T·C, the embeddings' 2·B·T·C and 3·B·T·V floats.
  CHECK(m.activation_bytes == 4.0 * (4 * 20 * 12 * 64 * 128 + 2 * 12 * 64 * 128 + 3 * 12 * 64 * 65));
  CHECK_NOTHROW(char_gpt::check_run_fits(c, 12, 1, uint64_t{1} << 30));  // the default run: about 0.04 GiB
  CHECK_THAT(error_message([&] { char_gpt::check_run_fits(c, 12, 1, uint64_t{1} << 20); }),
             Catch::StartsWith("char_gpt: this run needs about 0.") && Catch::Contains("but 0.00 GiB of memory is available") &&
                 Catch::Contains("lower --n-layer, --n-embd, --batch-size or --block-size"));
  // On a GPU only the weights built on the host count.
  CHECK_NOTHROW(char_gpt::check_run_fits(c, 100000, 1, uint64_t{1} << 30, /*activations_on_host=*/false));
  CHECK_THAT(error_message([&] { char_gpt::check_run_fits(c, 12, 1, 1024, false); }),
             Catch::Contains("need") && Catch::Contains("on the host before they move to the device"));
}

TEST_CASE("char_gpt get_batch refuses a batch whose size overflows instead of allocating it", "[samples][char-gpt]") {
  std::vector<int64_t> data(100, 1);
  Generator gen(1);
  CHECK_THAT(error_message([&] { char_gpt::get_batch(data, std::numeric_limits<int64_t>::max(), 8, gen, "training"); }),
             Catch::Contains("--batch-size 9223372036854775807") && Catch::Contains("overflows a 64-bit size"));
  CHECK_THAT(error_message([&] { char_gpt::get_batch(data, int64_t{1} << 60, 8, gen, "training"); }),
             Catch::Contains("overflows a 64-bit size"));
  CHECK(char_gpt::get_batch(data, 3, 8, gen, "training").x.shape() == Shape{3, 8});
}

TEST_CASE("char_gpt read_text_file refuses a FIFO, a folder and a device naming --data without opening them", "[samples][char-gpt]") {
  TempDir dir;
  make_fifo(dir.file("fifo"));
  CHECK_THAT(error_message([&] { char_gpt::read_text_file(dir.file("fifo")); }),
             Catch::Equals("--data " + dir.file("fifo") + " is a FIFO (named pipe); expected a regular file"));
  CHECK_THAT(error_message([&] { char_gpt::read_text_file(dir.path()); }), Catch::Contains("is a folder"));
  CHECK_THAT(error_message([&] { char_gpt::read_text_file("/dev/zero"); }), Catch::Contains("is a character device"));
}

// ---- the programs ----

#if defined(MINIDL_CHAR_GPT_BINARY) && defined(MINIDL_FASHION_MNIST_BINARY)  // tests/CMakeLists.txt

namespace {

struct Outcome {
  int exit_code = -1;  // the shell's: 124 a timeout, 128 + N a signal N (134: an abort)
  std::vector<std::string> err_lines;
  std::string out;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs `binary args` in `dir` with no core dumps, one thread and a 60 s limit.
Outcome run_in(const TempDir& dir, const std::string& binary, const std::string& args) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string command = "cd '" + dir.path() + "' && ulimit -c 0 && OMP_NUM_THREADS=1 timeout 60 '" + binary +
                              "' " + args + " >'" + out + "' 2>'" + err + "' </dev/null";
  const int status = std::system(command.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.err_lines = lines_of(read_bytes(err));
  o.out = read_bytes(out);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return o;
}

const std::string kTiny =
    " --n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --batch-size 2 --iters 2 --eval-iters 1 --eval-interval 1"
    " --warmup 0 --device cpu --progress none";

Outcome run_char_gpt(const TempDir& dir, const std::string& args) { return run_in(dir, MINIDL_CHAR_GPT_BINARY, args); }
Outcome run_fashion_mnist(const TempDir& dir, const std::string& args) {
  return run_in(dir, MINIDL_FASHION_MNIST_BINARY, args);
}

// Exit status 1 and exactly one line on stderr, starting with the program's name and holding
// every one of `parts`.
void check_refused(const Outcome& o, const std::string& program, const std::vector<std::string>& parts) {
  INFO("exit code " << o.exit_code << "; stderr:\n" << [&] {
    std::string all;
    for (const auto& l : o.err_lines) all += l + "\n";
    return all;
  }());
  CHECK(o.exit_code == 1);
  REQUIRE(o.err_lines.size() == 1);
  CHECK_THAT(o.err_lines[0], Catch::StartsWith(program + ": "));
  for (const std::string& p : parts) CHECK_THAT(o.err_lines[0], Catch::Contains(p));
}

// A folder with the text as input.txt.
struct TextDir {
  TempDir dir;
  std::string data = dir.file("input.txt");
  std::string text = small_text();
  TextDir() { write_bytes(data, text); }
  bool data_unchanged() const { return read_bytes(data) == text; }
};

}  // namespace

TEST_CASE("char_gpt trains the tiny model on the small text (the baseline of the refusals below)", "[samples][char-gpt][hostile]") {
  TextDir t;
  const Outcome o = run_char_gpt(t.dir, "--data input.txt" + kTiny);
  CHECK(o.exit_code == 0);
  CHECK(o.err_lines.empty());
}

TEST_CASE("char_gpt --data naming a folder is one error line and exit 1", "[samples][char-gpt][hostile]") {
  TextDir t;
  check_refused(run_char_gpt(t.dir, "--data '" + t.dir.path() + "'" + kTiny), "char_gpt",
                {"--data " + t.dir.path(), "is a folder; expected a regular file"});
}

TEST_CASE("char_gpt --data /dev/zero is one error line and exit 1", "[samples][char-gpt][hostile]") {
  TextDir t;
  check_refused(run_char_gpt(t.dir, "--data /dev/zero" + kTiny), "char_gpt", {"--data /dev/zero", "character device"});
}

TEST_CASE("char_gpt --data naming a FIFO is refused without blocking", "[samples][char-gpt][hostile]") {
  TextDir t;
  make_fifo(t.dir.file("fifo"));
  check_refused(run_char_gpt(t.dir, "--data fifo" + kTiny), "char_gpt", {"--data fifo", "is a FIFO"});
}

TEST_CASE("char_gpt --data naming a missing file is one error line and exit 1", "[samples][char-gpt][hostile]") {
  TextDir t;
  check_refused(run_char_gpt(t.dir, "--data missing.txt" + kTiny), "char_gpt", {"missing.txt", "--data"});
}

TEST_CASE("char_gpt --resume naming a FIFO is refused without blocking", "[samples][char-gpt][hostile]") {
  TextDir t;
  make_fifo(t.dir.file("fifo"));
  check_refused(run_char_gpt(t.dir, "--data input.txt --resume fifo" + kTiny), "char_gpt", {"--resume fifo", "is a FIFO"});
}

TEST_CASE("char_gpt --from naming a FIFO is refused without blocking", "[samples][char-gpt][hostile]") {
  TextDir t;
  make_fifo(t.dir.file("fifo"));
  check_refused(run_char_gpt(t.dir, "--from fifo --sample 5"), "char_gpt", {"--from fifo", "is a FIFO"});
}

TEST_CASE("char_gpt --checkpoint naming the --data file is refused and leaves the text as it was", "[samples][char-gpt][hostile]") {
  TextDir t;
  check_refused(run_char_gpt(t.dir, "--data input.txt --checkpoint input.txt" + kTiny), "char_gpt",
                {"--checkpoint input.txt", "names the same file as --data input.txt"});
  CHECK(t.data_unchanged());
  // The same file by another spelling, and through a symbolic link.
  check_refused(run_char_gpt(t.dir, "--data input.txt --checkpoint ./input.txt" + kTiny), "char_gpt",
                {"--checkpoint ./input.txt", "--data input.txt"});
  std::filesystem::create_symlink(t.data, t.dir.file("link.txt"));
  check_refused(run_char_gpt(t.dir, "--data link.txt --checkpoint '" + t.data + "'" + kTiny), "char_gpt",
                {"--checkpoint " + t.data, "--data link.txt"});
  CHECK(t.data_unchanged());
}

TEST_CASE("char_gpt --profile or --dump-grads naming an input or the checkpoint is refused", "[samples][char-gpt][hostile]") {
  TextDir t;
  check_refused(run_char_gpt(t.dir, "--data input.txt --profile input.txt" + kTiny), "char_gpt",
                {"--profile input.txt", "--data input.txt"});
  check_refused(run_char_gpt(t.dir, "--data input.txt --dump-grads input.txt" + kTiny), "char_gpt",
                {"--dump-grads input.txt", "--data input.txt"});
  check_refused(run_char_gpt(t.dir, "--data input.txt --checkpoint run.st --profile run.st" + kTiny), "char_gpt",
                {"--profile run.st", "--checkpoint run.st"});
  CHECK(t.data_unchanged());
  CHECK(!std::filesystem::exists(t.dir.file("run.st")));
}

TEST_CASE("char_gpt an output naming a FIFO or a device is refused without blocking", "[samples][char-gpt][hostile]") {
  TextDir t;
  make_fifo(t.dir.file("fifo"));
  check_refused(run_char_gpt(t.dir, "--data input.txt --profile fifo" + kTiny), "char_gpt", {"--profile fifo", "is a FIFO"});
  check_refused(run_char_gpt(t.dir, "--data input.txt --checkpoint /dev/null" + kTiny), "char_gpt",
                {"--checkpoint /dev/null", "is a character device"});
}

TEST_CASE("char_gpt --checkpoint X --resume X continues a run in place", "[samples][char-gpt][hostile]") {
  TextDir t;
  REQUIRE(run_char_gpt(t.dir, "--data input.txt --checkpoint run.st --stop-after 1" + kTiny).exit_code == 0);
  const Outcome o = run_char_gpt(t.dir, "--data input.txt --checkpoint run.st --resume run.st" + kTiny);
  CHECK(o.exit_code == 0);
  CHECK(o.err_lines.empty());
  CHECK(t.data_unchanged());
}

TEST_CASE("char_gpt an absurd --n-layer is refused before anything is allocated", "[samples][char-gpt][hostile]") {
  TextDir t;
  const std::string flags = " --n-embd 16 --n-head 2 --block-size 8 --batch-size 2 --iters 2 --warmup 0 --device cpu";
  check_refused(run_char_gpt(t.dir, "--data input.txt --n-layer 1000000000000" + flags), "char_gpt",
                {"GiB", "memory is available", "--n-layer"});
  check_refused(run_char_gpt(t.dir, "--data input.txt --n-layer 9223372036854775807" + flags), "char_gpt",
                {"overflows a 64-bit integer", "--n-layer 9223372036854775807"});
}

TEST_CASE("char_gpt a --batch-size near 1e12 or INT64_MAX is refused before training", "[samples][char-gpt][hostile]") {
  TextDir t;
  const std::string flags = " --n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --iters 2 --warmup 0 --device cpu";
  check_refused(run_char_gpt(t.dir, "--data input.txt --batch-size 1000000000000" + flags), "char_gpt",
                {"GiB", "memory is available", "--batch-size"});
  check_refused(run_char_gpt(t.dir, "--data input.txt --batch-size 9223372036854775807" + flags), "char_gpt",
                {"overflows a 64-bit integer", "--batch-size 9223372036854775807"});
}

TEST_CASE("char_gpt --temperature 0 is refused before the first iteration", "[samples][char-gpt][hostile]") {
  TextDir t;
  const Outcome o = run_char_gpt(t.dir, "--data input.txt --sample 5 --temperature 0" + kTiny);
  check_refused(o, "char_gpt", {"--temperature", "> 0", "got 0"});
  CHECK(o.out.find("step") == std::string::npos);
}

TEST_CASE("char_gpt a --prompt outside the text's vocabulary is refused before the first iteration", "[samples][char-gpt][hostile]") {
  TextDir t;
  const Outcome o = run_char_gpt(t.dir, "--data input.txt --sample 5 --prompt 'ROMEO:'" + kTiny);
  check_refused(o, "char_gpt", {"--prompt", "('R')", "not in the vocabulary"});
  CHECK(o.out.find("step") == std::string::npos);
}

TEST_CASE("char_gpt a --prompt outside the vocabulary of the --from checkpoint is refused", "[samples][char-gpt][hostile]") {
  TextDir t;
  REQUIRE(run_char_gpt(t.dir, "--data input.txt --checkpoint run.st" + kTiny).exit_code == 0);
  CHECK(run_char_gpt(t.dir, "--from run.st --sample 5 --prompt 'romeo:'").exit_code == 0);
  check_refused(run_char_gpt(t.dir, "--from run.st --sample 5 --prompt 'ROMEO:'"), "char_gpt", {"--prompt", "('R')"});
  check_refused(run_char_gpt(t.dir, "--from run.st --sample 5 --temperature 0"), "char_gpt", {"--temperature"});
}

TEST_CASE("char_gpt a flag value CLI11 refuses is one error line and exit 1, and --help still exits 0", "[samples][char-gpt][hostile]") {
  TextDir t;
  check_refused(run_char_gpt(t.dir, "--data input.txt --n-layer abc"), "char_gpt",
                {"--n-layer", "expected a positive integer", "got 'abc'", "run with --help"});
  check_refused(run_char_gpt(t.dir, "--data input.txt --top-k -1"), "char_gpt", {"--top-k", "got '-1'"});
  check_refused(run_char_gpt(t.dir, "--no-such-flag"), "char_gpt", {"--no-such-flag"});
  const Outcome help = run_char_gpt(t.dir, "--help");
  CHECK(help.exit_code == 0);
  CHECK(help.err_lines.empty());
  CHECK_THAT(help.out, Catch::Contains("--temperature"));
}

TEST_CASE("fashion_mnist --resume naming a FIFO is refused without blocking", "[samples][fashion-mnist][hostile]") {
  TempDir dir;
  make_fifo(dir.file("fifo"));
  check_refused(run_fashion_mnist(dir, "--resume fifo --data-dir '" + dir.path() + "'"), "fashion_mnist",
                {"--resume fifo", "is a FIFO"});
}

TEST_CASE("fashion_mnist an IDX file that is a FIFO or a folder is refused naming --data-dir", "[samples][fashion-mnist][hostile]") {
  TempDir dir;
  make_fifo(dir.file("train-images-idx3-ubyte"));
  check_refused(run_fashion_mnist(dir, "--data-dir '" + dir.path() + "'"), "fashion_mnist",
                {"--data-dir " + dir.file("train-images-idx3-ubyte"), "is a FIFO"});
  std::filesystem::remove(dir.file("train-images-idx3-ubyte"));
  std::filesystem::create_directory(dir.file("t10k-labels-idx1-ubyte.gz"));
  check_refused(run_fashion_mnist(dir, "--data-dir '" + dir.path() + "'"), "fashion_mnist",
                {"--data-dir " + dir.file("t10k-labels-idx1-ubyte.gz"), "is a folder"});
}

TEST_CASE("fashion_mnist outputs naming an input, each other or a FIFO are refused and leave the files as they were", "[samples][fashion-mnist][hostile]") {
  TempDir dir;
  const std::string idx = dir.file("train-labels-idx1-ubyte");
  write_bytes(idx, "not really IDX");
  write_bytes(dir.file("old.st"), "an old checkpoint");
  const std::string data_dir = " --data-dir '" + dir.path() + "'";
  check_refused(run_fashion_mnist(dir, "--checkpoint '" + idx + "'" + data_dir), "fashion_mnist",
                {"--checkpoint " + idx, "names the same file as --data-dir " + idx});
  check_refused(run_fashion_mnist(dir, "--checkpoint run.st --metrics run.st" + data_dir), "fashion_mnist",
                {"--metrics run.st", "--checkpoint run.st"});
  check_refused(run_fashion_mnist(dir, "--resume old.st --plot old.st" + data_dir), "fashion_mnist",
                {"--plot old.st", "--resume old.st"});
  check_refused(run_fashion_mnist(dir, "--metrics m.csv --profile ./m.csv" + data_dir), "fashion_mnist",
                {"--profile ./m.csv", "--metrics m.csv"});
  make_fifo(dir.file("fifo"));
  check_refused(run_fashion_mnist(dir, "--metrics fifo" + data_dir), "fashion_mnist", {"--metrics fifo", "is a FIFO"});
  CHECK(read_bytes(idx) == "not really IDX");
  CHECK(read_bytes(dir.file("old.st")) == "an old checkpoint");
  CHECK(!std::filesystem::exists(dir.file("run.st")));
}

#ifdef MINIDL_SEED_TRAIN_BINARY
TEST_CASE("seed_train a flag value CLI11 refuses is one error line and exit 1", "[samples][seed_train][hostile]") {
  TempDir dir;
  check_refused(run_in(dir, MINIDL_SEED_TRAIN_BINARY, "--epochs 0"), "seed_train",
                {"--epochs", "expected a positive integer", "got '0'"});
  check_refused(run_in(dir, MINIDL_SEED_TRAIN_BINARY, "--device nowhere --epochs 1"), "seed_train", {"nowhere"});
}
#endif  // MINIDL_SEED_TRAIN_BINARY

#endif  // MINIDL_CHAR_GPT_BINARY && MINIDL_FASHION_MNIST_BINARY
