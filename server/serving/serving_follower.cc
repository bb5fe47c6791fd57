#include "server/serving/serving_follower.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "glog/logging.h"

namespace ps {
namespace {

// Asks of one round when the servers' steps disagree (sync), before it is skipped.
constexpr int kAttempts = 4;
// The longest a server may wait for a round's step.
constexpr absl::Duration kMaxWait = absl::Seconds(1);
// A round's frames come from the job's own servers, admitted by key: a
// table shard's snapshot may be far larger than a worker's frames.
constexpr uint64_t kMaxRoundFrameBytes = uint64_t{16} << 30;

template <typename T>
std::vector<T> Take(const char*& at, uint64_t n) {
  std::vector<T> out(n);
  if (n > 0) std::memcpy(out.data(), at, n * sizeof(T));
  at += n * sizeof(T);
  return out;
}

bool SyncModel(const ModelSpec& model) {
  if (model.consistency.mode != ConsistencyMode::kSync) return false;
  return std::all_of(model.tables.begin(), model.tables.end(), [](const TableSpec& t) {
    return !t.consistency.has_value() || t.consistency->mode == ConsistencyMode::kSync;
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServingFollower>> ServingFollower::Create(const FollowOptions& options,
                                                                         ServingModel* model) {
  if (options.sync_interval <= absl::ZeroDuration()) return absl::InvalidArgumentError("sync_interval: must be > 0");
  if (options.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("follow timeout: must be > 0");
  PS_ASSIGN_OR_RETURN(const std::string endpoint, NormalizeEndpoint(options.scheduler));
  std::unique_ptr<ServingFollower> follower(new ServingFollower(options, model));
  // A client of the job, as a worker is (the replica's own socket admits its clients).
  SecurityOptions security = options.security;
  security.authorized_keys.clear();
  security.max_frame_bytes = std::max(security.max_frame_bytes, kMaxRoundFrameBytes);
  PS_RETURN_IF_ERROR(security.CheckEndpoint(endpoint, "scheduler"));
  PS_ASSIGN_OR_RETURN(follower->security_, NodeSecurity::Load(security, Role::kWorker));
  PS_ASSIGN_OR_RETURN(follower->scheduler_,
                      ConnectDealer(follower->context_, endpoint, follower->security_, Traffic::kControl,
                                    follower->security_.scheduler_public_key()));
  follower->scheduler_.set(zmq::sockopt::linger, 0);
  return follower;
}

ServingFollower::~ServingFollower() {
  scheduler_.close();
  for (Peer& p : peers_) p.socket.close();
}

absl::Status ServingFollower::Run() {
  absl::Time quiet_until = absl::InfinitePast();
  while (!stop_.load()) {
    const absl::Time next = absl::Now() + options_.sync_interval;
    absl::StatusOr<bool> ended = FollowOnce();
    if (ended.ok() && *ended) {
      LOG(INFO) << "serving replica: the job ended; serving its final model (step " << last_step_ << ")";
      return absl::OkStatus();
    }
    if (!ended.ok() && FinalsComplete()) continue;  // the job ended while a round was out
    if (!ended.ok()) {
      for (Peer& p : peers_) p.socket.close();
      peers_.clear();  // the view again, from the scheduler
      if (absl::Now() >= quiet_until) {
        LOG(WARNING) << "serving replica: " << ended.status().message() << " (serving step " << last_step_
                     << "; trying again)";
        quiet_until = absl::Now() + absl::Seconds(30);
      }
    }
    WaitForNextRound(
        ended.ok() ? next : absl::Now() + std::clamp(options_.sync_interval, absl::Milliseconds(50), absl::Seconds(1)));
  }
  return absl::CancelledError("the serving replica stopped following by request");
}

bool ServingFollower::FinalsComplete() const {
  return !peers_.empty() &&
         std::all_of(peers_.begin(), peers_.end(), [&](const Peer& p) { return finals_.contains(p.rank); });
}

absl::StatusOr<bool> ServingFollower::FollowOnce() {
  if (FinalsComplete()) {
    std::vector<Part> finals;
    for (auto& [rank, part] : finals_) finals.push_back(std::move(part));
    finals_.clear();
    PS_RETURN_IF_ERROR(PublishParts(std::move(finals)));
    return true;
  }
  if (peers_.empty()) PS_RETURN_IF_ERROR(Subscribe());
  uint64_t target = reset_ ? 0 : last_step_ + 1;
  for (int attempt = 0; attempt < kAttempts && !stop_.load(); ++attempt) {
    PS_ASSIGN_OR_RETURN(const Outcome outcome, Round(&target));
    if (outcome != Outcome::kDisagree) return outcome == Outcome::kEnded;
    target += attempt;  // the servers moved on meanwhile: further ahead
  }
  ++skipped_;
  VLOG(1) << "serving replica: a round skipped, the servers' parts stood at different steps";
  return false;
}

absl::Status ServingFollower::Subscribe() {
  const uint64_t id = ++next_request_;
  PS_RETURN_IF_ERROR(
      SendMessage(scheduler_, nullptr, Envelope{kProtocolVersion, id, 0, ServingRequestMsg{ServingKind::kSubscribe}}));
  std::optional<DefineModelReplyMsg> model;
  std::optional<ClusterViewMsg> view;
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (!model.has_value() || !view.has_value()) {
    const absl::Duration left = deadline - absl::Now();
    if (stop_.load()) return absl::CancelledError("stopped");
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the scheduler at ", options_.scheduler, " did not answer within ", absl::FormatDuration(options_.timeout)));
    }
    zmq::pollitem_t item{static_cast<void*>(scheduler_), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 1, 100)));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    absl::StatusOr<RawMessage> raw = ReceiveMessage(scheduler_, /*routed=*/false);
    if (!raw.ok()) continue;
    absl::StatusOr<Envelope> env = DecodeEnvelope(Bytes(raw->header));
    if (!env.ok() || env->request_id != id) continue;
    if (const auto* err = std::get_if<ErrorMsg>(&env->body)) {
      return absl::Status(err->code, absl::StrCat("the scheduler at ", options_.scheduler, ": ", err->message));
    }
    if (auto* m = std::get_if<DefineModelReplyMsg>(&env->body)) model = std::move(*m);
    if (auto* v = std::get_if<ClusterViewMsg>(&env->body)) view = std::move(*v);
  }
  return AdoptView(*model, *view);
}

absl::Status ServingFollower::AdoptView(const DefineModelReplyMsg& model, const ClusterViewMsg& view) {
  if (!spec_.has_value() || !(*spec_ == model.model)) {
    spec_ = model.model;
    held_.clear();
    reset_ = true;
  }
  slices_ = model.slices;
  leader_.assign(slices_.size(), 0);
  shard_of_.assign(slices_.size(), {0, 0});
  absl::flat_hash_map<uint32_t, int> shards;  // per table: shards seen
  for (const Slice& s : slices_) {
    const bool copies = s.key < view.copies.size() && !view.copies[s.key].empty();
    leader_[s.key] = copies ? view.copies[s.key][0] : s.server;
    if (s.table) shard_of_[s.key].first = shards[s.tensor]++;
  }
  for (const Slice& s : slices_) {
    if (s.table) shard_of_[s.key].second = shards[s.tensor];
  }
  const absl::flat_hash_set<uint32_t> dead(view.dead.begin(), view.dead.end());
  std::vector<Peer> peers;
  for (int32_t rank : absl::flat_hash_set<int32_t>(leader_.begin(), leader_.end())) {
    const NodeInfo* node = nullptr;
    for (const NodeInfo& n : view.nodes) {
      if (n.role == Role::kServer && n.rank == rank && !dead.contains(n.node_id) &&
          (node == nullptr || n.node_id > node->node_id)) {
        node = &n;
      }
    }
    if (node == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("server ", rank, " leads slices but the job's view has no live server ", rank));
    }
    PS_ASSIGN_OR_RETURN(zmq::socket_t socket,
                        ConnectDealer(context_, node->address, security_, Traffic::kData, node->public_key));
    socket.set(zmq::sockopt::linger, 0);
    peers.push_back(Peer{rank, node->node_id, node->address, std::move(socket)});
  }
  peers_ = std::move(peers);
  return absl::OkStatus();
}

absl::Status ServingFollower::Ask(Peer& peer, uint64_t request_id, uint64_t target) {
  ServingRequestMsg request{ServingKind::kRound};
  request.target_step = target;
  request.wait_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(std::min(options_.sync_interval, kMaxWait)));
  for (const Slice& s : slices_) {
    if (leader_[s.key] != peer.rank) continue;
    auto it = held_.find(s.key);
    if (it == held_.end()) continue;
    // A cut is the numbering of the server that made it.
    request.held.push_back(
        ServingPart{s.key, it->second.version, it->second.cut_node == peer.node_id ? it->second.cut : 0});
  }
  return SendMessage(peer.socket, nullptr, Envelope{kProtocolVersion, request_id, 0, std::move(request)});
}

absl::StatusOr<ServingFollower::Outcome> ServingFollower::Round(uint64_t* target) {
  const uint64_t id = ++next_request_;
  for (Peer& p : peers_) PS_RETURN_IF_ERROR(Ask(p, id, *target));
  const absl::Duration wait = std::min(options_.sync_interval, kMaxWait);
  PS_ASSIGN_OR_RETURN(std::vector<Part> parts, Collect(id, absl::Now() + wait + options_.timeout));
  PS_RETURN_IF_ERROR(CheckCovers(parts));
  uint64_t low = std::numeric_limits<uint64_t>::max(), high = 0;
  bool exact = true, ended = true;
  for (const Part& p : parts) {
    low = std::min(low, p.reply.step);
    high = std::max(high, p.reply.step);
    exact = exact && p.reply.exact;
    ended = ended && p.reply.job_ended;
  }
  if (SyncModel(*spec_) && !ended && (!exact || low != high)) {
    *target = high + 1;
    return Outcome::kDisagree;
  }
  PS_RETURN_IF_ERROR(PublishParts(std::move(parts)));
  if (ended) finals_.clear();
  return ended ? Outcome::kEnded : Outcome::kPublished;
}

absl::StatusOr<std::vector<ServingFollower::Part>> ServingFollower::Collect(uint64_t request_id, absl::Time deadline) {
  std::vector<Part> parts;
  absl::flat_hash_set<int32_t> answered;
  std::vector<zmq::pollitem_t> items;
  for (Peer& p : peers_) items.push_back(zmq::pollitem_t{static_cast<void*>(p.socket), 0, ZMQ_POLLIN, 0});
  while (answered.size() < peers_.size()) {
    const absl::Duration left = deadline - absl::Now();
    if (stop_.load()) return absl::CancelledError("stopped");
    if (FinalsComplete()) return absl::AbortedError("the job ended while a round was out");
    if (left <= absl::ZeroDuration()) {
      std::vector<int32_t> missing;
      for (const Peer& p : peers_) {
        if (!answered.contains(p.rank)) missing.push_back(p.rank);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("server(s) ", absl::StrJoin(missing, ", "), " did not answer a round in time"));
    }
    zmq::poll(items.data(), items.size(),
              std::chrono::milliseconds(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 1, 100)));
    for (size_t i = 0; i < peers_.size(); ++i) {
      if ((items[i].revents & ZMQ_POLLIN) == 0) continue;
      PS_ASSIGN_OR_RETURN(std::optional<Part> part, Receive(peers_[i], request_id));
      if (!part.has_value() || answered.contains(part->rank)) continue;
      answered.insert(part->rank);
      parts.push_back(std::move(*part));
    }
  }
  return parts;
}

