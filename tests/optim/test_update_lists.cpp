// The list updates the optimizers hand to a backend (Note [one update per list] in optim/sgd.cpp):
// Backend::sgd_step_many / adam_step_many must give the bits of sgd_step / adam_step run on each
// parameter alone (core/backend.h), for every update rule, in float32, float64 and the 16-bit
// dtypes, over tensors of odd sizes: one element, a few, one spanning several of the CPU's
// chunks (kernels/cpu/tensor_chunks.h) and a remainder, and an empty one.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "tests/same_bits.h"

using namespace minidl;

namespace {

// 1, 7, 3 chunks of 16384 + 123 (over the CPU's parallel grain: split over threads), 0, and one
// between a chunk and the grain (one loop alone, two chunks in a list).
const std::vector<int64_t> kSizes = {1, 7, 3 * 16384 + 123, 0, 20000};

std::vector<Tensor> random_list(Generator& g, DType dtype, double scale) {
  std::vector<Tensor> out;
  for (int64_t n : kSizes) out.push_back((randn({n}, {}, &g) * scale).to(dtype));
  return out;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.clone() : Tensor());
  return out;
}

// Every tensor of got has the bits of the same tensor of expected (tests/same_bits.h).
void check_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& expected, const std::string& what) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    testing::check_same_bits(got[i], expected[i], what + ", tensor " + std::to_string(i));
}

const DType kDTypes[] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16};

}  // namespace

TEST_CASE("sgd_step_many gives the bits of sgd_step per parameter, for every momentum case and dtype", "[optim]") {
  Backend& cpu = backend_for(Device::cpu());
  struct Case {
    const char* name;
    SGDConfig cfg;
  };
  const Case cases[] = {
      {"plain", {.lr = 0.1}},
      {"weight decay", {.lr = 0.1, .weight_decay = 0.01}},
      {"momentum", {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}},
      {"nesterov", {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true}},
  };
  for (DType dtype : kDTypes) {
    for (const Case& c : cases) {
      Generator g(11);
      std::vector<Tensor> params = random_list(g, dtype, 1.0);
      std::vector<Tensor> buffers(params.size());  // undefined without momentum
      if (c.cfg.momentum != 0.0)
        for (size_t i = 0; i < params.size(); ++i) buffers[i] = zeros_like(params[i]);
      std::vector<Tensor> ref_params = clones(params), ref_buffers = clones(buffers);
      for (int step = 0; step < 3; ++step) {  // the first step initialises the buffers, later ones use them
        const std::vector<Tensor> grads = random_list(g, dtype, 0.5), ref_grads = clones(grads);
        SGDConfig cfg = c.cfg;
        cfg.first_step = step == 0;
        for (size_t i = 0; i < params.size(); ++i) cpu.sgd_step(ref_params[i], ref_grads[i], ref_buffers[i], cfg);
        cpu.sgd_step_many(params, grads, buffers, cfg);
        const std::string what = std::string("sgd ") + c.name + ", " + dtype_name(dtype) + ", step " +
                                 std::to_string(step);
        check_same_bits(params, ref_params, what + ", params");
        check_same_bits(buffers, ref_buffers, what + ", momentum buffers");
      }
    }
  }
  std::vector<Tensor> none;  // an empty list is no work
  cpu.sgd_step_many(none, none, none, SGDConfig{});
}

TEST_CASE("adam_step_many gives the bits of adam_step per parameter, Adam and AdamW, in every dtype", "[optim]") {
  Backend& cpu = backend_for(Device::cpu());
  struct Case {
    const char* name;
    AdamConfig cfg;
  };
  const Case cases[] = {
      {"Adam", {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8}},
      {"Adam with L2 weight decay", {.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1}},
      {"AdamW", {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1,
                 .decoupled_weight_decay = true}},
  };
  for (DType dtype : kDTypes) {
    for (const Case& c : cases) {
      Generator g(12);
      std::vector<Tensor> params = random_list(g, dtype, 1.0), exp_avgs, exp_avg_sqs;
      for (const Tensor& p : params) exp_avgs.push_back(zeros_like(p)), exp_avg_sqs.push_back(zeros_like(p));
      std::vector<Tensor> ref_params = clones(params), ref_avgs = clones(exp_avgs), ref_sqs = clones(exp_avg_sqs);
      for (int64_t step = 1; step <= 3; ++step) {
        const std::vector<Tensor> grads = random_list(g, dtype, 0.5), ref_grads = clones(grads);
        AdamConfig cfg = c.cfg;
        cfg.step = step;
        for (size_t i = 0; i < params.size(); ++i)
          cpu.adam_step(ref_params[i], ref_grads[i], ref_avgs[i], ref_sqs[i], cfg);
        cpu.adam_step_many(params, grads, exp_avgs, exp_avg_sqs, cfg);
        const std::string what = std::string(c.name) + ", " + dtype_name(dtype) + ", step " + std::to_string(step);
        check_same_bits(params, ref_params, what + ", params");
        check_same_bits(exp_avgs, ref_avgs, what + ", exp_avg");
        check_same_bits(exp_avg_sqs, ref_sqs, what + ", exp_avg_sq");
      }
    }
  }
  std::vector<Tensor> none;  // an empty list is no work
  cpu.adam_step_many(none, none, none, none, AdamConfig{});
}
