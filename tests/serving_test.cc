// Serving replicas (ps_serve) and their client: what a reader gets is the
// trained model exactly, bad requests are refused naming the problem while
// the replica serves on, and a client behind several replicas fails over
// when one dies.

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_file/model_file_reader.h"
#include "common/model_file/model_file_writer.h"
#include "common/net/security.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/export/exporter.h"
#include "server/serving/serving_replica.h"
#include "tests/job.h"
#include "tests/raw_peer.h"
#include "worker/client/serving_client.h"

namespace ps {
namespace {

using ::ps::testing::ChildProcess;
using ::ps::testing::Job;
using ::ps::testing::RawPeer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A model of tensor "w" [2, 2] = 1..4 and table "emb" (dim 3) holding ids 10
// and 20 (rows 10, 10.5, 11 and 20, 20.5, 21), initialised to a constant 0.25.
std::unique_ptr<ServingModel> SmallModel() {
  absl::flat_hash_map<std::string, ServingModel::Tensor> tensors;
  tensors["w"] = {{2, 2}, {1, 2, 3, 4}};
  ServingModel::Table table;
  table.dim = 3;
  table.spec = TableSpec{"emb", 3, Initializer::Constant(0.25f)};
  table.index = {{10, 0}, {20, 1}};
  table.rows = {10, 10.5f, 11, 20, 20.5f, 21};
  absl::flat_hash_map<std::string, ServingModel::Table> tables;
  tables["emb"] = std::move(table);
  return std::make_unique<ServingModel>(std::move(tensors), std::move(tables),
                                        ServingVersion{7, absl::FromUnixSeconds(1700000000), true, "test"});
}

// A replica serving SmallModel() on its own thread, stopped by the destructor.
class RunningReplica {
 public:
  explicit RunningReplica(uint64_t max_lookup_ids = 100000, SecurityOptions security = {}) {
    ServingOptions options;
    options.max_lookup_ids = max_lookup_ids;
    options.security = std::move(security);
    auto replica = ServingReplica::Start(options, SmallModel());
    EXPECT_TRUE(replica.ok()) << replica.status();
    replica_ = std::move(*replica);
    endpoint_ = replica_->endpoint();
    thread_ = std::thread([this] { EXPECT_TRUE(replica_->Run().ok()); });
  }
  ~RunningReplica() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    replica_->RequestStop();
    thread_.join();
    replica_.reset();  // its socket closes: it is gone
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::unique_ptr<ServingReplica> replica_;
  std::thread thread_;
  std::string endpoint_;
};

std::unique_ptr<ServingClient> ClientOf(std::vector<std::string> endpoints, absl::Duration timeout = absl::Seconds(5)) {
  auto client = ServingClient::Connect({.endpoints = std::move(endpoints), .timeout = timeout});
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

TEST(ServingTest, LookupsDenseReadsAndTheVersionComeBackExactly) {
  RunningReplica replica;
  std::unique_ptr<ServingClient> client = ClientOf({replica.endpoint()});
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> ids = {20, 5, 10};
  absl::StatusOr<ServingClient::Rows> rows = client->Lookup("emb", ids);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->dim, 3u);
  EXPECT_THAT(rows->values, ElementsAre(20, 20.5f, 21, 0.25f, 0.25f, 0.25f, 10, 10.5f, 11));
  EXPECT_THAT(rows->found, ElementsAre(1, 0, 1));
  EXPECT_EQ(rows->version.step, 7u);
  EXPECT_TRUE(rows->version.exact);
  EXPECT_EQ(rows->version.synced_at, absl::FromUnixSeconds(1700000000));
  EXPECT_EQ(rows->version.replica, replica.endpoint());
  absl::StatusOr<ServingClient::Tensor> w = client->Dense("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->shape, ElementsAre(2, 2));
  EXPECT_THAT(w->values, ElementsAre(1, 2, 3, 4));
  absl::StatusOr<ServingClient::Model> model = client->Version();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(model->tensors, ElementsAre("w"));
  EXPECT_THAT(model->tables, ElementsAre("emb"));
  EXPECT_THAT(model->table_dims, ElementsAre(3));
  EXPECT_EQ(model->version.source, "test");
  absl::StatusOr<ServingClient::Rows> none = client->Lookup("emb", {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->values.empty());
}

TEST(ServingTest, BadRequestsAreRefusedNamingTheProblemAndTheReplicaServesOn) {
  RunningReplica replica(/*max_lookup_ids=*/4);
  std::unique_ptr<ServingClient> client = ClientOf({replica.endpoint()});
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> one = {10};
  absl::Status unknown = client->Lookup("users", one).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("no table 'users' in the model served (tables: emb)"));
  absl::Status tensor = client->Dense("fc9").status();
  EXPECT_EQ(tensor.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tensor.message(), HasSubstr("no tensor 'fc9'"));
  const std::vector<uint64_t> five = {1, 2, 3, 4, 5};
  absl::Status many = client->Lookup("emb", five).status();
  EXPECT_EQ(many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(many.message(), HasSubstr("a lookup of 5 ids of table 'emb': at most 4 (--max_lookup_ids)"));

  auto peer = RawPeer::Connect(replica.endpoint());
  ASSERT_TRUE(peer.ok()) << peer.status();
  // Ids that are not whole uint64s.
  std::vector<zmq::message_t> frames;
  frames.push_back(
      RawPeer::HeaderFrame(Envelope{kProtocolVersion, 11, 0, ServingRequestMsg{ServingKind::kLookup, "emb"}}));
  frames.emplace_back(7);
  ErrorMsg odd = (*peer)->Refusal(std::move(frames), 11, absl::Seconds(5));
  EXPECT_EQ(odd.code, absl::StatusCode::kInvalidArgument) << odd.message;
  EXPECT_THAT(odd.message, HasSubstr("carries its ids as one frame of uint64 (got 1 frames of 7 bytes)"));
  // A write: a replica is read-only.
  frames.clear();
  frames.push_back(RawPeer::HeaderFrame(Envelope{kProtocolVersion, 12, 0, PushRequestMsg{}}));
  ErrorMsg write = (*peer)->Refusal(std::move(frames), 12, absl::Seconds(5));
  EXPECT_EQ(write.code, absl::StatusCode::kPermissionDenied) << write.message;
  EXPECT_THAT(write.message, HasSubstr("is a read-only serving replica"));
  EXPECT_THAT(write.message, HasSubstr("not pushRequest"));
  // A header that does not decode.
  frames.clear();
  frames.emplace_back(std::string("not a header"));
  ErrorMsg garbage = (*peer)->Refusal(std::move(frames), std::nullopt, absl::Seconds(5));
  EXPECT_EQ(garbage.code, absl::StatusCode::kInvalidArgument) << garbage.message;
  EXPECT_THAT(garbage.message, HasSubstr("could not decode"));
  // And it serves on.
  absl::StatusOr<ServingClient::Rows> rows = client->Lookup("emb", one);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(rows->values, ElementsAre(10, 10.5f, 11));
}

TEST(ServingTest, AClientBehindTwoReplicasSpreadsItsRequestsAndFailsOverWhenOneDies) {
  RunningReplica a, b;
  const std::string a_endpoint = a.endpoint(), b_endpoint = b.endpoint();
  std::unique_ptr<ServingClient> client = ClientOf({a_endpoint, b_endpoint}, absl::Milliseconds(500));
  ASSERT_NE(client, nullptr);
  const std::vector<uint64_t> ids = {10};
  std::vector<std::string> answered;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<ServingClient::Rows> rows = client->Lookup("emb", ids);
    ASSERT_TRUE(rows.ok()) << rows.status();
    answered.push_back(rows->version.replica);
  }
  EXPECT_THAT(answered, ElementsAre(a_endpoint, b_endpoint, a_endpoint, b_endpoint));
  a.Stop();
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<ServingClient::Rows> rows = client->Lookup("emb", ids);
    ASSERT_TRUE(rows.ok()) << "lookup " << i << " after a replica died: " << rows.status();
    EXPECT_EQ(rows->version.replica, b_endpoint);
    EXPECT_THAT(rows->values, ElementsAre(10, 10.5f, 11));
  }
  b.Stop();
  absl::Status none = client->Lookup("emb", ids).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(none.message(), HasSubstr("no serving replica answered"));
  EXPECT_THAT(none.message(), HasSubstr(a_endpoint));
}

// With keys the replica is a CURVE server: a client with an admitted key
// reads; one whose key it does not admit gets no answer.
TEST(ServingTest, WithKeysOnlyAnAdmittedClientReads) {
  Job job;  // its directory holds the keys
  const std::string dir = job.dir() + "/keys";
  std::filesystem::create_directories(dir);
  for (const char* name : {"serve", "client", "stranger"}) {
    absl::StatusOr<CurveKeyPair> keys = GenerateCurveKeyPair();
    ASSERT_TRUE(keys.ok()) << keys.status();
    ASSERT_TRUE(WriteKeyPair(dir, name, *keys).ok());
  }
  SecurityOptions server_side;
  server_side.secret_key_file = dir + "/serve.key";
  server_side.authorized_keys = dir + "/client.pub";
  RunningReplica replica(100000, server_side);
  auto client_of = [&](const std::string& name) {
    ServingClientOptions options{.endpoints = {replica.endpoint()}, .timeout = absl::Milliseconds(500)};
    options.security.secret_key_file = dir + "/" + name + ".key";
    options.replica_public_key = dir + "/serve.pub";
    absl::StatusOr<std::unique_ptr<ServingClient>> client = ServingClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  };
  std::unique_ptr<ServingClient> admitted = client_of("client");
  ASSERT_NE(admitted, nullptr);
  const std::vector<uint64_t> ids = {10};
  absl::StatusOr<ServingClient::Rows> rows = admitted->Lookup("emb", ids);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(rows->values, ElementsAre(10, 10.5f, 11));
  std::unique_ptr<ServingClient> stranger = client_of("stranger");
  ASSERT_NE(stranger, nullptr);
  EXPECT_EQ(stranger->Lookup("emb", ids).status().code(), absl::StatusCode::kUnavailable);
}

// ---- ps_serve on a trained job's checkpoints ------------------------------------

std::string ServeFrom(Job& job, const std::string& from, std::vector<ChildProcess>* replicas) {
  auto p = ChildProcess::Start("ps_serve", {"--from=" + from, "--port=0"},
                               absl::StrCat(job.dir(), "/serve", replicas->size(), ".log"));
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return "";
  replicas->push_back(std::move(*p));
  absl::StatusOr<std::string> line = replicas->back().WaitForLine("ps_serve listening on ", absl::Seconds(60));
  EXPECT_TRUE(line.ok()) << line.status() << "\n" << replicas->back().StderrText();
  return line.ok() ? line->substr(0, line->find(',')) : "";
}

// A sync job of ps_exact_sum (2 servers, 2 workers) ends, writing its final
// checkpoints; ps_serve from them, and from their export, serves every
// tensor and row equal bit for bit to the export.
TEST(ServingJobTest, TheFinalModelServedFromCheckpointsEqualsTheExportBitForBit) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, 2).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(job.StartServer(i, {"--checkpoint_dir=" + job.checkpoints()}).ok());
  ASSERT_TRUE(job.StartWorkers("ps_exact_sum", 2,
                               {"--steps=6", "--consistency=sync", "--dense_elements=5000", "--slice_bytes=4096",
                                "--table_ids=50"})
                  .ok());
  for (ChildProcess& w : job.workers()) ::ps::testing::ExpectExitZero(w, "worker", absl::Seconds(120));
  for (ChildProcess& s : job.servers()) ::ps::testing::ExpectExitZero(s, "server", absl::Seconds(30));
  const std::string npz = job.dir() + "/model.npz";
  absl::StatusOr<ExportSummary> exported = ExportCheckpoints(job.checkpoints(), npz);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ASSERT_EQ(exported->model.tables.size(), 1u);
  ASSERT_FALSE(exported->model.tensors.empty());
  auto file = ModelFileReader::Open(npz);
  ASSERT_TRUE(file.ok()) << file.status();

