// samples/common/flags.h: the samples' flag checks answer a bad value with what was expected, read
// the text before CLI11 converts it (a negative seed is not wrapped, a huge batch size is not
// clamped), and a list with an empty item ("256,,128") is an error rather than a shorter list.
#include <catch2/catch.hpp>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "samples/common/flags.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

namespace {

struct Flags {
  int epochs = 10;
  int64_t batch_size = 64;
  double lr = 0.05;
  uint64_t seed = 0;
  int workers = 0;
};

// Parses argv the way the samples do ("--epochs N" etc.); "" when it is accepted, else CLI11's
// message, which is what a user sees after "Run with --help for more information".
std::string parse(std::vector<std::string> args, Flags& f) {
  CLI::App app{"test"};
  app.add_option("--epochs", f.epochs)->check(samples::positive_integer<int>());
  app.add_option("--batch-size", f.batch_size)->check(samples::positive_integer<int64_t>());
  app.add_option("--lr", f.lr)->check(samples::non_negative_real());
  app.add_option("--seed", f.seed)->check(samples::seed_value());
  app.add_option("--workers", f.workers)->check(samples::non_negative_integer<int>());
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes argv backwards
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

std::string parse(const std::vector<std::string>& args) {
  Flags f;
  return parse(args, f);
}

}  // namespace

TEST_CASE("sample flags: a value out of range says what was expected", "[samples][flags]") {
  CHECK(parse({"--epochs", "0"}) == "--epochs: expected a positive integer (1 to 2147483647), got '0'");
  CHECK(parse({"--epochs", "-3"}) == "--epochs: expected a positive integer (1 to 2147483647), got '-3'");
  CHECK(parse({"--epochs", "2.5"}) == "--epochs: expected a positive integer (1 to 2147483647), got '2.5'");
  CHECK(parse({"--workers", "-1"}) == "--workers: expected an integer from 0 to 2147483647, got '-1'");
  CHECK(parse({"--lr", "-0.1"}) == "--lr: expected a finite number >= 0, got '-0.1'");
  CHECK(parse({"--lr", "inf"}) == "--lr: expected a finite number >= 0, got 'inf'");
  CHECK(parse({"--batch-size", "99999999999999999999"}) ==
        "--batch-size: expected a positive integer (1 to 9223372036854775807), got '99999999999999999999'");
}

TEST_CASE("sample flags: a negative seed is an error, not 2^64 minus it", "[samples][flags]") {
  CHECK(parse({"--seed", "-1"}) == "--seed: expected an integer from 0 to 18446744073709551615, got '-1'");
  Flags f;
  CHECK(parse({"--seed", "18446744073709551615"}, f).empty());
  CHECK(f.seed == UINT64_MAX);
}

TEST_CASE("sample flags: good values pass through unchanged", "[samples][flags]") {
  Flags f;
  REQUIRE(parse({"--epochs", "3", "--batch-size", "9223372036854775807", "--lr", "0", "--seed", "7", "--workers", "0"},
                f)
              .empty());
  CHECK(f.epochs == 3);
  CHECK(f.batch_size == INT64_MAX);
  CHECK(f.lr == 0.0);
  CHECK(f.seed == 7);
}

TEST_CASE("sample flags: --hidden and --devices refuse empty items instead of skipping them", "[samples][flags]") {
  CHECK(samples::parse_hidden_sizes("256,128") == std::vector<int64_t>{256, 128});
  CHECK(samples::parse_hidden_sizes("none").empty());
  CHECK(samples::parse_hidden_sizes("").empty());
  CHECK(error_message([] { samples::parse_hidden_sizes("256,,128"); }) ==
        "--hidden: item 2 of '256,,128' is empty; expected a comma-separated list like 256,128 (or none)");
  CHECK_THAT(error_message([] { samples::parse_hidden_sizes("256,"); }), Catch::Contains("item 2 of '256,' is empty"));
  CHECK_THAT(error_message([] { samples::parse_hidden_sizes(",256"); }), Catch::Contains("item 1 of ',256' is empty"));
  CHECK(error_message([] { samples::parse_hidden_sizes("256,0x10"); }) ==
        "--hidden: expected positive layer sizes like 256,128 (or none); got '0x10' in '256,0x10'");
  CHECK_THAT(error_message([] { samples::parse_hidden_sizes("-5"); }), Catch::Contains("got '-5'"));
  CHECK(samples::split_flag_list("cpu,cpu", "--devices", "cuda:0,cuda:1") == std::vector<std::string>{"cpu", "cpu"});
  CHECK_THAT(error_message([] { samples::split_flag_list("cpu,,cpu", "--devices", "cuda:0,cuda:1"); }),
             Catch::Contains("--devices: item 2 of 'cpu,,cpu' is empty"));
}
