// CurveZMQ on every socket: a scheduler and a server on threads of this
// process with keys from a temporary directory, and clients with no key, the
// wrong server key, or a valid key nobody authorised, each of which must fail
// by its deadline without changing a parameter; the non-loopback refusal and
// --insecure; ps_keygen and the refusal of a secret key others can read; a
// secured job of real processes ending with the exact sums; a frame over the
// limit dropped while the server keeps serving. Everything on 127.0.0.1 with
// ephemeral ports; processes and threads are always stopped.
#include <sys/stat.h>

#include <future>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/log_capture_testing.h"
#include "common/net/security.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/job.h"
#include "tests/raw_peer.h"
#include "worker/client/kv_client.h"

namespace ps {
namespace {

using testing::ChildProcess;
using ::testing::HasSubstr;
using testing::InProcessCluster;
using testing::InProcessClusterOptions;
using testing::Job;
using testing::RawPeer;
using testing::RawReply;
using testing::ScopedTempDir;

constexpr int kN = 1000;
constexpr absl::Duration kRefusedWithin = absl::Seconds(2);

using ::ps::testing::LogCapture;

// Key pairs for a job in DIR/keys (scheduler, server-0, server-1, worker-0,
// worker-1: the authorised directory) and one outsider in DIR/outside.
class JobKeys {
 public:
  explicit JobKeys(const std::string& dir) : keys_(dir + "/keys"), outside_(dir + "/outside") {
    mkdir(keys_.c_str(), 0700);
    mkdir(outside_.c_str(), 0700);
    for (const char* name : {"scheduler", "server-0", "server-1", "worker-0", "worker-1"}) {
      EXPECT_TRUE(WriteKeyPair(keys_, name, GenerateCurveKeyPair().value()).ok());
    }
    EXPECT_TRUE(WriteKeyPair(outside_, "stranger", GenerateCurveKeyPair().value()).ok());
  }

  // What a node named `name` (in keys/, or "stranger") runs with.
  SecurityOptions For(const std::string& name) const {
    SecurityOptions o;
    o.secret_key_file = KeyFile(name);
    o.authorized_keys = keys_;
    o.scheduler_public_key = keys_ + "/scheduler.pub";
    return o;
  }
  std::string KeyFile(const std::string& name) const {
    return (name == "stranger" ? outside_ : keys_) + "/" + name + ".key";
  }
  std::string PubFile(const std::string& name) const {
    return (name == "stranger" ? outside_ : keys_) + "/" + name + ".pub";
  }
  std::string PublicKey(const std::string& name) const { return ReadPublicKey(PubFile(name)).value(); }
  const std::string& dir() const { return keys_; }

