#include "common/net/security.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"
#include "glog/logging.h"

// A draft option in libzmq 4.3 (Debian builds the drafts): with it, a CURVE
// server socket whose context has no ZAP handler refuses every client
// instead of admitting all of them.
#ifndef ZMQ_ZAP_ENFORCE_DOMAIN
#define ZMQ_ZAP_ENFORCE_DOMAIN 93
#endif

namespace ps {
namespace {

// What CURVE adds to a frame on the wire (command name, nonce, MAC, flags:
// 33 bytes in libzmq 4.3), rounded up.
constexpr uint64_t kCurveFrameOverhead = 64;

// Key files are a few lines; anything longer is not one.
constexpr size_t kMaxKeyFileBytes = 64 << 10;
constexpr size_t kMaxAuthorizedFileBytes = 16 << 20;

std::string Errno(int err) { return std::strerror(err); }

// The status with `prefix: ` in front of its message, code kept.
absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, ": ", s.message()));
}

bool IsZ85Key(absl::string_view text) {
  if (text.size() != kZ85KeyLength) return false;
  const std::string z(text);
  uint8_t raw[32];
  return zmq_z85_decode(raw, z.c_str()) != nullptr;
}

absl::string_view HostOf(absl::string_view host_port) {
  if (absl::StartsWith(host_port, "[")) {
    const size_t close = host_port.find(']');
    return close == absl::string_view::npos ? host_port : host_port.substr(1, close - 1);
  }
  // One colon: HOST:PORT. None: a bare host. More: an unbracketed IPv6 address.
  if (std::count(host_port.begin(), host_port.end(), ':') == 1) return host_port.substr(0, host_port.find(':'));
  return host_port;
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "lo") return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

// Reads at most `limit` bytes of a file already open as `fd`.
absl::StatusOr<std::string> ReadAll(int fd, const std::string& path, size_t limit) {
  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", Errno(errno)));
    if (n == 0) return text;
    if (text.size() + n > limit) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is over ", limit, " bytes; not a key file"));
    }
    text.append(buf, n);
  }
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t limit) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", Errno(err)));
  }
  absl::StatusOr<std::string> text = ReadAll(fd, path, limit);
  close(fd);
  return text;
}

// The keys of "Z85KEY [comment]" lines, with '#' comment lines and blank
// lines skipped. ('#' is a Z85 character, but never the first of a 32-byte
// key: the first digit of each 4-byte group is at most the 83rd of 85.)
absl::Status ParseKeyLines(absl::string_view text, const std::string& path, absl::flat_hash_set<std::string>* keys) {
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const absl::string_view key = line.substr(0, std::min(line.find_first_of(" \t"), line.size()));
    if (line.front() == '#') continue;
    if (!IsZ85Key(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": '", key.substr(0, 60), "' is not a 40-character Z85 public key"));
    }
    keys->insert(std::string(key));
  }
  return absl::OkStatus();
}

absl::Status WriteWhole(int fd, const std::string& path, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", Errno(errno)));
    text.remove_prefix(n);
  }
  return absl::OkStatus();
}

// Creates `path` with O_EXCL and `mode`; the mode is set at creation, so the
// file is never readable by anyone else, not even for a moment.
absl::StatusOr<int> CreateExclusive(const std::string& path, mode_t mode) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd >= 0) return fd;
  const int err = errno;
  if (err == EEXIST) {
    return absl::AlreadyExistsError(absl::StrCat(path, " already exists; remove it or choose another --name"));
  }
  return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", Errno(err)));
}

absl::Status PlaintextRefusal(absl::string_view endpoint, absl::string_view what, absl::StatusCode code) {
  return absl::Status(
      code, absl::StrCat(what, ": ", endpoint,
                         " is not a loopback address and this node has no keys, so anyone who can reach it could "
                         "join the job and read or change the model. Generate a key pair per node with "
                         "'ps_keygen --out_dir=DIR --name=NAME' and pass --secret_key_file, --authorized_keys "
                         "(scheduler, servers) and --scheduler_public_key (servers, workers), see docs/security.md; "
                         "or pass --insecure to run unauthenticated and unencrypted anyway"));
}

void WarnInsecure(absl::string_view endpoint, absl::string_view what) {
  LOG(WARNING) << "--insecure: " << what << " " << endpoint
               << " is not a loopback address and this node has no keys: its traffic is neither "
                  "authenticated nor encrypted, and anyone who can reach it can join the job";
}

}  // namespace

