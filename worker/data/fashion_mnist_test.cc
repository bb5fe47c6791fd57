#include "worker/data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// Three 2x3 images: every pixel distinct, with 0 and 255 among them.
const std::vector<uint8_t> kPixels = {0, 1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 60, 100, 127, 128, 200, 254, 255};
const std::vector<uint8_t> kLabels = {7, 0, 9};

void AppendWord(std::string& out, uint32_t word) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(word >> shift));
}

std::string ImagesIdx(uint32_t count, uint32_t rows, uint32_t cols, const std::vector<uint8_t>& pixels,
                      uint32_t magic = 0x00000803) {
  std::string out;
  for (uint32_t word : {magic, count, rows, cols}) AppendWord(out, word);
  out.append(pixels.begin(), pixels.end());
  return out;
}

std::string LabelsIdx(const std::vector<uint8_t>& labels, uint32_t magic = 0x00000801) {
  std::string out;
  AppendWord(out, magic);
  AppendWord(out, static_cast<uint32_t>(labels.size()));
  out.append(labels.begin(), labels.end());
  return out;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::string& path) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
}

void ExpectDatasetsEqual(const Dataset& a, const Dataset& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
}

class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fashion_mnist_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WritePlain(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::string WriteGz(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }

  // Reads `labels` next to the good 3-image file.
  absl::Status ReadWithLabels(const std::string& labels) {
    return ReadIdx(WritePlain("images", ImagesIdx(3, 2, 3, kPixels)), labels).status();
  }

  std::string dir_;
};

TEST_F(FashionMnistTest, RoundTripsExactPixelsAndLabels) {
  absl::StatusOr<Dataset> ds =
      ReadIdx(WritePlain("images", ImagesIdx(3, 2, 3, kPixels)), WritePlain("labels", LabelsIdx(kLabels)));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->count, 3);
  EXPECT_EQ(ds->rows, 2);
  EXPECT_EQ(ds->cols, 3);
  EXPECT_EQ(ds->features(), 6);
  ASSERT_EQ(ds->images.size(), kPixels.size());
  for (size_t i = 0; i < kPixels.size(); ++i) {
    EXPECT_EQ(ds->images[i], static_cast<float>(kPixels[i]) / 255.0f) << i;
  }
  EXPECT_EQ(ds->images.front(), 0.0f);
  EXPECT_EQ(ds->images.back(), 1.0f);
  EXPECT_EQ(ds->labels, std::vector<int32_t>({7, 0, 9}));
}

TEST_F(FashionMnistTest, CompressedAndPlainGiveEqualDatasets) {
  absl::StatusOr<Dataset> plain =
      ReadIdx(WritePlain("images", ImagesIdx(3, 2, 3, kPixels)), WritePlain("labels", LabelsIdx(kLabels)));
  // Deliberately misnamed: compression is detected by content.
  absl::StatusOr<Dataset> gz =
      ReadIdx(WriteGz("images.idx", ImagesIdx(3, 2, 3, kPixels)), WriteGz("labels.idx", LabelsIdx(kLabels)));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(gz.ok()) << gz.status();
  ExpectDatasetsEqual(*plain, *gz);
}

TEST_F(FashionMnistTest, MissingFileIsNotFoundNamingPath) {
  const std::string missing = dir_ + "/no-such-file";
  ExpectError(ReadWithLabels(missing), absl::StatusCode::kNotFound, missing);
  ExpectError(ReadIdx(missing, WritePlain("labels", LabelsIdx(kLabels))).status(), absl::StatusCode::kNotFound,
              missing);
}

TEST_F(FashionMnistTest, WrongMagicIsDataLoss) {
  const std::string images = WritePlain("images", ImagesIdx(3, 2, 3, kPixels, 0x00000801));
  absl::Status s = ReadIdx(images, WritePlain("labels", LabelsIdx(kLabels))).status();
  ExpectError(s, absl::StatusCode::kDataLoss, images);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad magic number 0x00000801"));
  const std::string labels = WritePlain("labels2", LabelsIdx(kLabels, 0x00000803));
  ExpectError(ReadWithLabels(labels), absl::StatusCode::kDataLoss, labels);
}

