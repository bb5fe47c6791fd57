// A server's side of --replicas beyond forwarding (replicator.h): replies
// that wait for the backups, the numbering of pushes made for other
// servers' slices, pushes that wait for a newer cluster view, and the
// copies that bring a slice back to K copies (a primary sends one, a new
// backup takes it). Sync steps forwarded as their sums: replica_steps.cc.

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/events.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"
#include "common/wire/id_coding.h"
#include "common/wire/wire_frames.h"
#include "glog/logging.h"
#include "server/replication/replica_protocol.h"
#include "server/store/checkpoint_codec.h"

namespace ps {
namespace {

// The ids of a forwarded pull's shard `meta`: raw, 8 bytes each, or (with
// `compressed`) an id section that is the whole frame.
absl::Status PulledIds(const SliceData& meta, const zmq::message_t& frame, std::vector<uint64_t>* ids) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("pulled rows of slice ", meta.key, ": ", why));
  };
  if (meta.compressed) {
    absl::StatusOr<size_t> used = DecodeIds(AsView(frame), meta.rows, ids);
    if (!used.ok()) return refuse(used.status().message());
    if (*used != frame.size()) {
      return refuse(absl::StrCat(frame.size() - *used, " bytes after the id section of its ", meta.rows, " ids"));
    }
    return absl::OkStatus();
  }
  if (frame.size() != uint64_t{meta.rows} * sizeof(uint64_t)) {
    return refuse(absl::StrCat(frame.size(), " bytes for ", meta.rows, " ids"));
  }
  ids->resize(meta.rows);
  std::memcpy(ids->data(), frame.data(), frame.size());
  return absl::OkStatus();
}

}  // namespace

void ReplicaProtocol::OnView(const ClusterViewMsg& view) {
  for (const Replicator::Settled& settled : replicator_.OnView(view, self_.rank())) OnReplicated(settled);
  ResendLastSteps();
  server_nodes_.clear();
  for (const NodeInfo& n : view.nodes) {
    if (n.role == Role::kServer) server_nodes_[n.node_id] = n.rank;
  }
}

std::optional<ReplicationStats> ReplicaProtocol::Stats() const {
  if (!replicator_.replicated()) return std::nullopt;
  ReplicationStats r =
      replicator_.Stats(self_.rank(), store_.has_model() ? store_.stats().held_keys : std::vector<uint32_t>{});
  r.diverged = diverged_;
  r.repaired = copies_repaired_;
  r.steps_forwarded = steps_forwarded_;
  return r;
}

void ReplicaProtocol::OnReady(PollSet& poll, int tag) {
  for (const Replicator::Settled& settled : replicator_.OnReady(poll, tag)) OnReplicated(settled);
}

std::vector<uint32_t> ReplicaProtocol::PullKeys(const PullRequestMsg& pull) {
  std::vector<uint32_t> keys = pull.keys;
  for (const RowsRequest& rows : pull.rows) keys.push_back(rows.key);
  return keys;
}

absl::Status ReplicaProtocol::CheckServes(const std::vector<uint32_t>& keys) const {
  if (absl::Status s = replicator_.CheckLeads(keys, self_.rank()); !s.ok()) {
    return MovedError(s.message(), runtime_.view_epoch());
  }
  for (uint32_t key : keys) {
    if (auto it = handing_over_.find(key); it != handing_over_.end()) {
      return MovedError(absl::StrCat("slice ", key, " is moving from server ", self_.rank(), " to another server"),
                        it->second);
    }
  }
  return absl::OkStatus();
}

absl::Status ReplicaProtocol::CheckLeads(const PushRequestMsg& push) const {
  if (absl::Status s = replicator_.CheckApply(push, self_.rank(), -1); !s.ok()) {
    return MovedError(s.message(), runtime_.view_epoch());
  }
  std::vector<uint32_t> keys;
  for (const SliceData& s : push.slices) keys.push_back(s.key);
  if (push.then_pull.has_value()) {
    for (uint32_t key : PullKeys(*push.then_pull)) keys.push_back(key);
  }
  return CheckServes(keys);
}

