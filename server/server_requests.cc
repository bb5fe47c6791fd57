// The workers' requests to a server: pushes (numbered, applied now or parked
// until their step, forwarded to the backups of their slices), pulls
// (answered now or parked), the stats, and the replies.

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/base/dispatch.h"
#include "common/wire/codec.h"
#include "common/wire/wire_frames.h"
#include "glog/logging.h"
#include "server/request_order.h"
#include "server/server_impl.h"

namespace ps {

void Server::Impl::OnWorkerMessage(RawMessage raw) {
  const int64_t t0 = metrics_.Now();
  absl::StatusOr<Envelope> env = DecodeEnvelope(Bytes(raw.header));
  OnWorkerMessage(std::move(raw), std::move(env), t0);
}

void Server::Impl::OnWorkerMessages(std::vector<RawMessage> batch) {
  if (batch.size() < 2) {  // nothing to order (most polls, or none)
    for (RawMessage& raw : batch) OnWorkerMessage(std::move(raw));
    return;
  }
  std::vector<absl::StatusOr<Envelope>> envs;
  std::vector<QueuedRequest> queued;
  for (const RawMessage& raw : batch) {
    absl::StatusOr<Envelope>& env = envs.emplace_back(DecodeEnvelope(Bytes(raw.header)));
    queued.push_back(env.ok() ? QueuedRequest{env->sender, env->priority} : QueuedRequest{});
  }
  // Each request's time in the metrics starts when it is served, as for one alone.
  for (size_t i : ServeOrder(queued)) OnWorkerMessage(std::move(batch[i]), std::move(envs[i]), metrics_.Now());
}

void Server::Impl::OnWorkerMessage(RawMessage raw, absl::StatusOr<Envelope> env, int64_t t0) {
  counters_.bytes_in += raw.header.size();
  for (const auto& p : raw.payloads) counters_.bytes_in += p.size();
  if (!env.ok()) {
    ReplyError(raw.routing_id, 0, env.status());
    return;
  }
  absl::Status s;
  if (env->version != kProtocolVersion) {
    s = absl::FailedPreconditionError(
        absl::StrCat("protocol version ", env->version, "; this server speaks ", kProtocolVersion));
  } else {
    s = HandleWorkerRequest(*env, raw);
  }
  if (!s.ok()) ReplyError(raw.routing_id, env->request_id, s);
  metrics_.ObserveRequest(env->body, t0);
}

StatsReplyMsg Server::Impl::Stats() const {
  StatsReplyMsg stats = store_.stats();
  stats.pulls_served = counters_.pulls_served;
  stats.errors_replied = counters_.errors_replied;
  stats.bytes_in = counters_.bytes_in;
  stats.bytes_out = counters_.bytes_out;
  stats.waited_pull_micros = counters_.waited_pull_micros;
  stats.duplicates_dropped = seqs_.duplicates() + replication_.slice_seqs().duplicates();
  stats.tables = store_.TableStats();
  if (store_.has_model()) {
    // A server holding no slice (yet: --replicas copies come later) has no
    // say in where a worker resumes.
    for (int w = 0; w < store_.num_workers() && stats.slices_held > 0; ++w) {
      stats.worker_clocks.push_back(store_.WorkerClock(w));
    }
    stats.max_version = store_.MaxVersion();
  }
  return stats;
}

absl::Status Server::Impl::OnWorkerPush(const Envelope& env, RawMessage& raw, const PushRequestMsg& push) {
  PS_ASSIGN_OR_RETURN(const int worker, membership_.WorkerOf(env, raw));
  // Numbered by this server: taken in the order numbered, so not ahead of
  // an earlier push of its worker that waits for a newer view (one that
  // acts on the view moving a slice here, reaching it before that view).
  const bool numbered_here = push.origin < 0 && push.seq != 0;
  if (numbered_here && replication_.HoldsPushOf(worker)) return replication_.AwaitBehind(worker, raw);
  if (absl::Status s = replication_.CheckLeads(push); !s.ok()) {
    if (push.origin >= 0 || !seqs_.Holds(worker, push.seq)) {
      return replication_.AwaitView(push.view_epoch, raw, s, numbered_here ? worker : -1);
    }
    // Re-sent after a restart and held already (applied before its slice
    // moved on): answered as applied; a pull riding on it goes elsewhere.
    if (!push.then_pull.has_value()) {
      Reply(raw.routing_id, env.request_id, AckMsg{}, {}, worker);
      return absl::OkStatus();
    }
    return MovedError(s.message(), MovedEpoch(s), /*push_applied=*/true);
  }
  return OnPush(env.request_id, worker, push, raw);
}

absl::Status Server::Impl::HandleWorkerRequest(const Envelope& env, RawMessage& raw) {
  return std::visit(
      Overloaded{
          [&](const StatsRequestMsg&) {
            Reply(raw.routing_id, env.request_id, Stats());
            return absl::OkStatus();
          },
          [&](const PushRequestMsg& push) -> absl::Status {
            if (push.for_worker >= 0) return replication_.OnForward(env, push, raw);  // a primary's (--replicas)
            return OnWorkerPush(env, raw, push);
          },
          [&](const SliceCopyMsg& copy) { return replication_.OnSliceCopy(env, copy, raw); },
          [&](const ShmOfferMsg&) { return OnShmOffer(env, raw); },
          [&](const HeartbeatMsg&) -> absl::Status {
            // A worker's probe: its requests wait here (a sync step, a
            // partition?); the answer says this server hears it.
            PS_ASSIGN_OR_RETURN(const int worker, membership_.WorkerOf(env, raw));
            Reply(raw.routing_id, env.request_id, AckMsg{}, {}, worker);
            return absl::OkStatus();
          },
          [&](const ServingRequestMsg& m) {  // a serving replica's round: not a worker
            return feed_.OnRequest(raw.routing_id.to_string(), env.request_id, m, runtime_.Now());
          },
          [&](const PullRequestMsg& pull) -> absl::Status {
            PS_ASSIGN_OR_RETURN(const int worker, membership_.WorkerOf(env, raw));
            PS_RETURN_IF_ERROR(replication_.CheckServes(ReplicaProtocol::PullKeys(pull)));
            PS_RETURN_IF_ERROR(store_.CheckPull(pull));
            StartPull(raw.routing_id, worker, env.request_id, pull);
            return absl::OkStatus();
          },
          OnlyFor<ErrorMsg, AckMsg, RegisterRequestMsg, RegisterReplyMsg, ClusterViewMsg, DefineModelRequestMsg,
                  DefineModelReplyMsg, CreateSlicesRequestMsg, BarrierRequestMsg, WorkerDoneMsg, ShutdownMsg,
                  PullReplyMsg, StatsReplyMsg, ShmGrantMsg, AddCopyRequestMsg, DrainRequestMsg, ServingReplyMsg>(
              [&](const auto&) -> absl::Status {
                PS_RETURN_IF_ERROR(membership_.WorkerOf(env, raw).status());
                return absl::InvalidArgumentError(absl::StrCat("a server does not take ", BodyName(env.body)));
              }),
      },
      env.body);
}

absl::Status Server::Impl::OnShmOffer(const Envelope& env, const RawMessage& raw) {
  // From a worker, or from a primary forwarding to this backup (--replicas).
  int worker = -1;
  if (!replication_.ServerPeerRank(env).ok()) {
    PS_ASSIGN_OR_RETURN(worker, membership_.WorkerOf(env, raw));
  }
  PS_ASSIGN_OR_RETURN(ShmGrantMsg grant, shm_.Offer(raw));
  Reply(raw.routing_id, env.request_id, std::move(grant), {}, worker);
  return absl::OkStatus();
}

absl::Status Server::Impl::OnPush(uint64_t request_id, int worker, const PushRequestMsg& push, RawMessage& raw) {
  if (push.pulled) return absl::InvalidArgumentError("pulled rows come only from a primary server, forwarded");
  if (push.step_sum) return absl::InvalidArgumentError("step sums come only from a primary server, forwarded");
  // A bad pull part refuses the whole request before anything is applied.
  if (push.then_pull.has_value()) PS_RETURN_IF_ERROR(store_.CheckPull(*push.then_pull));
  if (push.want_checkpoint) checkpointer_.Want();
  // After a restart, workers re-send numbered sync pushes of several steps
  // back to back: one for a step its slices have not reached waits (as do
  // this worker's later pushes, to keep their order) until the other
  // workers' re-sent pushes complete the step before.
  const bool behind_own = std::any_of(parked_pushes_.begin(), parked_pushes_.end(),
                                      [&](const ParkedPush& p) { return p.worker == worker; });
  if (push.seq != 0 && (behind_own || store_.PushAhead(push))) {
    if (parked_pushes_.size() >= kMaxParkedPulls) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server has ", parked_pushes_.size(), " pushes waiting for their step already; refusing more"));
    }
    const absl::Time now = runtime_.Now();
    parked_pushes_.push_back(
        ParkedPush{std::move(raw), worker, request_id, push, now, now + options_.default_pull_timeout});
    return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(ApplyPush(raw, worker, request_id, push));
  ApplyParkedPushes();
  return absl::OkStatus();
}

std::optional<std::vector<bool>> Server::Impl::Fresh(const PushRequestMsg& push, int worker) {
  if (!replication_.replicated()) {
    if (!seqs_.Admit(worker, push.seq)) return std::nullopt;
    return std::vector<bool>();
  }
  // With replicas, told per slice (a failover's re-sends may find some held, some not).
  const int32_t origin = push.origin >= 0 ? push.origin : rank();
  std::vector<bool> fresh = replication_.slice_seqs().Admit(push, origin, worker);
  // Its own numbering reaches a server from the worker alone, in order: a
  // seq its checkpoint or state holds (a restart's re-send) is held by all.
  if (origin == rank() && !seqs_.Admit(worker, push.seq)) return std::nullopt;
  if (!push.slices.empty() && std::find(fresh.begin(), fresh.end(), true) == fresh.end()) return std::nullopt;
  return fresh;
}

absl::Status Server::Impl::ApplyPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push) {
  const std::optional<std::vector<bool>> fresh = Fresh(push, worker);
  if (push.for_worker < 0 && replication_.HasSummedSlices(push)) {
    return replication_.ApplySummedPush(raw, worker, request_id, push, fresh);
  }
  // --replicas: the backups apply it while this server does, and the worker
  // hears once every one has. A re-sent push goes to them even when this
  // copy had it: a primary that died may have reached some and not others.
  uint64_t token = 0;
  if (push.for_worker < 0) {
    PS_ASSIGN_OR_RETURN(token, replication_.ForwardPush(raw, worker, request_id, push));
  }
  if (!fresh.has_value()) {
    // Re-sent after a restart or a failover, and already in the state: answered, not applied again.
    LOG_EVERY_N(INFO, 1000) << "server " << rank() << ": push " << push.seq << " of worker " << worker
                            << " was applied before it was re-sent; dropped";
  } else if (absl::Status s = ApplyFresh(raw, worker, push, *fresh); !s.ok()) {
    if (token != 0) replication_.RefusedHere(token);  // the worker hears why now (the backups refuse it alike)
    return s;
  }
  if (token != 0) return absl::OkStatus();
  if (push.then_pull.has_value()) {
    StartPull(raw.routing_id, worker, request_id, *push.then_pull, /*after_push=*/true);
  } else {
    Reply(raw.routing_id, request_id, AckMsg{}, {}, worker);
  }
  return absl::OkStatus();
}

