#include "worker/client/kv_client.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/codec.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/client/kv_client_internal.h"

namespace ps {
namespace {

// A server that answers a pull with an error of its own (naming what the
// pull waited for) should win over our local timer by this much.
constexpr absl::Duration kReplyGrace = absl::Seconds(2);
// ZeroMQ's reconnect interval: how often a registration that found no
// connection is tried again.
constexpr absl::Duration kRegisterRetry = absl::Milliseconds(100);

}  // namespace

void KVClient::ReleaseFrame(void* /*data*/, void* hint) {
  auto* op = static_cast<std::shared_ptr<Op>*>(hint);
  {
    absl::MutexLock lock(&(*op)->mu);
    --(*op)->frames_held;
  }
  delete op;
}

void KVClient::FailOp(const std::shared_ptr<Op>& op, const absl::Status& status) {
  absl::MutexLock lock(&op->mu);
  op->Fail(status);
  --op->replies_pending;
}

// ---- KVClient ---------------------------------------------------------------

absl::Status KVClientOptions::Validate() const {
  if (scheduler.empty()) return absl::InvalidArgumentError("scheduler: required (HOST:PORT)");
  if (auto s = NormalizeEndpoint(scheduler); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler: ", s.status().message()));
  }
  PS_RETURN_IF_ERROR(metrics.Validate());
  if (register_timeout <= absl::ZeroDuration() || request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("register_timeout and request_timeout must be positive");
  }
  if (heartbeat_interval <= absl::ZeroDuration() || heartbeat_timeout <= heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat_timeout (", absl::FormatDuration(heartbeat_timeout), ") must exceed heartbeat_interval (",
        absl::FormatDuration(heartbeat_interval), "), which must be positive"));
  }
  if (server_recovery_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("server_recovery_timeout must be positive");
  }
  if (scheduler_recovery_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("scheduler_recovery_timeout: negative");
  }
  if (rank < -1) return absl::InvalidArgumentError(absl::StrCat("rank: ", rank, " (use -1 for any)"));
  if (caller_spin < absl::ZeroDuration() || caller_spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("caller_spin: ", absl::FormatDuration(caller_spin),
                                                   " (must be in [0, 1s])"));
  }
  PS_RETURN_IF_ERROR(security.Validate(Role::kWorker));
  PS_RETURN_IF_ERROR(security.CheckEndpoint(scheduler, "scheduler"));
  return absl::OkStatus();
}

KVClient::KVClient(const KVClientOptions& options) : options_(options) {}

KVClient::~KVClient() { io_.reset(); }

absl::StatusOr<std::unique_ptr<KVClient>> KVClient::Connect(const KVClientOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<KVClient> client(new KVClient(options));
  PS_RETURN_IF_ERROR(client->Start());
  return client;
}

absl::Status KVClient::Start() {
  PS_ASSIGN_OR_RETURN(std::string endpoint, NormalizeEndpoint(options_.scheduler));
  io_ = std::make_unique<IoThread>(endpoint, options_);
  PS_RETURN_IF_ERROR(io_->Start());
  PS_ASSIGN_OR_RETURN(Envelope reply, AddKeyHint(Register(), io_->security()));
  auto* registered = std::get_if<RegisterReplyMsg>(&reply.body);
  if (registered == nullptr) {
    return absl::DataLossError(absl::StrCat("scheduler answered registration with ", BodyName(reply.body)));
  }
  node_id_ = registered->node_id;
  rank_ = registered->rank;
  io_->set_identity(node_id_, rank_, registered->incarnation);
  PS_ASSIGN_OR_RETURN(ClusterViewMsg view, io_->AwaitView(options_.register_timeout));
  num_workers_ = view.num_workers;
  num_servers_ = view.num_servers;
  LOG(INFO) << "worker " << rank_ << " joined: " << num_servers_ << " servers, " << num_workers_ << " workers";
  return absl::OkStatus();
}

absl::StatusOr<Envelope> KVClient::Register() {
  const absl::Time deadline = absl::Now() + options_.register_timeout;
  while (true) {
    absl::StatusOr<Envelope> reply = Call(kSchedulerTarget, RegisterRequestMsg{Role::kWorker, options_.advertise, options_.rank},
                                          std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    // kUnavailable: the send found no connection (a handshake the scheduler
    // refused, or no scheduler listening yet). ZeroMQ keeps reconnecting, so
    // try again, at its reconnect interval, until the deadline.
    if (reply.ok() || reply.status().code() != absl::StatusCode::kUnavailable) return reply;
    if (absl::Now() + kRegisterRetry >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no answer from the scheduler within ",
                                                      absl::FormatDuration(options_.register_timeout), " (",
                                                      reply.status().message(), ")"));
    }
    absl::SleepFor(kRegisterRetry);
  }
}

