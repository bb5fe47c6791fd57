// Damaged model files: each must give a clear error (the code and a message
// naming the file and the problem), never a crash or a huge allocation.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/raw_bytes.h"
#include "common/model_file/model_file_reader.h"
#include "common/model_file/model_file_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::ReadEverything;
using ::ps::testing::ReadFileBytes;
using ::ps::testing::WriteFileBytes;
using ::testing::HasSubstr;
using namespace std::string_literals;

class CorruptModelFileTest : public ::ps::testing::ModelFileTestBase {
 protected:
  // A good file of the samples but the big table (to keep the byte-by-byte
  // loops short): its bytes.
  std::string Good(const std::string& name) {
    std::vector<testing::Sample> samples = testing::Samples();
    samples.pop_back();
    const std::string path = Path(name);
    EXPECT_TRUE(testing::WriteSamples(path, samples, 1 << 20).ok());
    return ReadFileBytes(path);
  }

  // `bytes` with `from` (which must occur once) replaced by `to`.
  static std::string Edit(std::string bytes, const std::string& from, const std::string& to) {
    const size_t at = bytes.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    EXPECT_EQ(bytes.find(from, at + 1), std::string::npos) << from;
    if (at != std::string::npos) bytes.replace(at, from.size(), to);
    return bytes;
  }

  absl::Status OpenBytes(const std::string& name, const std::string& bytes) {
    WriteFileBytes(Path(name), bytes);
    return ReadEverything(Path(name));
  }
};

TEST_F(CorruptModelFileTest, NpzTruncatedAnywhereIsDataLoss) {
  const std::string good = Good("good.npz");
  for (size_t n = 0; n < good.size(); ++n) {
    const absl::Status s = OpenBytes("cut.npz", good.substr(0, n));
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << n << ": " << s;
    ASSERT_THAT(s.message(), HasSubstr("cut.npz")) << n;
  }
}

TEST_F(CorruptModelFileTest, SafetensorsTruncatedAnywhereIsDataLoss) {
  const std::string good = Good("good.safetensors");
  for (size_t n = 0; n < good.size(); ++n) {
    const absl::Status s = OpenBytes("cut.safetensors", good.substr(0, n));
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << n << ": " << s;
    ASSERT_THAT(s.message(), HasSubstr("cut.safetensors")) << n;
  }
}

