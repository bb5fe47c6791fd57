#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/base/raw_bytes.h"
#include "common/model_file/model_file_reader.h"
#include "common/model_file/model_file_testing.h"
#include "common/model_file/model_file_writer.h"
#include "common/model_file/npz.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::AsBytes;
using ::ps::testing::PythonHas;
using ::ps::testing::ReadFileBytes;
using ::ps::testing::RunPython;
using ::ps::testing::Sample;
using ::ps::testing::Samples;
using ::ps::testing::WriteSamples;
using ::testing::HasSubstr;

class ModelFileTest : public ::ps::testing::ModelFileTestBase {
 protected:
  // Checks that `path` lists and reads back exactly `samples`, whole and in ranges.
  void ExpectSamples(const std::string& path, const std::vector<Sample>& samples) {
    absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status();
    ASSERT_EQ((*reader)->arrays().size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      const ArrayInfo& info = (*reader)->arrays()[i];
      EXPECT_EQ(static_cast<const ArraySpec&>(info), samples[i].spec);
      EXPECT_EQ(info.bytes, samples[i].bytes.size());
      EXPECT_EQ((*reader)->Find(info.name), &info);
      absl::StatusOr<std::string> all = (*reader)->ReadAll(info.name);
      ASSERT_TRUE(all.ok()) << all.status();
      EXPECT_EQ(*all, samples[i].bytes) << info.name;
      if (info.bytes >= 8) {
        std::string middle(info.bytes / 2, '\0');
        ASSERT_TRUE((*reader)->ReadRange(info.name, 3, absl::MakeSpan(middle)).ok());
        EXPECT_EQ(middle, samples[i].bytes.substr(3, middle.size())) << info.name;
      }
    }
  }

  std::string PythonCheck(const std::string& body, const std::string& args, int* rc) {
    std::string output;
    *rc = RunPython(dir_, absl::StrCat(::ps::testing::kSamplesPython, body), args, &output);
    return output;
  }
};

TEST_F(ModelFileTest, NpzRoundTripsInPieces) {
  const std::string path = Path("model.npz");
  ASSERT_TRUE(WriteSamples(path, Samples(), 7).ok());
  ExpectSamples(path, Samples());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(ModelFileTest, SafetensorsRoundTripsWithMetadata) {
  const std::string path = Path("model.safetensors");
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "1200"}, {"q\"uote", "\\\n"}};
  ASSERT_TRUE(WriteSamples(path, Samples(), 5, metadata).ok());
  ExpectSamples(path, Samples());
  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(path);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->metadata(), metadata);
  // The data starts at a multiple of 8, as the safetensors library writes it.
  const std::string bytes = ReadFileBytes(path);
  absl::string_view header = bytes;
  EXPECT_EQ(TakeRaw<uint64_t>(&header) % 8, 0u);
}

TEST_F(ModelFileTest, NoArraysAtAll) {
  for (const std::string name : {"none.npz", "none.safetensors"}) {
    absl::StatusOr<std::unique_ptr<ModelFileWriter>> writer = ModelFileWriter::Create(Path(name), {});
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Close().ok());
    absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(Path(name));
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_TRUE((*reader)->arrays().empty());
  }
}

