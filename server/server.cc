#include "server/server.h"

#include <unistd.h>

#include <cstring>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/messages.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "server/slice_store.h"

namespace ps {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(100);
// Pulls waiting for a sync step or the ssp bound; a real job parks at most a
// few per worker, so this only stops a peer flooding the server with them.
constexpr size_t kMaxParkedPulls = 4096;

// A pull that must wait for a sync step or the ssp bound.
struct ParkedPull {
  zmq::message_t routing_id;
  uint64_t request_id = 0;
  PullRequestMsg request;
  absl::Time since;
  absl::Time deadline;
};

uint64_t MemoryBudget(const ServerOptions& options) {
  if (options.max_memory_bytes > 0) return options.max_memory_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page / 2 : 0;
}

}  // namespace

absl::Status ServerOptions::Validate() const {
  if (scheduler.empty()) return absl::InvalidArgumentError("scheduler: required (HOST:PORT)");
  if (auto s = NormalizeEndpoint(scheduler); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler: ", s.status().message()));
  }
  if (auto s = NormalizeEndpoint(bind); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bind: ", s.status().message()));
  }
  if (num_threads < 0 || num_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads: ", num_threads, " not in [0, 256]"));
  }
  if (register_timeout <= absl::ZeroDuration() || default_pull_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("register_timeout and default_pull_timeout must be positive");
  }
  return absl::OkStatus();
}

class Server::Impl {
 public:
  explicit Impl(const ServerOptions& options)
      : options_(options),
        pool_(options.num_threads),
        store_(&pool_, options.allow_nonfinite, MemoryBudget(options)) {}

  absl::Status Bind() {
    PS_ASSIGN_OR_RETURN(std::string bind, NormalizeEndpoint(options_.bind));
    PS_ASSIGN_OR_RETURN(router_, BindRouter(context_, bind, options_.advertise_host, &endpoint_));
    return absl::OkStatus();
  }

  const std::string& endpoint() const { return endpoint_; }
  void RequestStop() { stop_.store(true); }
  absl::Status Run();

 private:
  absl::Status Connect();
  absl::Status PollOnce();
  absl::Status OnSchedulerMessage(RawMessage raw);
  void OnWorkerMessage(RawMessage raw);
  absl::Status HandleWorkerRequest(const Envelope& env, RawMessage& raw);
  absl::Status HandlePush(int worker, const PushRequestMsg& push, RawMessage& raw);
  // Answers `pull` now if it may be, else parks it until it may or its
  // deadline passes. Requires store_.CheckPull(pull) to be OK.
  void StartPull(zmq::message_t& routing_id, uint64_t request_id, const PullRequestMsg& pull);
  void AnswerPull(const zmq::message_t& routing_id, uint64_t request_id, const PullRequestMsg& pull);
  void AnswerReadyPulls();
  void ExpireParkedPulls();
  void Reply(const zmq::message_t& routing_id, uint64_t request_id, Body body,
             std::vector<zmq::message_t> payloads = {});
  void ReplyError(const zmq::message_t& routing_id, uint64_t request_id, const absl::Status& s);
  void ToScheduler(uint64_t request_id, Body body);

  const ServerOptions options_;
  zmq::context_t context_;
  zmq::socket_t router_;
  zmq::socket_t scheduler_;
  std::string endpoint_;
  ThreadPool pool_;
  SliceStore store_;
  std::atomic<bool> stop_{false};

  uint32_t node_id_ = 0;
  int rank_ = -1;
  bool have_view_ = false;
  bool shutdown_ = false;
  absl::flat_hash_map<uint32_t, int> worker_rank_;  // node id -> worker rank
  std::deque<ParkedPull> parked_;
  StatsReplyMsg counters_;  // pulls, errors, bytes; the store keeps the rest
};

absl::Status Server::Impl::Run() {
  PS_RETURN_IF_ERROR(Connect());
  const absl::Time register_deadline = absl::Now() + options_.register_timeout;
  while (!shutdown_) {
    if (stop_.load()) return absl::CancelledError("server stopped by request");
    if (!have_view_ && absl::Now() > register_deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "server: no cluster view from scheduler ", options_.scheduler, " within ",
          absl::FormatDuration(options_.register_timeout),
          rank_ < 0 ? " (it never answered the registration)" : " (the cluster did not form)"));
    }
    PS_RETURN_IF_ERROR(PollOnce());
  }
  LOG(INFO) << "server " << rank_ << ": orderly shutdown";
  return absl::OkStatus();
}

absl::Status Server::Impl::Connect() {
  PS_ASSIGN_OR_RETURN(std::string sched, NormalizeEndpoint(options_.scheduler));
  PS_ASSIGN_OR_RETURN(scheduler_, ConnectDealer(context_, sched));
  ToScheduler(1, RegisterRequestMsg{Role::kServer, endpoint_});
  LOG(INFO) << "server at " << endpoint_ << " registering with " << sched;
  return absl::OkStatus();
}