absl::StatusOr<Envelope> KVClient::Call(int target, Body body, absl::Duration timeout) {
  auto op = std::make_shared<Op>();
  std::vector<Outgoing> out(1);
  out[0].target = target;
  out[0].envelope = Envelope{kProtocolVersion, 0, node_id_, std::move(body)};
  out[0].timeout = timeout;
  Submit(std::move(out), op);
  absl::MutexLock lock(&op->mu);
  op->mu.Await(absl::Condition(op.get(), &Op::Done));
  if (!op->status.ok()) return op->status;
  return std::move(op->reply);
}

void KVClient::Submit(std::vector<Outgoing> requests, const std::shared_ptr<Op>& op) {
  {
    absl::MutexLock lock(&op->mu);
    op->replies_pending += static_cast<int>(requests.size());
  }
  for (Outgoing& r : requests) r.op = op;
  io_->Enqueue(std::move(requests));
}

KVClient::Ticket KVClient::Track(std::shared_ptr<Op> op) {
  absl::MutexLock lock(&tickets_mu_);
  const Ticket t = next_ticket_++;
  tickets_.emplace(t, std::move(op));
  return t;
}

KVClient::Ticket KVClient::Failed(absl::Status status) {
  auto op = std::make_shared<Op>();
  {
    absl::MutexLock lock(&op->mu);
    op->status = std::move(status);
  }
  return Track(std::move(op));
}

absl::Status KVClient::RegisterModel(const ModelSpec& model) {
  PS_RETURN_IF_ERROR(model.Validate());
  PS_ASSIGN_OR_RETURN(Envelope reply, Call(kSchedulerTarget, DefineModelRequestMsg{model},
                                           options_.request_timeout));
  auto* defined = std::get_if<DefineModelReplyMsg>(&reply.body);
  if (defined == nullptr) {
    return absl::DataLossError(absl::StrCat("scheduler answered the model with ", BodyName(reply.body)));
  }
  PS_ASSIGN_OR_RETURN(map_, PartitionMap::FromSlices(defined->model.tensors, num_servers_, defined->slices,
                                                     static_cast<int>(defined->model.tables.size())));
  PS_RETURN_IF_ERROR(CheckSlicesFit(map_.slices(), options_.security.max_frame_bytes));
  model_ = defined->model;
  table_hash_.clear();
  for (const TableSpec& t : model_.tables) table_hash_.push_back(TableHash(t.name));
  pulled_version_ = std::make_unique<std::atomic<uint64_t>[]>(map_.slices().size());
  for (size_t i = 0; i < map_.slices().size(); ++i) pulled_version_[i].store(0);
  io_->set_versions(pulled_version_.get(), map_.slices().size());
  return absl::OkStatus();
}

absl::StatusOr<int> KVClient::TensorIndex(absl::string_view name) const {
  for (size_t i = 0; i < model_.tensors.size(); ++i) {
    if (model_.tensors[i].name == name) return static_cast<int>(i);
  }
  return absl::NotFoundError(absl::StrCat("no tensor named '", name, "' in the registered model"));
}

template <typename Buffer>
absl::Status KVClient::CheckBuffers(absl::Span<const Buffer> buffers) const {
  if (pulled_version_ == nullptr) return absl::FailedPreconditionError("no model registered yet");
  std::vector<bool> seen(model_.tensors.size(), false);
  for (const Buffer& buffer : buffers) {
    const int t = buffer.tensor;
    if (t < 0 || t >= static_cast<int>(model_.tensors.size())) {
      return absl::NotFoundError(absl::StrCat("tensor index ", t, " not in the model"));
    }
    const TensorSpec& spec = model_.tensors[t];
    if (seen[t]) return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' listed twice"));
    seen[t] = true;
    if (static_cast<int64_t>(buffer.data.size()) == spec.NumElements() && buffer.offset == 0) continue;
    if (!SlicesOf(t, buffer.offset, buffer.data.size()).empty()) continue;
    if (buffer.offset == 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has ", spec.NumElements(),
                                                     " elements; buffer has ", buffer.data.size()));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", spec.name, "' has ", spec.NumElements(), " elements in ", map_.SlicesOfTensor(t).size(),
        " slices; a buffer of elements [", buffer.offset, ", ", buffer.offset + buffer.data.size(),
        ") is not whole slices of it (partition_map() has where they start and end)"));
  }
  return absl::OkStatus();
}