TEST_F(ModelFileTest, ReadRangeChecksNameAndBounds) {
  const std::string path = Path("model.npz");
  ASSERT_TRUE(WriteSamples(path, Samples(), 1 << 20).ok());
  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(path);
  ASSERT_TRUE(reader.ok());
  char buf[16];
  EXPECT_EQ((*reader)->ReadRange("nope", 0, absl::MakeSpan(buf)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*reader)->Find("nope"), nullptr);
  EXPECT_EQ((*reader)->ReadRange("fc1.weight", 40, absl::MakeSpan(buf)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*reader)->ReadRange("fc1.weight", 32, absl::MakeSpan(buf)).code(), absl::StatusCode::kOk);
  EXPECT_EQ((*reader)->ReadRange("empty", 0, absl::MakeSpan(buf, 0)).code(), absl::StatusCode::kOk);
  EXPECT_EQ((*reader)->ReadRange("empty", 1, absl::MakeSpan(buf, 0)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE((*reader)->metadata().empty());
}

TEST_F(ModelFileTest, NumpyLoadsOurNpz) {
  if (!PythonHas("numpy")) GTEST_SKIP() << "no numpy in /usr/bin/python3";
  for (const bool zip64 : {false, true}) {
    const std::string path = Path(zip64 ? "zip64.npz" : "plain.npz");
    absl::StatusOr<std::unique_ptr<ModelFileWriter>> writer =
        internal::CreateNpzWriter(path, testing::Specs(Samples()), {.force_zip64 = zip64});
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const Sample& s : Samples()) ASSERT_TRUE((*writer)->Append(s.bytes).ok());
    ASSERT_TRUE((*writer)->Close().ok());
    int rc = 0;
    const std::string out = PythonCheck(R"py(
import sys, zipfile
with np.load(sys.argv[1]) as f:
    check({k: f[k] for k in f.files})
with zipfile.ZipFile(sys.argv[1]) as z:
    assert z.testzip() is None
    for i in z.infolist():
        assert i.compress_type == zipfile.ZIP_STORED
        # The array data starts at a multiple of 64 within the entry.
        raw = z.read(i.filename)
        hlen = 10 + int.from_bytes(raw[8:10], 'little')
        assert hlen % 64 == 0 and raw[:8] == b'\x93NUMPY\x01\x00', i.filename
print('OK')
)py",
                                        path, &rc);
    EXPECT_EQ(rc, 0) << out;
    ExpectSamples(path, Samples());
  }
}

TEST_F(ModelFileTest, OverSixtyFiveThousandEntriesUseZip64EndRecords) {
  if (!PythonHas("numpy")) GTEST_SKIP() << "no numpy in /usr/bin/python3";
  constexpr int kArrays = 70000;
  std::vector<ArraySpec> specs;
  for (int i = 0; i < kArrays; ++i) specs.push_back({absl::StrCat("row.", i), DType::kInt64, {1}});
  const std::string path = Path("many.npz");
  absl::StatusOr<std::unique_ptr<ModelFileWriter>> writer = ModelFileWriter::Create(path, specs);
  ASSERT_TRUE(writer.ok());
  for (int64_t i = 0; i < kArrays; ++i) ASSERT_TRUE((*writer)->Append(AsBytes(std::vector<int64_t>{i * 3})).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->arrays().size(), static_cast<size_t>(kArrays));
  absl::StatusOr<std::string> last = (*reader)->ReadAll("row.69999");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, AsBytes(std::vector<int64_t>{69999 * 3}));
  int rc = 0;
  const std::string out = PythonCheck(R"py(
import sys
with np.load(sys.argv[1]) as f:
    assert len(f.files) == 70000, len(f.files)
    assert f['row.69999'].tolist() == [69999 * 3]
    assert f['row.123'].tolist() == [369]
print('OK')
)py",
                                      path, &rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(ModelFileTest, ReadsNumpySavezAndSavezCompressed) {
  if (!PythonHas("numpy")) GTEST_SKIP() << "no numpy in /usr/bin/python3";
  int rc = 0;
  const std::string out = PythonCheck(R"py(
import sys
np.savez(sys.argv[1], **expected)
# A big, compressible array, so that inflating takes many chunks.
big = (np.arange(1 << 20, dtype=np.int64) % 1000).astype(np.float64)
np.savez_compressed(sys.argv[2], big=big, **expected)
print('OK')
)py",
                                      absl::StrCat(Path("plain.npz"), " ", Path("packed.npz")), &rc);
  ASSERT_EQ(rc, 0) << out;
  std::vector<Sample> samples = Samples();
  ExpectSamples(Path("plain.npz"), samples);

  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(Path("packed.npz"));
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (const Sample& s : samples) {
    absl::StatusOr<std::string> all = (*reader)->ReadAll(s.spec.name);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(*all, s.bytes) << s.spec.name;
  }
  std::vector<double> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i % 1000);
  const std::string want = AsBytes(big);
  const ArrayInfo* info = (*reader)->Find("big");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->shape, std::vector<uint64_t>{1 << 20});
  // Front to back in pieces, then a read behind the last one (inflates anew).
  std::string piece(100003, '\0');
  for (uint64_t at = 0; at < want.size(); at += piece.size()) {
    piece.resize(std::min<uint64_t>(piece.size(), want.size() - at));
    ASSERT_TRUE((*reader)->ReadRange("big", at, absl::MakeSpan(piece)).ok()) << at;
    ASSERT_EQ(piece, want.substr(at, piece.size())) << at;
  }
  std::string back(64, '\0');
  ASSERT_TRUE((*reader)->ReadRange("big", 8000, absl::MakeSpan(back)).ok());
  EXPECT_EQ(back, want.substr(8000, 64));
}