absl::Status Server::Impl::PollOnce() {
  absl::Duration wait = kPollInterval;
  for (const ParkedPull& p : parked_) wait = std::min(wait, p.deadline - absl::Now());
  wait = std::max(wait, absl::ZeroDuration());
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                             {scheduler_.handle(), 0, ZMQ_POLLIN, 0}};
  zmq::poll(items, 2, std::chrono::milliseconds(absl::ToInt64Milliseconds(wait)));
  if (items[1].revents & ZMQ_POLLIN) {
    while (true) {
      auto raw = ReceiveMessage(scheduler_, /*routed=*/false);
      if (!raw.ok()) break;
      PS_RETURN_IF_ERROR(OnSchedulerMessage(*std::move(raw)));
    }
  }
  if (items[0].revents & ZMQ_POLLIN) {
    // Bounded batch so the scheduler socket and deadlines are not starved.
    for (int i = 0; i < 64; ++i) {
      auto raw = ReceiveMessage(router_, /*routed=*/true);
      if (!raw.ok()) break;
      OnWorkerMessage(*std::move(raw));
    }
  }
  ExpireParkedPulls();
  return absl::OkStatus();
}

absl::Status Server::Impl::OnSchedulerMessage(RawMessage raw) {
  auto env = DecodeEnvelope(Bytes(raw.header));
  if (!env.ok()) {
    LOG(ERROR) << "server: bad message from scheduler: " << env.status();
    return absl::OkStatus();
  }
  if (auto* reply = std::get_if<RegisterReplyMsg>(&env->body)) {
    node_id_ = reply->node_id;
    rank_ = reply->rank;
    LOG(INFO) << "server registered as rank " << rank_ << " (node " << node_id_ << ")";
  } else if (auto* view = std::get_if<ClusterViewMsg>(&env->body)) {
    for (const NodeInfo& n : view->nodes) {
      if (n.role == Role::kWorker) worker_rank_[n.node_id] = n.rank;
    }
    have_view_ = true;
    LOG(INFO) << "server " << rank_ << ": cluster of " << view->num_servers << " servers, "
              << view->num_workers << " workers";
  } else if (auto* create = std::get_if<CreateSlicesRequestMsg>(&env->body)) {
    absl::Status s = store_.Create(create->model, create->slices, create->num_workers);
    LOG(INFO) << "server " << rank_ << ": create " << create->slices.size() << " slices: " << s;
    ToScheduler(env->request_id, s.ok() ? Body(AckMsg{})
                                         : Body(ErrorMsg{s.code(), std::string(s.message())}));
  } else if (auto* down = std::get_if<ShutdownMsg>(&env->body)) {
    ToScheduler(env->request_id, AckMsg{});
    shutdown_ = true;
    if (!down->reason.empty()) {
      return absl::AbortedError(absl::StrCat("scheduler ended the job: ", down->reason));
    }
  } else if (auto* err = std::get_if<ErrorMsg>(&env->body)) {
    return absl::Status(err->code, absl::StrCat("scheduler refused this server: ", err->message));
  }
  return absl::OkStatus();
}

void Server::Impl::OnWorkerMessage(RawMessage raw) {
  counters_.bytes_in += raw.header.size();
  for (const auto& p : raw.payloads) counters_.bytes_in += p.size();
  auto env = DecodeEnvelope(Bytes(raw.header));
  if (!env.ok()) {
    ReplyError(raw.routing_id, 0, env.status());
    return;
  }
  absl::Status s;
  if (env->version != kProtocolVersion) {
    s = absl::FailedPreconditionError(absl::StrCat("protocol version ", env->version,
                                                   "; this server speaks ", kProtocolVersion));
  } else {
    s = HandleWorkerRequest(*env, raw);
  }
  if (!s.ok()) ReplyError(raw.routing_id, env->request_id, s);
}

absl::Status Server::Impl::HandleWorkerRequest(const Envelope& env, RawMessage& raw) {
  if (std::holds_alternative<StatsRequestMsg>(env.body)) {
    StatsReplyMsg stats = store_.stats();
    stats.pulls_served = counters_.pulls_served;
    stats.errors_replied = counters_.errors_replied;
    stats.bytes_in = counters_.bytes_in;
    stats.bytes_out = counters_.bytes_out;
    stats.waited_pull_micros = counters_.waited_pull_micros;
    Reply(raw.routing_id, env.request_id, std::move(stats));
    return absl::OkStatus();
  }
  auto it = worker_rank_.find(env.sender);
  if (it == worker_rank_.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("sender node ", env.sender, " is not a registered worker of this job"));
  }
  if (auto* push = std::get_if<PushRequestMsg>(&env.body)) {
    // A bad pull part refuses the whole request before anything is applied.
    if (push->then_pull.has_value()) PS_RETURN_IF_ERROR(store_.CheckPull(*push->then_pull));
    PS_RETURN_IF_ERROR(HandlePush(it->second, *push, raw));
    AnswerReadyPulls();
    if (push->then_pull.has_value()) {
      StartPull(raw.routing_id, env.request_id, *push->then_pull);
    } else {
      Reply(raw.routing_id, env.request_id, AckMsg{});
    }
    return absl::OkStatus();
  }
  if (auto* pull = std::get_if<PullRequestMsg>(&env.body)) {
    PS_RETURN_IF_ERROR(store_.CheckPull(*pull));
    StartPull(raw.routing_id, env.request_id, *pull);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("a server does not take ", BodyName(env.body)));
}