absl::Status SecurityOptions::Validate(Role role) const {
  if (max_frame_bytes < kMinMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("max_frame_mb: ", max_frame_bytes >> 20,
                                                   " MiB is below the minimum of ", kMinMaxFrameBytes >> 20,
                                                   " MiB (a header frame)"));
  }
  if (!has_keys()) {
    if (!authorized_keys.empty() || !scheduler_public_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(authorized_keys.empty() ? "scheduler_public_key" : "authorized_keys",
                       ": given without --secret_key_file (this node's key pair from ps_keygen)"));
    }
    return absl::OkStatus();
  }
  const bool needs_authorized = role != Role::kWorker;
  const bool needs_scheduler_key = role != Role::kScheduler && role != Role::kServing;
  if (needs_authorized && authorized_keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("authorized_keys: a ", RoleName(role),
                     " with --secret_key_file needs the public keys it admits "
                     "(a file of Z85 keys or a directory of *.pub files of every node of the job)"));
  }
  if (needs_scheduler_key && scheduler_public_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler_public_key: a ", RoleName(role),
                     " with --secret_key_file needs the scheduler's public key (its .pub file or the Z85 key)"));
  }
  return absl::OkStatus();
}

absl::Status SecurityOptions::CheckEndpoint(absl::string_view endpoint, absl::string_view what) const {
  if (has_keys() || IsLoopbackEndpoint(endpoint)) return absl::OkStatus();
  if (!insecure) return PlaintextRefusal(endpoint, what, absl::StatusCode::kInvalidArgument);
  WarnInsecure(endpoint, what);
  return absl::OkStatus();
}

bool IsLoopbackEndpoint(absl::string_view endpoint) {
  if (absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://")) return true;
  absl::string_view rest = endpoint;
  if (!absl::ConsumePrefix(&rest, "tcp://") && absl::StrContains(rest, "://")) return false;
  if (rest.empty()) return false;
  // "tcp://SOURCE;HOST:PORT" connects from SOURCE: every part must be loopback.
  for (absl::string_view part : absl::StrSplit(rest, ';')) {
    if (!IsLoopbackHost(HostOf(part))) return false;
  }
  return true;
}

absl::StatusOr<CurveKeyPair> GenerateCurveKeyPair() {
  char pub[kZ85KeyLength + 1], sec[kZ85KeyLength + 1];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return absl::InternalError(
        absl::StrCat("zmq_curve_keypair failed (", zmq_strerror(zmq_errno()), "): this libzmq has no CURVE support"));
  }
  return CurveKeyPair{pub, sec};
}

absl::Status WriteKeyPair(const std::string& dir, const std::string& name, const CurveKeyPair& keys) {
  if (name.empty() || absl::StrContains(name, "/") || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("name: '", name, "' is not a file name"));
  }
  const std::string key_path = absl::StrCat(dir, "/", name, ".key");
  const std::string pub_path = absl::StrCat(dir, "/", name, ".pub");
  PS_ASSIGN_OR_RETURN(const int key_fd, CreateExclusive(key_path, 0600));
  absl::StatusOr<int> pub_fd = CreateExclusive(pub_path, 0644);
  if (!pub_fd.ok()) {
    close(key_fd);
    unlink(key_path.c_str());
    return pub_fd.status();
  }
  absl::Status s =
      WriteWhole(key_fd, key_path,
                 absl::StrCat("# CurveZMQ key pair of ", name, ", written by ps_keygen. Secret: keep it mode 0600.\n",
                              "public-key = ", keys.public_key, "\n", "secret-key = ", keys.secret_key, "\n"));
  if (s.ok()) s = WriteWhole(*pub_fd, pub_path, absl::StrCat(keys.public_key, " ", name, "\n"));
  if (s.ok() && fsync(key_fd) != 0) s = absl::UnavailableError(absl::StrCat("fsync ", key_path, ": ", Errno(errno)));
  close(key_fd);
  close(*pub_fd);
  if (!s.ok()) {
    unlink(key_path.c_str());
    unlink(pub_path.c_str());
  }
  return s;
}

absl::StatusOr<CurveKeyPair> ReadSecretKeyFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("secret key file ", path, " does not exist"));
    return absl::UnavailableError(absl::StrCat("cannot open secret key file ", path, ": ", Errno(err)));
  }
  struct stat st;
  // fstat on the open file: the mode checked is the mode of what is read.
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("secret key file ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrFormat("secret key file %s has mode %04o: group or others may read it. Fix: chmod 600 %s "
                        "(and make a new key pair with ps_keygen if others may have read it)",
                        path, st.st_mode & 07777, path));
  }
  absl::StatusOr<std::string> text = ReadAll(fd, path, kMaxKeyFileBytes);
  close(fd);
  if (!text.ok()) return text.status();
  CurveKeyPair keys;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    const absl::string_view field = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (field == "public-key") keys.public_key = std::string(value);
    if (field == "secret-key") keys.secret_key = std::string(value);
  }
  if (!IsZ85Key(keys.secret_key)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds no 'secret-key = <40 Z85 characters>' line; is it a NAME.key file from ps_keygen?"));
  }
  char derived[kZ85KeyLength + 1];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("zmq_curve_public failed: ", zmq_strerror(zmq_errno())));
  }
  if (keys.public_key != derived) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": its public-key line is not the public key of its secret key"));
  }
  return keys;
}