absl::StatusOr<uint64_t> ReplicaProtocol::ForwardPush(RawMessage& raw, int worker, uint64_t request_id,
                                                      const PushRequestMsg& push) {
  if (!replicator_.replicated()) return 0;  // one copy: nothing to forward
  const std::vector<int32_t> backups = replicator_.BackupsOf(push, self_.rank());
  if (backups.empty()) return 0;
  const uint64_t token = next_forward_++;
  PS_RETURN_IF_ERROR(replicator_.Forward(token, self_.node_id(), self_.rank(), runtime_.view_epoch(), worker, push,
                                         raw.payloads, backups));
  awaiting_backups_.emplace(token, AwaitingBackups{zmq::message_t(raw.routing_id.data(), raw.routing_id.size()), worker,
                                                   request_id, push.then_pull});
  return token;
}

void ReplicaProtocol::RefusedHere(uint64_t token) {
  awaiting_backups_.erase(token);
  NoteRefusedHere(token);
}

void ReplicaProtocol::AwaitBackups(uint64_t token, const zmq::message_t& routing_id, int worker, uint64_t request_id,
                                   PullReplyMsg reply, std::vector<zmq::message_t> payloads) {
  awaiting_backups_.emplace(token, AwaitingBackups{zmq::message_t(routing_id.data(), routing_id.size()), worker,
                                                   request_id, std::nullopt, std::move(reply), std::move(payloads)});
}

void ReplicaProtocol::OnReplicated(const Replicator::Settled& settled) {
  OnSettled(settled);
  if (!releases_.empty()) FinishReleases();  // a release may wait for this forward
}

void ReplicaProtocol::OnSettled(const Replicator::Settled& settled) {
  if (durable_asks_.erase(settled.token) > 0) {
    if (!settled.status.ok()) {
      LOG(ERROR) << "server " << self_.rank() << ": server " << settled.backup
                 << " did not checkpoint a slice handed over to it: " << settled.status;
    }
    return;
  }
  if (settled.late) {
    if (refused_here_.contains(settled.token)) return;  // refused by every copy alike
    ++diverged_;
    LOG(ERROR) << "server " << self_.rank() << ": backup server " << settled.backup
               << " could not apply an update this server applied, so its copy differs (" << diverged_
               << " such so far): " << settled.status;
    RepairCopies(settled);
    return;
  }
  if (copy_requests_.contains(settled.token)) {
    OnCopySettled(settled.token, settled.status);
    return;
  }
  if (auto waiting = token_replies_.find(settled.token); waiting != token_replies_.end()) {
    const std::vector<uint64_t> ids = std::move(waiting->second);
    token_replies_.erase(waiting);
    absl::erase_if(resent_steps_, [&](const auto& resent) { return resent.second == settled.token; });
    for (uint64_t id : ids) EndWait(id, settled.status);
    return;
  }
  auto it = awaiting_backups_.find(settled.token);
  if (it == awaiting_backups_.end()) return;
  AwaitingBackups a = std::move(it->second);
  awaiting_backups_.erase(it);
  if (a.reply.has_value()) {  // a pull: served here already
    if (!settled.status.ok()) {
      ++diverged_;
      LOG(ERROR) << "server " << self_.rank()
                 << ": a backup could not read the table rows a pull read here, so its copy "
                 << "differs (" << diverged_ << " such so far): " << settled.status;
    }
    host_.ReplyTo(a.routing_id, a.request_id, std::move(*a.reply), std::move(a.payloads), a.worker);
  } else {
    AnswerPush(a, settled.status);
  }
}

void ReplicaProtocol::OnCopySettled(uint64_t token, const absl::Status& status) {
  const CopyRequest c = copy_requests_.at(token);
  copy_requests_.erase(token);
  if (c.repair) {
    OnRepaired(c.key, c.server, status);
    return;
  }
  if (!status.ok()) replicator_.DropJoining(c.key, c.server);
  LOG(INFO) << "server " << self_.rank() << ": copy of slice " << c.key << " to server " << c.server << ": " << status;
  host_.ToScheduler(c.request_id,
                    status.ok() ? Body(AckMsg{}) : Body(ErrorMsg{status.code(), std::string(status.message())}));
}

absl::Status ReplicaProtocol::AwaitView(uint64_t epoch, RawMessage& raw, const absl::Status& refusal, int worker) {
  if (epoch <= runtime_.view_epoch()) return refusal;
  return Hold(raw, epoch, worker);
}

bool ReplicaProtocol::HoldsPushOf(int worker) const {
  return worker >= 0 && std::any_of(awaiting_view_.begin(), awaiting_view_.end(),
                                    [worker](const AwaitingView& w) { return w.worker == worker; });
}

absl::Status ReplicaProtocol::AwaitBehind(int worker, RawMessage& raw) { return Hold(raw, 0, worker); }

