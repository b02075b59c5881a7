// The seed tutorial's dataset: N samples of F standard-normal features with labels drawn
// uniformly from [0, C), reproducible from one seed.
#pragma once

#include <memory>

#include "data/dataset.h"

namespace minidl::data {

std::shared_ptr<TensorDataset> make_random_classification(int64_t n, int64_t features, int64_t classes, uint64_t seed);

}  // namespace minidl::data
