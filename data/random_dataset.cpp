// make_random_classification: x = randn [n, features], y = randint [0, classes) from Generator(seed).
#include "data/random_dataset.h"

namespace minidl::data {

std::shared_ptr<TensorDataset> make_random_classification(int64_t n, int64_t features, int64_t classes, uint64_t seed) {
  MINIDL_CHECK(n > 0 && features > 0 && classes > 0, "make_random_classification: n, features and classes must be "
               "positive, got ", n, ", ", features, ", ", classes);
  Generator gen(seed);
  Tensor x = randn(Shape{n, features}, DType::Float32, &gen);
  Tensor y = randint(0, classes, Shape{n}, DType::Int64, &gen);
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace minidl::data