absl::Status ReplicaProtocol::Hold(RawMessage& raw, uint64_t epoch, int worker) {
  if (awaiting_view_.size() >= options_.max_view_waiters) {
    return absl::ResourceExhaustedError(
        epoch != 0 ? absl::StrCat("server has ", awaiting_view_.size(), " requests waiting for cluster view ", epoch)
                   : absl::StrCat("server has ", awaiting_view_.size(),
                                  " requests waiting for a newer cluster view, among them an earlier push of worker ",
                                  worker, ", which this one may not overtake"));
  }
  awaiting_view_.push_back(AwaitingView{std::move(raw), runtime_.Now() + options_.view_wait, worker});
  return absl::OkStatus();
}

void ReplicaProtocol::RetryAwaitingView() {
  std::deque<AwaitingView> waiting = std::move(awaiting_view_);
  awaiting_view_.clear();
  for (AwaitingView& w : waiting) {
    const size_t held = awaiting_view_.size();
    host_.HandleAgain(std::move(w.raw));  // handled again: applied, held again, or refused
    if (awaiting_view_.size() > held) awaiting_view_.back().deadline = w.deadline;  // held again: its first deadline
  }
}

void ReplicaProtocol::ExpireAwaitingView() {
  if (awaiting_view_.empty()) return;
  const absl::Time now = runtime_.Now();
  bool pushes_behind = false;  // a push of a worker expired: its later ones need not wait for it
  std::erase_if(awaiting_view_, [&](AwaitingView& w) {
    if (w.deadline > now) return false;
    pushes_behind |= w.worker >= 0;
    auto env = DecodeEnvelope(Bytes(w.raw.header));
    host_.RefuseTo(w.raw.routing_id, env.ok() ? env->request_id : 0,
                   absl::DeadlineExceededError(absl::StrCat("no newer cluster view reached server ", self_.rank(),
                                                            " in time to apply this request (the sender's is newer)")),
                   -1);
    return true;
  });
  if (pushes_behind) RetryAwaitingView();
}

absl::Status ReplicaProtocol::OnForward(const Envelope& env, const PushRequestMsg& push, RawMessage& raw) {
  const absl::StatusOr<int32_t> primary = ServerPeerRank(env);
  if (!primary.ok()) return AwaitUnknownPeer(env, push.view_epoch, raw, primary.status());
  if (absl::Status s = replicator_.CheckApply(push, self_.rank(), *primary); !s.ok()) {
    return AwaitView(push.view_epoch, raw, s);
  }
  ApplyForwarded(env.request_id, *primary, push, raw);
  return absl::OkStatus();
}

void ReplicaProtocol::ApplyForwarded(uint64_t request_id, int32_t primary, const PushRequestMsg& push,
                                     RawMessage& raw) {
  if (push.want_checkpoint && push.slices.empty() && !push.pulled && push.seq == 0) {
    // AskDurable: every update forwarded before is applied here; the slice
    // handed over is in this server's checkpoint before its old one drops it.
    if (host_.CheckpointsEnabled() && store_.has_model()) {
      host_.Checkpoint("a slice handed over to this server");
    }
    host_.ReplyTo(raw.routing_id, request_id, AckMsg{}, {}, -1);
    return;
  }
  // Acknowledged on receipt: this server applies it before it reads anything
  // else, so it holds the update whatever happens to the primary next; the
  // primary's answer to the worker does not wait for this copy's apply.
  host_.ReplyTo(raw.routing_id, request_id, AckMsg{}, {}, -1);
  // (A test's fault is refused as a failed apply is.)
  absl::Status s = options_.fault ? options_.fault(push) : absl::OkStatus();
  std::vector<uint32_t> differ;  // slices refused alone (a step summed again)
  if (s.ok() && push.step_sum) {
    s = ApplyForwardedSteps(push, raw, &differ);
  } else if (s.ok() && push.pulled) {
    s = ReadPulledRows(push, raw);
  } else if (s.ok()) {
    const std::optional<std::vector<bool>> fresh = host_.Fresh(push, push.for_worker);
    if (!fresh.has_value()) return;  // held already (a re-send relayed by a new primary)
    s = host_.ApplyFresh(raw, push.for_worker, push, *fresh);
  }
  if (!s.ok()) {
    // The primary refused it too (the same checks on the same state), or
    // this copy differs from it: the primary, which knows, tells them apart.
    LOG(WARNING) << "server " << self_.rank() << ": "
                 << (push.step_sum ? "a step's sum" : absl::StrCat("a push of worker ", push.for_worker))
                 << " forwarded by primary " << primary << " is refused: " << s;
    ErrorMsg refusal{s.code(), std::string(s.message())};
    refusal.slices = std::move(differ);
    host_.ReplyTo(raw.routing_id, request_id, std::move(refusal), {}, -1);
  }
}

