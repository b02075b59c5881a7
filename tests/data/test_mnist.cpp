// data/mnist: load_mnist on small handcrafted splits (values, layouts, limit, .gz or plain,
// every consistency check), Normalize, and the real Fashion-MNIST: sizes, balanced classes,
// and the default normalisation constants recomputed from the training set.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <cmath>

#include "data/idx.h"
#include "data/mnist.h"
#include "data/idx_bytes.h"
#include "error_message.h"
#include "temp_dir.h"

using namespace minidl;
using namespace minidl::data;
using minidl::testing::error_message;
using minidl::testing::idx_file;
using minidl::testing::TempDir;
using Catch::Contains;

namespace {

// Image i has every pixel equal to (i * 37 + pixel index) % 256; label i is labels[i].
std::string images_payload(int n, int side = 28) {
  std::string s;
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < side * side; ++p) s.push_back(static_cast<char>((i * 37 + p) % 256));
  return s;
}

void write_split(const TempDir& dir, const std::string& prefix, int n_images, const std::string& labels,
                 bool gz = false, int side = 28) {
  const std::string img = idx_file(kIdxUint8, {uint32_t(n_images), uint32_t(side), uint32_t(side)},
                                   images_payload(n_images, side));
  const std::string lab = idx_file(kIdxUint8, {uint32_t(labels.size())}, labels);
  auto put = [&](const std::string& name, const std::string& bytes) {
    if (!gz) return testing::write_bytes(dir.file(name), bytes);
    testing::write_gzip(dir.file(name + ".gz"), bytes);
  };
  put(prefix + "-images-idx3-ubyte", img);
  put(prefix + "-labels-idx1-ubyte", lab);
}

std::string labels_of(std::initializer_list<int> v) { return testing::ubytes(v); }

MnistOptions raw_options() {
  MnistOptions o;
  o.normalize.reset();
  return o;
}

}  // namespace

TEST_CASE("load_mnist scales pixels to 0..1 and keeps labels as int64", "[data][mnist]") {
  TempDir dir;
  write_split(dir, "train", 3, labels_of({7, 0, 9}));
  TensorDataset ds = load_mnist(dir.path(), MnistSplit::Train, raw_options());
  CHECK(ds.size() == 3);
  CHECK(ds.features().shape() == Shape{3, 784});
  CHECK(ds.features().dtype() == DType::Float32);
  CHECK(ds.labels().shape() == Shape{3});
  CHECK(ds.labels().dtype() == DType::Int64);
  CHECK(ds.labels().to_vector<int64_t>() == std::vector<int64_t>{7, 0, 9});
  const std::vector<float> x = ds.features().to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int p = 0; p < 784; p += 97) {
      // Exact: the loader computes pixel / 255.0f in float, as this check does.
      CHECK(x[static_cast<size_t>(i * 784 + p)] == static_cast<float>((i * 37 + p) % 256) / 255.0f);
    }
}

TEST_CASE("load_mnist normalises exactly as Normalize does on the scaled pixels", "[data][mnist]") {
  TempDir dir;
  write_split(dir, "t10k", 4, labels_of({1, 2, 3, 4}));
  TensorDataset raw = load_mnist(dir.path(), MnistSplit::Test, raw_options());
  MnistOptions opts;
  opts.normalize = Normalize{0.5, 0.25};
  TensorDataset norm = load_mnist(dir.path(), MnistSplit::Test, opts);
  // Bit-identical: the loader's pixel table is made by Normalize itself.
  CHECK(norm.features().to_vector<float>() == Normalize{0.5, 0.25}(raw.features()).to_vector<float>());
  CHECK(norm.features().at({0, 0}) == Approx((0.0 - 0.5) / 0.25));
  // The default options normalise with the Fashion-MNIST constants.
  TensorDataset def = load_mnist(dir.path(), MnistSplit::Test);
  CHECK(def.features().to_vector<float>() == Normalize{0.2860, 0.3530}(raw.features()).to_vector<float>());
}