TEST_F(FashionMnistTest, TruncatedHeaderIsDataLoss) {
  const std::string images = WritePlain("images", ImagesIdx(3, 2, 3, {}).substr(0, 10));
  absl::Status s = ReadIdx(images, WritePlain("labels", LabelsIdx(kLabels))).status();
  EXPECT_EQ(s, absl::DataLossError("file " + images + ": truncated: expected 16 bytes of header, got 10"));
  const std::string labels = WritePlain("labels2", LabelsIdx({}).substr(0, 6));
  ExpectError(ReadWithLabels(labels), absl::StatusCode::kDataLoss, labels);
}

TEST_F(FashionMnistTest, TruncatedPixelDataIsDataLossPlainOrGz) {
  const std::string bytes = ImagesIdx(3, 2, 3, kPixels);
  const std::string cut = bytes.substr(0, bytes.size() - 2);
  const std::string labels = WritePlain("labels", LabelsIdx(kLabels));
  for (const std::string& images : {WritePlain("images", cut), WriteGz("images.gz", cut)}) {
    EXPECT_EQ(ReadIdx(images, labels).status(),
              absl::DataLossError("file " + images + ": truncated: expected 18 bytes of pixel data, got 16"));
  }
}

TEST_F(FashionMnistTest, TrailingBytesAreDataLoss) {
  const std::string images = WritePlain("images", ImagesIdx(3, 2, 3, kPixels) + "x");
  const std::string labels = WritePlain("labels", LabelsIdx(kLabels));
  EXPECT_EQ(ReadIdx(images, labels).status(),
            absl::DataLossError("file " + images + ": trailing bytes after 18 bytes of pixel data"));
  const std::string long_labels = WriteGz("labels.gz", LabelsIdx(kLabels) + "x");
  ExpectError(ReadWithLabels(long_labels), absl::StatusCode::kDataLoss, long_labels);
}

TEST_F(FashionMnistTest, LabelTenIsDataLoss) {
  const std::string labels = WritePlain("labels", LabelsIdx({7, 10, 9}));
  EXPECT_EQ(ReadWithLabels(labels), absl::DataLossError("file " + labels + ": label 10 at index 1 is outside 0..9"));
}

TEST_F(FashionMnistTest, CountMismatchIsInvalidArgumentNamingBothFiles) {
  const std::string images = WritePlain("images", ImagesIdx(3, 2, 3, kPixels));
  const std::string labels = WritePlain("labels", LabelsIdx({7, 0}));
  absl::Status s = ReadIdx(images, labels).status();
  ExpectError(s, absl::StatusCode::kInvalidArgument, images);
  EXPECT_THAT(std::string(s.message()), HasSubstr(labels));
  EXPECT_THAT(std::string(s.message()), HasSubstr("3 images"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("2 labels"));
}

TEST_F(FashionMnistTest, ZeroOrAbsurdDimensionIsInvalidArgument) {
  const std::string labels = WritePlain("labels", LabelsIdx(kLabels));
  const std::string zero_rows = WritePlain("zero_rows", ImagesIdx(3, 0, 3, {}));
  EXPECT_EQ(ReadIdx(zero_rows, labels).status(),
            absl::InvalidArgumentError("file " + zero_rows + ": rows 0 is outside 1..4096"));
  const std::string huge = WritePlain("huge", ImagesIdx((1u << 20) + 1, 2, 3, kPixels));
  ExpectError(ReadIdx(huge, labels).status(), absl::StatusCode::kInvalidArgument, huge);
  const std::string wide = WritePlain("wide", ImagesIdx(3, 2, 4097, kPixels));
  ExpectError(ReadIdx(wide, labels).status(), absl::StatusCode::kInvalidArgument, wide);
}

// 200 images of 28x28 with varied pixels, so the deflate stream is long.
std::string LargeImagesIdx() {
  std::vector<uint8_t> pixels(200 * 28 * 28);
  uint32_t x = 12345;
  for (uint8_t& p : pixels) {
    x = x * 1103515245u + 12345u;
    p = static_cast<uint8_t>((x >> 16) % 64);
  }
  return ImagesIdx(200, 28, 28, pixels);
}

TEST_F(FashionMnistTest, CorruptGzipIsDataLoss) {
  const std::string path = WriteGz("images.gz", LargeImagesIdx());
  std::string gz = ReadBytes(path);
  ASSERT_GT(gz.size(), 1000u);
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 16; ++i) gz[i] = static_cast<char>(~gz[i]);
  WritePlain("images.gz", gz);
  absl::Status s = ReadWithLabels(path);
  ExpectError(s, absl::StatusCode::kDataLoss, path);
  EXPECT_THAT(std::string(s.message()), HasSubstr("corrupt gzip data"));
}

