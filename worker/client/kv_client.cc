#include "worker/client/kv_client.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/events.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"
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

// KVClientOptions::compress_threads, 0 resolved: half the cores, at most 4.
int CompressThreads(int asked) {
  if (asked > 0) return asked;
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 4);
}

}  // namespace

namespace client_internal {

void ReleaseFrame(void* /*data*/, void* hint) {
  auto* op = static_cast<std::shared_ptr<Op>*>(hint);
  {
    absl::MutexLock lock(&(*op)->mu);
    --(*op)->frames_held;
  }
  delete op;
}

void ReleaseOwner(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }

void FailOp(const std::shared_ptr<Op>& op, const absl::Status& status) {
  absl::MutexLock lock(&op->mu);
  op->Fail(status);
  --op->replies_pending;
}

bool OwnsFrames(const std::shared_ptr<Op>& op) {
  if (op == nullptr) return false;
  absl::MutexLock lock(&op->mu);
  return op->frames_held == 0;
}

}  // namespace client_internal

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
  if (compress_threads < 0 || compress_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("compress_threads: ", compress_threads, " (must be in [0, 256])"));
  }
  if (caller_spin < absl::ZeroDuration() || caller_spin > absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("caller_spin: ", absl::FormatDuration(caller_spin), " (must be in [0, 1s])"));
  }
  PS_RETURN_IF_ERROR(security.Validate(Role::kWorker));
  PS_RETURN_IF_ERROR(security.CheckEndpoint(scheduler, "scheduler"));
  return absl::OkStatus();
}

KVClient::Impl::~Impl() { io_.reset(); }

absl::Status KVClient::Impl::Start() {
  PS_ASSIGN_OR_RETURN(std::string endpoint, NormalizeEndpoint(options_.scheduler));
  io_ = std::make_unique<client_internal::IoThread>(endpoint, options_);
  PS_RETURN_IF_ERROR(io_->Start());
  PS_ASSIGN_OR_RETURN(Envelope reply, AddKeyHint(Register(), io_->security()));
  auto* registered = std::get_if<RegisterReplyMsg>(&reply.body);
  if (registered == nullptr) {
    return absl::DataLossError(absl::StrCat("scheduler answered registration with ", BodyName(reply.body)));
  }
  node_id_ = registered->node_id;
  rank_ = registered->rank;
  io_->set_identity(node_id_, rank_, registered->incarnation);
  if (registered->replicas > 1) io_->set_replicated();
  PS_ASSIGN_OR_RETURN(ClusterViewMsg view, io_->AwaitView(options_.register_timeout));
  num_workers_ = view.num_workers;
  num_servers_ = view.num_servers;
  LOG(INFO) << "worker " << rank_ << " joined: " << num_servers_ << " servers, " << num_workers_ << " workers";
  EmitEvent("joined", JsonLine().Add("rank", rank_).Add("servers", num_servers_).Add("workers", num_workers_));
  return absl::OkStatus();
}