absl::Status Server::Impl::ApplyFresh(RawMessage& raw, int worker, const PushRequestMsg& push,
                                      const std::vector<bool>& fresh) {
  const uint64_t skipped = store_.stats().slices_skipped;
  PS_RETURN_IF_ERROR(HandlePush(worker, push, raw, fresh.empty() ? nullptr : &fresh));
  replication_.ForwardCompletedSteps();
  if (store_.stats().slices_skipped > skipped) {
    LOG_EVERY_N(INFO, 100) << "server " << rank() << ": worker " << worker << "'s push for step " << push.clock
                           << " skipped " << store_.stats().slices_skipped - skipped
                           << " slices that hold that step from its previous node (" << store_.stats().slices_skipped
                           << " such so far)";
  }
  checkpointer_.CountPush();
  AnswerReadyPulls();
  return absl::OkStatus();
}

void Server::Impl::ApplyParkedPushes() {
  for (bool progress = true; progress && !parked_pushes_.empty();) {
    progress = false;
    std::vector<int> blocked;  // workers whose oldest parked push must wait
    for (auto it = parked_pushes_.begin(); it != parked_pushes_.end();) {
      const bool ready =
          std::find(blocked.begin(), blocked.end(), it->worker) == blocked.end() && !store_.PushAhead(it->push);
      if (!ready) {
        blocked.push_back(it->worker);
        ++it;
        continue;
      }
      ParkedPush p = std::move(*it);
      it = parked_pushes_.erase(it);
      if (absl::Status s = ApplyPush(p.raw, p.worker, p.request_id, p.push); !s.ok()) {
        ReplyError(p.raw.routing_id, p.request_id, s, p.worker);
      }
      progress = true;
      break;  // the deque changed; start over
    }
  }
}