TEST_CASE("load_mnist keeps N x 1 x 28 x 28 images when asked not to flatten, and honours limit", "[data][mnist]") {
  TempDir dir;
  write_split(dir, "train", 5, labels_of({0, 1, 2, 3, 4}), /*gz=*/true);
  MnistOptions o = raw_options();
  o.flatten = false;
  o.limit = 2;
  TensorDataset ds = load_mnist(dir.path(), MnistSplit::Train, o);
  CHECK(ds.features().shape() == Shape{2, 1, 28, 28});
  CHECK(ds.labels().to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  TensorDataset flat = load_mnist(dir.path(), MnistSplit::Train, raw_options());
  CHECK(ds.features().reshape({2, 784}).to_vector<float>() == flat.features().narrow(0, 0, 2).contiguous().to_vector<float>());
  o.limit = 100;  // more than the file holds: all of it
  CHECK(load_mnist(dir.path(), MnistSplit::Train, o).size() == 5);
  o.limit = -1;
  CHECK_THAT(error_message([&] { load_mnist(dir.path(), MnistSplit::Train, o); }), Contains("limit must be >= 0"));
}

TEST_CASE("load_mnist reads plain and gzipped splits to the same dataset", "[data][mnist]") {
  TempDir plain, gz;
  write_split(plain, "train", 3, labels_of({5, 6, 7}));
  write_split(gz, "train", 3, labels_of({5, 6, 7}), /*gz=*/true);
  TensorDataset a = load_mnist(plain.path(), MnistSplit::Train);
  TensorDataset b = load_mnist(gz.path(), MnistSplit::Train);
  CHECK(a.features().to_vector<float>() == b.features().to_vector<float>());
  CHECK(a.labels().to_vector<int64_t>() == b.labels().to_vector<int64_t>());
}

TEST_CASE("load_mnist refuses inconsistent or missing files, naming them", "[data][mnist]") {
  TempDir dir;
  SECTION("missing files point at scripts/setup-deps") {
    CHECK_THAT(error_message([&] { load_mnist(dir.path(), MnistSplit::Train); }),
               Contains(dir.file("train-images-idx3-ubyte")) && Contains(".gz") && Contains("scripts/setup-deps"));
  }
  SECTION("image and label counts disagree") {
    write_split(dir, "train", 3, labels_of({1, 2}));
    CHECK_THAT(error_message([&] { load_mnist(dir.path(), MnistSplit::Train); }),
               Contains("holds 3 images") && Contains("holds 2 labels"));
  }
  SECTION("a label outside 0..9") {
    write_split(dir, "train", 3, labels_of({1, 10, 2}));
    CHECK_THAT(error_message([&] { load_mnist(dir.path(), MnistSplit::Train); }),
               Contains(dir.file("train-labels-idx1-ubyte")) && Contains("label 1 is 10") && Contains("0..9"));
  }
  SECTION("images that are not 28x28") {
    write_split(dir, "t10k", 2, labels_of({1, 2}), false, 27);
    CHECK_THAT(error_message([&] { load_mnist(dir.path(), MnistSplit::Test); }),
               Contains("expected N x 28 x 28 ubyte images") && Contains("[2, 27, 27]"));
  }
  SECTION("images that are not ubyte") {
    testing::write_bytes(dir.file("t10k-images-idx3-ubyte"), idx_file(kIdxInt8, {1, 28, 28}, std::string(784, '\1')));
    testing::write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_file(kIdxUint8, {1}, "\1"));
    CHECK_THAT(error_message([&] { load_mnist(dir.path(), MnistSplit::Test); }), Contains("got int8"));
  }
  SECTION("a truncated image file") {
    write_split(dir, "train", 2, labels_of({1, 2}));
    const std::string img = testing::read_bytes(dir.file("train-images-idx3-ubyte"));
    testing::write_bytes(dir.file("train-images-idx3-ubyte"), img.substr(0, img.size() - 100));
    CHECK_THAT(error_message([&] { load_mnist(dir.path(), MnistSplit::Train); }),
               Contains("read_idx: " + dir.file("train-images-idx3-ubyte")) && Contains("truncated"));
  }
}

TEST_CASE("Normalize subtracts the mean, divides by stddev, and refuses stddev <= 0", "[data][mnist]") {
  Tensor x = from_vector(std::vector<float>{0.0f, 0.5f, 1.0f});
  CHECK(Normalize{0.5, 0.5}(x).to_vector<float>() == std::vector<float>{-1.0f, 0.0f, 1.0f});
  CHECK_THAT(error_message([&] { Normalize{0.5, 0.0}(x); }), Contains("stddev must be a finite number > 0, got 0"));
  CHECK_THAT(error_message([&] { Normalize{0.5, -1.0}(x); }), Contains("got -1"));
  CHECK_THAT(error_message([&] { Normalize{NAN, 1.0}(x); }), Contains("mean must be finite"));
  CHECK_THAT(error_message([&] { Normalize{0.0, 1.0}(arange(3, DType::Int64)); }), Contains("float32 or float64"));
  MnistOptions bad;
  bad.normalize = Normalize{0.0, 0.0};
  CHECK_THAT(error_message([&] { load_mnist("/nonexistent", MnistSplit::Train, bad); }), Contains("stddev"));
}

TEST_CASE("Fashion-MNIST loads 60000 + 10000 balanced examples, and the default mean and std are its own",
          "[data][mnist][fashion-mnist]") {
  INFO("Fashion-MNIST is a required dependency: run scripts/setup-deps (Debian package dataset-fashion-mnist)");
  TensorDataset train = load_fashion_mnist(MnistSplit::Train, raw_options());
  TensorDataset test = load_fashion_mnist(MnistSplit::Test);
  REQUIRE(train.size() == 60000);
  REQUIRE(test.size() == 10000);
  CHECK(train.features().shape() == Shape{60000, 784});
  CHECK(test.features().shape() == Shape{10000, 784});

  // Fashion-MNIST has exactly 6000 training and 1000 test images per class.
  auto counts = [](const Tensor& y) {
    std::vector<int64_t> c(10, 0);
    for (int64_t label : y.to_vector<int64_t>()) ++c.at(static_cast<size_t>(label));
    return c;
  };
  CHECK(counts(train.labels()) == std::vector<int64_t>(10, 6000));
  CHECK(counts(test.labels()) == std::vector<int64_t>(10, 1000));

  // Mean and std over every training pixel (in [0, 1]), summed in double.
  const std::vector<float> x = train.features().to_vector<float>();
  double sum = 0, sum_sq = 0;
  for (float v : x) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(x.size());
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  const Normalize defaults = *MnistOptions{}.normalize;
  // The defaults are these statistics rounded to 4 decimals, so they agree to within 0.5e-4;
  // double sums of 47 M values in [0, 1] are exact to far better than that.
  CHECK(std::fabs(mean - defaults.mean) <= 0.5e-4);
  CHECK(std::fabs(stddev - defaults.stddev) <= 0.5e-4);
  // The normalised test set then has roughly zero mean and unit spread (a sanity check only:
  // the test split's statistics differ slightly from the training split's).
  CHECK(test.features().mean().item() == Approx(0.0).margin(0.02));
}