TEST_F(CorruptModelFileTest, NpzFlippedDataByteFailsTheCrcAtTheEntryEnd) {
  std::vector<float> weight(12);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.5f * static_cast<float>(i);
  std::string bad = Good("good.npz");
  const size_t at = bad.find(testing::AsBytes(weight));
  ASSERT_NE(at, std::string::npos);
  bad[at + 20] ^= 0x01;
  WriteFileBytes(Path("bad.npz"), bad);
  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(Path("bad.npz"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  // A range short of the entry's end is not checked; one that reaches it is.
  char head[16];
  EXPECT_TRUE((*reader)->ReadRange("fc1.weight", 0, absl::MakeSpan(head)).ok());
  const absl::Status s = (*reader)->ReadAll("fc1.weight").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("bad.npz"));
  EXPECT_THAT(s.message(), HasSubstr("'fc1.weight.npy'"));
  EXPECT_THAT(s.message(), HasSubstr("CRC-32 mismatch"));
  char tail[8];
  EXPECT_EQ((*reader)->ReadRange("fc1.weight", 40, absl::MakeSpan(tail)).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE((*reader)->ReadAll("fc1.bias").ok());
}

TEST_F(CorruptModelFileTest, NpzBadMagic) {
  std::string bad = Good("good.npz");
  bad[0] = 'X';
  const absl::Status s = OpenBytes("bad.npz", bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("bad magic"));
  EXPECT_EQ(OpenBytes("text.npz", "this is not a zip file at all, just words").code(), absl::StatusCode::kDataLoss);
}

TEST_F(CorruptModelFileTest, NpzBadNpyHeaders) {
  const std::string good = Good("good.npz");
  const std::string weight = "'shape': (3, 4)";
  struct Case {
    std::string from, to, message;
    absl::StatusCode code;
  };
  // The start of fc1.bias's entry; "s" keeps the NULs.
  const std::string bias = "\x93NUMPY\x01\x00v\x00{'descr': '<f8'"s;
  const std::vector<Case> cases = {
      {bias, "\x93NUMPZ\x01\x00v\x00{'descr': '<f8'"s, "bad magic", absl::StatusCode::kDataLoss},
      {bias, "\x93NUMPY\x04\x00v\x00{'descr': '<f8'"s, "version 4.0", absl::StatusCode::kInvalidArgument},
      {bias, "\x93NUMPY\x01\x00\xff\x00{'descr': '<f8'"s, "longer than the entry", absl::StatusCode::kDataLoss},
      {"'<f8'", "'<i4'", "unsupported dtype '<i4'", absl::StatusCode::kInvalidArgument},
      {"'<f8'", "'>f8'", "unsupported dtype '>f8'", absl::StatusCode::kInvalidArgument},
      {"False, " + weight, " True, " + weight, "fortran_order True", absl::StatusCode::kInvalidArgument},
      {weight, "'shape': (3, 5)", "says float32 shape (3, 5)", absl::StatusCode::kDataLoss},
      {weight, "'shape': (3,-4)", "expected a dimension", absl::StatusCode::kDataLoss},
      {weight, "'shape': ( 12 )", "not a tuple", absl::StatusCode::kDataLoss},
      {weight, "'shapf': (3, 4)", "unexpected key 'shapf'", absl::StatusCode::kDataLoss},
  };
  for (const Case& c : cases) {
    const absl::Status s = OpenBytes("bad.npz", Edit(good, c.from, c.to));
    EXPECT_EQ(s.code(), c.code) << c.to << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.to;
    EXPECT_THAT(s.message(), HasSubstr("bad.npz")) << c.to;
  }
}

TEST_F(CorruptModelFileTest, NpzUnsupportedZipFeatures) {
  const std::string good = Good("good.npz");
  // Method 12 (bzip2) in the directory and the local header of fc1.bias.
  std::string bzip = good;
  for (size_t at = bzip.find("fc1.bias.npy"); at != std::string::npos; at = bzip.find("fc1.bias.npy", at + 1)) {
    const bool central = bzip.compare(at - 46, 4, "PK\x01\x02") == 0;
    bzip[at - (central ? 46 : 30) + (central ? 10 : 8)] = 12;
  }
  absl::Status s = OpenBytes("bzip.npz", bzip);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("compression method 12"));
  // An entry that is not a .npy.
  std::string other = good;
  for (size_t at = other.find("ids.npy"); at != std::string::npos; at = other.find("ids.npy", at + 1)) {
    other.replace(at, 7, "ids.txt");
  }
  s = OpenBytes("other.npz", other);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("'ids.txt' is not a .npy array"));
}

// Every single-byte change gives an error or a file that still reads; none
// crashes (this is the test to run under the sanitizers).
TEST_F(CorruptModelFileTest, EveryFlippedByteIsHandled) {
  for (const std::string name : {"f.npz", "f.safetensors"}) {
    const std::string good = Good(name);
    int errors = 0;
    for (size_t at = 0; at < good.size(); ++at) {
      for (const char mask : {'\x01', '\x80'}) {
        std::string bad = good;
        bad[at] ^= mask;
        const absl::Status s = OpenBytes(name, bad);
        if (!s.ok()) {
          ++errors;
          ASSERT_TRUE(s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kInvalidArgument)
              << name << " byte " << at << ": " << s;
        }
      }
    }
    // Stored data is covered by the CRC; safetensors data has no checksum.
    EXPECT_GT(errors, name == "f.npz" ? static_cast<int>(good.size()) : 100) << name;
  }
}