TEST_F(ModelFileTest, SafetensorsBytesMatchTheFormat) {
  if (!PythonHas("numpy")) GTEST_SKIP() << "no numpy in /usr/bin/python3";
  const std::string path = Path("model.safetensors");
  ASSERT_TRUE(WriteSamples(path, Samples(), 1000, {{"format", "np"}}).ok());
  int rc = 0;
  // The format by hand: header length, JSON, contiguous data; and through the
  // safetensors package where this python has it.
  const std::string out = PythonCheck(R"py(
import json, struct, sys
raw = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', raw[:8])
assert (8 + n) % 8 == 0
header = json.loads(raw[8:8 + n].decode('utf-8'))
assert header.pop('__metadata__') == {'format': 'np'}
data = raw[8 + n:]
codes = {'F32': np.float32, 'F64': np.float64, 'I64': np.int64, 'U64': np.uint64}
arrays, end = {}, 0
for name, t in sorted(header.items(), key=lambda kv: kv[1]['data_offsets']):
    assert set(t) == {'dtype', 'shape', 'data_offsets'}, t
    b, e = t['data_offsets']
    assert b == end, (name, b, end)
    end = e
    arrays[name] = np.frombuffer(data[b:e], dtype=codes[t['dtype']]).reshape(t['shape'])
assert end == len(data)
check(arrays)
try:
    from safetensors.numpy import load_file
except ImportError:
    load_file = None
if load_file:
    check(load_file(sys.argv[1]))
print('OK')
)py",
                                      path, &rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(ModelFileTest, ReadsSafetensorsMadeInPython) {
  if (!PythonHas("numpy")) GTEST_SKIP() << "no numpy in /usr/bin/python3";
  int rc = 0;
  // Keys in another order than the data, spaces in the JSON, no padding.
  const std::string out = PythonCheck(R"py(
import json, struct, sys
codes = {np.float32: 'F32', np.float64: 'F64', np.int64: 'I64', np.uint64: 'U64'}
header, blobs, at = {}, [], 0
for name, a in expected.items():
    b = a.tobytes()
    header[name] = {'shape': list(a.shape), 'data_offsets': [at, at + len(b)], 'dtype': codes[a.dtype.type]}
    blobs.append(b)
    at += len(b)
header['__metadata__'] = {'source': 'python', 'caf\u00e9': '\u2603'}
text = json.dumps(dict(reversed(list(header.items()))), indent=1).encode('utf-8')
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(text)) + text + b''.join(blobs))
print('OK')
)py",
                                      Path("py.safetensors"), &rc);
  ASSERT_EQ(rc, 0) << out;
  ExpectSamples(Path("py.safetensors"), Samples());
  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(Path("py.safetensors"));
  ASSERT_TRUE(reader.ok());
  const std::map<std::string, std::string> metadata = {{"source", "python"}, {"caf\xc3\xa9", "\xe2\x98\x83"}};
  EXPECT_EQ((*reader)->metadata(), metadata);
}