 private:
  std::string keys_, outside_;
};

// A scheduler and servers on threads (tests/cluster_fixture.h), each with its
// own SecurityOptions; a test failure when they do not start.
std::unique_ptr<InProcessCluster> StartCluster(int num_servers, int num_workers, const SecurityOptions& scheduler,
                                               const std::vector<SecurityOptions>& servers) {
  InProcessClusterOptions o;
  o.num_servers = num_servers;
  o.num_workers = num_workers;
  o.server_threads = 1;
  o.scheduler_security = scheduler;
  o.server_security = servers;
  auto cluster = InProcessCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

absl::StatusOr<std::unique_ptr<KVClient>> ConnectWorker(const std::string& scheduler, const SecurityOptions& s,
                                                        absl::Duration register_timeout = absl::Seconds(30)) {
  KVClientOptions o;
  o.scheduler = scheduler;
  o.security = s;
  o.register_timeout = register_timeout;
  o.request_timeout = absl::Seconds(20);
  return KVClient::Connect(o);
}

ModelSpec AsyncModel() {
  ModelSpec model;
  model.tensors = {{"w", {kN}, Initializer::Constant(1.0f)}};
  model.optimizer.learning_rate = 1.0f;
  model.consistency = Consistency::Parse("async").value();
  return model;
}

std::vector<float> PullW(KVClient& client) {
  std::vector<float> out(kN, -1.0f);
  TensorBuffer buf[] = {{0, absl::MakeSpan(out)}};
  EXPECT_TRUE(client.Wait(client.Pull(buf, 0)).ok());
  return out;
}

// A DEALER straight to a server's port, as an attacker would open one
// (tests/raw_peer.h); a test failure when it cannot be made.
std::unique_ptr<RawPeer> Peer(const std::string& endpoint, const NodeSecurity& security,
                              const std::string& server_key) {
  auto peer = RawPeer::Connect(endpoint, security, server_key);
  EXPECT_TRUE(peer.ok()) << peer.status();
  return peer.ok() ? *std::move(peer) : nullptr;
}

// Sends through `peer` a push of `value` to every element claiming to be node
// `sender`; returns the reply, or kDeadlineExceeded when none comes within
// `wait` (kUnavailable when the send itself fails).
absl::StatusOr<Envelope> Push(RawPeer& peer, uint32_t sender, float value, absl::Duration wait,
                              size_t extra_bytes = 0) {
  std::vector<zmq::message_t> payloads;
  payloads.push_back(RawPeer::FloatFrame(kN, value));
  if (extra_bytes > 0) payloads.emplace_back(extra_bytes);
  PushRequestMsg push{0, {SliceData{0, kN, 0}}, std::nullopt};
  if (extra_bytes > 0) push.slices.push_back(SliceData{0, extra_bytes / sizeof(float), 0});
  absl::Status sent = peer.Send(Envelope{kProtocolVersion, 99, sender, push}, std::move(payloads));
  if (!sent.ok()) return sent;
  absl::StatusOr<RawReply> reply = peer.Receive(wait);
  if (!reply.ok()) return reply.status();
  return reply->env;
}

class SecureClusterTest : public ::testing::Test {
 protected:
  SecureClusterTest() : keys_(temp_.path()) {}

  std::unique_ptr<InProcessCluster> StartJob(int servers, int workers) {
    std::vector<SecurityOptions> s;
    for (int i = 0; i < servers; ++i) s.push_back(keys_.For(absl::StrCat("server-", i)));
    return StartCluster(servers, workers, keys_.For("scheduler"), s);
  }

  ScopedTempDir temp_;
  JobKeys keys_;
};

TEST_F(SecureClusterTest, AnAuthorisedWorkerPushesAndPullsOverCurve) {
  auto cluster = StartJob(1, 1);
  auto client = ConnectWorker(cluster->scheduler_endpoint(), keys_.For("worker-0"));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->RegisterModel(AsyncModel()).ok());
  std::vector<float> grad(kN, 0.25f);
  ConstTensorBuffer g[] = {{0, grad}};
  ASSERT_TRUE((*client)->Wait((*client)->Push(g, 0)).ok());
  EXPECT_EQ(PullW(**client), std::vector<float>(kN, 0.75f));
  auto stats = (*client)->GetServerStats(0);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->pushes_applied, 1u);
  EXPECT_TRUE((*client)->Finish().ok());
}

TEST_F(SecureClusterTest, ClientsWithoutTheRightKeysFailToRegisterByTheirDeadline) {
  LogCapture log;
  auto cluster = StartJob(1, 1);
  const std::string endpoint = cluster->scheduler_endpoint();
  SecurityOptions wrong_server_key = keys_.For("worker-0");
  wrong_server_key.scheduler_public_key = keys_.PubFile("stranger");
  const absl::Time start = absl::Now();
  // All three at once: each waits out its own deadline.
  auto none = std::async(std::launch::async, [&] { return ConnectWorker(endpoint, {}, kRefusedWithin).status(); });
  auto wrong = std::async(std::launch::async,
                          [&] { return ConnectWorker(endpoint, wrong_server_key, kRefusedWithin).status(); });
  auto stranger = std::async(std::launch::async,
                             [&] { return ConnectWorker(endpoint, keys_.For("stranger"), kRefusedWithin).status(); });
  for (auto* f : {&none, &wrong, &stranger}) {
    const absl::Status s = f->get();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  }
  EXPECT_LT(absl::Now() - start, kRefusedWithin + absl::Seconds(5));
  EXPECT_THAT(log.text(), HasSubstr(absl::StrCat("zap[scheduler]: refused key ",
                                                 KeyFingerprint(keys_.PublicKey("stranger")), " from 127.0.0.1")));
  // None of them took the job's one worker place: the real worker still gets it.
  auto client = ConnectWorker(endpoint, keys_.For("worker-0"));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->RegisterModel(AsyncModel()).ok());
  EXPECT_EQ(PullW(**client), std::vector<float>(kN, 1.0f));
  EXPECT_TRUE((*client)->Finish().ok());
}