absl::StatusOr<Envelope> KVClient::Impl::Register() {
  const absl::Time deadline = absl::Now() + options_.register_timeout;
  while (true) {
    absl::StatusOr<Envelope> reply =
        Call(client_internal::kSchedulerTarget, RegisterRequestMsg{Role::kWorker, options_.advertise, options_.rank},
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

absl::StatusOr<Envelope> KVClient::Impl::Call(int target, Body body, absl::Duration timeout) {
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

void KVClient::Impl::Submit(std::vector<Outgoing> requests, const std::shared_ptr<Op>& op) {
  {
    absl::MutexLock lock(&op->mu);
    op->replies_pending += static_cast<int>(requests.size());
  }
  for (Outgoing& r : requests) r.op = op;
  io_->Enqueue(std::move(requests));
}

KVClient::Ticket KVClient::Impl::Track(std::shared_ptr<Op> op) {
  absl::MutexLock lock(&tickets_mu_);
  const Ticket t = next_ticket_++;
  tickets_.emplace(t, std::move(op));
  return t;
}

KVClient::Ticket KVClient::Impl::Failed(absl::Status status) {
  auto op = std::make_shared<Op>();
  {
    absl::MutexLock lock(&op->mu);
    op->status = std::move(status);
  }
  return Track(std::move(op));
}

absl::Status KVClient::Impl::RegisterModel(const ModelSpec& model) {
  PS_RETURN_IF_ERROR(model.Validate());
  PS_ASSIGN_OR_RETURN(Envelope reply,
                      Call(client_internal::kSchedulerTarget, DefineModelRequestMsg{model}, options_.request_timeout));
  auto* defined = std::get_if<DefineModelReplyMsg>(&reply.body);
  if (defined == nullptr) {
    return absl::DataLossError(absl::StrCat("scheduler answered the model with ", BodyName(reply.body)));
  }
  const int map_servers = defined->map_servers > 0 ? defined->map_servers : num_servers_;
  PS_ASSIGN_OR_RETURN(map_, PartitionMap::FromSlices(defined->model.tensors, map_servers, defined->slices,
                                                     static_cast<int>(defined->model.tables.size()),
                                                     defined->model.placement.table_shards));
  PS_RETURN_IF_ERROR(CheckSlicesFit(map_.slices(), options_.security.max_frame_bytes));
  model_ = defined->model;
  table_hash_.clear();
  for (const TableSpec& t : model_.tables) table_hash_.push_back(TableHash(t.name));
  pulled_version_ = std::make_unique<std::atomic<uint64_t>[]>(map_.slices().size());
  for (size_t i = 0; i < map_.slices().size(); ++i) pulled_version_[i].store(0);
  compression_ = std::make_unique<PushCompression>(model_, map_, CompressThreads(options_.compress_threads));
  delta_pulls_ = std::make_unique<DeltaPulls>(model_, map_);
  bool deltas = false;
  for (const Slice& slice : map_.slices()) deltas = deltas || delta_pulls_->Has(slice.key);
  if (!deltas) delta_pulls_.reset();
  io_->set_versions(pulled_version_.get(), map_.slices().size(), delta_pulls_.get());
  return absl::OkStatus();
}

absl::StatusOr<int> KVClient::Impl::TensorIndex(absl::string_view name) const {
  for (size_t i = 0; i < model_.tensors.size(); ++i) {
    if (model_.tensors[i].name == name) return static_cast<int>(i);
  }
  return absl::NotFoundError(absl::StrCat("no tensor named '", name, "' in the registered model"));
}

template <typename Buffer>
absl::Status KVClient::Impl::CheckBuffers(absl::Span<const Buffer> buffers) const {
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

absl::Span<const uint32_t> KVClient::Impl::SlicesOf(int tensor, uint64_t offset, uint64_t size) const {
  const absl::Span<const uint32_t> keys = map_.SlicesOfTensor(tensor);
  size_t first = 0;
  while (first < keys.size() && map_.slices()[keys[first]].offset < offset) ++first;
  size_t end = first;
  uint64_t covered = offset;
  while (end < keys.size() && covered < offset + size) covered += map_.slices()[keys[end++]].length;
  const bool whole =
      size > 0 && first < keys.size() && map_.slices()[keys[first]].offset == offset && covered == offset + size;
  return whole ? keys.subspan(first, end - first) : absl::Span<const uint32_t>();
}

void KVClient::Impl::AddPush(absl::Span<const ConstTensorBuffer> grads, int64_t step, bool assign,
                             const std::shared_ptr<Op>& op, RequestBuilder& requests) {
  // Every slice's part of the gradients; those that compress are encoded
  // first, over the compression threads.
  std::vector<PushCompression::Job> parts, jobs;
  std::vector<const std::shared_ptr<const void>*> owners;  // of each part
  for (const ConstTensorBuffer& g : grads) {
    for (uint32_t key : SlicesOf(g.tensor, g.offset, g.data.size())) {  // checked: CheckBuffers
      const Slice& slice = map_.slices()[key];
      parts.push_back({key, g.data.subspan(slice.offset - g.offset, slice.length)});
      owners.push_back(&g.owner);
      if (!assign && compression_->Compresses(key)) jobs.push_back(parts.back());
    }
  }
  std::vector<zmq::message_t> encoded = compression_->EncodeAll(jobs, rank_, step);
  size_t next = 0;  // the next of `encoded`, in the same order
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& [key, values] = parts[i];
    const Slice& slice = map_.slices()[key];
    Outgoing& out = requests.For(slice);
    if (!std::holds_alternative<PushRequestMsg>(out.envelope.body)) {
      out.envelope.body = PushRequestMsg{step, {}, std::nullopt};
    }
    const bool compressed = next < jobs.size() && jobs[next].key == key;
    std::get<PushRequestMsg>(out.envelope.body)
        .slices.push_back(SliceData{key, slice.length, pulled_version_[key].load(std::memory_order_relaxed),
                                    /*rows=*/0, compressed});
    if (compressed) {  // the caller's buffer is free again once encoded
      out.payloads.push_back(std::move(encoded[next++]));
      continue;
    }
    if (*owners[i] != nullptr) {  // lent: the frame holds the memory, the caller does not wait for it
      out.payloads.emplace_back(const_cast<float*>(values.data()), slice.length * sizeof(float),
                                &client_internal::ReleaseOwner, new std::shared_ptr<const void>(*owners[i]));
      continue;
    }
    {
      absl::MutexLock lock(&op->mu);
      ++op->frames_held;
    }
    out.payloads.emplace_back(const_cast<float*>(values.data()), slice.length * sizeof(float),
                              &client_internal::ReleaseFrame, new std::shared_ptr<Op>(op));
  }
}

PullRequestMsg& KVClient::Impl::PullOf(Outgoing& req, int64_t step) const {
  const uint64_t timeout_ms = absl::ToInt64Milliseconds(options_.request_timeout);
  if (auto* push = std::get_if<PushRequestMsg>(&req.envelope.body)) {
    if (!push->then_pull.has_value()) push->then_pull = PullRequestMsg{step, {}, timeout_ms};
    return *push->then_pull;
  }
  if (!std::holds_alternative<PullRequestMsg>(req.envelope.body)) {
    req.envelope.body = PullRequestMsg{step, {}, timeout_ms};
  }
  return std::get<PullRequestMsg>(req.envelope.body);
}

void KVClient::Impl::AddPull(absl::Span<const TensorBuffer> params, int64_t step, RequestBuilder& requests) {
  for (const TensorBuffer& p : params) {
    for (uint32_t key : SlicesOf(p.tensor, p.offset, p.data.size())) {  // checked: CheckBuffers
      const Slice& slice = map_.slices()[key];
      Outgoing& req = requests.For(slice);
      PullRequestMsg& pull = PullOf(req, step);
      pull.keys.push_back(key);
      // Delta pulls: every key says the version held (0 where not a delta pull).
      if (delta_pulls_ != nullptr) pull.have.push_back(delta_pulls_->Has(key) ? delta_pulls_->Ask(key) : 0);
      req.destinations.push_back(
          client_internal::Destination{key, slice.length, p.data.data() + (slice.offset - p.offset)});
    }
  }
}

KVClient::Ticket KVClient::Impl::SubmitRequests(RequestBuilder& builder, std::shared_ptr<Op> op, bool assign) {
  std::vector<Outgoing> requests = builder.Take();
  for (Outgoing& out : requests) {
    out.envelope.sender = node_id_;
    if (auto* push = std::get_if<PushRequestMsg>(&out.envelope.body)) push->assign = assign;
    // A server answers a pull that waits too long with an error naming what
    // it waited for; give that answer time to arrive before our own timer.
    out.timeout = options_.request_timeout + (out.destinations.empty() ? absl::ZeroDuration() : kReplyGrace);
  }
  Submit(std::move(requests), op);
  return Track(std::move(op));
}

KVClient::Ticket KVClient::Impl::Exchange(const StepRequest& request) {
  if (absl::Status s = CheckBuffers(request.push); !s.ok()) return Failed(s);
  if (absl::Status s = CheckBuffers(request.pull); !s.ok()) return Failed(s);
  if (absl::Status s = CheckRows(request.push_rows, request.pull_rows); !s.ok()) return Failed(s);
  auto op = std::make_shared<Op>();
  RequestBuilder requests(num_servers_, options_.max_request_bytes);
  AddPush(request.push, request.step, request.assign, op, requests);
  if (absl::Status s = AddPushRows(request.push_rows, request.step, request.assign, requests); !s.ok()) {
    return Failed(s);
  }
  // Dense slices first in each pull: the server answers them first.
  AddPull(request.pull, request.pull_step, requests);
  if (absl::Status s = AddPullRows(request.pull_rows, request.pull_step, requests); !s.ok()) return Failed(s);
  return SubmitRequests(requests, std::move(op), request.assign);
}

absl::StatusOr<std::shared_ptr<KVClient::Impl::Op>> KVClient::Impl::Find(Ticket ticket) {
  absl::MutexLock lock(&tickets_mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) {
    return absl::NotFoundError(absl::StrCat("ticket ", ticket, " was never issued or was already collected"));
  }
  return it->second;
}

bool KVClient::Impl::AwaitOp(const std::shared_ptr<Op>& op, absl::Time deadline) {
  const int64_t t0 = io_->metrics().WaitStart();
  // One deadline for both ways of waiting: collecting replies on this
  // thread, then sleeping until the I/O thread completes the op.
  io_->WaitDirect(
      [&] {
        absl::MutexLock lock(&op->mu);
        return op->Done();
      },
      deadline);
  absl::MutexLock lock(&op->mu);
  const bool done = op->mu.AwaitWithDeadline(absl::Condition(op.get(), &Op::Done), deadline);
  io_->metrics().ObserveWait(t0);
  return done;
}

absl::Status KVClient::Impl::Wait(Ticket ticket) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Op> op, Find(ticket));
  // Every request has its own deadline (SubmitRequests), so this ends.
  AwaitOp(op, absl::InfiniteFuture());
  {
    absl::MutexLock lock(&tickets_mu_);
    tickets_.erase(ticket);
  }
  absl::MutexLock op_lock(&op->mu);
  return op->status;
}

absl::StatusOr<bool> KVClient::Impl::Ready(Ticket ticket, absl::Duration timeout) {
  PS_ASSIGN_OR_RETURN(std::shared_ptr<Op> op, Find(ticket));
  return AwaitOp(op, absl::Now() + std::max(timeout, absl::ZeroDuration()));
}

absl::Status KVClient::Impl::Barrier(absl::string_view name, absl::Duration timeout) {
  BarrierRequestMsg req{std::string(name), static_cast<uint64_t>(absl::ToInt64Milliseconds(timeout))};
  return Call(client_internal::kSchedulerTarget, std::move(req), timeout + kReplyGrace).status();
}

namespace {

ServerStats FromWire(StatsReplyMsg&& m) {
  ServerStats s;
  s.pushes_applied = m.pushes_applied;
  s.updates_applied = m.updates_applied;
  s.pulls_served = m.pulls_served;
  s.errors_replied = m.errors_replied;
  s.bytes_in = m.bytes_in;
  s.bytes_out = m.bytes_out;
  s.staleness_histogram = std::move(m.staleness_histogram);
  s.staleness_max = m.staleness_max;
  s.slices_held = m.slices_held;
  s.waited_pull_micros = m.waited_pull_micros;
  s.held_keys = std::move(m.held_keys);
  s.worker_steps = std::move(m.worker_clocks);
  s.max_version = m.max_version;
  s.slices_skipped = m.slices_skipped;
  s.duplicates_dropped = m.duplicates_dropped;
  s.assigns_applied = m.assigns_applied;
  for (const TableStatsMsg& t : m.tables) {
    s.tables.push_back({.table = static_cast<int>(t.table),
                        .rows = t.rows,
                        .bytes = t.bytes,
                        .evictions = t.evictions,
                        .admissions = t.admissions,
                        .rejections = t.rejections,
                        .gradients_dropped = t.gradients_dropped,
                        .rows_pulled = t.rows_pulled,
                        .rows_pushed = t.rows_pushed,
                        .disk_rows = t.disk_rows,
                        .disk_reads = t.disk_reads,
                        .disk_writes = t.disk_writes,
                        .disk_refusals = t.disk_refusals,
                        .expired = t.expired});
  }
  return s;
}

}  // namespace

absl::StatusOr<ServerStats> KVClient::Impl::GetServerStats(int rank) {
  if (rank < 0 || rank >= num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat("server rank ", rank, " not in [0, ", num_servers(), ")"));
  }
  PS_ASSIGN_OR_RETURN(Envelope reply, Call(rank, StatsRequestMsg{}, options_.request_timeout));
  auto* stats = std::get_if<StatsReplyMsg>(&reply.body);
  if (stats == nullptr) return absl::DataLossError("server answered stats with " + std::string(BodyName(reply.body)));
  return FromWire(std::move(*stats));
}

absl::StatusOr<std::optional<ServerStats>> KVClient::Impl::LiveServerStats(int rank) {
  if (io_->failed_over(rank)) return std::nullopt;
  absl::StatusOr<ServerStats> stats = GetServerStats(rank);
  if (!stats.ok() && io_->failed_over(rank)) return std::nullopt;  // it failed over while asked
  PS_RETURN_IF_ERROR(stats.status());
  return *std::move(stats);
}

absl::StatusOr<int64_t> KVClient::Impl::ResumeStep() {
  int64_t step = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < num_servers(); ++s) {
    PS_ASSIGN_OR_RETURN(std::optional<ServerStats> live, LiveServerStats(s));
    if (!live.has_value()) continue;  // dead, its slices led by their backups (--replicas)
    const ServerStats& stats = *live;
    if (stats.slices_held == 0) continue;  // no say (a new server, copies to come)
    if (rank_ >= static_cast<int>(stats.worker_steps.size())) {
      return absl::DataLossError(absl::StrCat("server ", s, " reports the steps of ", stats.worker_steps.size(),
                                              " workers; this is worker ", rank_));
    }
    step = std::min(step, stats.worker_steps[rank_]);
  }
  // No server holds a slice of this worker's (pipeline stage's): nothing pushed.
  return num_servers_ > 0 && step != std::numeric_limits<int64_t>::max() ? step : 0;
}

