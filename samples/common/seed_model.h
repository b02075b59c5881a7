// The seed tutorial's model, written once for everything that trains it: the samples
// (seed_train, data_parallel, manual_split), the benchmarks (bench_train_step --model seed,
// bench_data_parallel) and the tests. In PyTorch:
//   class SimpleModel(nn.Module):
//       def __init__(self): fc1 = nn.Linear(10, 5); relu = nn.ReLU(); fc2 = nn.Linear(5, 2)
//       def forward(self, x): return self.fc2(self.relu(self.fc1(x)))
// It is Cloneable, so parallel::DataParallel can replicate it. It is sample code, not part of
// the library (a model is its user's code): targets get it by linking minidl_seed_model
// (samples/CMakeLists.txt), and it is not installed.
#pragma once

#include <memory>
#include <string>

#include "core/generator.h"
#include "core/tensor.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace minidl::samples {

struct SimpleModel : nn::Cloneable<SimpleModel> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::ReLU> relu;

  // The weights come from `gen`, or from the default generator (manual_seed) when it is null:
  // fc1's weight and bias, then fc2's.
  explicit SimpleModel(Generator* gen = nullptr) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 5, true, gen));  // W [5, 10], b [5]
    relu = register_module("relu", std::make_shared<nn::ReLU>());
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(5, 2, true, gen));  // W [2, 5], b [2]
  }

  // x [N, 10] -> logits [N, 2]
  Tensor forward(const Tensor& x) override { return (*fc2)((*relu)((*fc1)(x))); }
  std::string name() const override { return "SimpleModel"; }
};

}  // namespace minidl::samples