  std::vector<ChildProcess> replicas;
  const std::string from_checkpoints = ServeFrom(job, job.checkpoints(), &replicas);
  const std::string from_file = ServeFrom(job, npz, &replicas);
  ASSERT_FALSE(from_checkpoints.empty());
  ASSERT_FALSE(from_file.empty());
  for (const std::string& endpoint : {from_checkpoints, from_file}) {
    std::unique_ptr<ServingClient> client = ClientOf({endpoint});
    ASSERT_NE(client, nullptr);
    absl::StatusOr<ServingClient::Model> model = client->Version();
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_EQ(model->tensors.size(), exported->model.tensors.size()) << endpoint;
    for (const TensorSpec& t : exported->model.tensors) {
      absl::StatusOr<ServingClient::Tensor> served = client->Dense(t.name);
      ASSERT_TRUE(served.ok()) << served.status();
      EXPECT_EQ(served->shape, t.shape);
      absl::StatusOr<std::string> want = (*file)->ReadAll(t.name);
      ASSERT_TRUE(want.ok());
      ASSERT_EQ(want->size(), served->values.size() * sizeof(float));
      EXPECT_EQ(std::memcmp(want->data(), served->values.data(), want->size()), 0) << t.name << " from " << endpoint;
    }
    for (const TableSpec& t : exported->model.tables) {
      absl::StatusOr<std::string> id_bytes = (*file)->ReadAll(t.name + ".ids");
      absl::StatusOr<std::string> row_bytes = (*file)->ReadAll(t.name + ".rows");
      ASSERT_TRUE(id_bytes.ok() && row_bytes.ok());
      std::vector<uint64_t> ids(id_bytes->size() / sizeof(uint64_t));
      std::memcpy(ids.data(), id_bytes->data(), id_bytes->size());
      ASSERT_EQ(ids.size(), 50u);
      absl::StatusOr<ServingClient::Rows> served = client->Lookup(t.name, ids);
      ASSERT_TRUE(served.ok()) << served.status();
      EXPECT_THAT(served->found, ::testing::Each(1));
      ASSERT_EQ(row_bytes->size(), served->values.size() * sizeof(float));
      EXPECT_EQ(std::memcmp(row_bytes->data(), served->values.data(), row_bytes->size()), 0) << t.name;
    }
    if (endpoint == from_checkpoints) {
      EXPECT_TRUE(model->version.exact);
      EXPECT_EQ(model->version.step, exported->steps[0]);
      EXPECT_GT(model->version.step, 0u);
    }
  }
}

