// MNIST and Fashion-MNIST as TensorDatasets, read from the four IDX files of a split:
// {train,t10k}-{images-idx3,labels-idx1}-ubyte, gzipped (.gz) or not. Images become float32
// in [0, 1] (pixel / 255), optionally normalised, flattened to [N, 784] or kept [N, 1, 28, 28];
// labels become int64 [N] in 0..9. Debian's dataset-fashion-mnist package installs the files
// under /usr/share/datasets/fashion-mnist (scripts/setup-deps installs it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "data/dataset.h"

namespace minidl::data {

enum class MnistSplit { Train, Test };

// "/usr/share/datasets/fashion-mnist", where Debian's dataset-fashion-mnist puts the files, or
// $MINIDL_FASHION_MNIST_DIR when set.
std::string default_fashion_mnist_dir();

// (x - mean) / stddev, elementwise; throws a minidl::Error when stddev <= 0 (or is not finite).
struct Normalize {
  double mean = 0.0;
  double stddev = 1.0;
  Tensor operator()(const Tensor& x) const;
};

struct MnistOptions {
  bool flatten = true;  // [N, 784]; false gives [N, 1, 28, 28]
  // The Fashion-MNIST training set's pixel mean and standard deviation (after / 255);
  // tests/data/test_mnist.cpp recomputes them from the files. nullopt: no normalisation.
  std::optional<Normalize> normalize = Normalize{0.2860, 0.3530};
  int64_t limit = 0;  // keep the first `limit` examples; 0 keeps all
};

// Loads one split from `dir`. Checks that images are N x 28 x 28 ubyte, labels N ubyte with
// the same N, and every label in 0..9; each error names the file.
TensorDataset load_mnist(const std::string& dir, MnistSplit split, const MnistOptions& options = {});

// load_mnist on Fashion-MNIST's files (by default where Debian installs them).
TensorDataset load_fashion_mnist(MnistSplit split, const MnistOptions& options = {},
                                 const std::string& dir = default_fashion_mnist_dir());

}  // namespace minidl::data