absl::StatusOr<std::optional<ServingFollower::Part>> ServingFollower::Receive(Peer& peer, uint64_t request_id) {
  absl::StatusOr<RawMessage> raw = ReceiveMessage(peer.socket, /*routed=*/false);
  if (!raw.ok()) return std::nullopt;
  absl::StatusOr<Envelope> env = DecodeEnvelope(Bytes(raw->header));
  if (!env.ok()) return absl::DataLossError(absl::StrCat("server ", peer.rank, " sent an undecodable message"));
  auto* reply = std::get_if<ServingReplyMsg>(&env->body);
  if (reply != nullptr && reply->job_ended) {  // kept for the job's end, whatever it answered
    Part copy{peer.rank, *reply, {}};
    for (zmq::message_t& f : raw->payloads) copy.payloads.emplace_back(f.data(), f.size());
    finals_[peer.rank] = std::move(copy);
  }
  if (env->request_id != request_id) return std::nullopt;  // an earlier round's, given up on
  if (const auto* err = std::get_if<ErrorMsg>(&env->body)) {
    return absl::Status(err->code, absl::StrCat("server ", peer.rank, " (", peer.endpoint, "): ", err->message));
  }
  if (reply == nullptr) {
    return absl::InternalError(absl::StrCat("server ", peer.rank, " answered a round with ", BodyName(env->body)));
  }
  return Part{peer.rank, std::move(*reply), std::move(raw->payloads)};
}

