#include "worker/client/serving_client.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"

namespace ps {
namespace {

ServedVersion VersionOf(const ServingReplyMsg& reply, const std::string& replica) {
  return ServedVersion{reply.step, absl::FromUnixMillis(reply.synced_at_ms), reply.exact, reply.source, replica};
}

std::vector<float> Floats(const zmq::message_t& frame) {
  std::vector<float> out(frame.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), frame.data(), out.size() * sizeof(float));
  return out;
}

uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d < 0 ? 0 : d);
  return n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServingClient>> ServingClient::Connect(const ServingClientOptions& options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("serving client: no replica endpoint given");
  if (options.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("serving client: timeout must be > 0");
  std::unique_ptr<ServingClient> client(new ServingClient(options));
  // A client of the replicas only: their key stands where a worker's
  // scheduler key would.
  SecurityOptions security = options.security;
  if (security.scheduler_public_key.empty()) security.scheduler_public_key = options.replica_public_key;
  PS_ASSIGN_OR_RETURN(client->security_, NodeSecurity::Load(security, Role::kWorker));
  absl::MutexLock lock(&client->mu_);
  for (const std::string& e : options.endpoints) {
    PS_ASSIGN_OR_RETURN(std::string endpoint, NormalizeEndpoint(e));
    client->replicas_.push_back(Replica{endpoint, zmq::socket_t()});
    PS_RETURN_IF_ERROR(client->Open(client->replicas_.back()));
  }
  return client;
}

ServingClient::~ServingClient() {
  absl::MutexLock lock(&mu_);
  for (Replica& r : replicas_) r.socket.close();
}

absl::Status ServingClient::Open(Replica& replica) {
  if (replica.socket) replica.socket.close();
  PS_ASSIGN_OR_RETURN(replica.socket, ConnectDealer(context_, replica.endpoint, security_, Traffic::kData,
                                                    security_.scheduler_public_key()));
  replica.socket.set(zmq::sockopt::linger, 0);  // a dead replica's queue is dropped
  return absl::OkStatus();
}

absl::StatusOr<ServingClient::Answer> ServingClient::Ask(Replica& replica, const ServingRequestMsg& request,
                                                         std::optional<absl::string_view> payload) {
  const uint64_t id = ++request_id_;
  std::vector<zmq::message_t> frames;
  if (payload.has_value()) frames.emplace_back(payload->data(), payload->size());
  PS_RETURN_IF_ERROR(
      SendMessage(replica.socket, nullptr, Envelope{kProtocolVersion, id, 0, request}, std::move(frames)));
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat(replica.endpoint, " did not answer within ", absl::FormatDuration(options_.timeout)));
    }
    zmq::pollitem_t item{static_cast<void*>(replica.socket), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    absl::StatusOr<RawMessage> raw = ReceiveMessage(replica.socket, /*routed=*/false);
    if (!raw.ok()) continue;
    PS_ASSIGN_OR_RETURN(Envelope env, DecodeEnvelope(Bytes(raw->header)));
    if (env.request_id != id && env.request_id != 0) continue;  // the answer to a request given up on
    if (const auto* err = std::get_if<ErrorMsg>(&env.body)) {
      return absl::Status(err->code, absl::StrCat(replica.endpoint, ": ", err->message));
    }
    auto* reply = std::get_if<ServingReplyMsg>(&env.body);
    if (reply == nullptr) {
      return absl::InternalError(absl::StrCat(replica.endpoint, " answered with a ", BodyName(env.body)));
    }
    return Answer{std::move(*reply), std::move(raw->payloads), replica.endpoint};
  }
}

absl::StatusOr<ServingClient::Answer> ServingClient::Call(const ServingRequestMsg& request,
                                                          std::optional<absl::string_view> payload) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> failures;
  const absl::Time now = absl::Now();
  // Every replica once, those skipped after a failure last (still tried:
  // they may be back).
  for (bool skipped : {false, true}) {
    for (size_t k = 0; k < replicas_.size(); ++k) {
      Replica& r = replicas_[(next_ + k) % replicas_.size()];
      if ((r.skip_until > now) != skipped) continue;
      absl::StatusOr<Answer> answer = Ask(r, request, payload);
      if (answer.ok() || (answer.status().code() != absl::StatusCode::kDeadlineExceeded &&
                          answer.status().code() != absl::StatusCode::kUnavailable)) {
        if (answer.ok()) r.skip_until = absl::InfinitePast();
        next_ = (next_ + 1) % replicas_.size();
        return answer;
      }
      failures.push_back(std::string(answer.status().message()));
      r.skip_until = absl::Now() + options_.retry_after;
      PS_RETURN_IF_ERROR(Open(r));  // drops what is queued for it
    }
  }
  return absl::UnavailableError(absl::StrCat("no serving replica answered: ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<ServingClient::Rows> ServingClient::Lookup(absl::string_view table, absl::Span<const uint64_t> ids) {
  const absl::string_view id_bytes(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint64_t));
  PS_ASSIGN_OR_RETURN(Answer answer, Call(ServingRequestMsg{ServingKind::kLookup, std::string(table)}, id_bytes));
  const ServingReplyMsg& r = answer.reply;
  if (r.shape.size() != 2 || static_cast<uint64_t>(r.shape[0]) != ids.size() || answer.payloads.size() != 2 ||
      answer.payloads[0].size() != Elements(r.shape) * sizeof(float) || answer.payloads[1].size() != ids.size()) {
    return absl::InternalError(
        absl::StrCat(answer.replica, " answered a lookup of ", ids.size(), " ids with a reply that does not match it"));
  }
  Rows rows;
  rows.dim = static_cast<uint32_t>(r.shape[1]);
  rows.values = Floats(answer.payloads[0]);
  const auto* found = static_cast<const uint8_t*>(answer.payloads[1].data());
  rows.found.assign(found, found + ids.size());
  rows.version = VersionOf(r, answer.replica);
  return rows;
}

absl::StatusOr<ServingClient::Tensor> ServingClient::Dense(absl::string_view name) {
  PS_ASSIGN_OR_RETURN(Answer answer, Call(ServingRequestMsg{ServingKind::kDense, std::string(name)}, std::nullopt));
  if (answer.payloads.size() != 1 || answer.payloads[0].size() != Elements(answer.reply.shape) * sizeof(float)) {
    return absl::InternalError(
        absl::StrCat(answer.replica, " answered a read of '", name, "' with a reply that does not match its shape"));
  }
  return Tensor{answer.reply.shape, Floats(answer.payloads[0]), VersionOf(answer.reply, answer.replica)};
}

absl::StatusOr<ServingClient::Model> ServingClient::Version() {
  PS_ASSIGN_OR_RETURN(Answer answer, Call(ServingRequestMsg{ServingKind::kVersion, ""}, std::nullopt));
  return Model{VersionOf(answer.reply, answer.replica), std::move(answer.reply.tensors), std::move(answer.reply.tables),
               std::move(answer.reply.table_dims)};
}

}  // namespace ps
