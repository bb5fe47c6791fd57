#include "scheduler/job_state.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/durable_file.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"

namespace ps {
namespace {

constexpr FrameKind kStateFile{absl::string_view("PSSCHED\n", 8), "scheduler state file", 1, kJobStateFormat};

// The server ranks the job has: its own, then one per server that joined
// the running job (--join), given in order: every rank below this is held.
int ServerRanks(const JobState& s) {
  std::set<int32_t> joined;
  for (const JobStateNode& n : s.nodes) {
    if (n.info.role == Role::kServer && n.info.rank >= s.num_servers) joined.insert(n.info.rank);
  }
  return s.num_servers + static_cast<int>(joined.size());
}

// The slices' copies and the move under way name servers of `ranks`.
absl::Status CheckCopies(const JobState& s, int ranks) {
  for (size_t key = 0; key < s.copies.size(); ++key) {
    for (int32_t rank : s.copies[key]) {
      if (rank < 0 || rank >= ranks) {
        return absl::DataLossError(absl::StrCat("slice ", key, ": a copy on server rank ", rank, ", out of range"));
      }
    }
  }
  if (const auto& m = s.releasing; m.has_value() && (m->key >= s.copies.size() || m->from < 0 || m->from >= ranks ||
                                                     m->to < 0 || m->to >= ranks || m->from == m->to)) {
    return absl::DataLossError(
        absl::StrCat("a move of slice ", m->key, " from server ", m->from, " to ", m->to, " out of range"));
  }
  return absl::OkStatus();
}

absl::Status CheckConfig(const JobState& s) {
  if (!s.config.has_value()) return absl::OkStatus();
  const JobConfig& c = *s.config;
  if (c.replicas < 1 || c.replicas > s.num_servers) {
    return absl::DataLossError(absl::StrCat("replicas ", c.replicas, " not in [1, ", s.num_servers, "]"));
  }
  if (c.heartbeat_timeout_ms <= 0 || c.server_timeout_ms <= 0 || c.register_timeout_ms <= 0) {
    return absl::DataLossError("a timeout of the job's configuration is not positive");
  }
  return absl::OkStatus();
}

// What a decoded state must satisfy before a scheduler acts on it.
absl::Status CheckState(const JobState& s) {
  if (s.incarnation == 0) return absl::DataLossError("incarnation 0");
  if (s.endpoint.empty()) return absl::DataLossError("no endpoint");
  if (s.num_servers < 1 || s.num_servers > 4096 || s.num_workers < 1 || s.num_workers > 65536) {
    return absl::DataLossError(absl::StrCat(s.num_servers, " servers and ", s.num_workers, " workers"));
  }
  const int server_ranks = ServerRanks(s);  // a joined rank past them leaves a gap below it
  for (const JobStateNode& n : s.nodes) {
    const int want = n.info.role == Role::kServer ? server_ranks : s.num_workers;
    if (n.info.role == Role::kScheduler || n.info.rank < 0 || n.info.rank >= want) {
      return absl::DataLossError(
          absl::StrCat("node ", n.info.node_id, ": ", RoleName(n.info.role), " rank ", n.info.rank, " out of range"));
    }
    if (n.info.node_id == 0 || n.info.node_id >= s.next_node_id) {
      return absl::DataLossError(absl::StrCat("node id ", n.info.node_id, " not in [1, ", s.next_node_id, ")"));
    }
  }
  PS_RETURN_IF_ERROR(CheckConfig(s));
  return CheckCopies(s, server_ranks);
}

}  // namespace

absl::Status WriteJobState(const std::string& path, const JobState& state) {
  kj::Array<capnp::word> words = EncodeJobState(state);
  const auto bytes = words.asBytes();
  return WriteFramedFile(path, kStateFile, kJobStateFormat,
                         {absl::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size())});
}

absl::StatusOr<JobState> ReadJobState(const std::string& path) {
  PS_ASSIGN_OR_RETURN(FramedRecord record, ReadFramedFile(path, kStateFile));
  absl::StatusOr<JobState> state = DecodeJobState(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(record.body.data()), record.body.size()));
  absl::Status s = state.ok() ? CheckState(*state) : state.status();
  if (!s.ok()) return absl::DataLossError(absl::StrCat(path, ": ", s.message()));
  return state;
}

}  // namespace ps