absl::Span<const uint32_t> KVClient::SlicesOf(int tensor, uint64_t offset, uint64_t size) const {
  const absl::Span<const uint32_t> keys = map_.SlicesOfTensor(tensor);
  size_t first = 0;
  while (first < keys.size() && map_.slices()[keys[first]].offset < offset) ++first;
  size_t end = first;
  uint64_t covered = offset;
  while (end < keys.size() && covered < offset + size) covered += map_.slices()[keys[end++]].length;
  const bool whole = size > 0 && first < keys.size() && map_.slices()[keys[first]].offset == offset &&
                     covered == offset + size;
  return whole ? keys.subspan(first, end - first) : absl::Span<const uint32_t>();
}

void KVClient::AddPush(absl::Span<const TensorBuffer> grads, int64_t clock, const std::shared_ptr<Op>& op,
                       RequestBuilder& requests) {
  for (const TensorBuffer& g : grads) {
    for (uint32_t key : SlicesOf(g.tensor, g.offset, g.data.size())) {  // checked: CheckBuffers
      const Slice& slice = map_.slices()[key];
      Outgoing& out = requests.For(slice);
      if (!std::holds_alternative<PushRequestMsg>(out.envelope.body)) {
        out.envelope.body = PushRequestMsg{clock, {}, std::nullopt};
      }
      std::get<PushRequestMsg>(out.envelope.body)
          .slices.push_back(SliceData{key, slice.length, pulled_version_[key].load(std::memory_order_relaxed)});
      {
        absl::MutexLock lock(&op->mu);
        ++op->frames_held;
      }
      out.payloads.emplace_back(const_cast<float*>(g.data.data() + (slice.offset - g.offset)),
                                slice.length * sizeof(float), &ReleaseFrame, new std::shared_ptr<Op>(op));
    }
  }
}

PullRequestMsg& KVClient::PullOf(Outgoing& req, int64_t clock) const {
  const uint64_t timeout_ms = absl::ToInt64Milliseconds(options_.request_timeout);
  if (auto* push = std::get_if<PushRequestMsg>(&req.envelope.body)) {
    if (!push->then_pull.has_value()) push->then_pull = PullRequestMsg{clock, {}, timeout_ms};
    return *push->then_pull;
  }
  if (!std::holds_alternative<PullRequestMsg>(req.envelope.body)) {
    req.envelope.body = PullRequestMsg{clock, {}, timeout_ms};
  }
  return std::get<PullRequestMsg>(req.envelope.body);
}

void KVClient::AddPull(absl::Span<const MutableTensorBuffer> out, int64_t clock, RequestBuilder& requests) {
  for (const MutableTensorBuffer& o : out) {
    for (uint32_t key : SlicesOf(o.tensor, o.offset, o.data.size())) {  // checked: CheckBuffers
      const Slice& slice = map_.slices()[key];
      Outgoing& req = requests.For(slice);
      PullOf(req, clock).keys.push_back(key);
      req.destinations.push_back(Destination{key, slice.length, o.data.data() + (slice.offset - o.offset)});
    }
  }
}

KVClient::Ticket KVClient::SubmitRequests(RequestBuilder& builder, std::shared_ptr<Op> op) {
  std::vector<Outgoing> requests = builder.Take();
  for (Outgoing& out : requests) {
    out.envelope.sender = node_id_;
    // A server answers a pull that waits too long with an error naming what
    // it waited for; give that answer time to arrive before our own timer.
    out.timeout = options_.request_timeout + (out.destinations.empty() ? absl::ZeroDuration() : kReplyGrace);
  }
  Submit(std::move(requests), op);
  return Track(std::move(op));
}

KVClient::Ticket KVClient::Push(absl::Span<const TensorBuffer> grads, int64_t clock) {
  return Exchange({.grads = grads, .clock = clock});
}

KVClient::Ticket KVClient::Pull(absl::Span<const MutableTensorBuffer> out, int64_t clock) {
  return Exchange({.out = out, .pull_clock = clock});
}

KVClient::Ticket KVClient::PushPullAsync(absl::Span<const TensorBuffer> grads,
                                         absl::Span<const MutableTensorBuffer> out, int64_t clock,
                                         int64_t pull_clock) {
  return Exchange({.grads = grads, .clock = clock, .out = out, .pull_clock = pull_clock});
}