TEST_F(ModelFileTest, UnknownExtensionIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<ModelFileWriter>> writer = ModelFileWriter::Create(Path("model.bin"), {});
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(writer.status().message(), HasSubstr("'.bin'"));
  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(Path("model.pt"));
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reader.status().message(), HasSubstr("'.pt'"));
  EXPECT_EQ(ModelFileReader::Open(Path("absent.npz")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelFileTest, CreateRefusesBadDeclarations) {
  const std::vector<ArraySpec> dup = {{"w", DType::kFloat32, {2}}, {"w", DType::kInt64, {1}}};
  const std::vector<ArraySpec> unnamed = {{"", DType::kFloat32, {2}}};
  const std::vector<ArraySpec> huge = {{"w", DType::kFloat64, {1ull << 40, 1ull << 30}}};
  const std::vector<ArraySpec> meta = {{"__metadata__", DType::kFloat32, {1}}};
  for (const std::string name : {"m.npz", "m.safetensors"}) {
    for (const auto& specs : {dup, unnamed, huge}) {
      EXPECT_EQ(ModelFileWriter::Create(Path(name), specs).status().code(), absl::StatusCode::kInvalidArgument) << name;
    }
  }
  EXPECT_EQ(ModelFileWriter::Create(Path("m.safetensors"), meta).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelFileWriter::Create(Path("m.safetensors"), {{"\xff", DType::kFloat32, {1}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelFileWriter::Create(Path("m.npz"), {}, {{"k", "v"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(Path("m.npz.tmp")));
}

TEST_F(ModelFileTest, AppendAndCloseFollowTheDeclaration) {
  for (const std::string name : {"m.npz", "m.safetensors"}) {
    const std::string path = Path(name);
    absl::StatusOr<std::unique_ptr<ModelFileWriter>> writer = ModelFileWriter::Create(
        path, {{"a", DType::kFloat32, {2}}, {"none", DType::kFloat64, {0}}, {"b", DType::kInt64, {}}});
    ASSERT_TRUE(writer.ok());
    ModelFileWriter& w = **writer;
    EXPECT_EQ(w.current(), 0u);
    EXPECT_EQ(w.remaining(), 8u);
    ASSERT_TRUE(w.Append("abcd").ok());
    // A piece never crosses into the next array; a refused one changes nothing.
    EXPECT_EQ(w.Append("efghXYZ").code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(w.Append("efgh").ok());
    EXPECT_EQ(w.current(), 2u);  // "none" needed nothing
    absl::Status early = w.Close();
    EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(early.message(), HasSubstr("'b'"));
    EXPECT_FALSE(std::filesystem::exists(path));
    ASSERT_TRUE(w.Append("01234567").ok());
    EXPECT_EQ(w.current(), 3u);
    EXPECT_EQ(w.remaining(), 0u);
    EXPECT_EQ(w.Append("x").code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(w.Close().ok());
    EXPECT_EQ(w.Close().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(w.Append("").code(), absl::StatusCode::kFailedPrecondition);
    absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ(*(*reader)->ReadAll("a"), "abcdefgh");
    EXPECT_EQ(*(*reader)->ReadAll("b"), "01234567");
  }
}

TEST_F(ModelFileTest, AWriterDroppedBeforeCloseLeavesTheOldFile) {
  for (const std::string name : {"m.npz", "m.safetensors"}) {
    const std::string path = Path(name);
    ASSERT_TRUE(WriteSamples(path, Samples(), 64).ok());
    const std::string before = ReadFileBytes(path);
    {
      absl::StatusOr<std::unique_ptr<ModelFileWriter>> writer =
          ModelFileWriter::Create(path, testing::Specs(Samples()));
      ASSERT_TRUE(writer.ok());
      ASSERT_TRUE((*writer)->Append(Samples()[0].bytes).ok());
      EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    }
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    EXPECT_EQ(ReadFileBytes(path), before);
  }
}

TEST_F(ModelFileTest, ConcurrentReadsAgree) {
  const std::string path = Path("model.npz");
  ASSERT_TRUE(WriteSamples(path, Samples(), 1 << 20).ok());
  absl::StatusOr<std::unique_ptr<ModelFileReader>> reader = ModelFileReader::Open(path);
  ASSERT_TRUE(reader.ok());
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        for (const Sample& s : Samples()) {
          // Whole arrays and ranges that end short of the entry, interleaved.
          const uint64_t from = (round + t) % 2 == 0 ? 0 : s.bytes.size() / 3;
          std::string got(s.bytes.size() - from, '\0');
          if (!(*reader)->ReadRange(s.spec.name, from, absl::MakeSpan(got)).ok() || got != s.bytes.substr(from)) {
            ++mismatches;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(ModelFileTest, CreateReportsFilesystemErrors) {
  ::ps::testing::WriteFileBytes(Path("plain_file"), "x");
  const absl::Status s = ModelFileWriter::Create(Path("plain_file/model.npz"), {}).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("plain_file"));
}

TEST_F(ModelFileTest, CreatesMissingDirectories) {
  const std::string path = Path("a/b/model.npz");
  ASSERT_TRUE(WriteSamples(path, Samples(), 4096).ok());
  ExpectSamples(path, Samples());
}

}  // namespace
}  // namespace ps