uint64_t ReplicaProtocol::ForwardPulledRows(int worker, const PullRequestMsg& pull) {
  if (!replicator_.replicated() || pull.rows.empty()) return 0;
  PushRequestMsg pulled;
  pulled.clock = pull.clock;
  pulled.pulled = true;
  pulled.seq = pull.pull_id;  // counted once per pull on the backups too
  std::vector<zmq::message_t> frames;
  for (const RowsRequest& rows : pull.rows) {
    SliceData& meta = pulled.slices.emplace_back(
        SliceData{rows.key, 0, store_.Version(rows.key), static_cast<uint32_t>(rows.ids.size())});
    if (rows.delta_ids) {
      // They came delta coded (small integer ids): they go on so, as an id
      // section (common/wire/id_coding.h), not at 8 bytes an id.
      std::string section;
      AppendIds(rows.ids, /*delta=*/true, &section);
      meta.compressed = true;
      frames.push_back(OwnedFrame(std::move(section)));
    } else {
      frames.emplace_back(rows.ids.data(), rows.ids.size() * sizeof(uint64_t));
    }
  }
  const std::vector<int32_t> backups = replicator_.BackupsOf(pulled, self_.rank());
  if (backups.empty()) return 0;
  const uint64_t token = next_forward_++;
  if (absl::Status s = replicator_.Forward(token, self_.node_id(), self_.rank(), runtime_.view_epoch(), worker, pulled,
                                           frames, backups);
      !s.ok()) {
    LOG(ERROR) << "server " << self_.rank() << ": the rows a pull read could not reach every backup: " << s;
    return 0;
  }
  return token;
}

absl::Status ReplicaProtocol::ReadPulledRows(const PushRequestMsg& pulled, const RawMessage& raw) {
  if (raw.payloads.size() != pulled.slices.size()) {
    return absl::InvalidArgumentError(absl::StrCat("pulled rows of ", pulled.slices.size(), " table shards in ",
                                                   raw.payloads.size(), " payload frames"));
  }
  PullRequestMsg pull{pulled.clock, {}, 0};
  for (size_t i = 0; i < pulled.slices.size(); ++i) {
    RowsRequest& rows = pull.rows.emplace_back(RowsRequest{pulled.slices[i].key, {}});
    PS_RETURN_IF_ERROR(PulledIds(pulled.slices[i], raw.payloads[i], &rows.ids));
  }
  PS_RETURN_IF_ERROR(store_.CheckPull(pull));
  std::vector<float> scratch;
  for (const RowsRequest& rows : pull.rows) {
    TableShard* table = store_.Table(rows.key);
    scratch.resize(rows.ids.size() * table->dim());
    table->Read(rows.ids, absl::MakeSpan(scratch), counted_pulls_.First(pulled.for_worker, rows.key, pulled.seq));
  }
  return absl::OkStatus();
}

void ReplicaProtocol::OnAddCopy(uint64_t request_id, const AddCopyRequestMsg& add) {
  absl::Status s = [&]() -> absl::Status {
    if (!replicator_.IsPrimary(add.key, self_.rank())) {
      return absl::FailedPreconditionError(
          absl::StrCat("server ", self_.rank(), " is not the primary of slice ", add.key, " in its view"));
    }
    if (add.release_epoch != 0) return StartRelease(request_id, add);
    PS_ASSIGN_OR_RETURN(SliceImage image, EncodeSliceImage(store_, add.key));
    // Which numbered pushes the image holds: the new copy drops those if a
    // failover re-sends them.
    // And which pulls of its rows it counted: the copy counts none again.
    const SliceCopyMsg copy{add.key, slice_seqs_.Of(add.key), counted_pulls_.Of(add.key), runtime_.view_epoch()};
    const uint64_t token = next_forward_++;
    const size_t bytes = image.image.size(), disk_bytes = image.disk_rows.size();
    PS_RETURN_IF_ERROR(replicator_.SendCopy(token, self_.node_id(), add.server, copy, std::move(image)));
    copy_requests_[token] = CopyRequest{request_id, add.key, add.server};
    LOG(INFO) << "server " << self_.rank() << ": sent server " << add.server << " a copy of slice " << add.key << " ("
              << bytes << " bytes, and " << disk_bytes << " of rows on the disk tier); its updates follow";
    EmitEvent("copy_sent", JsonLine()
                               .Add("rank", self_.rank())
                               .Add("slice", add.key)
                               .Add("to", add.server)
                               .Add("bytes", bytes)
                               .Add("disk_bytes", disk_bytes));
    return absl::OkStatus();
  }();
  if (!s.ok()) {
    LOG(ERROR) << "server " << self_.rank() << ": no copy of slice " << add.key << " for server " << add.server << ": "
               << s;
    host_.ToScheduler(request_id, ErrorMsg{s.code(), std::string(s.message())});
  }
}

