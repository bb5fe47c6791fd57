#include "server/serving/serving_replica.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/poll_set.h"
#include "common/wire/codec.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr int kRouterTag = 0;
constexpr int kBatch = 256;

// `values` as a frame without a copy: ZeroMQ frees them once sent.
zmq::message_t Frame(std::vector<float> values) {
  auto* held = new std::vector<float>(std::move(values));
  return zmq::message_t(
      held->data(), held->size() * sizeof(float),
      [](void*, void* hint) { delete static_cast<std::vector<float>*>(hint); }, held);
}

// What every answer says of the version it is of.
ServingReplyMsg VersionReply(const ServingVersion& version) {
  ServingReplyMsg reply;
  reply.step = version.step;
  reply.synced_at_ms = absl::ToUnixMillis(version.synced_at);
  reply.exact = version.exact;
  return reply;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServingReplica>> ServingReplica::Start(const ServingOptions& options) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ServingModel> model, ServingModel::Load(options.from));
  return Start(options, std::move(model));
}

absl::StatusOr<std::unique_ptr<ServingReplica>> ServingReplica::Start(const ServingOptions& options,
                                                                      std::unique_ptr<ServingModel> model) {
  if (options.max_lookup_ids == 0) return absl::InvalidArgumentError("max_lookup_ids: must be >= 1");
  std::unique_ptr<ServingReplica> replica(new ServingReplica(options, std::move(model)));
  PS_RETURN_IF_ERROR(replica->Bind());
  return replica;
}

absl::Status ServingReplica::Bind() {
  PS_ASSIGN_OR_RETURN(std::string bind, NormalizeEndpoint(options_.bind));
  // Plaintext only on loopback, unless insecure.
  PS_RETURN_IF_ERROR(options_.security.CheckEndpoint(bind, "bind"));
  PS_ASSIGN_OR_RETURN(security_, NodeSecurity::Load(options_.security, Role::kServing));
  PS_ASSIGN_OR_RETURN(zap_, StartZapHandler(context_, security_, "serving replica"));
  PS_ASSIGN_OR_RETURN(router_,
                      BindRouter(context_, bind, options_.advertise_host, &endpoint_, security_, Traffic::kData));
  return absl::OkStatus();
}

absl::Status ServingReplica::Run() {
  PollSet poll;
  bool unsettled = true;
  while (!stop_.load()) {
    poll.Clear();
    poll.AddSocketFd(router_, kRouterTag, unsettled);
    poll.Wait(absl::Milliseconds(100));
    if (!poll.IsReady(kRouterTag)) continue;
    PS_RETURN_IF_ERROR(DrainMessages(
        router_, /*routed=*/true, kBatch,
        [&](RawMessage raw) {
          Handle(std::move(raw));
          return absl::OkStatus();
        },
        &unsettled));
  }
  return absl::OkStatus();
}

void ServingReplica::Handle(RawMessage raw) {
  absl::StatusOr<Envelope> env = DecodeEnvelope(Bytes(raw.header));
  if (!env.ok()) {
    LOG(WARNING) << "serving replica: undecodable message refused: " << env.status();
    (void)SendMessage(router_, &raw.routing_id,
                      Envelope{kProtocolVersion, 0, 0,
                               ErrorOf(absl::InvalidArgumentError(absl::StrCat(
                                   "the serving replica could not decode the message: ", env.status().message())))});
    return;
  }
  Envelope reply{kProtocolVersion, env->request_id, 0, AckMsg{}};
  std::vector<zmq::message_t> payloads;
  absl::StatusOr<ServingReplyMsg> answer =
      std::holds_alternative<ServingRequestMsg>(env->body)
          ? Answer(std::get<ServingRequestMsg>(env->body), raw, &payloads)
          : absl::PermissionDeniedError(absl::StrCat("ps_serve at ", endpoint_,
                                                     " is a read-only serving replica: it answers lookups "
                                                     "(servingRequest), not ",
                                                     BodyName(env->body)));
  if (answer.ok()) {
    reply.body = std::move(*answer);
  } else {
    payloads.clear();
    reply.body = ErrorOf(answer.status());
  }
  if (absl::Status s = SendMessage(router_, &raw.routing_id, reply, std::move(payloads)); !s.ok()) {
    LOG(WARNING) << "serving replica: reply to request " << env->request_id << " not sent: " << s;
  }
}

absl::StatusOr<ServingReplyMsg> ServingReplica::Answer(const ServingRequestMsg& request, const RawMessage& raw,
                                                       std::vector<zmq::message_t>* payloads) {
  if (request.kind == ServingKind::kVersion) {
    const ServingModel::Contents contents = model_->Describe();
    ServingReplyMsg reply = VersionReply(contents.version);
    reply.source = contents.version.source;
    reply.tensors = contents.tensors;
    for (const auto& [name, dim] : contents.tables) {
      reply.tables.push_back(name);
      reply.table_dims.push_back(dim);
    }
    return reply;
  }
  ServingReplyMsg reply = VersionReply(model_->version());
  if (request.kind == ServingKind::kDense) {
    PS_ASSIGN_OR_RETURN(ServingModel::Tensor tensor, model_->Dense(request.name));
    reply.shape = tensor.shape;
    payloads->push_back(Frame(std::move(tensor.values)));
    return reply;
  }
  if (request.kind != ServingKind::kLookup) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps_serve at ", endpoint_, " is a serving replica: it answers version, lookup and dense requests; ",
        request.kind == ServingKind::kRound ? "a round is asked of a training server"
                                            : "subscribe is asked of a job's scheduler"));
  }
  if (raw.payloads.size() != 1 || raw.payloads[0].size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a lookup of table '", request.name, "' carries its ids as one frame of uint64 (got ",
                     raw.payloads.size(), " frames", raw.payloads.empty() ? "" : " of ",
                     raw.payloads.empty() ? "" : absl::StrCat(raw.payloads[0].size(), " bytes"), ")"));
  }
  const size_t n = raw.payloads[0].size() / sizeof(uint64_t);
  if (n > options_.max_lookup_ids) {
    return absl::InvalidArgumentError(absl::StrCat("a lookup of ", n, " ids of table '", request.name, "': at most ",
                                                   options_.max_lookup_ids, " (--max_lookup_ids)"));
  }
  PS_ASSIGN_OR_RETURN(const uint32_t dim, model_->TableDim(request.name));
  std::vector<uint64_t> ids(n);
  if (n > 0) std::memcpy(ids.data(), raw.payloads[0].data(), n * sizeof(uint64_t));
  zmq::message_t rows(n * dim * sizeof(float));
  zmq::message_t found(n);
  PS_RETURN_IF_ERROR(model_->Lookup(request.name, ids, absl::MakeSpan(static_cast<float*>(rows.data()), n * dim),
                                    absl::MakeSpan(static_cast<uint8_t*>(found.data()), n)));
  reply.shape = {static_cast<int64_t>(n), static_cast<int64_t>(dim)};
  payloads->push_back(std::move(rows));
  payloads->push_back(std::move(found));
  return reply;
}

}  // namespace ps