ClientStats KVClient::Impl::stats() const {
  const client_internal::RecoveryStats r = io_->recovery_stats();
  const client_internal::CallerIoStats c = io_->caller_io_stats();
  return {.pushes_resent = r.pushes_resent,
          .requests_held = r.requests_held,
          .replay_bytes = r.replay_bytes,
          .servers_recovered = r.servers_recovered,
          .requests_resent_off_shm = r.requests_resent_off_shm,
          .requests_rerouted = r.requests_rerouted,
          .requests_fenced = r.requests_fenced,
          .servers_unreachable = r.servers_unreachable,
          .requests_resent_after_cut = r.requests_resent_after_cut,
          .caller_requests_sent = c.requests_sent,
          .caller_messages_read = c.messages_read,
          .shm_servers = io_->shm_servers(),
          .metrics_url = io_->metrics().url()};
}

absl::StatusOr<WorkerInfo> KVClient::Impl::Worker(int rank) const {
  const std::optional<ClusterViewMsg> view = io_->latest_view();
  if (view.has_value()) {
    for (const NodeInfo& n : view->nodes) {
      if (n.role == Role::kWorker && n.rank == rank) return WorkerInfo{n.node_id, n.address, n.public_key};
    }
  }
  return absl::NotFoundError(
      absl::StrCat("worker ", rank, " is not in this worker's cluster view (dead, or it takes no connections)"));
}