void Server::Impl::StartPull(zmq::message_t& routing_id, int worker, uint64_t request_id, const PullRequestMsg& pull,
                             bool after_push) {
  if (after_push) {
    // Its push waited for the backups, and a slice it reads began to move
    // on meanwhile: the pull goes to the slice's next server (read here,
    // its rows would reach backups that follow that server already).
    if (absl::Status s = replication_.CheckServes(ReplicaProtocol::PullKeys(pull)); !s.ok()) {
      ReplyError(routing_id, request_id, MovedError(s.message(), MovedEpoch(s), /*push_applied=*/true), worker);
      return;
    }
  }
  if (store_.PullReady(pull)) {
    AnswerPull(routing_id, worker, request_id, pull);
    return;
  }
  if (parked_.size() >= kMaxParkedPulls) {
    ReplyError(routing_id, request_id,
               absl::ResourceExhaustedError(
                   absl::StrCat("server has ", parked_.size(), " pulls waiting already; refusing more")));
    return;
  }
  const absl::Duration timeout = pull.timeout_ms > 0 ? absl::Milliseconds(std::min<uint64_t>(pull.timeout_ms, 86400000))
                                                     : options_.default_pull_timeout;
  const absl::Time now = runtime_.Now();
  parked_.push_back(ParkedPull{std::move(routing_id), worker, request_id, pull, now, now + timeout, after_push});
}

absl::Status Server::Impl::DecodeCompressed(const PushRequestMsg& push, const std::vector<bool>* fresh,
                                            const RawMessage& raw, std::vector<std::vector<float>>* out) {
  std::vector<size_t> compressed;
  for (size_t i = 0; i < raw.payloads.size() && i < push.slices.size(); ++i) {
    if (push.slices[i].compressed && (fresh == nullptr || (i < fresh->size() && (*fresh)[i]))) {
      PS_RETURN_IF_ERROR(store_.CheckDeclared(push.slices[i]));  // before decoding allocates what it declares
      compressed.push_back(i);
    }
  }
  std::vector<absl::Status> status(compressed.size());
  const auto decode = [&](size_t j) {
    const size_t i = compressed[j];
    status[j] = DecodePayload(push.slices[i], AsView(raw.payloads[i]), &(*out)[i]);
  };
  if (compressed.size() == 1) {
    decode(0);
  } else if (compressed.size() > 1) {
    pool_.ParallelFor(compressed.size(), decode);
  }
  for (const absl::Status& s : status) PS_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status Server::Impl::HandlePush(int worker, const PushRequestMsg& push, RawMessage& raw,
                                      const std::vector<bool>* fresh) {
  const bool some = fresh != nullptr && std::find(fresh->begin(), fresh->end(), false) != fresh->end();
  PushRequestMsg part;  // `some`: the slices that lack the push
  if (some) {
    part = push;
    part.slices.clear();
    for (size_t i = 0; i < push.slices.size(); ++i) {
      if ((*fresh)[i]) part.slices.push_back(push.slices[i]);
    }
  }
  std::vector<absl::Span<const float>> grads;
  // Compressed frames decoded (on the pool's threads, all of them before
  // anything is applied: a bad one refuses the push whole), and frames
  // ZeroMQ left unaligned.
  std::vector<std::vector<float>> realigned(raw.payloads.size());
  PS_RETURN_IF_ERROR(DecodeCompressed(push, some ? fresh : nullptr, raw, &realigned));
  grads.reserve(raw.payloads.size());
  for (size_t i = 0; i < raw.payloads.size(); ++i) {
    if (some && (i >= fresh->size() || !(*fresh)[i])) continue;
    const zmq::message_t& frame = raw.payloads[i];
    if (i < push.slices.size() && push.slices[i].compressed) {
      grads.emplace_back(realigned[i]);
      continue;
    }
    if (frame.size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload frame ", i, " has ", frame.size(), " bytes, not a whole number of floats"));
    }
    const size_t n = frame.size() / sizeof(float);
    // (8: a table shard's frame starts with uint64 ids.)
    if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint64_t) != 0) {
      realigned[i].resize(n);
      std::memcpy(realigned[i].data(), frame.data(), frame.size());
      grads.emplace_back(realigned[i]);
    } else {
      grads.emplace_back(static_cast<const float*>(frame.data()), n);
    }
  }
  return store_.Push(worker, some ? part : push, grads);
}

void Server::Impl::ReadRows(int worker, const PullRequestMsg& request, PullReplyMsg* reply,
                            std::vector<zmq::message_t>* payloads) {
  const std::vector<RowsRequest>& pull = request.rows;
  const size_t first = payloads->size();
  std::vector<const Compressor*> compressors;  // 16-bit rows: the floats read, encoded on the same thread
  std::vector<bool> count;                     // towards admission: the first time for this pull
  for (const RowsRequest& rows : pull) {
    count.push_back(counted_pulls_.First(worker, rows.key, request.pull_id));
    const uint64_t floats = rows.ids.size() * static_cast<uint64_t>(store_.Table(rows.key)->dim());
    payloads->emplace_back(floats * sizeof(float));
    compressors.push_back(PullCompressor(store_.Compression(rows.key).pull));
    reply->slices.push_back(SliceData{rows.key, floats, store_.Version(rows.key),
                                      static_cast<uint32_t>(rows.ids.size()), compressors.back() != nullptr});
  }
  // Straight into the frames ZeroMQ sends; the shards (distinct: CheckPull)
  // on the pool's threads at once, so that one shard's disk reads overlap
  // another's (TableShard allows one thread per shard).
  auto read = [&](size_t i) {
    zmq::message_t& frame = (*payloads)[first + i];
    const absl::Span<float> rows(static_cast<float*>(frame.data()), frame.size() / sizeof(float));
    store_.Table(pull[i].key)->Read(pull[i].ids, rows, count[i]);
    if (compressors[i] == nullptr) return;
    std::string encoded;
    compressors[i]->Encode(rows, 0, &encoded);
    frame = OwnedFrame(std::move(encoded));
  };
  if (pull.size() == 1) {
    read(0);
  } else if (pull.size() > 1) {
    pool_.ParallelFor(pull.size(), read);
  }
  for (size_t i = first; i < payloads->size(); ++i) counters_.bytes_out += (*payloads)[i].size();
}

zmq::message_t Server::Impl::DenseReply(uint64_t have, bool views, SliceData* meta) {
  const CompressionSpec spec = store_.Compression(meta->key);
  absl::Span<const float> values = store_.Values(meta->key);
  meta->length = values.size();
  if (spec.delta_pull()) {
    const DeltaReply delta = store_.PullDelta(meta->key, have);
    meta->base = delta.base;
    meta->compressed = delta.base != 0;
    if (delta.base != 0) return zmq::message_t(delta.frame->data(), delta.frame->size());
    values = delta.whole;  // what the worker's next delta starts from: ref, not the values
  } else if (const Compressor* compressor = PullCompressor(spec.pull); compressor != nullptr) {
    std::string frame;
    compressor->Encode(values, 0, &frame);
    meta->compressed = true;
    return OwnedFrame(std::move(frame));
  }
  auto* data = const_cast<float*>(values.data());
  return views ? zmq::message_t(data, values.size() * sizeof(float), nullptr, nullptr)
               : zmq::message_t(data, values.size() * sizeof(float));
}