TEST_F(FashionMnistTest, TruncatedGzipIsDataLoss) {
  const std::string path = WriteGz("images.gz", LargeImagesIdx());
  const std::string gz = ReadBytes(path);
  WritePlain("images.gz", gz.substr(0, gz.size() / 2));
  absl::Status s = ReadWithLabels(path);
  ExpectError(s, absl::StatusCode::kDataLoss, path);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated gzip data"));
}

TEST_F(FashionMnistTest, LoadPrefersGzAndFallsBackToPlain) {
  WriteGz("train-images-idx3-ubyte.gz", ImagesIdx(3, 2, 3, kPixels));
  WritePlain("train-images-idx3-ubyte", "not read");
  WritePlain("train-labels-idx1-ubyte", LabelsIdx(kLabels));
  absl::StatusOr<Dataset> ds = LoadFashionMnist(dir_, "train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->count, 3);
  EXPECT_EQ(ds->labels, std::vector<int32_t>({7, 0, 9}));
}

TEST_F(FashionMnistTest, LoadMissingSplitNamesBothPaths) {
  absl::Status s = LoadFashionMnist(dir_, "t10k").status();
  const std::string base = dir_ + "/t10k-images-idx3-ubyte";
  EXPECT_EQ(s, absl::NotFoundError("neither " + base + ".gz nor " + base + " exists"));
}

TEST_F(FashionMnistTest, LoadUnknownSplitIsInvalidArgument) {
  EXPECT_EQ(LoadFashionMnist(dir_, "validation").status().code(), absl::StatusCode::kInvalidArgument);
}

void ExpectRealSplit(const std::string& split, int64_t count) {
  if (!std::filesystem::exists(kDefaultFashionMnistDir)) {
    GTEST_SKIP() << "dataset-fashion-mnist not installed (scripts/install_deps.sh installs it)";
  }
  absl::StatusOr<Dataset> ds = LoadFashionMnist(kDefaultFashionMnistDir, split);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->count, count);
  EXPECT_EQ(ds->rows, 28);
  EXPECT_EQ(ds->cols, 28);
  ASSERT_EQ(ds->images.size(), static_cast<size_t>(count) * 28 * 28);
  const auto [lo, hi] = std::minmax_element(ds->images.begin(), ds->images.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  std::array<int64_t, 10> per_class{};
  for (int32_t label : ds->labels) ++per_class[label];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], count / 10) << "class " << c;
}

TEST(FashionMnistRealDataTest, TrainHas60000BalancedImages) { ExpectRealSplit("train", 60000); }

TEST(FashionMnistRealDataTest, TestHas10000BalancedImages) { ExpectRealSplit("t10k", 10000); }

}  // namespace
}  // namespace ps