absl::Status KVClient::Impl::Finish() {
  return Call(client_internal::kSchedulerTarget, WorkerDoneMsg{}, options_.request_timeout).status();
}

// ---- KVClient: the contract, forwarded -----------------------------------------

KVClient::KVClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KVClient::~KVClient() = default;

absl::StatusOr<std::unique_ptr<KVClient>> KVClient::Connect(const KVClientOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options);
  PS_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<KVClient>(new KVClient(std::move(impl)));
}

int KVClient::rank() const { return impl_->rank(); }
uint32_t KVClient::node_id() const { return impl_->node_id(); }
int KVClient::num_workers() const { return impl_->num_workers(); }
int KVClient::num_servers() const { return impl_->num_servers(); }
absl::Status KVClient::RegisterModel(const ModelSpec& model) { return impl_->RegisterModel(model); }
const ModelSpec& KVClient::model() const { return impl_->model(); }
const PartitionMap& KVClient::partition_map() const { return impl_->partition_map(); }
absl::StatusOr<int> KVClient::TensorIndex(absl::string_view name) const { return impl_->TensorIndex(name); }
absl::StatusOr<int> KVClient::TableIndex(absl::string_view name) const { return impl_->TableIndex(name); }

KVClient::Ticket KVClient::Exchange(const StepRequest& request) { return impl_->Exchange(request); }
KVClient::Ticket KVClient::Push(absl::Span<const ConstTensorBuffer> grads, int64_t step) {
  return impl_->Exchange({.push = grads, .step = step});
}
KVClient::Ticket KVClient::Pull(absl::Span<const TensorBuffer> params, int64_t step) {
  return impl_->Exchange({.pull = params, .pull_step = step});
}
KVClient::Ticket KVClient::PushPull(absl::Span<const ConstTensorBuffer> grads, absl::Span<const TensorBuffer> params,
                                    int64_t step) {
  return impl_->Exchange({.push = grads, .step = step, .pull = params, .pull_step = step + 1});
}
KVClient::Ticket KVClient::PushRows(absl::Span<const ConstRowBuffer> grads, int64_t step) {
  return impl_->Exchange({.push_rows = grads, .step = step});
}
KVClient::Ticket KVClient::Assign(absl::Span<const ConstTensorBuffer> values, absl::Span<const ConstRowBuffer> rows) {
  return impl_->Exchange({.push = values, .push_rows = rows, .assign = true});
}
KVClient::Ticket KVClient::PullRows(absl::Span<const RowBuffer> rows, int64_t step) {
  return impl_->Exchange({.pull_rows = rows, .pull_step = step});
}
absl::Status KVClient::Wait(Ticket ticket) { return impl_->Wait(ticket); }
absl::StatusOr<bool> KVClient::Ready(Ticket ticket, absl::Duration timeout) { return impl_->Ready(ticket, timeout); }
absl::Status KVClient::ExchangeAndWait(const StepRequest& request) { return impl_->Wait(impl_->Exchange(request)); }

absl::Status KVClient::Barrier(absl::string_view name, absl::Duration timeout) { return impl_->Barrier(name, timeout); }
absl::StatusOr<int64_t> KVClient::ResumeStep() { return impl_->ResumeStep(); }
absl::Status KVClient::Finish() { return impl_->Finish(); }
absl::StatusOr<ServerStats> KVClient::GetServerStats(int rank) { return impl_->GetServerStats(rank); }
absl::StatusOr<std::optional<ServerStats>> KVClient::LiveServerStats(int rank) { return impl_->LiveServerStats(rank); }
absl::StatusOr<WorkerInfo> KVClient::Worker(int rank) const { return impl_->Worker(rank); }
ClientStats KVClient::stats() const { return impl_->stats(); }

}  // namespace ps