absl::Status ServingFollower::CheckCovers(const std::vector<Part>& parts) const {
  std::vector<bool> covered(slices_.size());
  for (const Part& part : parts) {
    for (const ServingPart& p : part.reply.parts) {
      if (p.key < slices_.size() && leader_[p.key] == part.rank) covered[p.key] = true;
    }
  }
  for (const Slice& s : slices_) {
    if (covered[s.key]) continue;
    return absl::FailedPreconditionError(absl::StrCat("slice ", s.key, " came in no part from server ", leader_[s.key],
                                                      ", its leader: the view changed"));
  }
  return absl::OkStatus();
}

void ServingFollower::WaitForNextRound(absl::Time until) {
  std::vector<zmq::pollitem_t> items;
  for (Peer& p : peers_) items.push_back(zmq::pollitem_t{static_cast<void*>(p.socket), 0, ZMQ_POLLIN, 0});
  while (!stop_.load()) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    const auto ms = std::chrono::milliseconds(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 1, 100));
    if (items.empty()) {
      absl::SleepFor(std::min(left, absl::Milliseconds(100)));
      continue;
    }
    zmq::poll(items.data(), items.size(), ms);
    for (size_t i = 0; i < peers_.size(); ++i) {
      // Only the servers' last rounds are kept; late answers go.
      if ((items[i].revents & ZMQ_POLLIN) != 0) (void)Receive(peers_[i], 0);
    }
  }
}