TEST_F(CorruptModelFileTest, NpzDeflatedDataDamage) {
  if (!testing::PythonHas("numpy")) GTEST_SKIP() << "no numpy in /usr/bin/python3";
  std::string out;
  ASSERT_EQ(testing::RunPython(dir_, absl::StrCat(testing::kSamplesPython, R"py(
import sys
np.savez_compressed(sys.argv[1], big=np.arange(50000, dtype=np.float32) % 7, **expected)
)py"),
                               Path("packed.npz"), &out),
            0)
      << out;
  const std::string good = ReadFileBytes(Path("packed.npz"));
  ASSERT_TRUE(ReadEverything(Path("packed.npz")).ok());
  int data_errors = 0;
  for (size_t at = 0; at < good.size(); at += 7) {
    std::string bad = good;
    bad[at] ^= 0x10;
    const absl::Status s = OpenBytes("bad.npz", bad);
    if (!s.ok()) ++data_errors;
    ASSERT_TRUE(s.ok() || s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kInvalidArgument)
        << at << ": " << s;
    ASSERT_EQ(OpenBytes("cut.npz", good.substr(0, at)).code(), absl::StatusCode::kDataLoss) << at;
  }
  EXPECT_GT(data_errors, static_cast<int>(good.size() / 7 * 9 / 10));
}

std::string Safetensors(const std::string& json, size_t data_bytes) {
  std::string out;
  PutRaw<uint64_t>(&out, json.size());
  return out + json + std::string(data_bytes, '\x42');
}

TEST_F(CorruptModelFileTest, SafetensorsBadHeaders) {
  const std::string w = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string json;
    size_t data;
    absl::StatusCode code;
    std::string message;
  };
  const absl::StatusCode kLoss = absl::StatusCode::kDataLoss;
  const std::vector<Case> cases = {
      {"{" + w + "}", 8, absl::StatusCode::kOk, ""},
      {"{" + w + "}", 12, kLoss, "4 bytes after the last tensor"},
      {"{" + w + "}", 4, kLoss, "truncated: the tensors need 8 bytes"},
      {"[" + w + "]", 8, kLoss, "expected '{' at byte 0"},
      {"{" + w + "} x", 8, kLoss, "bytes after the JSON object"},
      {"{" + w + "," + w + "}", 16, kLoss, "tensor 'w' twice"},
      {R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", 4, absl::StatusCode::kInvalidArgument,
       "unsupported dtype 'BF16'"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, kLoss, "F32 shape (3,) needs 12"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, kLoss, "is not [begin, end]"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8, kLoss, "more than 2 values"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}})", 8, kLoss, "expected a non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8, kLoss, "not a fraction"},
      {R"({"w":{"dtype":"F32","shape":[02],"data_offsets":[0,8]}})", 8, kLoss, "leading zero"},
      {R"({"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}})", 8, kLoss, "over 2^64"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", 8, kLoss, "lacks one of"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8, kLoss, "unexpected field 'x'"},
      {R"({"w":{"dtype":"F32","shape":[2],"dtype":"F32","data_offsets":[0,8]}})", 8, kLoss, "field 'dtype' twice"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
       6, kLoss, "overlaps"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, kLoss, "a gap of 4 bytes before tensor 'w'"},
      {R"({"__metadata__":{"k":1},)" + w + "}", 8, kLoss, "__metadata__ 'k' is not a string"},
      {R"({"w\q":1})", 0, kLoss, "bad escape"},
      {R"({"w\ud800":1})", 0, kLoss, "surrogate"},
      {"{\"w\n\":1}", 0, kLoss, "control character"},
      {R"({"w)", 0, kLoss, "unterminated string"},
      {"", 0, kLoss, "expected '{'"},
  };
  for (const Case& c : cases) {
    const absl::Status s = OpenBytes("h.safetensors", Safetensors(c.json, c.data));
    EXPECT_EQ(s.code(), c.code) << c.json << ": " << s;
    if (c.code != absl::StatusCode::kOk) {
      EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.json;
      EXPECT_THAT(s.message(), HasSubstr("h.safetensors")) << c.json;
    }
  }
}

TEST_F(CorruptModelFileTest, SafetensorsHeaderLengthBeyondTheFile) {
  std::string huge;
  PutRaw<uint64_t>(&huge, uint64_t{1} << 62);
  absl::Status s = OpenBytes("huge.safetensors", huge + "{}");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("header length"));
  std::string longer;
  PutRaw<uint64_t>(&longer, 1000);
  s = OpenBytes("long.safetensors", longer + "{}");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
}

}  // namespace
}  // namespace ps
