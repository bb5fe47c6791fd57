#include "worker/client/request_split.h"

#include <optional>
#include <utility>

namespace ps::client_internal {
namespace {

// The part for server `target`, made on first use.
RequestPart& PartFor(std::vector<RequestPart>& parts, int target, const Envelope& like) {
  for (RequestPart& p : parts) {
    if (p.target == target) return p;
  }
  RequestPart& p = parts.emplace_back();
  p.target = target;
  p.envelope = Envelope{like.version, like.request_id, like.sender, Body(AckMsg{}), 0, like.incarnation};
  return p;
}

// Adds `pull`'s keys and rows, with their destinations (from `*next` on), to
// each part's pull.
void SplitPull(const PullRequestMsg& pull, std::vector<Destination>& destinations, size_t* next,
               std::vector<RequestPart>& parts, std::vector<std::optional<PullRequestMsg>>& pulls, const Envelope& like,
               absl::FunctionRef<int(uint32_t)> route) {
  auto pull_of = [&](int target) -> std::pair<PullRequestMsg&, RequestPart&> {
    RequestPart& part = PartFor(parts, target, like);
    const size_t i = static_cast<size_t>(&part - parts.data());
    if (pulls.size() <= i) pulls.resize(i + 1);
    if (!pulls[i].has_value()) {
      pulls[i] = PullRequestMsg{pull.clock, {}, pull.timeout_ms, {}};
      pulls[i]->pull_id = pull.pull_id;  // a part of the same pull, counted once per shard
    }
    return {*pulls[i], part};
  };
  for (size_t j = 0; j < pull.keys.size(); ++j) {
    auto [p, part] = pull_of(route(pull.keys[j]));
    p.keys.push_back(pull.keys[j]);
    if (j < pull.have.size()) p.have.push_back(pull.have[j]);
    if (*next < destinations.size()) part.destinations.push_back(std::move(destinations[(*next)++]));
  }
  for (const RowsRequest& rows : pull.rows) {
    auto [p, part] = pull_of(route(rows.key));
    p.rows.push_back(rows);
    if (*next < destinations.size()) part.destinations.push_back(std::move(destinations[(*next)++]));
  }
}

}  // namespace

std::vector<RequestPart> SplitByServer(Envelope envelope, std::vector<zmq::message_t> payloads,
                                       std::vector<Destination> destinations, int fallback,
                                       absl::FunctionRef<int(uint32_t)> route) {
  std::vector<RequestPart> parts;
  std::vector<std::optional<PullRequestMsg>> pulls;  // by part
  size_t next = 0;
  if (auto* push = std::get_if<PushRequestMsg>(&envelope.body)) {
    std::vector<std::optional<PushRequestMsg>> pushes;
    for (size_t i = 0; i < push->slices.size(); ++i) {
      RequestPart& part = PartFor(parts, route(push->slices[i].key), envelope);
      const size_t at = static_cast<size_t>(&part - parts.data());
      if (pushes.size() <= at) pushes.resize(at + 1);
      if (!pushes[at].has_value()) {
        pushes[at] = *push;
        pushes[at]->slices.clear();
        pushes[at]->then_pull.reset();
      }
      pushes[at]->slices.push_back(push->slices[i]);
      if (i < payloads.size()) part.payloads.push_back(std::move(payloads[i]));
    }
    if (push->then_pull.has_value()) SplitPull(*push->then_pull, destinations, &next, parts, pulls, envelope, route);
    pushes.resize(parts.size());
    pulls.resize(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      if (pushes[i].has_value()) {
        pushes[i]->then_pull = std::move(pulls[i]);
        parts[i].envelope.body = std::move(*pushes[i]);
      } else {
        parts[i].envelope.body = std::move(*pulls[i]);
      }
    }
    return parts;
  }
  if (auto* pull = std::get_if<PullRequestMsg>(&envelope.body)) {
    SplitPull(*pull, destinations, &next, parts, pulls, envelope, route);
    for (size_t i = 0; i < parts.size(); ++i) parts[i].envelope.body = std::move(*pulls[i]);
    return parts;
  }
  RequestPart& whole = parts.emplace_back();
  whole.target = fallback;
  whole.envelope = std::move(envelope);
  whole.payloads = std::move(payloads);
  whole.destinations = std::move(destinations);
  return parts;
}

}  // namespace ps::client_internal