TEST_F(SecureClusterTest, TheHintOnAFailedRegistrationNamesTheKeys) {
  auto cluster = StartJob(1, 1);
  auto plain = ConnectWorker(cluster->scheduler_endpoint(), {}, absl::Seconds(1));
  EXPECT_THAT(std::string(plain.status().message()), HasSubstr("pass --secret_key_file"));
  auto stranger = ConnectWorker(cluster->scheduler_endpoint(), keys_.For("stranger"), absl::Seconds(1));
  EXPECT_THAT(std::string(stranger.status().message()), HasSubstr("--authorized_keys"));
}

TEST_F(SecureClusterTest, PushesWithoutTheRightKeysNeverReachTheServer) {
  LogCapture log;
  auto cluster = StartJob(1, 1);
  auto client = ConnectWorker(cluster->scheduler_endpoint(), keys_.For("worker-0"));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->RegisterModel(AsyncModel()).ok());
  const uint32_t me = (*client)->node_id();
  const std::string server = cluster->server_endpoint(0);
  const std::string server_key = keys_.PublicKey("server-0");
  const NodeSecurity stranger = NodeSecurity::Load(keys_.For("stranger"), Role::kWorker).value();
  const NodeSecurity worker = NodeSecurity::Load(keys_.For("worker-0"), Role::kWorker).value();
  auto no_keys = Peer(server, NodeSecurity(), "");
  auto not_authorised = Peer(server, stranger, server_key);
  auto wrong_server_key = Peer(server, worker, keys_.PublicKey("stranger"));
  for (RawPeer* peer : {no_keys.get(), not_authorised.get(), wrong_server_key.get()}) {
    // No reply by the deadline; or, once ZeroMQ has dropped a connection the
    // server refused, the send itself fails at once.
    const absl::StatusCode code = Push(*peer, me, 100.0f, kRefusedWithin).status().code();
    EXPECT_TRUE(code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable) << code;
  }
  EXPECT_EQ(PullW(**client), std::vector<float>(kN, 1.0f));
  EXPECT_THAT(log.text(), HasSubstr(absl::StrCat("zap[server]: refused key ", KeyFingerprint(stranger.public_key()))));
  EXPECT_EQ((*client)->GetServerStats(0)->pushes_applied, 0u);
  EXPECT_TRUE((*client)->Finish().ok());
}