void Server::Impl::StartPull(zmq::message_t& routing_id, uint64_t request_id, const PullRequestMsg& pull) {
  if (store_.PullReady(pull)) {
    AnswerPull(routing_id, request_id, pull);
    return;
  }
  if (parked_.size() >= kMaxParkedPulls) {
    ReplyError(routing_id, request_id,
               absl::ResourceExhaustedError(absl::StrCat("server has ", parked_.size(),
                                                         " pulls waiting already; refusing more")));
    return;
  }
  const absl::Duration timeout = pull.timeout_ms > 0
                                     ? absl::Milliseconds(std::min<uint64_t>(pull.timeout_ms, 86400000))
                                     : options_.default_pull_timeout;
  const absl::Time now = absl::Now();
  parked_.push_back(ParkedPull{std::move(routing_id), request_id, pull, now, now + timeout});
}

absl::Status Server::Impl::HandlePush(int worker, const PushRequestMsg& push, RawMessage& raw) {
  std::vector<absl::Span<const float>> grads;
  std::vector<std::vector<float>> realigned;  // only for frames ZeroMQ left unaligned
  grads.reserve(raw.payloads.size());
  for (size_t i = 0; i < raw.payloads.size(); ++i) {
    const zmq::message_t& frame = raw.payloads[i];
    if (frame.size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("payload frame ", i, " has ", frame.size(),
                                                     " bytes, not a whole number of floats"));
    }
    const size_t n = frame.size() / sizeof(float);
    if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(float) != 0) {
      realigned.emplace_back(n);
      std::memcpy(realigned.back().data(), frame.data(), frame.size());
      grads.emplace_back(realigned.back());
    } else {
      grads.emplace_back(static_cast<const float*>(frame.data()), n);
    }
  }
  return store_.Push(worker, push, grads);
}

void Server::Impl::AnswerPull(const zmq::message_t& routing_id, uint64_t request_id,
                              const PullRequestMsg& pull) {
  PullReplyMsg reply;
  std::vector<zmq::message_t> payloads;
  reply.slices.reserve(pull.keys.size());
  payloads.reserve(pull.keys.size());
  for (uint32_t key : pull.keys) {
    // A copy: the slice keeps changing while ZeroMQ sends in the background.
    absl::Span<const float> values = store_.Values(key);
    payloads.emplace_back(values.data(), values.size() * sizeof(float));
    reply.slices.push_back(SliceData{key, values.size(), store_.Version(key)});
    counters_.bytes_out += values.size() * sizeof(float);
  }
  ++counters_.pulls_served;
  Reply(routing_id, request_id, std::move(reply), std::move(payloads));
}

void Server::Impl::AnswerReadyPulls() {
  const absl::Time now = absl::Now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (!store_.PullReady(it->request)) {
      ++it;
      continue;
    }
    counters_.waited_pull_micros += absl::ToInt64Microseconds(now - it->since);
    AnswerPull(it->routing_id, it->request_id, it->request);
    it = parked_.erase(it);
  }
}

void Server::Impl::ExpireParkedPulls() {
  const absl::Time now = absl::Now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    ReplyError(it->routing_id, it->request_id,
               absl::DeadlineExceededError(absl::StrCat(
                   "pull at clock ", it->request.clock, " waited ",
                   absl::FormatDuration(now - it->since), ": ", store_.DescribeWait(it->request))));
    it = parked_.erase(it);
  }
}

void Server::Impl::Reply(const zmq::message_t& routing_id, uint64_t request_id, Body body,
                         std::vector<zmq::message_t> payloads) {
  Envelope env{kProtocolVersion, request_id, node_id_, std::move(body)};
  if (absl::Status s = SendMessage(router_, &routing_id, env, std::move(payloads)); !s.ok()) {
    LOG(WARNING) << "server " << rank_ << ": reply " << request_id << " not sent: " << s;
  }
}

void Server::Impl::ReplyError(const zmq::message_t& routing_id, uint64_t request_id,
                              const absl::Status& s) {
  ++counters_.errors_replied;
  LOG(WARNING) << "server " << rank_ << ": request " << request_id << " refused: " << s;
  Reply(routing_id, request_id, ErrorMsg{s.code(), std::string(s.message())});
}

void Server::Impl::ToScheduler(uint64_t request_id, Body body) {
  Envelope env{kProtocolVersion, request_id, node_id_, std::move(body)};
  if (absl::Status s = SendMessage(scheduler_, nullptr, env); !s.ok()) {
    LOG(ERROR) << "server: message to scheduler not sent: " << s;
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options);
  PS_RETURN_IF_ERROR(impl->Bind());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const std::string& Server::endpoint() const { return impl_->endpoint(); }
absl::Status Server::Run() { return impl_->Run(); }
void Server::RequestStop() { impl_->RequestStop(); }

}  // namespace ps