void ReplicaProtocol::RepairCopies(const Replicator::Settled& refused) {
  for (uint32_t key : refused.keys) {
    const std::pair<uint32_t, int32_t> copy{key, refused.backup};
    // Its backup still (a copy a move released, or one the view dropped,
    // refuses what follows by design); a repair under way holds the update.
    if (!replicator_.IsPrimary(key, self_.rank()) || !replicator_.ListedBackup(key, refused.backup) ||
        repairing_.contains(copy)) {
      continue;
    }
    // A refusal that named its slices (a step summed again after a failover)
    // is not counted: each failover may cause one.
    if (!refused.named && repairs_made_[copy] >= kMaxRepairs) {
      LOG_EVERY_N(ERROR, 100) << "server " << self_.rank() << ": backup server " << refused.backup
                              << "'s copy of slice " << key << " keeps refusing updates after " << kMaxRepairs
                              << " fresh copies: left as it is (counted as diverged)";
      continue;
    }
    absl::Status s = [&]() -> absl::Status {
      PS_ASSIGN_OR_RETURN(SliceImage image, EncodeSliceImage(store_, key));
      const uint64_t token = next_forward_++;
      const SliceCopyMsg msg{key, slice_seqs_.Of(key), counted_pulls_.Of(key), runtime_.view_epoch()};
      PS_RETURN_IF_ERROR(replicator_.SendCopy(token, self_.node_id(), refused.backup, msg, std::move(image)));
      copy_requests_[token] = CopyRequest{0, key, refused.backup, /*repair=*/true};
      repairing_.insert(copy);
      if (!refused.named) ++repairs_made_[copy];
      return absl::OkStatus();
    }();
    if (s.ok()) {
      LOG(WARNING) << "server " << self_.rank() << ": sent backup server " << refused.backup
                   << " a fresh copy of slice " << key << ", whose update it refused";
    } else {
      LOG(ERROR) << "server " << self_.rank() << ": no fresh copy of slice " << key << " for backup server "
                 << refused.backup << ": " << s;
    }
  }
}

void ReplicaProtocol::OnRepaired(uint32_t key, int32_t backup, const absl::Status& status) {
  repairing_.erase({key, backup});
  // A listed backup: its updates go to it as before, not as to a copy being made.
  replicator_.DropJoining(key, backup);
  if (status.ok()) ++copies_repaired_;
  LOG(INFO) << "server " << self_.rank() << ": fresh copy of slice " << key << " for backup server " << backup << ": "
            << status;
}

void ReplicaProtocol::DropMovedSlices() {
  for (uint32_t key : store_.stats().held_keys) {
    if (replicator_.Keeps(key, self_.rank())) continue;
    store_.Drop(key);
    last_step_workers_.erase(key);
    handing_over_.erase(key);
    LOG(INFO) << "server " << self_.rank() << ": slice " << key << " moved to another server: dropped here";
  }
}

absl::Status ReplicaProtocol::StartRelease(uint64_t request_id, const AddCopyRequestMsg& release) {
  uint64_t durable = 0;
  if (release.server == self_.rank()) {
    // Handed over: from now on a worker's request for it goes to the new
    // primary once the view that names it comes (this epoch or later).
    handing_over_[release.key] = release.release_epoch;
    host_.LetMovedSlicesGo();
    durable = AskDurable(release.key);
  } else {
    replicator_.Exclude(release.key, release.server);
  }
  releases_.push_back(Release{request_id, next_forward_, durable});
  LOG(INFO) << "server " << self_.rank() << ": releasing server " << release.server << "'s copy of slice "
            << release.key << " (moves in view " << release.release_epoch << ")";
  FinishReleases();
  return absl::OkStatus();
}

