#ifndef PS_WORKER_DATA_FASHION_MNIST_H_
#define PS_WORKER_DATA_FASHION_MNIST_H_

// Reading Fashion-MNIST (or MNIST) from IDX files, gzip-compressed or not.
// Thread-compatible: no shared state.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps {

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Images as floats in [0, 1], row-major [count x rows*cols]; labels 0..9.
struct Dataset {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<float> images;
  std::vector<int32_t> labels;

  int features() const { return rows * cols; }
};

// Reads an IDX image file (magic 0x00000803) and a label file (0x00000801).
// Either may be gzip-compressed (detected by content, not name). Errors name
// the file: kNotFound when it does not exist, kPermissionDenied when it may
// not be read, kDataLoss for a bad magic number, a truncated file, trailing
// bytes, corrupt gzip data or a label outside 0..9, kInvalidArgument when
// image and label counts differ or a dimension is 0 or absurd (over 2^20
// images of 2^12 x 2^12).
absl::StatusOr<Dataset> ReadIdx(const std::string& images_path, const std::string& labels_path);

// Reads `split` ("train" or "t10k") from `dir`: the images from
// SPLIT-images-idx3-ubyte.gz, or SPLIT-images-idx3-ubyte when that is absent,
// and the labels likewise from SPLIT-labels-idx1-ubyte[.gz]. kInvalidArgument
// for another split; kNotFound names both paths tried; otherwise as ReadIdx.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split);

}  // namespace ps

#endif  // PS_WORKER_DATA_FASHION_MNIST_H_
