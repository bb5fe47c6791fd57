#include "common/net/zap_handler.h"

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr absl::Duration kReportEvery = absl::Seconds(10);
// Bounds the memory a stream of distinct refused keys can take.
constexpr size_t kMaxTrackedRefusals = 4096;
// A ZAP request has 6 frames and, for CURVE, one credential.
constexpr size_t kMaxRequestFrames = 16;

// A key missed: the keys' path read again at the latest this long after it
// was last read, changed or not.
constexpr absl::Duration kRereadEvery = absl::Seconds(5);

std::string Text(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

// `path`'s modification time in ns; -1 when it cannot be read.
int64_t ModifiedNanos(const std::string& path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& context, AuthorizedKeys authorized,
                                                              std::string name) {
  zmq::socket_t socket(context, zmq::socket_type::rep);
  socket.set(zmq::sockopt::linger, 0);
  try {
    socket.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot bind ", kZapEndpoint, " (a ZAP handler on this context already?): ", e.what()));
  }
  const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) return absl::InternalError("eventfd failed");
  std::unique_ptr<ZapHandler> handler(
      new ZapHandler(std::move(authorized), std::move(name), std::move(socket), wake_fd));
  // The socket moves to the thread here; thread creation orders the two.
  handler->thread_ = std::thread([h = handler.get()] { h->Loop(); });
  return handler;
}

ZapHandler::ZapHandler(AuthorizedKeys authorized, std::string name, zmq::socket_t socket, int wake_fd)
    : authorized_(std::move(authorized)), name_(std::move(name)), socket_(std::move(socket)), wake_fd_(wake_fd) {
  read_mtime_ = ModifiedNanos(authorized_.path);
  read_at_ = absl::Now();
}

ZapHandler::~ZapHandler() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(wake_fd_);
}

void ZapHandler::Loop() {
  zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
  try {
    while (true) {
      zmq::poll(items, 2, std::chrono::milliseconds(-1));
      if (items[1].revents & ZMQ_POLLIN) break;
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> request;
      bool more = true;
      while (more) {
        zmq::message_t frame;
        if (!socket_.recv(frame, zmq::recv_flags::none)) break;
        more = frame.more();
        if (request.size() < kMaxRequestFrames) request.push_back(std::move(frame));
      }
      const std::vector<std::string> reply = Answer(request);
      for (size_t i = 0; i < reply.size(); ++i) {
        zmq::message_t frame(reply[i].data(), reply[i].size());
        socket_.send(frame, i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    }
  } catch (const zmq::error_t& e) {
    // Only a context torn down under us gets here; the sockets that would
    // ask are gone with it.
    LOG(ERROR) << "zap[" << name_ << "]: stopped: " << e.what();
  }
  socket_.close();
}

std::vector<std::string> ZapHandler::Answer(const std::vector<zmq::message_t>& request) {
  // Frames: version, request id, domain, address, routing id, mechanism,
  // credentials...; reply: version, request id, status code, status text,
  // user id, metadata.
  const std::string request_id = request.size() > 1 ? Text(request[1]) : "";
  auto refuse = [&](const std::string& code, const std::string& why) {
    return std::vector<std::string>{"1.0", request_id, code, why, "", ""};
  };
  if (request.size() < 6 || Text(request[0]) != "1.0") {
    LOG(ERROR) << "zap[" << name_ << "]: malformed ZAP request of " << request.size() << " frames";
    return refuse("500", "malformed ZAP request");
  }
  const std::string address = Text(request[3]);
  const std::string mechanism = Text(request[5]);
  if (Text(request[2]) != kZapDomain || mechanism != "CURVE" || request.size() != 7 || request[6].size() != 32) {
    const std::string why = absl::StrCat("mechanism ", mechanism, " in domain '", Text(request[2]),
                                         "' is not allowed (CURVE in domain '", kZapDomain, "' only)");
    ++refused_;
    LogRefusal(address, "", why);
    return refuse("400", why);
  }
  char z85[kZ85KeyLength + 1];
  zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), 32);
  const std::string key(z85);
  std::string not_admitted;
  {
    absl::MutexLock lock(&mu_);
    if (!authorized_.keys.contains(key)) {
      not_admitted = absl::StrCat("not among the ", authorized_.keys.size(), " authorised keys of ", authorized_.source,
                                  "; to admit it, add its .pub file (", key, ")");
    }
  }
  if (!not_admitted.empty() && !Reread(key)) {
    ++refused_;
    LogRefusal(address, key, not_admitted);
    return refuse("400", "public key not authorised");
  }
  ++admitted_;
  LOG(INFO) << "zap[" << name_ << "]: admitted key " << KeyFingerprint(key) << " from " << address;
  return {"1.0", request_id, "200", "OK", key, ""};
}

bool ZapHandler::Reread(const std::string& key) {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    path = authorized_.path;
  }
  const int64_t mtime = ModifiedNanos(path);
  const absl::Time now = absl::Now();
  if (path.empty() || (mtime == read_mtime_ && now - read_at_ < kRereadEvery)) return false;
  read_at_ = now;
  absl::StatusOr<AuthorizedKeys> keys = ReadAuthorizedKeys(path);
  if (!keys.ok()) {  // a file half written: read again at the next miss
    LOG(WARNING) << "zap[" << name_ << "]: cannot read the authorised keys again: " << keys.status();
    return false;
  }
  read_mtime_ = mtime;
  absl::MutexLock lock(&mu_);
  size_t added = 0;
  for (const std::string& k : keys->keys) added += authorized_.keys.insert(k).second ? 1 : 0;
  if (added > 0) LOG(INFO) << "zap[" << name_ << "]: " << added << " new authorised keys in " << path;
  return authorized_.keys.contains(key);
}

void ZapHandler::LogRefusal(const std::string& address, const std::string& key, const std::string& why) {
  if (refusals_.size() >= kMaxTrackedRefusals) refusals_.clear();
  Reported& r = refusals_[absl::StrCat(address, "/", key)];
  const absl::Time now = absl::Now();
  if (now - r.last < kReportEvery) {
    ++r.since;
    return;
  }
  LOG(WARNING) << "zap[" << name_ << "]: refused " << (key.empty() ? "a client" : "key " + KeyFingerprint(key))
               << " from " << address << ": " << why
               << (r.since > 0 ? absl::StrCat(" (", r.since, " more refusals since the last report)") : "");
  r.last = now;
  r.since = 0;
}

absl::StatusOr<std::unique_ptr<ZapHandler>> StartZapHandler(zmq::context_t& context, const NodeSecurity& security,
                                                            std::string name) {
  if (!security.curve()) return std::unique_ptr<ZapHandler>();
  return ZapHandler::Start(context, security.authorized_keys(), std::move(name));
}

void ZapHandler::Authorize(AuthorizedKeys authorized) {
  absl::MutexLock lock(&mu_);
  authorized_ = std::move(authorized);
}

}  // namespace ps