absl::StatusOr<std::string> ReadPublicKey(const std::string& file_or_key) {
  struct stat st;
  if (stat(file_or_key.c_str(), &st) != 0) {
    if (IsZ85Key(file_or_key)) return file_or_key;
    return absl::NotFoundError(
        absl::StrCat("'", file_or_key.substr(0, 200), "' is neither a 40-character Z85 key nor an existing file"));
  }
  PS_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(file_or_key, kMaxKeyFileBytes));
  absl::flat_hash_set<std::string> keys;
  PS_RETURN_IF_ERROR(ParseKeyLines(text, file_or_key, &keys));
  if (keys.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_or_key, " holds ", keys.size(), " public keys; expected exactly one"));
  }
  return *keys.begin();
}

absl::StatusOr<AuthorizedKeys> ReadAuthorizedKeys(const std::string& file_or_dir) {
  struct stat st;
  if (stat(file_or_dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(file_or_dir, ": ", Errno(errno)));
  }
  AuthorizedKeys out;
  out.source = file_or_dir;
  out.path = file_or_dir;
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    DIR* dir = opendir(file_or_dir.c_str());
    if (dir == nullptr) return absl::UnavailableError(absl::StrCat("cannot list ", file_or_dir, ": ", Errno(errno)));
    while (const dirent* e = readdir(dir)) {
      if (absl::EndsWith(e->d_name, ".pub")) files.push_back(absl::StrCat(file_or_dir, "/", e->d_name));
    }
    closedir(dir);
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(file_or_dir);
  }
  for (const std::string& file : files) {
    PS_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(file, kMaxAuthorizedFileBytes));
    PS_RETURN_IF_ERROR(ParseKeyLines(text, file, &out.keys));
  }
  if (out.keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file_or_dir, " holds no public keys (",
                                                   S_ISDIR(st.st_mode) ? "no *.pub files with a key" : "no key lines",
                                                   "): every node would be refused"));
  }
  return out;
}

std::string KeyFingerprint(absl::string_view z85_key) { return std::string(z85_key.substr(0, 8)); }

absl::StatusOr<NodeSecurity> NodeSecurity::Load(const SecurityOptions& options, Role role) {
  PS_RETURN_IF_ERROR(options.Validate(role));
  NodeSecurity s;
  s.max_frame_bytes_ = options.max_frame_bytes;
  s.insecure_ = options.insecure;
  if (!options.has_keys()) return s;
  absl::StatusOr<CurveKeyPair> keys = ReadSecretKeyFile(options.secret_key_file);
  if (!keys.ok()) return Prefixed("secret_key_file", keys.status());
  s.keys_ = *std::move(keys);
  if (role != Role::kWorker) {
    absl::StatusOr<AuthorizedKeys> authorized = ReadAuthorizedKeys(options.authorized_keys);
    if (!authorized.ok()) return Prefixed("authorized_keys", authorized.status());
    s.authorized_ = *std::move(authorized);
  }
  if (!options.scheduler_public_key.empty()) {
    absl::StatusOr<std::string> key = ReadPublicKey(options.scheduler_public_key);
    if (!key.ok()) return Prefixed("scheduler_public_key", key.status());
    s.scheduler_public_key_ = *std::move(key);
  }
  if (role == Role::kScheduler) {
    if (!s.scheduler_public_key_.empty() && s.scheduler_public_key_ != s.keys_.public_key) {
      return absl::InvalidArgumentError(absl::StrCat("scheduler_public_key: ", KeyFingerprint(s.scheduler_public_key_),
                                                     " is not this scheduler's own public key ",
                                                     KeyFingerprint(s.keys_.public_key)));
    }
    s.scheduler_public_key_ = s.keys_.public_key;
  }
  LOG(INFO) << "CurveZMQ on: this " << RoleName(role) << "'s public key is " << s.keys_.public_key
            << (role == Role::kWorker ? ""
                                      : absl::StrCat("; admitting ", s.authorized_.keys.size(), " public keys from ",
                                                     s.authorized_.source));
  return s;
}

NodeSecurity NodeSecurity::WithKeys(CurveKeyPair own, std::string scheduler_public_key, AuthorizedKeys authorized,
                                    uint64_t max_frame_bytes) {
  NodeSecurity s;
  s.keys_ = std::move(own);
  s.scheduler_public_key_ = std::move(scheduler_public_key);
  s.authorized_ = std::move(authorized);
  s.max_frame_bytes_ = max_frame_bytes;
  return s;
}

