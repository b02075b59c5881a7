// End to end: the seed tutorial's SimpleModel (samples/common/seed_model.h), DataLoader, SGD
// and cross-entropy learn a linearly separable problem; a shape error in the loop surfaces as
// minidl::Error. tests/samples/test_seed_train.cpp runs the samples/seed_train program itself.
#include <catch2/catch.hpp>

#include "core/ops.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "samples/common/seed_model.h"

using namespace minidl;
using samples::SimpleModel;

TEST_CASE("the seed model trained with SGD on a separable dataset drives its loss down", "[e2e]") {
  manual_seed(1);
  Generator g(123);
  Tensor x = randn({200, 10}, {}, &g);
  // Label = 1 when x0 + x1 > 0: separable by the first layer.
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 200; ++i) labels.push_back(x.at({i, 0}) + x.at({i, 1}) > 0 ? 1 : 0);
  Tensor y = from_vector(labels);
  auto ds = std::make_shared<data::TensorDataset>(x, y);
  data::DataLoader loader(ds, data::DataLoaderOptions{.batch_size = 10, .shuffle = true, .seed = 5});
  SimpleModel model;
  optim::SGD opt(model.parameters(), optim::SGDOptions{.lr = 0.1});  // the tutorial's plain SGD, larger lr
  nn::CrossEntropyLoss criterion;
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 30; ++epoch) {
    double total = 0;
    for (data::Batch& b : loader) {
      opt.zero_grad();
      Tensor loss = criterion(model(b.x), b.y);
      loss.backward();
      opt.step();
      total += loss.item();
    }
    total /= static_cast<double>(loader.size());
    if (epoch == 0) first = total;
    last = total;
  }
  // Chance level is log 2 = 0.69. Measured: this configuration ends its 30th epoch at a mean
  // loss of 0.041, and 20 other (weight, data, shuffle) seeds end between 0.021 and 0.062
  // with accuracy >= 0.99. The bound 0.15 is over twice the worst of those, yet a model that
  // learned little (or a loader that fed mismatched x/y rows) stays near 0.69.
  CHECK(first > last);
  CHECK(last < 0.15);
  Tensor acc = model(x).argmax(1).eq(y).mean();
  CHECK(acc.item() > 0.95);  // measured 1.0 here and >= 0.99 over the 20 other seeds
  CHECK_THROWS_WITH(model(zeros({4, 9})), Catch::Contains("Linear") && Catch::Contains("[4, 9]"));
}