absl::Status ServingFollower::PublishParts(std::vector<Part> parts) {
  uint64_t low = std::numeric_limits<uint64_t>::max(), high = 0;
  int64_t synced_ms = std::numeric_limits<int64_t>::max();
  bool exact = true;
  uint64_t bytes = 0;
  for (const Part& p : parts) {
    for (const zmq::message_t& f : p.payloads) bytes += f.size();
    low = std::min(low, p.reply.step);
    high = std::max(high, p.reply.step);
    synced_ms = std::min(synced_ms, p.reply.synced_at_ms);
    exact = exact && p.reply.exact;
  }
  ServingModel::Update update;
  update.version = ServingVersion{low, absl::FromUnixMillis(synced_ms), exact && low == high,
                                  absl::StrCat("job at ", options_.scheduler)};
  if (reset_) update.reset = *spec_;
  std::vector<std::pair<uint32_t, Held>> held;
  for (const Part& p : parts) PS_RETURN_IF_ERROR(AddPart(p, &update, &held));
  PS_RETURN_IF_ERROR(model_->Apply(std::move(update)));
  for (const auto& [key, h] : held) held_[key] = h;
  reset_ = false;
  last_step_ = low;
  round_bytes_ += bytes;
  ++published_;
  return absl::OkStatus();
}

absl::Status ServingFollower::AddPart(const Part& part, ServingModel::Update* update,
                                      std::vector<std::pair<uint32_t, Held>>* held) {
  uint32_t node = 0;
  for (const Peer& p : peers_) {
    if (p.rank == part.rank) node = p.node_id;
  }
  size_t frame = 0;
  for (const ServingPart& p : part.reply.parts) {
    const auto bad = [&](absl::string_view what) {
      return absl::DataLossError(absl::StrCat("server ", part.rank, "'s part of slice ", p.key, ": ", what));
    };
    if (p.key >= slices_.size()) return bad("the model has no such slice");
    if (p.values && frame >= part.payloads.size()) return bad("its values are missing");
    const zmq::message_t* values = p.values ? &part.payloads[frame++] : nullptr;
    if (leader_[p.key] != part.rank) continue;  // another's now
    held->emplace_back(p.key, Held{p.version, p.cut, node});
    if (values == nullptr) continue;
    const Slice& s = slices_[p.key];
    const char* at = static_cast<const char*>(values->data());
    if (!s.table) {
      if (values->size() != s.length * sizeof(float)) return bad("its values are not the slice's length");
      update->dense.push_back({spec_->tensors[s.tensor].name, s.offset, Take<float>(at, s.length)});
      continue;
    }
    const TableSpec& t = spec_->tables[s.tensor];
    if (values->size() != p.rows * sizeof(uint64_t) + p.rows * t.dim * sizeof(float) + p.removed * sizeof(uint64_t)) {
      return bad("its frame does not hold the rows and ids it says");
    }
    ServingModel::Update::TableRows rows{t.name, Take<uint64_t>(at, p.rows), Take<float>(at, p.rows * t.dim)};
    rows.removed = Take<uint64_t>(at, p.removed);
    if (p.snapshot) std::tie(rows.shard, rows.shards) = shard_of_[p.key];
    update->tables.push_back(std::move(rows));
  }
  return absl::OkStatus();
}

}  // namespace ps