TEST_F(SecureClusterTest, AnAuthorisedNodeCannotPushInAnothersName) {
  auto cluster = StartJob(1, 2);
  const std::string endpoint = cluster->scheduler_endpoint();
  auto w1_future = std::async(std::launch::async, [&] { return ConnectWorker(endpoint, keys_.For("worker-1")); });
  auto w0 = ConnectWorker(endpoint, keys_.For("worker-0"));
  auto w1 = w1_future.get();
  ASSERT_TRUE(w0.ok()) << w0.status();
  ASSERT_TRUE(w1.ok()) << w1.status();
  auto define1 = std::async(std::launch::async, [&] { return (*w1)->RegisterModel(AsyncModel()); });
  ASSERT_TRUE((*w0)->RegisterModel(AsyncModel()).ok());
  ASSERT_TRUE(define1.get().ok());
  // Worker 1's own key, claiming worker 0's node id.
  const NodeSecurity w1_keys = NodeSecurity::Load(keys_.For("worker-1"), Role::kWorker).value();
  auto impostor = Peer(cluster->server_endpoint(0), w1_keys, keys_.PublicKey("server-0"));
  auto reply = Push(*impostor, (*w0)->node_id(), 100.0f, absl::Seconds(10));
  ASSERT_TRUE(reply.ok()) << reply.status();
  auto* error = std::get_if<ErrorMsg>(&reply->body);
  ASSERT_NE(error, nullptr) << BodyName(reply->body);
  EXPECT_EQ(error->code, absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(error->message, HasSubstr(absl::StrCat("node ", (*w0)->node_id())));
  // Under its own id the same connection is fine.
  auto own = Push(*impostor, (*w1)->node_id(), 0.5f, absl::Seconds(10));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_TRUE(std::holds_alternative<AckMsg>(own->body)) << BodyName(own->body);
  EXPECT_EQ(PullW(**w0), std::vector<float>(kN, 0.5f));
  auto finish1 = std::async(std::launch::async, [&] { return (*w1)->Finish(); });
  EXPECT_TRUE((*w0)->Finish().ok());
  EXPECT_TRUE(finish1.get().ok());
}

TEST(FrameLimitTest, AFrameOverTheLimitIsDroppedAndTheServerKeepsServing) {
  SecurityOptions small;  // plaintext on loopback, the smallest frame limit
  small.max_frame_bytes = kMinMaxFrameBytes;
  auto cluster = StartCluster(1, 1, small, {small});
  ASSERT_TRUE(cluster != nullptr);
  KVClientOptions o;
  o.scheduler = cluster->scheduler_endpoint();
  o.security = small;
  auto client = KVClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->RegisterModel(AsyncModel()).ok());
  auto big = Peer(cluster->server_endpoint(0), NodeSecurity(), "");
  EXPECT_EQ(Push(*big, (*client)->node_id(), 100.0f, absl::Seconds(1), kMinMaxFrameBytes + 4096).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // The server still answers, and nothing of the dropped push was applied.
  EXPECT_EQ(PullW(**client), std::vector<float>(kN, 1.0f));
  std::vector<float> grad(kN, 1.0f);
  ConstTensorBuffer g[] = {{0, grad}};
  ASSERT_TRUE((*client)->Wait((*client)->Push(g, 0)).ok());
  EXPECT_EQ(PullW(**client), std::vector<float>(kN, 0.0f));
  EXPECT_TRUE((*client)->Finish().ok());
}

TEST(FrameLimitTest, AModelWithASliceOverTheLimitIsRefusedUpFront) {
  SecurityOptions small;
  small.max_frame_bytes = kMinMaxFrameBytes;
  auto cluster = StartCluster(1, 1, small, {small});
  ASSERT_TRUE(cluster != nullptr);
  KVClientOptions o;
  o.scheduler = cluster->scheduler_endpoint();
  o.security = small;
  auto client = KVClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  ModelSpec model = AsyncModel();
  model.tensors = {{"huge", {int64_t{3} << 20}, Initializer::Zeros()}};  // 12 MiB, whole on one server
  model.placement.rule = PlacementRule::kLayer;
  absl::Status s = (*client)->RegisterModel(model);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max_frame_mb"));
}

TEST(PlaintextTest, NonLoopbackAddressesWithoutKeysAreRefusedBeforeAnySocket) {
  SchedulerOptions so;
  so.bind = "tcp://0.0.0.0:0";
  auto sched = Scheduler::Create(so);
  EXPECT_EQ(sched.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sched.status().message()), HasSubstr("ps_keygen"));
  ServerOptions server;
  server.scheduler = "10.255.255.1:9000";
  EXPECT_THAT(std::string(Server::Create(server).status().message()),
              HasSubstr("scheduler: 10.255.255.1:9000 is not a loopback address"));
  const absl::Time start = absl::Now();
  KVClientOptions client;
  client.scheduler = "10.255.255.1:9000";
  EXPECT_EQ(KVClient::Connect(client).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));  // refused, not timed out
  // --insecure lets them through (only validated here: nothing is reached).
  so.security.insecure = true;
  EXPECT_TRUE(so.Validate().ok());
  server.security.insecure = true;
  EXPECT_TRUE(server.Validate().ok());
  client.security.insecure = true;
  EXPECT_TRUE(client.Validate().ok());
}

TEST(PlaintextTest, InsecureBindsEveryInterfaceAndAdvertisesTheHost) {
  LogCapture log;
  SchedulerOptions so;
  so.bind = "tcp://0.0.0.0:0";
  so.advertise_host = "127.0.0.1";
  so.security.insecure = true;
  auto sched = Scheduler::Create(so);
  ASSERT_TRUE(sched.ok()) << sched.status();
  EXPECT_THAT((*sched)->endpoint(), ::testing::StartsWith("tcp://127.0.0.1:"));
  EXPECT_THAT(log.text(), HasSubstr("--insecure: bind tcp://0.0.0.0:0 is not a loopback address"));
}

// ---- real processes ---------------------------------------------------------

absl::StatusOr<int> RunToExit(const std::string& binary, const std::vector<std::string>& args, const std::string& log,
                              std::string* stderr_text = nullptr) {
  auto p = ChildProcess::Start(binary, args, log);
  if (!p.ok()) return p.status();
  auto code = p->WaitExit(absl::Seconds(30));
  if (stderr_text != nullptr) *stderr_text = p->StderrText() + p->stdout_text();
  return code;
}

TEST(KeygenTest, WritesAPrivateKeyOnceAndTheRolesRefuseOneOthersCanRead) {
  ScopedTempDir temp;
  const std::string dir = temp.path() + "/keys";
  ASSERT_EQ(RunToExit("ps_keygen", {"--out_dir=" + dir, "--name=scheduler"}, temp.path() + "/kg.log").value(), 0);
  struct stat st;
  ASSERT_EQ(stat((dir + "/scheduler.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((dir + "/scheduler.pub").c_str(), &st), 0);
  std::string out;
  EXPECT_NE(RunToExit("ps_keygen", {"--out_dir=" + dir, "--name=scheduler"}, temp.path() + "/kg2.log", &out).value(),
            0);
  EXPECT_THAT(out, HasSubstr("already exists"));
  ASSERT_EQ(chmod((dir + "/scheduler.key").c_str(), 0644), 0);
  EXPECT_EQ(
      RunToExit("ps_scheduler",
                {"--secret_key_file=" + dir + "/scheduler.key", "--authorized_keys=" + dir, "--register_timeout=1s"},
                temp.path() + "/sched.log", &out)
          .value(),
      1);
  EXPECT_THAT(out, HasSubstr("chmod 600 " + dir + "/scheduler.key"));
}

TEST(ProcessPlaintextTest, BinariesRefuseNonLoopbackWithoutKeysUnlessInsecure) {
  ScopedTempDir temp;
  std::string out;
  EXPECT_EQ(RunToExit("ps_scheduler", {"--host=0.0.0.0"}, temp.path() + "/a.log", &out).value(), 2);
  EXPECT_THAT(out, HasSubstr("bind: tcp://0.0.0.0:0 is not a loopback address"));
  EXPECT_THAT(out, HasSubstr("ps_keygen"));
  EXPECT_EQ(RunToExit("ps_exact_sum", {"--scheduler=10.255.255.1:9000"}, temp.path() + "/b.log", &out).value(), 2);
  EXPECT_THAT(out, HasSubstr("--insecure"));
  EXPECT_EQ(RunToExit("ps_server", {"--scheduler=127.0.0.1:9", "--host=0.0.0.0"}, temp.path() + "/c.log", &out).value(),
            2);
  // With --insecure the scheduler starts (and, with no one coming, gives up).
  auto sched = ChildProcess::Start("ps_scheduler", {"--host=0.0.0.0", "--insecure", "--register_timeout=1s"},
                                   temp.path() + "/d.log");
  ASSERT_TRUE(sched.ok());
  EXPECT_TRUE(sched->WaitForLine("ps_scheduler listening on ", absl::Seconds(20)).ok());
  EXPECT_EQ(sched->WaitExit(absl::Seconds(20)).value(), 1);
  EXPECT_THAT(sched->StderrText(), HasSubstr("--insecure: bind tcp://0.0.0.0:0"));
}

// Parses "exact_sum OK ... dense_sum=X".
double DenseSum(const std::string& out) {
  std::smatch m;
  static const std::regex re(R"(exact_sum OK .* dense_sum=([0-9.]+))");
  return std::regex_search(out, m, re) ? std::stod(m[1]) : -1;
}

TEST(SecureProcessTest, ASecuredJobOfRealProcessesEndsWithTheExactSum) {
  Job job;
  const std::string dir = job.dir(), keys = dir + "/keys";
  for (const char* name : {"scheduler", "server-0", "server-1", "worker-0", "worker-1"}) {
    ASSERT_EQ(RunToExit("ps_keygen", {"--out_dir=" + keys, absl::StrCat("--name=", name)}, dir + "/keygen.log").value(),
              0);
  }
  auto flags = [&](const std::string& name) {
    return std::vector<std::string>{"--secret_key_file=" + keys + "/" + name + ".key", "--authorized_keys=" + keys,
                                    "--scheduler_public_key=" + keys + "/scheduler.pub"};
  };
  std::vector<std::string> sched_args = flags("scheduler");
  sched_args.pop_back();  // the scheduler knows its own key
  const absl::Status started = job.StartScheduler(2, 2, sched_args);
  ASSERT_TRUE(started.ok()) << started;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(job.StartServer(i, flags(absl::StrCat("server-", i))).ok());
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> args = flags(absl::StrCat("worker-", i));
    args.insert(args.end(), {"--steps=10", "--dense_elements=100000", "--slice_bytes=65536", "--consistency=sync"});
    ASSERT_TRUE(job.StartWorker("ps_exact_sum", args).ok());
  }
  job.ExpectAllExitZero();
  for (auto& w : job.workers()) EXPECT_EQ(DenseSum(w.stdout_text()), testing::ExpectedDenseSum(2, 10, 100000));
  EXPECT_THAT(job.scheduler().StderrText(), HasSubstr("CurveZMQ on"));
  EXPECT_THAT(job.scheduler().StderrText(), HasSubstr("zap[scheduler]: admitted key"));
}

}  // namespace
}  // namespace ps