KVClient::Ticket KVClient::Exchange(const StepExchange& step) {
  if (absl::Status s = CheckBuffers(step.grads); !s.ok()) return Failed(s);
  if (absl::Status s = CheckBuffers(step.out); !s.ok()) return Failed(s);
  if (absl::Status s = CheckRows(step.row_grads, step.rows_out); !s.ok()) return Failed(s);
  auto op = std::make_shared<Op>();
  RequestBuilder requests(num_servers_, options_.max_request_bytes);
  AddPush(step.grads, step.clock, op, requests);
  if (absl::Status s = AddPushRows(step.row_grads, step.clock, requests); !s.ok()) return Failed(s);
  // Dense slices first in each pull: the server answers them first.
  AddPull(step.out, step.pull_clock, requests);
  if (absl::Status s = AddPullRows(step.rows_out, step.pull_clock, requests); !s.ok()) return Failed(s);
  return SubmitRequests(requests, std::move(op));
}

absl::Status KVClient::Wait(Ticket ticket, absl::Duration timeout) {
  std::shared_ptr<Op> op;
  {
    absl::MutexLock lock(&tickets_mu_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return absl::NotFoundError(absl::StrCat("unknown ticket ", ticket));
    op = it->second;
  }
  {
    const int64_t t0 = io_->metrics().WaitStart();
    // One deadline for both ways of waiting: a Wait never blocks past it.
    const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
    io_->WaitDirect(
        [&] {
          absl::MutexLock lock(&op->mu);
          return op->Done();
        },
        deadline);
    absl::MutexLock lock(&op->mu);
    const bool done = op->mu.AwaitWithDeadline(absl::Condition(op.get(), &Op::Done), deadline);
    io_->metrics().ObserveWait(t0);
    if (!done) {
      return absl::DeadlineExceededError(absl::StrCat("ticket ", ticket, " not complete after ",
                                                      absl::FormatDuration(timeout)));
    }
  }
  absl::MutexLock lock(&tickets_mu_);
  tickets_.erase(ticket);
  absl::MutexLock op_lock(&op->mu);
  return op->status;
}

absl::Status KVClient::PushPull(absl::Span<const TensorBuffer> grads,
                                absl::Span<const MutableTensorBuffer> out, int64_t clock) {
  return Wait(PushPullAsync(grads, out, clock));
}

absl::Status KVClient::Barrier(absl::string_view name, absl::Duration timeout) {
  BarrierRequestMsg req{std::string(name), static_cast<uint64_t>(absl::ToInt64Milliseconds(timeout))};
  return Call(kSchedulerTarget, std::move(req), timeout + kReplyGrace).status();
}

absl::StatusOr<StatsReplyMsg> KVClient::ServerStats(int rank) {
  if (rank < 0 || rank >= num_servers_) {
    return absl::InvalidArgumentError(absl::StrCat("server rank ", rank, " not in [0, ", num_servers_, ")"));
  }
  PS_ASSIGN_OR_RETURN(Envelope reply, Call(rank, StatsRequestMsg{}, options_.request_timeout));
  auto* stats = std::get_if<StatsReplyMsg>(&reply.body);
  if (stats == nullptr) return absl::DataLossError("server answered stats with " + std::string(BodyName(reply.body)));
  return *stats;
}

absl::StatusOr<int64_t> KVClient::ResumeClock() {
  int64_t clock = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < num_servers_; ++s) {
    PS_ASSIGN_OR_RETURN(StatsReplyMsg stats, ServerStats(s));
    if (rank_ >= static_cast<int>(stats.worker_clocks.size())) {
      return absl::DataLossError(absl::StrCat("server ", s, " reports clocks of ", stats.worker_clocks.size(),
                                              " workers; this is worker ", rank_));
    }
    clock = std::min(clock, stats.worker_clocks[rank_]);
  }
  // No server holds a slice of this worker's (pipeline stage's): nothing pushed.
  return num_servers_ > 0 && clock != std::numeric_limits<int64_t>::max() ? clock : 0;
}

KVClient::RecoveryStats KVClient::recovery_stats() const { return io_->recovery_stats(); }
KVClient::CallerIoStats KVClient::caller_io_stats() const { return io_->caller_io_stats(); }
std::string KVClient::metrics_url() const { return io_->metrics().url(); }

absl::StatusOr<NodeInfo> KVClient::Worker(int rank) const {
  const std::optional<ClusterViewMsg> view = io_->latest_view();
  if (view.has_value()) {
    for (const NodeInfo& n : view->nodes) {
      if (n.role == Role::kWorker && n.rank == rank) return n;
    }
  }
  return absl::NotFoundError(absl::StrCat("worker ", rank, " is not alive in the cluster view"));
}
int KVClient::shm_servers() const { return io_->shm_servers(); }

absl::Status KVClient::Finish() {
  return Call(kSchedulerTarget, WorkerDoneMsg{}, options_.request_timeout).status();
}

}  // namespace ps
