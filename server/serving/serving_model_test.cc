#include "server/serving/serving_model.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/initializer.h"
#include "common/model_file/model_file_testing.h"
#include "common/model_file/model_file_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::AsBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ServingModelTest : public ::ps::testing::ModelFileTestBase {
 protected:
  // An .npz of tensor "w" (2 x 3: 0..5), "b" (3: 10, 11, 12) and table "emb"
  // of dim 2 holding ids 7 and 9 (rows 7.0, 7.5 and 9.0, 9.5).
  std::string WriteModel(const std::vector<uint64_t>& ids = {7, 9}) {
    const std::string path = Path("model.npz");
    std::vector<float> rows;
    for (uint64_t id : ids) rows.insert(rows.end(), {static_cast<float>(id), static_cast<float>(id) + 0.5f});
    auto writer = ModelFileWriter::Create(path, {{"w", DType::kFloat32, {2, 3}},
                                                 {"b", DType::kFloat32, {3}},
                                                 {"emb.ids", DType::kUInt64, {ids.size()}},
                                                 {"emb.rows", DType::kFloat32, {ids.size(), 2}}});
    EXPECT_TRUE(writer.ok()) << writer.status();
    EXPECT_TRUE((*writer)->Append(AsBytes(std::vector<float>{0, 1, 2, 3, 4, 5})).ok());
    EXPECT_TRUE((*writer)->Append(AsBytes(std::vector<float>{10, 11, 12})).ok());
    EXPECT_TRUE((*writer)->Append(AsBytes(ids)).ok());
    EXPECT_TRUE((*writer)->Append(AsBytes(rows)).ok());
    EXPECT_TRUE((*writer)->Close().ok());
    return path;
  }
};

TEST_F(ServingModelTest, AModelFileServesItsTensorsAndRowsExactly) {
  absl::StatusOr<std::unique_ptr<ServingModel>> model = ServingModel::Load(WriteModel());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<ServingModel::Tensor> w = (*model)->Dense("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->shape, ElementsAre(2, 3));
  EXPECT_THAT(w->values, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT((*model)->Dense("b")->values, ElementsAre(10, 11, 12));
  // Known ids give their rows; an unknown one (no initializer in a file) zeros.
  const std::vector<uint64_t> ids = {9, 8, 7};
  std::vector<float> rows(6, -1.0f);
  std::vector<uint8_t> found(3, 7);
  ASSERT_TRUE((*model)->Lookup("emb", ids, absl::MakeSpan(rows), absl::MakeSpan(found)).ok());
  EXPECT_THAT(rows, ElementsAre(9.0f, 9.5f, 0.0f, 0.0f, 7.0f, 7.5f));
  EXPECT_THAT(found, ElementsAre(1, 0, 1));
  const ServingModel::Contents described = (*model)->Describe();
  EXPECT_THAT(described.tensors, ElementsAre("b", "w"));
  EXPECT_THAT(described.tables, ElementsAre(std::make_pair(std::string("emb"), 2u)));
  EXPECT_EQ(described.version.source, Path("model.npz"));
}

TEST_F(ServingModelTest, UnknownNamesAndWrongSizesAreRefusedNamingThem) {
  absl::StatusOr<std::unique_ptr<ServingModel>> model = ServingModel::Load(WriteModel());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> rows(2);
  std::vector<uint8_t> found(1);
  const std::vector<uint64_t> one = {7};
  absl::Status s = (*model)->Lookup("users", one, absl::MakeSpan(rows), absl::MakeSpan(found));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no table 'users' in the model served (tables: emb)"));
  EXPECT_THAT((*model)->Dense("fc9").status().message(),
              HasSubstr("no tensor 'fc9' in the model served (tensors: b, w)"));
  EXPECT_EQ((*model)->TableDim("nope").status().code(), absl::StatusCode::kNotFound);
  std::vector<float> short_rows(1);
  EXPECT_EQ((*model)->Lookup("emb", one, absl::MakeSpan(short_rows), absl::MakeSpan(found)).code(),
            absl::StatusCode::kInvalidArgument);
}

// From a model spec, an id never seen reads as the table's initial row.
TEST_F(ServingModelTest, AnUnseenIdReadsAsTheTablesInitialRow) {
  TableSpec spec{"emb", 4, Initializer::Uniform(-0.5f, 0.5f, 3)};
  ServingModel::Table table;
  table.dim = 4;
  table.spec = spec;
  table.index[5] = 0;
  table.rows = {1, 2, 3, 4};
  absl::flat_hash_map<std::string, ServingModel::Table> tables;
  tables["emb"] = table;
  ServingModel model({}, std::move(tables), ServingVersion{12, absl::Now(), true, "test"});
  const std::vector<uint64_t> ids = {5, 1234};
  std::vector<float> rows(8);
  std::vector<uint8_t> found(2);
  ASSERT_TRUE(model.Lookup("emb", ids, absl::MakeSpan(rows), absl::MakeSpan(found)).ok());
  std::vector<float> initial(4);
  FillInitialRow(spec, 1234, absl::MakeSpan(initial));
  EXPECT_THAT(std::vector<float>(rows.begin(), rows.begin() + 4), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(std::vector<float>(rows.begin() + 4, rows.end()), initial);
  EXPECT_THAT(found, ElementsAre(1, 0));
  EXPECT_EQ(model.version().step, 12u);
  EXPECT_TRUE(model.version().exact);
}

TEST_F(ServingModelTest, ABrokenSourceIsRefusedNamingTheProblem) {
  EXPECT_EQ(ServingModel::Load(Path("missing.npz")).status().code(), absl::StatusCode::kNotFound);
  absl::Status repeated = ServingModel::Load(WriteModel({7, 7})).status();
  EXPECT_EQ(repeated.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(repeated.message(), HasSubstr("table 'emb' holds id 7 twice"));
  const std::string lone = Path("lone.npz");
  auto writer = ModelFileWriter::Create(lone, {{"emb.ids", DType::kUInt64, {1}}});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append(AsBytes(std::vector<uint64_t>{1})).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  absl::Status no_rows = ServingModel::Load(lone).status();
  EXPECT_EQ(no_rows.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(no_rows.message(), HasSubstr("table 'emb' needs both emb.ids and emb.rows"));
  // A directory without checkpoints: ps_export's refusal.
  EXPECT_EQ(ServingModel::Load(dir_).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps
