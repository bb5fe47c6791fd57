#include "server/feed/serving_feed.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

// A subscriber not heard from for this long no longer holds the tables'
// change records back (it gets a snapshot when it comes back).
constexpr absl::Duration kSubscriberTimeout = absl::Minutes(1);
// The longest a round may wait for its step.
constexpr uint32_t kMaxWaitMs = 10000;

zmq::message_t Frame(const std::vector<uint64_t>& ids, const std::vector<float>& rows,
                     const std::vector<uint64_t>& removed) {
  zmq::message_t frame(ids.size() * sizeof(uint64_t) + rows.size() * sizeof(float) + removed.size() * sizeof(uint64_t));
  char* at = static_cast<char*>(frame.data());
  for (const auto& [data, bytes] : {std::pair<const void*, size_t>{ids.data(), ids.size() * sizeof(uint64_t)},
                                    {rows.data(), rows.size() * sizeof(float)},
                                    {removed.data(), removed.size() * sizeof(uint64_t)}}) {
    if (bytes > 0) std::memcpy(at, data, bytes);
    at += bytes;
  }
  return frame;
}

}  // namespace

absl::Status ServingFeed::OnRequest(const std::string& routing_id, uint64_t request_id,
                                    const ServingRequestMsg& request, absl::Time now) {
  if (request.kind != ServingKind::kRound) {
    return absl::InvalidArgumentError(
        "a training server answers a serving replica's rounds only; lookups go to a replica (ps_serve)");
  }
  if (!store_->has_model()) return absl::UnavailableError("this server holds no model yet: ask again");
  Subscriber& sub = subscribers_[routing_id];
  sub.held = request.held;
  sub.cuts.clear();
  for (const ServingPart& part : request.held) sub.cuts[part.key] = part.cut;
  sub.request_id = request_id;
  sub.seen = now;
  // A replica has one round out at a time: a newer request replaces one it gave up on.
  pending_.erase(
      std::remove_if(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.routing_id == routing_id; }),
      pending_.end());
  pending_.push_back(
      Pending{routing_id, request_id, request, now + absl::Milliseconds(std::min(request.wait_ms, kMaxWaitMs))});
  return absl::OkStatus();
}

bool ServingFeed::Syncs(const Slice& slice) const {
  const ModelSpec& model = store_->model();
  const Consistency& mode = slice.table && model.tables[slice.tensor].consistency.has_value()
                                ? *model.tables[slice.tensor].consistency
                                : model.consistency;
  return mode.mode == ConsistencyMode::kSync;
}

ServingFeed::Moment ServingFeed::Now() const {
  uint64_t low = std::numeric_limits<uint64_t>::max(), high = 0, newest = 0;
  bool any_sync = false, all_sync = true;
  for (const Slice& slice : store_->slice_list()) {
    if (!leads_(slice.key)) continue;
    const uint64_t v = store_->Version(slice.key);
    newest = std::max(newest, v);
    if (!Syncs(slice)) {
      all_sync = false;
      continue;
    }
    any_sync = true;
    low = std::min(low, v);
    high = std::max(high, v);
  }
  if (!any_sync) return Moment{newest, false};
  return Moment{low, all_sync && low == high};
}

std::optional<ServingFeed::Moment> ServingFeed::Ready(uint64_t target) const {
  const Moment now = Now();
  bool agree = true, any_sync = false;
  uint64_t at = 0;
  for (const Slice& slice : store_->slice_list()) {
    if (!leads_(slice.key) || !Syncs(slice)) continue;
    const uint64_t v = store_->Version(slice.key);
    if (any_sync && v != at) agree = false;
    at = v;
    any_sync = true;
  }
  if (!any_sync) return now;
  if (!agree || at < target) return std::nullopt;
  return now;
}

void ServingFeed::Poll(absl::Time now, const Send& send) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::optional<Moment> moment = Ready(it->request.target_step);
    if (!moment.has_value() && now < it->deadline) {
      ++it;
      continue;
    }
    Answer(it->routing_id, it->request_id, it->request.held, moment.value_or(Now()), /*job_ended=*/false, send);
    it = pending_.erase(it);
  }
}

absl::Time ServingFeed::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const Pending& p : pending_) next = std::min(next, p.deadline);
  return next;
}

