// MNIST / Fashion-MNIST loading: find the split's two IDX files, check they describe the same
// N images of 28x28 ubyte and N labels in 0..9, and build the TensorDataset. Pixels go
// through a 256-entry table (pixel -> normalised float) so the 47 M pixels of the training
// set are converted in one pass, with exactly the bits Normalize would give.
#include "data/mnist.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/host_parallel.h"
#include "data/idx.h"

namespace minidl::data {

// MINIDL_FASHION_MNIST_DIR overrides the Debian path (machines where the package cannot be
// installed, such as one without network access, carry the files elsewhere).
std::string default_fashion_mnist_dir() {
  const char* dir = std::getenv("MINIDL_FASHION_MNIST_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/usr/share/datasets/fashion-mnist";
}

Tensor Normalize::operator()(const Tensor& x) const {
  check_defined(x, "Normalize", "x");
  MINIDL_CHECK(std::isfinite(stddev) && stddev > 0, "Normalize: stddev must be a finite number > 0, got ", stddev,
               " (mean ", mean, ")");
  MINIDL_CHECK(std::isfinite(mean), "Normalize: mean must be finite, got ", mean);
  MINIDL_CHECK(is_floating(x.dtype()), "Normalize: x must be float32 or float64, got ", x.dtype(), " (shape ",
               x.shape(), ")");
  return (x - mean) / stddev;
}

namespace {

constexpr int64_t kSide = 28;
constexpr int kClasses = 10;

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// dir/stem, or dir/stem.gz; the plain file wins when both exist (no inflate needed).
std::string find_split_file(const std::string& dir, const std::string& stem) {
  const std::string plain = dir + "/" + stem;
  if (file_exists(plain)) return plain;
  const std::string gz = plain + ".gz";
  if (file_exists(gz)) return gz;
  throw Error(detail::make_message("load_mnist: neither ", plain, " nor ", gz, " exists (Fashion-MNIST: run ",
                                   "scripts/setup-deps, which installs Debian's dataset-fashion-mnist into ",
                                   default_fashion_mnist_dir(), ")"));
}

// pixel value k -> the float the dataset stores for it: k / 255, then normalised.
std::vector<float> pixel_table(const std::optional<Normalize>& normalize) {
  std::vector<float> scaled(256);
  for (int k = 0; k < 256; ++k) scaled[k] = static_cast<float>(k) / 255.0f;
  if (!normalize) return scaled;
  // Through Normalize itself, so a pixel gets exactly the value normalize(x / 255) gives.
  return (*normalize)(from_vector(scaled)).to_vector<float>();
}

}  // namespace

TensorDataset load_mnist(const std::string& dir, MnistSplit split, const MnistOptions& options) {
  MINIDL_CHECK(options.limit >= 0, "load_mnist: limit must be >= 0 (0 = all), got ", options.limit);
  const std::vector<float> table = pixel_table(options.normalize);  // checks normalize before any I/O
  const std::string prefix = split == MnistSplit::Train ? "train" : "t10k";
  const std::string images_path = find_split_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_split_file(dir, prefix + "-labels-idx1-ubyte");

  const IdxArray images = read_idx(images_path);
  const IdxArray labels = read_idx(labels_path);
  MINIDL_CHECK(images.type_code == kIdxUint8 && images.dims.size() == 3 && images.dims[1] == kSide &&
                   images.dims[2] == kSide,
               "load_mnist: ", images_path, ": expected N x 28 x 28 ubyte images, got ",
               idx_type_name(images.type_code), " of rank ", images.dims.size(), " with dims ", Shape(images.dims));
  MINIDL_CHECK(labels.type_code == kIdxUint8 && labels.dims.size() == 1, "load_mnist: ", labels_path,
               ": expected N ubyte labels, got ", idx_type_name(labels.type_code), " with dims ", Shape(labels.dims));
  MINIDL_CHECK(images.dims[0] == labels.dims[0], "load_mnist: ", images_path, " holds ", images.dims[0],
               " images but ", labels_path, " holds ", labels.dims[0], " labels");

  const int64_t total = images.dims[0];
  const int64_t n = options.limit > 0 && options.limit < total ? options.limit : total;
  constexpr int64_t kPixels = kSide * kSide;

  // Every label of the file is checked, not just the kept ones: a bad one means a bad file.
  for (int64_t i = 0; i < total; ++i) {
    const int label = labels.payload[static_cast<size_t>(i)];
    MINIDL_CHECK(label < kClasses, "load_mnist: ", labels_path, ": label ", i, " is ", label,
                 ", expected a class in 0..9");
  }
  Tensor y = empty(Shape{n}, DType::Int64);  // [N]
  int64_t* yp = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) yp[i] = labels.payload[static_cast<size_t>(i)];

  const Shape x_shape = options.flatten ? Shape{n, kPixels} : Shape{n, 1, kSide, kSide};
  Tensor x = empty(x_shape, DType::Float32);  // [N, 784] or [N, 1, 28, 28]
  float* xp = x.data<float>();
  const unsigned char* pixels = images.payload.data();
  const float* lut = table.data();
  // Threads (the CPU kernels' pool) take slices of at least a million pixels: the training set
  // is split, a small --limit runs on this thread.
  host_parallel_for(n * kPixels, int64_t{1} << 20, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) xp[i] = lut[pixels[i]];
  });
  return TensorDataset(std::move(x), std::move(y));
}

TensorDataset load_fashion_mnist(MnistSplit split, const MnistOptions& options, const std::string& dir) {
  return load_mnist(dir, split, options);
}

}  // namespace minidl::data
