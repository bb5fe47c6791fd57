#include "common/net/security.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// A fresh directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ps_security_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

CurveKeyPair NewKeys() {
  auto keys = GenerateCurveKeyPair();
  EXPECT_TRUE(keys.ok()) << keys.status();
  return *keys;
}

TEST(IsLoopbackEndpointTest, LoopbackHostsIpcAndInprocAreLocal) {
  for (const char* e :
       {"tcp://127.0.0.1:9000", "127.0.0.1:0", "tcp://127.1.2.3:5", "tcp://localhost:1", "tcp://[::1]:7", "tcp://lo:9",
        "ipc:///tmp/x.sock", "inproc://a", "tcp://127.0.0.1:1;127.0.0.1:2", "tcp://[::ffff:127.0.0.1]:3"}) {
    EXPECT_TRUE(IsLoopbackEndpoint(e)) << e;
  }
}

TEST(IsLoopbackEndpointTest, WildcardsAndOtherHostsAreNot) {
  for (const char* e : {"tcp://0.0.0.0:9000", "tcp://*:9000", "tcp://[::]:1", "10.255.255.1:9000", "tcp://10.0.0.1:1",
                        "tcp://host-a:1", "tcp://eth0:1", "tcp://128.0.0.1:1", "tcp://127.0.0.1:1;10.0.0.1:2",
                        "tcp://[2001:db8::1]:1", "udp://127.0.0.1:1", ""}) {
    EXPECT_FALSE(IsLoopbackEndpoint(e)) << e;
  }
}

TEST(SecurityOptionsTest, PlaintextOffLoopbackIsRefusedSayingHowToFixIt) {
  SecurityOptions o;
  absl::Status s = o.CheckEndpoint("tcp://0.0.0.0:9000", "bind");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("bind: tcp://0.0.0.0:9000 is not a loopback address"));
  EXPECT_THAT(Message(s), HasSubstr("ps_keygen"));
  EXPECT_THAT(Message(s), HasSubstr("--secret_key_file"));
  EXPECT_THAT(Message(s), HasSubstr("--insecure"));
  EXPECT_TRUE(o.CheckEndpoint("tcp://127.0.0.1:9000", "bind").ok());
  o.insecure = true;
  EXPECT_TRUE(o.CheckEndpoint("tcp://0.0.0.0:9000", "bind").ok());
  SecurityOptions keyed;
  keyed.secret_key_file = "/some/node.key";
  EXPECT_TRUE(keyed.CheckEndpoint("10.255.255.1:9000", "scheduler").ok());
}

TEST(SecurityOptionsTest, ValidateNamesTheFlagEachRoleLacks) {
  SecurityOptions o;
  EXPECT_TRUE(o.Validate(Role::kScheduler).ok());
  o.authorized_keys = "/keys";
  EXPECT_THAT(Message(o.Validate(Role::kServer)), HasSubstr("authorized_keys: given without --secret_key_file"));
  o = SecurityOptions{};
  o.secret_key_file = "/k.key";
  EXPECT_THAT(Message(o.Validate(Role::kScheduler)), HasSubstr("authorized_keys"));
  EXPECT_THAT(Message(o.Validate(Role::kWorker)), HasSubstr("scheduler_public_key"));
  o.authorized_keys = "/keys";
  EXPECT_TRUE(o.Validate(Role::kScheduler).ok());
  EXPECT_THAT(Message(o.Validate(Role::kServer)), HasSubstr("scheduler_public_key"));
  o.scheduler_public_key = "/s.pub";
  EXPECT_TRUE(o.Validate(Role::kServer).ok());
  EXPECT_TRUE(o.Validate(Role::kWorker).ok());
  o.max_frame_bytes = 1 << 20;
  EXPECT_EQ(o.Validate(Role::kWorker).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(o.Validate(Role::kWorker)), HasSubstr("max_frame_mb"));
}

TEST(KeyFilesTest, SecretKeyIsCreatedMode0600AndReadsBack) {
  TempDir dir;
  const CurveKeyPair keys = NewKeys();
  ASSERT_TRUE(WriteKeyPair(dir.path(), "node", keys).ok());
  struct stat st;
  ASSERT_EQ(stat(dir.File("node.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(std::filesystem::exists(dir.File("node.pub")));
  auto read = ReadSecretKeyFile(dir.File("node.key"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->public_key, keys.public_key);
  EXPECT_EQ(read->secret_key, keys.secret_key);
  auto pub = ReadPublicKey(dir.File("node.pub"));
  ASSERT_TRUE(pub.ok()) << pub.status();
  EXPECT_EQ(*pub, keys.public_key);
}

TEST(KeyFilesTest, ExistingKeysAreNeverOverwritten) {
  TempDir dir;
  const CurveKeyPair first = NewKeys();
  ASSERT_TRUE(WriteKeyPair(dir.path(), "node", first).ok());
  absl::Status again = WriteKeyPair(dir.path(), "node", NewKeys());
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ReadSecretKeyFile(dir.File("node.key"))->secret_key, first.secret_key);
  // A stray .pub alone also stops it, and leaves no .key behind.
  WriteFile(dir.File("other.pub"), "x\n");
  EXPECT_EQ(WriteKeyPair(dir.path(), "other", NewKeys()).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(std::filesystem::exists(dir.File("other.key")));
  EXPECT_EQ(WriteKeyPair(dir.path(), "a/b", NewKeys()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KeyFilesTest, ASecretKeyOthersCanReadIsRefusedWithTheFix) {
  TempDir dir;
  ASSERT_TRUE(WriteKeyPair(dir.path(), "node", NewKeys()).ok());
  const std::string path = dir.File("node.key");
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto read = ReadSecretKeyFile(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(read.status()), HasSubstr("mode 0644"));
  EXPECT_THAT(Message(read.status()), HasSubstr("chmod 600 " + path));
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  EXPECT_EQ(ReadSecretKeyFile(path).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(chmod(path.c_str(), 0400), 0);
  EXPECT_TRUE(ReadSecretKeyFile(path).ok());
}

TEST(KeyFilesTest, MalformedOrMismatchedSecretKeysAreRefused) {
  TempDir dir;
  const CurveKeyPair a = NewKeys(), b = NewKeys();
  const std::string path = dir.File("bad.key");
  WriteFile(path, "public-key = " + b.public_key + "\nsecret-key = " + a.secret_key + "\n");
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  EXPECT_THAT(Message(ReadSecretKeyFile(path).status()), HasSubstr("not the public key of its secret key"));
  WriteFile(path, "hello\n");
  EXPECT_EQ(ReadSecretKeyFile(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSecretKeyFile(dir.File("missing.key")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadSecretKeyFile(dir.path()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KeyFilesTest, PublicKeyFromAStringOrAFile) {
  const CurveKeyPair keys = NewKeys();
  EXPECT_EQ(ReadPublicKey(keys.public_key).value(), keys.public_key);
  EXPECT_EQ(ReadPublicKey("not-a-key").status().code(), absl::StatusCode::kNotFound);
  TempDir dir;
  WriteFile(dir.File("two.pub"), keys.public_key + " a\n" + NewKeys().public_key + " b\n");
  EXPECT_THAT(Message(ReadPublicKey(dir.File("two.pub")).status()), HasSubstr("2 public keys"));
}

TEST(AuthorizedKeysTest, FileWithCommentsAndBlankLines) {
  TempDir dir;
  const CurveKeyPair a = NewKeys(), b = NewKeys();
  WriteFile(dir.File("authorized"), "# the job's nodes\n\n" + a.public_key + " worker-0\n  " + b.public_key + "\n");
  auto keys = ReadAuthorizedKeys(dir.File("authorized"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->keys.size(), 2u);
  EXPECT_TRUE(keys->keys.contains(a.public_key));
  EXPECT_TRUE(keys->keys.contains(b.public_key));
}

TEST(AuthorizedKeysTest, ADirectoryOfPubFilesIgnoresSecretKeys) {
  TempDir dir;
  const CurveKeyPair a = NewKeys(), b = NewKeys();
  ASSERT_TRUE(WriteKeyPair(dir.path(), "a", a).ok());
  ASSERT_TRUE(WriteKeyPair(dir.path(), "b", b).ok());
  WriteFile(dir.File("notes.txt"), "not keys\n");
  auto keys = ReadAuthorizedKeys(dir.path());
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->keys.size(), 2u);
  EXPECT_TRUE(keys->keys.contains(b.public_key));
}

TEST(AuthorizedKeysTest, BadLinesNameTheFileAndLineAndNoKeysIsAnError) {
  TempDir dir;
  WriteFile(dir.File("authorized"), NewKeys().public_key + "\nshort-key comment\n");
  auto bad = ReadAuthorizedKeys(dir.File("authorized"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr(dir.File("authorized") + ":2"));
  WriteFile(dir.File("empty"), "# nobody\n");
  EXPECT_THAT(Message(ReadAuthorizedKeys(dir.File("empty")).status()), HasSubstr("no public keys"));
  EXPECT_EQ(ReadAuthorizedKeys(dir.File("missing")).status().code(), absl::StatusCode::kNotFound);
}

TEST(NodeSecurityTest, LoadReadsWhatTheRoleNeeds) {
  TempDir dir;
  const CurveKeyPair sched = NewKeys(), server = NewKeys();
  ASSERT_TRUE(WriteKeyPair(dir.path(), "scheduler", sched).ok());
  ASSERT_TRUE(WriteKeyPair(dir.path(), "server", server).ok());
  SecurityOptions o;
  o.secret_key_file = dir.File("server.key");
  o.authorized_keys = dir.path();
  o.scheduler_public_key = dir.File("scheduler.pub");
  auto s = NodeSecurity::Load(o, Role::kServer);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->curve());
  EXPECT_EQ(s->public_key(), server.public_key);
  EXPECT_EQ(s->scheduler_public_key(), sched.public_key);
  EXPECT_EQ(s->authorized_keys().keys.size(), 2u);
  // A scheduler told another key than its own.
  o.secret_key_file = dir.File("scheduler.key");
  o.scheduler_public_key = dir.File("server.pub");
  EXPECT_THAT(Message(NodeSecurity::Load(o, Role::kScheduler).status()),
              HasSubstr("not this scheduler's own public key"));
  o.scheduler_public_key = "";
  EXPECT_EQ(NodeSecurity::Load(o, Role::kScheduler)->scheduler_public_key(), sched.public_key);
  // Errors name the flag.
  o.secret_key_file = dir.File("nope.key");
  EXPECT_THAT(Message(NodeSecurity::Load(o, Role::kScheduler).status()), HasSubstr("secret_key_file: "));
  EXPECT_FALSE(NodeSecurity::Load(SecurityOptions{}, Role::kWorker)->curve());
}

TEST(NodeSecurityTest, AClientWithKeysNeedsItsPeersKey) {
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  const NodeSecurity s = NodeSecurity::WithKeys(NewKeys(), "", {});
  EXPECT_EQ(s.Apply(dealer, CurveRole::kClient, kDefaultMaxFrameBytes).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.Apply(dealer, CurveRole::kClient, kDefaultMaxFrameBytes, NewKeys().public_key).ok());
  // The encrypted frame is a few bytes longer than what it carries.
  EXPECT_GT(dealer.get(zmq::sockopt::maxmsgsize), static_cast<int64_t>(kDefaultMaxFrameBytes));
  EXPECT_LE(dealer.get(zmq::sockopt::maxmsgsize), static_cast<int64_t>(kDefaultMaxFrameBytes) + 64);
  zmq::socket_t plain(context, zmq::socket_type::dealer);
  ASSERT_TRUE(NodeSecurity().Apply(plain, CurveRole::kClient, 12345).ok());
  EXPECT_EQ(plain.get(zmq::sockopt::maxmsgsize), 12345);
}

TEST(KeyChecksTest, RegistrationTakesTheAuthenticatedKey) {
  std::string claimed;
  EXPECT_TRUE(AdoptAuthenticatedKey(claimed, "").ok());
  EXPECT_EQ(claimed, "");
  EXPECT_TRUE(AdoptAuthenticatedKey(claimed, "KEY-A").ok());
  EXPECT_EQ(claimed, "KEY-A");
  std::string other = "KEY-B";
  EXPECT_EQ(AdoptAuthenticatedKey(other, "KEY-A").code(), absl::StatusCode::kPermissionDenied);
}

TEST(KeyChecksTest, SenderMustUseTheKeyItRegisteredWith) {
  EXPECT_TRUE(CheckSenderKey(3, "", "").ok());
  EXPECT_TRUE(CheckSenderKey(3, "KEY-A", "KEY-A").ok());
  absl::Status s = CheckSenderKey(3, "KEY-A", "KEY-B");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Message(s), HasSubstr("node 3"));
}

TEST(KeyChecksTest, SlicesOverTheFrameLimitAreRefused) {
  std::vector<Slice> slices = {Slice{0, 0, 0, 1000, 0}, Slice{1, 1, 0, 3 << 20, 1}};
  EXPECT_TRUE(CheckSlicesFit(slices, 12 << 20).ok());
  absl::Status s = CheckSlicesFit(slices, 8 << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(s), HasSubstr("--max_frame_mb"));
}

TEST(KeyHintTest, DeadlinesGetAHintOnKeys) {
  EXPECT_THAT(Message(AddKeyHint(absl::DeadlineExceededError("late"), NodeSecurity())),
              HasSubstr("--scheduler_public_key"));
  const NodeSecurity keyed = NodeSecurity::WithKeys(NewKeys(), "x", {});
  EXPECT_THAT(Message(AddKeyHint(absl::DeadlineExceededError("late"), keyed)), HasSubstr("--authorized_keys"));
  EXPECT_EQ(Message(AddKeyHint(absl::InternalError("other"), keyed)), "other");
}

}  // namespace
}  // namespace ps