void ServingFeed::Flush(absl::Time now, const Send& send) {
  pending_.clear();
  if (!store_->has_model()) return;
  std::vector<std::pair<std::string, Subscriber>> heard;  // Answer forgets subscribers as it goes
  for (const auto& [routing_id, sub] : subscribers_) {
    if (now - sub.seen <= kSubscriberTimeout) heard.emplace_back(routing_id, sub);
  }
  for (const auto& [routing_id, sub] : heard) {
    Answer(routing_id, sub.request_id, sub.held, Now(), /*job_ended=*/true, send);
  }
}

void ServingFeed::Answer(const std::string& routing_id, uint64_t request_id, const std::vector<ServingPart>& held,
                         Moment moment, bool job_ended, const Send& send) {
  absl::flat_hash_map<uint32_t, const ServingPart*> have;
  for (const ServingPart& part : held) have[part.key] = &part;
  ServingReplyMsg reply;
  reply.step = moment.step;
  reply.exact = moment.exact;
  reply.synced_at_ms = absl::ToUnixMillis(absl::Now());
  reply.job_ended = job_ended;
  std::vector<zmq::message_t> payloads;
  for (const Slice& slice : store_->slice_list()) {
    if (!leads_(slice.key)) continue;
    auto it = have.find(slice.key);
    if (slice.table) {
      reply.parts.push_back(TablePart(slice, it == have.end() ? 0 : it->second->cut, &payloads));
      continue;
    }
    ServingPart part{slice.key, store_->Version(slice.key)};
    if (it == have.end() || it->second->version != part.version) {
      const absl::Span<const float> values = store_->Values(slice.key);
      part.values = true;
      payloads.emplace_back(values.data(), values.size() * sizeof(float));
    }
    reply.parts.push_back(part);
  }
  ForgetHeard(absl::Now());
  send(routing_id, request_id, std::move(reply), std::move(payloads));
}

ServingPart ServingFeed::TablePart(const Slice& slice, uint64_t cut_held, std::vector<zmq::message_t>* payloads) {
  TableShard* shard = store_->Table(slice.key);
  RowChanges& changes = shard->changes();
  changes.Enable();
  ServingPart part{slice.key, store_->Version(slice.key), changes.Cut()};
  const RowChanges::Delta delta = changes.Since(cut_held);
  const size_t dim = shard->dim();
  std::vector<uint64_t> ids, removed;
  std::vector<float> rows;
  if (delta.snapshot) {
    part.snapshot = true;
    const absl::Status s = shard->ForEachRow([&](uint64_t id, absl::Span<const float> values) {
      ids.push_back(id);
      rows.insert(rows.end(), values.begin(), values.end());
    });
    if (!s.ok()) {
      // The replica keeps what it held and asks again from there.
      LOG(WARNING) << "serving round: table shard " << slice.key << " not read from the disk tier: " << s;
      return ServingPart{slice.key, store_->Version(slice.key), cut_held};
    }
  } else {
    rows.resize(delta.changed.size() * dim);
    std::vector<uint8_t> found(delta.changed.size());
    shard->Peek(delta.changed, absl::MakeSpan(rows), absl::MakeSpan(found));
    size_t kept = 0;
    for (size_t i = 0; i < delta.changed.size(); ++i) {
      if (!found[i]) {  // changed, then gone before this round
        removed.push_back(delta.changed[i]);
        continue;
      }
      if (kept != i) std::copy_n(rows.begin() + i * dim, dim, rows.begin() + kept * dim);
      ids.push_back(delta.changed[i]);
      ++kept;
    }
    rows.resize(kept * dim);
    removed.insert(removed.end(), delta.removed.begin(), delta.removed.end());
  }
  part.rows = ids.size();
  part.removed = removed.size();
  part.values = part.snapshot || !ids.empty() || !removed.empty();
  if (part.values) payloads->push_back(Frame(ids, rows, removed));
  return part;
}

void ServingFeed::ForgetHeard(absl::Time now) {
  for (auto it = subscribers_.begin(); it != subscribers_.end();) {
    if (now - it->second.seen > kSubscriberTimeout) {
      subscribers_.erase(it++);
    } else {
      ++it;
    }
  }
  for (const Slice& slice : store_->slice_list()) {
    if (!slice.table || !leads_(slice.key)) continue;
    uint64_t upto = std::numeric_limits<uint64_t>::max();
    for (const auto& [id, sub] : subscribers_) {
      auto it = sub.cuts.find(slice.key);
      upto = std::min(upto, it == sub.cuts.end() ? 0 : it->second);
    }
    if (upto != std::numeric_limits<uint64_t>::max()) store_->Table(slice.key)->changes().Forget(upto);
  }
}

}  // namespace ps