absl::Status NodeSecurity::Apply(zmq::socket_t& socket, CurveRole role, uint64_t max_frame_bytes,
                                 absl::string_view server_public_key) const {
  if (curve() && role == CurveRole::kClient && server_public_key.empty()) {
    return absl::FailedPreconditionError(
        "the peer has no public key: it runs without keys while this node has them; secure every node "
        "of the job or none");
  }
  try {
    // Checked by ZeroMQ per frame as it arrives, before the frame is
    // allocated: a larger one closes the connection. With CURVE the frame
    // checked is the encrypted one, a few bytes longer than what it carries.
    const uint64_t overhead = curve() ? kCurveFrameOverhead : 0;
    socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_frame_bytes + overhead));
    if (!curve()) return absl::OkStatus();
    socket.set(zmq::sockopt::curve_secretkey, keys_.secret_key);
    socket.set(zmq::sockopt::curve_publickey, keys_.public_key);
    if (role == CurveRole::kServer) {
      socket.set(zmq::sockopt::curve_server, true);
      socket.set(zmq::sockopt::zap_domain, kZapDomain);
      const int enforce = 1;
      if (zmq_setsockopt(socket.handle(), ZMQ_ZAP_ENFORCE_DOMAIN, &enforce, sizeof(enforce)) != 0) {
        // Without it the ZAP handler must simply be there, which the roles
        // guarantee (it starts before the bind and stops after the close).
        LOG_FIRST_N(WARNING, 1) << "this libzmq lacks ZMQ_ZAP_ENFORCE_DOMAIN; relying on the ZAP "
                                   "handler running for as long as the socket";
      }
    } else {
      socket.set(zmq::sockopt::curve_serverkey, std::string(server_public_key));
    }
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("cannot set the socket's security options: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status NodeSecurity::CheckEndpoint(absl::string_view endpoint, absl::string_view what) const {
  if (curve() || IsLoopbackEndpoint(endpoint)) return absl::OkStatus();
  if (!insecure_) return PlaintextRefusal(endpoint, what, absl::StatusCode::kFailedPrecondition);
  WarnInsecure(endpoint, what);
  return absl::OkStatus();
}

absl::Status AdoptAuthenticatedKey(std::string& claimed_key, absl::string_view authenticated_key) {
  if (authenticated_key.empty()) return absl::OkStatus();
  if (!claimed_key.empty() && claimed_key != authenticated_key) {
    return absl::PermissionDeniedError(absl::StrCat("registration claims public key ", KeyFingerprint(claimed_key),
                                                    " but its connection authenticated with ",
                                                    KeyFingerprint(authenticated_key)));
  }
  claimed_key = std::string(authenticated_key);
  return absl::OkStatus();
}

absl::Status CheckSenderKey(uint32_t sender, absl::string_view registered_key, absl::string_view authenticated_key) {
  if (authenticated_key.empty() || registered_key == authenticated_key) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("message claims to come from node ", sender, ", which registered with key ",
                   registered_key.empty() ? "(none)" : KeyFingerprint(registered_key),
                   ", but its connection authenticated with key ", KeyFingerprint(authenticated_key)));
}

absl::Status CheckSlicesFit(absl::Span<const Slice> slices, uint64_t max_frame_bytes) {
  const Slice* largest = nullptr;
  for (const Slice& s : slices) {
    if (largest == nullptr || s.length > largest->length) largest = &s;
  }
  if (largest == nullptr || largest->length <= max_frame_bytes / sizeof(float)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("slice ", largest->key, " (tensor ", largest->tensor, ") is ", largest->length * sizeof(float),
                   " bytes, over the ", max_frame_bytes,
                   "-byte frame limit: raise --max_frame_mb on every server "
                   "and worker, or cut large tensors into smaller slices (auto placement, --slice_bytes)"));
}

absl::Status AddKeyHint(const absl::Status& status, const NodeSecurity& security) {
  if (status.code() != absl::StatusCode::kDeadlineExceeded) return status;
  const std::string hint =
      security.curve() ? absl::StrCat(
                             " (CurveZMQ is on, and ZeroMQ retries a failing handshake silently: check that "
                             "--scheduler_public_key is the scheduler's key and that this node's key ",
                             KeyFingerprint(security.public_key()), " is in the scheduler's --authorized_keys)")
                       : " (this node has no keys: if the scheduler runs with CurveZMQ, pass --secret_key_file and "
                         "--scheduler_public_key)";
  return absl::Status(status.code(), absl::StrCat(status.message(), hint));
}

}  // namespace ps