TEST(ServingJobTest, BadFlagsAndAMissingSourceStopPsServeNamingThem) {
  Job job;
  auto run = [&](std::vector<std::string> args) {
    auto p = ChildProcess::Start("ps_serve", args, job.dir() + "/bad.log");
    EXPECT_TRUE(p.ok());
    auto code = p->WaitExit(absl::Seconds(30));
    EXPECT_TRUE(code.ok());
    return std::make_pair(code.value_or(-1), p->StderrText());
  };
  auto [no_from, no_from_log] = run({});
  EXPECT_EQ(no_from, 2);
  EXPECT_THAT(no_from_log, HasSubstr("--from or --scheduler: one is required"));
  auto [missing, missing_log] = run({"--from=" + job.dir() + "/nothing.npz"});
  EXPECT_EQ(missing, 1);
  EXPECT_THAT(missing_log, HasSubstr("nothing.npz: no such checkpoint directory or model file"));
  auto [empty, empty_log] = run({"--from=" + job.dir()});
  EXPECT_EQ(empty, 1);
  EXPECT_THAT(empty_log, HasSubstr("checkpoint"));
  {
    auto writer = ModelFileWriter::Create(job.dir() + "/one.npz", {{"w", DType::kFloat32, {1}}});
    ASSERT_TRUE(writer.ok());
    const float one = 1;
    ASSERT_TRUE((*writer)->Append(absl::string_view(reinterpret_cast<const char*>(&one), sizeof(one))).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto [open, open_log] = run({"--from=" + job.dir() + "/one.npz", "--host=0.0.0.0"});
  EXPECT_EQ(open, 2);
  EXPECT_THAT(open_log, HasSubstr("bind: tcp://0.0.0.0:0 is not a loopback address and this node has no keys"));
  auto [http, http_log] =
      run({"--from=" + job.dir() + "/one.npz", "--bind=tcp://127.0.0.1:0", "--host=0.0.0.0", "--http_port=0"});
  EXPECT_EQ(http, 2);
  EXPECT_THAT(http_log, HasSubstr("would serve plain HTTP beyond this machine"));
  auto [zero, zero_log] = run({"--from=x.npz", "--max_lookup_ids=0"});
  EXPECT_EQ(zero, 2);
  EXPECT_THAT(zero_log, HasSubstr("max_lookup_ids: must be >= 1"));
}

}  // namespace
}  // namespace ps