void Server::Impl::AnswerPull(const zmq::message_t& routing_id, int worker, uint64_t request_id,
                              const PullRequestMsg& pull) {
  PullReplyMsg reply;
  std::vector<zmq::message_t> payloads;
  reply.slices.reserve(pull.keys.size() + pull.rows.size());
  payloads.reserve(pull.keys.size() + pull.rows.size());
  // --replicas: the backups read the same rows, in this order among the
  // updates; the worker hears once they have.
  const uint64_t token = replication_.ForwardPulledRows(worker, pull);
  // Over shared memory the values go straight into the ring (the channel
  // copies them as it sends); a socket, or a reply that waits, needs a
  // copy: the slice keeps changing meanwhile.
  const bool views = token == 0 && shm_.Has(routing_id);
  // Encoded on the pool's threads where the slices compress (distinct
  // keys: CheckPull; each touches its own slice's state).
  bool encodes = false;
  for (uint32_t key : pull.keys) {
    reply.slices.push_back(SliceData{key, 0, store_.Version(key)});
    encodes = encodes || store_.Compression(key).pull != CompressionKind::kNone;
  }
  payloads.resize(pull.keys.size());
  const auto dense = [&](size_t i) {
    payloads[i] = DenseReply(i < pull.have.size() ? pull.have[i] : 0, views, &reply.slices[i]);
  };
  if (encodes && pull.keys.size() > 1) {
    pool_.ParallelFor(pull.keys.size(), dense);
  } else {
    for (size_t i = 0; i < pull.keys.size(); ++i) dense(i);
  }
  for (const zmq::message_t& p : payloads) counters_.bytes_out += p.size();
  ReadRows(worker, pull, &reply, &payloads);
  ++counters_.pulls_served;
  if (token != 0) {
    replication_.AwaitBackups(token, routing_id, worker, request_id, std::move(reply), std::move(payloads));
    return;
  }
  Reply(routing_id, request_id, std::move(reply), std::move(payloads), worker, views);
}

void Server::Impl::AnswerReadyPulls() {
  const absl::Time now = runtime_.Now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (!store_.PullReady(it->request)) {
      ++it;
      continue;
    }
    counters_.waited_pull_micros += absl::ToInt64Microseconds(now - it->since);
    AnswerPull(it->routing_id, it->worker, it->request_id, it->request);
    it = parked_.erase(it);
  }
}

void Server::Impl::ExpireParkedPulls() {
  const absl::Time now = runtime_.Now();
  for (auto it = parked_pushes_.begin(); it != parked_pushes_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    ReplyError(it->raw.routing_id, it->request_id,
               absl::DeadlineExceededError(absl::StrCat("push ", it->push.seq, " for step ", it->push.clock, " waited ",
                                                        absl::FormatDuration(now - it->since),
                                                        " for its slices to reach that step")),
               it->worker);
    it = parked_pushes_.erase(it);
  }
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    ReplyError(it->routing_id, it->request_id,
               absl::DeadlineExceededError(absl::StrCat("pull at clock ", it->request.clock, " waited ",
                                                        absl::FormatDuration(now - it->since), ": ",
                                                        store_.DescribeWait(it->request))),
               it->worker);
    it = parked_.erase(it);
  }
}

void Server::Impl::Reply(const zmq::message_t& routing_id, uint64_t request_id, Body body,
                         std::vector<zmq::message_t> payloads, int worker, bool views) {
  Envelope env{kProtocolVersion, request_id, membership_.node_id(), std::move(body),
               worker >= 0 ? seqs_.DurableSeq(worker) : 0};
  env.incarnation = membership_.incarnation();
  if (shm_.Send(routing_id, env, payloads, views)) return;
  if (views) OwnPayloads(payloads);
  router_unsettled_ = true;
  if (absl::Status s = SendMessage(router_, &routing_id, env, std::move(payloads)); !s.ok()) {
    LOG(WARNING) << "server " << rank() << ": reply " << request_id << " not sent: " << s;
  }
}

void Server::Impl::ReplyError(const zmq::message_t& routing_id, uint64_t request_id, const absl::Status& s,
                              int worker) {
  ++counters_.errors_replied;
  LOG(WARNING) << "server " << rank() << ": request " << request_id << " refused: " << s;
  Reply(routing_id, request_id, ErrorOf(s), {}, worker);
}

}  // namespace ps
