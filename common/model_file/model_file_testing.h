#ifndef PS_COMMON_MODEL_FILE_MODEL_FILE_TESTING_H_
#define PS_COMMON_MODEL_FILE_MODEL_FILE_TESTING_H_

// Tests only: a per-test directory, file helpers, sample arrays and a runner
// for the real numpy (/usr/bin/python3; the python3 first on PATH may be
// another) for the tests of common/model_file.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/model_file/model_file_reader.h"
#include "common/model_file/model_file_writer.h"
#include "gtest/gtest.h"

namespace ps::testing {

inline constexpr char kPython[] = "/usr/bin/python3";

// A fresh directory per test under testing::TempDir(), removed afterwards.
class ModelFileTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("model_file_", info->test_suite_name(), "_", info->name(), "_", ::getpid()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (std::filesystem::path(dir_) / name).string(); }

  std::string dir_;
};

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
std::string AsBytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Runs /usr/bin/python3 on `script` (saved as DIR/check.py) with `args`;
// its exit status, with stdout and stderr in *output.
inline int RunPython(const std::string& dir, const std::string& script, const std::string& args, std::string* output) {
  const std::string file = (std::filesystem::path(dir) / "check.py").string();
  WriteFileBytes(file, script);
  FILE* pipe = ::popen(absl::StrCat(kPython, " ", file, " ", args, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Whether /usr/bin/python3 can import `module`.
inline bool PythonHas(const std::string& module) {
  return ::system(absl::StrCat(kPython, " -c 'import ", module, "' >/dev/null 2>&1").c_str()) == 0;
}

struct Sample {
  ArraySpec spec;
  std::string bytes;
};

// Arrays of every dtype, a 0-d scalar, an empty array and names with dots;
// the big table last. kSamplesPython builds the same arrays with numpy.
inline std::vector<Sample> Samples() {
  std::vector<float> weight(12), table(100 * 64);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.5f * static_cast<float>(i);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.25f * static_cast<float>(i);
  std::vector<double> bias = {-1.25, -0.25, 0.75, 1.75};
  std::vector<int64_t> ids = {-2, -1, 0, 1000000000000, std::numeric_limits<int64_t>::min()};
  std::vector<uint64_t> counts(6);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = (uint64_t{1} << 63) + i;
  return {
      {{"fc1.weight", DType::kFloat32, {3, 4}}, AsBytes(weight)},
      {{"fc1.bias", DType::kFloat64, {4}}, AsBytes(bias)},
      {{"ids", DType::kInt64, {5}}, AsBytes(ids)},
      {{"counts", DType::kUInt64, {2, 3}}, AsBytes(counts)},
      {{"scalar", DType::kFloat32, {}}, AsBytes(std::vector<float>{3.5f})},
      {{"empty", DType::kFloat32, {0, 3}}, ""},
      {{"emb.table", DType::kFloat32, {100, 64}}, AsBytes(table)},
  };
}

// Python: `expected`, a dict of the arrays Samples() makes.
inline constexpr char kSamplesPython[] = R"py(
import numpy as np
expected = {
    'fc1.weight': (np.arange(12, dtype=np.float32) * np.float32(0.5)).reshape(3, 4),
    'fc1.bias': np.array([-1.25, -0.25, 0.75, 1.75], dtype=np.float64),
    'ids': np.array([-2, -1, 0, 10**12, -2**63], dtype=np.int64),
    'counts': (np.uint64(2**63) + np.arange(6, dtype=np.uint64)).reshape(2, 3),
    'scalar': np.array(3.5, dtype=np.float32),
    'empty': np.zeros((0, 3), dtype=np.float32),
    'emb.table': (np.arange(6400, dtype=np.float32) * np.float32(0.25)).reshape(100, 64),
}
def check(arrays):
    assert sorted(arrays) == sorted(expected), (sorted(arrays), sorted(expected))
    for k, v in expected.items():
        a = arrays[k]
        assert a.dtype == v.dtype and a.shape == v.shape, (k, a.dtype, a.shape, v.dtype, v.shape)
        assert np.array_equal(a, v), k
)py";

inline std::vector<ArraySpec> Specs(const std::vector<Sample>& samples) {
  std::vector<ArraySpec> specs;
  for (const Sample& s : samples) specs.push_back(s.spec);
  return specs;
}

// Writes `samples` to `path`, each array's bytes in pieces of `chunk` bytes.
inline absl::Status WriteSamples(const std::string& path, const std::vector<Sample>& samples, size_t chunk,
                                 const std::map<std::string, std::string>& metadata = {}) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ModelFileWriter> writer, ModelFileWriter::Create(path, Specs(samples), metadata));
  for (const Sample& s : samples) {
    for (size_t at = 0; at < s.bytes.size(); at += chunk) {
      PS_RETURN_IF_ERROR(writer->Append(absl::string_view(s.bytes).substr(at, chunk)));
    }
  }
  return writer->Close();
}

// Opens `path` and reads every array whole: the first error, or OK.
inline absl::Status ReadEverything(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ModelFileReader> reader, ModelFileReader::Open(path));
  for (const ArrayInfo& info : reader->arrays()) PS_RETURN_IF_ERROR(reader->ReadAll(info.name).status());
  return absl::OkStatus();
}

}  // namespace ps::testing

#endif  // PS_COMMON_MODEL_FILE_MODEL_FILE_TESTING_H_