void ReplicaProtocol::FinishReleases() {
  std::erase_if(releases_, [&](const Release& r) {
    if (durable_asks_.contains(r.durable_token)) return false;  // the new copy is not durable yet
    for (const auto& [token, awaiting] : awaiting_backups_) {
      if (token < r.before_token) return false;  // a forward made before it is not settled yet
    }
    for (const auto& [token, waiting] : token_replies_) {
      if (token < r.before_token) return false;
    }
    // One copy each: every push applied here so far is durable, so that a
    // restart re-sends none that the slice handed over holds already.
    if (r.durable_token != 0 && host_.CheckpointsEnabled()) host_.Checkpoint("a slice handed over to another server");
    host_.ToScheduler(r.request_id, AckMsg{});
    return true;
  });
}

uint64_t ReplicaProtocol::AskDurable(uint32_t key) {
  if (!one_copy_) return 0;  // the other copies keep it
  PushRequestMsg ask;        // no update: the marker ApplyForwarded knows
  ask.want_checkpoint = true;
  ask.slices.push_back(SliceData{key, 0, 0, 0});
  const std::vector<int32_t> to = replicator_.BackupsOf(ask, self_.rank());
  if (to.empty()) return 0;
  const uint64_t token = next_forward_++;
  std::vector<zmq::message_t> no_frames;
  if (absl::Status s =
          replicator_.Forward(token, self_.node_id(), self_.rank(), runtime_.view_epoch(), 0, ask, no_frames, to);
      !s.ok()) {
    LOG(WARNING) << "server " << self_.rank() << ": slice " << key
                 << " is handed over without its new server's checkpoint: " << s;
    return 0;
  }
  durable_asks_.insert(token);
  return token;
}

absl::Status ReplicaProtocol::OnSliceCopy(const Envelope& env, const SliceCopyMsg& copy, RawMessage& raw) {
  const absl::StatusOr<int32_t> sender = ServerPeerRank(env);
  if (!sender.ok()) return AwaitUnknownPeer(env, copy.view_epoch, raw, sender.status());
  const int32_t primary = *sender;
  // Not the slice's primary in this server's view: or not yet (a
  // promotion), when the sender's view is newer.
  if (!replicator_.IsPrimary(copy.key, primary)) {
    return AwaitView(copy.view_epoch, raw,
                     absl::FailedPreconditionError(absl::StrCat("server ", primary, " sent a copy of slice ", copy.key,
                                                                ", which it does not lead")));
  }
  if (raw.payloads.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a slice copy comes in two payload frames (its image, its rows on the disk tier), not ", raw.payloads.size()));
  }
  const zmq::message_t& image = raw.payloads[0];
  const zmq::message_t& disk_rows = raw.payloads[1];
  // A repair (RepairCopies) of a copy this server holds: the old state goes
  // first, its rows on the disk tier with it (they would outlive it). Should
  // the image then fail to apply, the copy is missing here and its primary's
  // next forwards, refused, ask for another (at most kMaxRepairs).
  const bool listed = replicator_.ListedBackup(copy.key, self_.rank());
  if (listed) store_.Drop(copy.key);
  PS_RETURN_IF_ERROR(AddSliceImage(absl::string_view(static_cast<const char*>(image.data()), image.size()),
                                   absl::string_view(static_cast<const char*>(disk_rows.data()), disk_rows.size()),
                                   &store_));
  slice_seqs_.Set(copy.key, copy.seqs);
  counted_pulls_.Add(copy.key, copy.pulls);
  last_step_workers_.erase(copy.key);          // not this copy's last step
  if (!listed) replicator_.AddHeld(copy.key);  // a new copy, which the view lists later
  host_.ApplyLiveWorkers();
  LOG(INFO) << "server " << self_.rank() << ": holds a copy of slice " << copy.key << " from server " << primary << " ("
            << image.size() << " bytes, and " << disk_rows.size() << " of rows on the disk tier)";
  EmitEvent("copy_held", JsonLine()
                             .Add("rank", self_.rank())
                             .Add("slice", copy.key)
                             .Add("from", primary)
                             .Add("bytes", image.size())
                             .Add("disk_bytes", disk_rows.size()));
  host_.ReplyTo(raw.routing_id, env.request_id, AckMsg{}, {}, -1);
  return absl::OkStatus();
}

}  // namespace ps
