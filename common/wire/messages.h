#ifndef PS_COMMON_WIRE_MESSAGES_H_
#define PS_COMMON_WIRE_MESSAGES_H_

// The messages of the system as plain C++ values. common/wire/codec.h turns them
// into the Cap'n Proto header frame of schemas/ps.capnp and back; handlers only
// ever see these structs. Payload frames travel beside the header and are not
// part of these values.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"

namespace ps {

inline constexpr uint32_t kProtocolVersion = 5;

// Envelope::durable_seq of a server that keeps no checkpoints: nothing is
// worth keeping for it (a restart loses its state anyway).
inline constexpr uint64_t kNothingToKeep = ~uint64_t{0};

struct NodeInfo {
  uint32_t node_id = 0;
  Role role = Role::kWorker;
  int32_t rank = 0;
  std::string address;  // servers: the endpoint workers connect to
  // The CurveZMQ public key (Z85) the node registered with, as the scheduler
  // authenticated it; empty in a job without keys.
  std::string public_key;
  bool operator==(const NodeInfo&) const = default;
};

struct ErrorMsg {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::string message;
  uint64_t view_epoch = 0;    // a refusal of a request routed by an older view (MovedError)
  bool push_applied = false;  // that request's push was applied; its pull was not
  // That request's push is held in the refusing server's sync step in
  // progress of a slice that moved on (--replicas: server/store/step_forwarding.h):
  // sent again numbered as it was, the slice's new primary applies it once.
  bool push_held = false;
  // A backup's refusal of a forward it acknowledged: the slices whose copy
  // differs from the primary's (empty: every slice the forward carried).
  std::vector<uint32_t> slices;
  bool operator==(const ErrorMsg&) const = default;
};
struct AckMsg {
  bool operator==(const AckMsg&) const = default;
};
// One slice in a push or pull reply; payload frame i holds slices[i].
//
// A table shard's frame holds rows: in a push, `rows` distinct uint64 ids
// (little-endian) followed by rows x dim float gradients; in a pull reply,
// rows x dim floats, the rows of the ids asked for, in their order. `length`
// counts the floats (rows x dim).
struct SliceData {
  uint32_t key = 0;
  uint64_t length = 0;   // floats in the payload frame
  uint64_t version = 0;  // push: version computed from; reply: version sent
  uint32_t rows = 0;     // table shards: rows in the frame; 0 for dense slices
  // The values are a compressed frame (common/compress/compressor.h): the whole
  // payload of a dense slice, what follows the ids of a table shard's.
  bool compressed = false;
  // A pull reply's compressed frame: != 0, the change from the values of
  // this version (which the worker holds) to `version` (server/store/delta_pull.h).
  uint64_t base = 0;
  bool operator==(const SliceData&) const = default;
};
struct RegisterRequestMsg {
  Role role = Role::kWorker;
  std::string address;
  int32_t rank = -1;  // >= 0: take this rank back (a restarted server or worker)
  // The node's CurveZMQ public key (Z85); empty without keys. The scheduler
  // refuses one that is not the key the connection authenticated with.
  std::string public_key;
  // != 0: the node id this node holds already: it re-registers with a
  // scheduler restarted from its state file (Envelope::incarnation names the
  // job it belongs to).
  uint32_t node_id = 0;
  // A server that restored its rank's state from a checkpoint. A server may
  // ask for a rank without one only while the job forms: rejoining a running
  // job it would bring fresh slices in place of trained ones.
  bool restored = false;
  // A restored server: each slice its checkpoint holds (key, length,
  // version, rows). A job restarted with --replicas keeps the most advanced
  // copy of each slice and makes the others again from it.
  std::vector<SliceData> held;
  // A server joining the running job under a new rank (ps_server --join):
  // slices move to it from the others.
  bool join = false;
  bool operator==(const RegisterRequestMsg&) const = default;
};
struct RegisterReplyMsg {
  uint32_t node_id = 0;
  int32_t rank = 0;
  uint64_t incarnation = 0;  // the job's (see Envelope::incarnation)
  int32_t replicas = 1;      // copies the job keeps of every slice (--replicas)
  bool operator==(const RegisterReplyMsg&) const = default;
};
struct ClusterViewMsg {
  int32_t num_servers = 0;
  int32_t num_workers = 0;
  std::vector<NodeInfo> nodes;
  std::vector<uint32_t> dead;  // node ids declared dead
  uint64_t epoch = 0;          // a later view replaces an earlier one
  uint64_t incarnation = 0;    // the job's (see Envelope::incarnation)
  // --replicas K > 1, once the model is placed: per slice key, the servers
  // holding a copy now, primary first. Empty: each slice on Slice::server.
  std::vector<std::vector<int32_t>> copies;
  // != 0: only what changed since view `base_epoch` (common/wire/cluster_view.h):
  // nodes new or changed, ids newly dead, copies when they changed.
  uint64_t base_epoch = 0;
  // A change (base_epoch != 0) to some slices' copies only: copies[i] are
  // the servers of slice copy_keys[i] now. Empty: `copies` is every slice's.
  std::vector<uint32_t> copy_keys;
  bool operator==(const ClusterViewMsg&) const = default;
};
struct DefineModelRequestMsg {
  ModelSpec model;
  bool operator==(const DefineModelRequestMsg&) const = default;
};
struct DefineModelReplyMsg {
  ModelSpec model;
  std::vector<Slice> slices;
  // The servers the map was placed on, which servers joining later do not
  // change (0: not said; the view's count).
  int32_t map_servers = 0;
  bool operator==(const DefineModelReplyMsg&) const = default;
};
struct CreateSlicesRequestMsg {
  ModelSpec model;
  std::vector<Slice> slices;  // only those this server holds (a copy of, with replicas)
  int32_t num_workers = 0;
  // With replicas: copies[i] lists the servers holding slices[i], primary first.
  std::vector<std::vector<int32_t>> copies;
  bool operator==(const CreateSlicesRequestMsg&) const = default;
};
struct BarrierRequestMsg {
  std::string name;
  uint64_t timeout_ms = 0;
  bool operator==(const BarrierRequestMsg&) const = default;
};
struct WorkerDoneMsg {
  bool operator==(const WorkerDoneMsg&) const = default;
};
struct ShutdownMsg {
  std::string reason;
  // To a drained server only (DrainRequestMsg): it left the job, which goes
  // on without it; its checkpoint holds nothing the job needs any more.
  bool left = false;
  bool operator==(const ShutdownMsg&) const = default;
};

// The rows of distinct `ids` of the table shard `key`.
struct RowsRequest {
  uint32_t key = 0;
  std::vector<uint64_t> ids;
  // Sending: the ids ascend, to travel delta coded where that is shorter
  // (common/wire/id_coding.h; a table whose rows travel compressed). Received:
  // they came delta coded (so they ascend strictly).
  bool delta_ids = false;
  bool operator==(const RowsRequest&) const = default;
};
struct PullRequestMsg {
  int64_t clock = 0;  // sync: the step whose parameters are wanted
  std::vector<uint32_t> keys;
  uint64_t timeout_ms = 0;
  std::vector<RowsRequest> rows;  // answered after `keys`, in this order
  // Empty, or per key: the version of the values the worker holds, from
  // which a delta pull's reply may be the change (0: none).
  std::vector<uint64_t> have;
  // != 0: the worker's number for this pull, kept by its re-sends (after a
  // failover too): a table shard counts the rows of one (worker, pull_id)
  // towards admission once (server/replication/counted_pulls.h).
  uint64_t pull_id = 0;
  bool operator==(const PullRequestMsg&) const = default;
};
struct PushRequestMsg {
  int64_t clock = 0;  // the worker's step
  std::vector<SliceData> slices;
  // Set: once the push is applied, answer this pull (a PullReply) instead of
  // an Ack, saving a round trip per step.
  std::optional<PullRequestMsg> then_pull;
  // Per (worker, server), from 1; a server applies each seq once, so a push
  // re-sent after the server restarted is never applied twice. 0: unnumbered.
  uint64_t seq = 0;
  bool want_checkpoint = false;  // the worker holds many unsaved pushes
  // The payloads are values, not gradients: each dense slice is set to its
  // frame and each table shard's rows of the frame's ids to its rows, their
  // optimizer state reset; no step, clocks and versions unchanged (the
  // user's own weights, a model file, pretrained rows).
  bool assign = false;
  // >= 0: a primary server forwards this push of worker `for_worker` to a
  // backup (--replicas), which applies it as that worker's (server/replication/replicator.h).
  int32_t for_worker = -1;
  // --replicas: the server rank whose slices `seq` numbers the worker's
  // pushes to (its slices' copies dedupe by it after a failover); -1: the
  // receiving server's own.
  int32_t origin = -1;
  // The cluster view epoch the sender routed by: a server whose view is
  // older holds the push until it has that view (a failover's promotion).
  uint64_t view_epoch = 0;
  // Forwarded only (for_worker >= 0): not a push but the table rows a pull
  // of that worker read on the primary, each frame `rows` uint64 ids and no
  // gradients. The backup reads the same rows, so that what a read does to
  // a table (rows created, admission counts, recency) is the same on every
  // copy.
  bool pulled = false;
  // Forwarded only (for_worker >= 0), sync: not a worker's push but steps
  // the primary completed: per slice (`version` the step) two frames, the
  // step's summed gradient (`length` floats; none for a step that completed
  // empty) and the pushes it summed (StepContributor records). The backup
  // completes the step with that sum, as the primary did
  // (server/store/step_forwarding.h): one forward per step, not one per worker.
  bool step_sum = false;
  bool operator==(const PushRequestMsg&) const = default;
};
struct PullReplyMsg {
  std::vector<SliceData> slices;
  bool operator==(const PullReplyMsg&) const = default;
};
// A server a worker's requests got no answer from for its heartbeat timeout
// (schemas/ps.capnp Unreachable).
struct UnreachableServer {
  int32_t server = 0;
  int64_t silent_ms = 0;
  bool hears_others = false;
  bool operator==(const UnreachableServer&) const = default;
};
struct HeartbeatMsg {
  std::vector<UnreachableServer> unreachable;  // worker -> scheduler only
  bool operator==(const HeartbeatMsg&) const = default;
};
// The counters of one table shard (SliceStore keeps them; see TableStats in
// schemas/ps.capnp).
struct TableStatsMsg {
  uint32_t table = 0;  // index in the model's tables
  uint64_t rows = 0;
  uint64_t bytes = 0;
  uint64_t evictions = 0;
  uint64_t admissions = 0;
  uint64_t rejections = 0;
  uint64_t gradients_dropped = 0;
  uint64_t rows_pulled = 0;
  uint64_t rows_pushed = 0;
  // The disk tier (server/disk/table_disk.h): rows only there now (rows +
  // disk_rows is the table), rows read back, rows written, rows that could
  // not go (store full or failing).
  uint64_t disk_rows = 0;
  uint64_t disk_reads = 0;
  uint64_t disk_writes = 0;
  uint64_t disk_refusals = 0;
  uint64_t expired = 0;  // rows dropped by TableSpec::expire_after_steps
  bool operator==(const TableStatsMsg&) const = default;
};
// A worker asks a server for a same-host shared-memory channel; the grant
// says where to fetch it (common/net/shm_channel.h).
struct ShmOfferMsg {
  bool operator==(const ShmOfferMsg&) const = default;
};
struct ShmGrantMsg {
  std::string socket_name;  // abstract Unix socket (without the leading NUL)
  std::string token;        // one-time, kShmTokenBytes
  uint64_t ring_bytes = 0;  // each of the two rings
  bool operator==(const ShmGrantMsg&) const = default;
};
// --replicas (schemas/ps.capnp AddCopyRequest, SliceCopy).
struct AddCopyRequestMsg {
  uint32_t key = 0;
  int32_t server = 0;
  uint64_t release_epoch = 0;  // != 0: release server's copy instead (a move)
  bool operator==(const AddCopyRequestMsg&) const = default;
};
// A server leaves a running job (schemas/ps.capnp DrainRequest).
struct DrainRequestMsg {
  int32_t server = 0;
  bool operator==(const DrainRequestMsg&) const = default;
};
// A read of a serving replica's model, or a replica following a job
// (schemas/ps.capnp ServingRequest: subscribe, round).
enum class ServingKind : uint8_t { kVersion = 0, kLookup = 1, kDense = 2, kSubscribe = 3, kRound = 4 };
// One slice in a serving round (schemas/ps.capnp ServingPart).
struct ServingPart {
  uint32_t key = 0;
  uint64_t version = 0;
  uint64_t cut = 0;       // table shards: the server's change cut (0: none)
  bool values = false;    // reply: a payload frame follows for it
  bool snapshot = false;  // reply, tables: the rows are all the shard holds
  uint64_t rows = 0;      // reply, tables: rows in the frame
  uint64_t removed = 0;   // reply, tables: ids removed, after the rows
  bool operator==(const ServingPart&) const = default;
};
struct ServingRequestMsg {
  ServingKind kind = ServingKind::kVersion;
  std::string name;  // the table (lookup) or tensor (dense)
  // kRound: what the replica holds of the server's slices, the step to
  // capture at, how long the server may wait for it.
  std::vector<ServingPart> held;
  uint64_t target_step = 0;
  uint32_t wait_ms = 0;
  bool operator==(const ServingRequestMsg&) const = default;
};
struct ServingReplyMsg {
  uint64_t step = 0;
  int64_t synced_at_ms = 0;  // unix milliseconds
  bool exact = false;
  std::string source;
  std::vector<int64_t> shape;
  std::vector<std::string> tensors;  // version: the model's tensors and tables
  std::vector<std::string> tables;
  std::vector<uint32_t> table_dims;
  std::vector<ServingPart> parts;  // a round's: every slice the server leads
  bool job_ended = false;          // the server's last round
  bool operator==(const ServingReplyMsg&) const = default;
};
struct OriginSeq {
  int32_t origin = 0;  // the server rank whose numbering it is
  int32_t worker = 0;
  uint64_t last_seq = 0;
  bool operator==(const OriginSeq&) const = default;
};
// A pull of table rows a shard counted towards admission (server/replication/counted_pulls.h).
struct CountedPullId {
  int32_t worker = 0;
  uint64_t pull_id = 0;
  bool operator==(const CountedPullId&) const = default;
};
struct SliceCopyMsg {
  uint32_t key = 0;
  std::vector<OriginSeq> seqs;
  // A table shard's: the pulls whose rows its state counted already, so that
  // the copy does not count one again when it is re-sent (a failover's).
  std::vector<CountedPullId> pulls;
  // The cluster view in which the sender leads the slice: a receiver whose
  // view is older waits for it before it judges the sender.
  uint64_t view_epoch = 0;
  bool operator==(const SliceCopyMsg&) const = default;
};
struct StatsRequestMsg {
  bool operator==(const StatsRequestMsg&) const = default;
};
struct StatsReplyMsg {
  uint64_t pushes_applied = 0;   // pushes that reached the parameters
  uint64_t updates_applied = 0;  // optimizer steps (sync: one per step and slice)
  uint64_t pulls_served = 0;
  uint64_t errors_replied = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  // [s] = slice updates applied with staleness s (a push of k slices counts k)
  std::vector<uint64_t> staleness_histogram;
  uint64_t staleness_max = 0;
  uint32_t slices_held = 0;
  uint64_t waited_pull_micros = 0;
  std::vector<uint32_t> held_keys;  // slice keys this server holds, ascending
  // Per worker rank: one past the last clock it pushed to every slice here.
  std::vector<int64_t> worker_clocks;
  uint64_t max_version = 0;  // the highest slice version here
  // Pushed slices skipped because their step was applied under the worker's
  // previous node (a restarted worker, or a whole job restarted from its
  // checkpoints), and re-sent pushes dropped by sequence number.
  uint64_t slices_skipped = 0;
  uint64_t duplicates_dropped = 0;
  uint64_t assigns_applied = 0;       // pushes of values (PushRequestMsg::assign)
  std::vector<TableStatsMsg> tables;  // per table shard held here, in table order
  bool operator==(const StatsReplyMsg&) const = default;
};

using Body = std::variant<ErrorMsg, AckMsg, RegisterRequestMsg, RegisterReplyMsg, ClusterViewMsg, DefineModelRequestMsg,
                          DefineModelReplyMsg, CreateSlicesRequestMsg, BarrierRequestMsg, WorkerDoneMsg, ShutdownMsg,
                          PushRequestMsg, PullRequestMsg, PullReplyMsg, StatsRequestMsg, StatsReplyMsg, HeartbeatMsg,
                          ShmOfferMsg, ShmGrantMsg, AddCopyRequestMsg, SliceCopyMsg, DrainRequestMsg, ServingRequestMsg,
                          ServingReplyMsg>;

struct Envelope {
  uint32_t version = kProtocolVersion;
  uint64_t request_id = 0;
  uint32_t sender = 0;
  Body body;
  // Server -> worker replies: the last push seq of this worker that the
  // server's latest checkpoint holds (see PushRequestMsg::seq).
  uint64_t durable_seq = 0;
  // The job incarnation the sender belongs to: a random 64-bit number drawn
  // by a scheduler forming a new job and kept by one restored from its state
  // file. Node ids are unique within an incarnation, so (incarnation, node
  // id) names a node for good, and a server never takes a push of one
  // incarnation for a re-send of another's. 0: not known yet.
  uint64_t incarnation = 0;
  // Worker requests: lower is served first among those a server finds
  // waiting together (server/request_order.h); the index of the request's
  // first tensor (tables: 0), its place in the forward pass.
  uint32_t priority = 0;
  bool operator==(const Envelope&) const = default;
};

// The scheduler's durable state: what a restarted scheduler needs to take a
// running job back (scheduler/job_state.h keeps it in a file).
struct JobStateNode {
  NodeInfo info;
  bool done = false;  // a worker that said it is done
  bool alive = true;  // false once declared dead or replaced
  bool operator==(const JobStateNode&) const = default;
};
// A slice's move whose old copy was being released when the state was
// saved: a restored scheduler finishes it (its new copy takes over).
struct JobStateMove {
  uint32_t key = 0;
  int32_t from = 0;
  int32_t to = 0;
  bool operator==(const JobStateMove&) const = default;
};

// The job's configuration as its scheduler was started (ps_scheduler's
// flags beyond the node counts): what a scheduler restored from the state
// file keeps, so that it is the same job (a replicated or elastic job stays
// so). The consistency and the placement rules are the model's
// (JobState::model); the node counts are JobState's own.
struct JobConfig {
  int32_t replicas = 1;
  bool elastic = false;
  int64_t heartbeat_timeout_ms = 0;
  int64_t server_timeout_ms = 0;
  int64_t register_timeout_ms = 0;
  bool operator==(const JobConfig&) const = default;
};

struct JobState {
  uint64_t incarnation = 0;
  std::string endpoint;  // where the nodes reach the scheduler
  int32_t num_servers = 0;
  int32_t num_workers = 0;
  uint32_t next_node_id = 1;
  uint64_t view_epoch = 0;
  std::vector<JobStateNode> nodes;
  std::optional<ModelSpec> model;            // set once the servers hold it
  std::vector<std::vector<int32_t>> copies;  // --replicas: per slice key, primary first
  std::optional<JobStateMove> releasing;
  std::optional<JobConfig> config;  // none in a state file of format 1
  bool operator==(const JobState&) const = default;
};

// Name of the body's type, for log lines and error messages ("pushRequest").
const char* BodyName(const Body& body);

// An incarnation as log lines and errors show it: 16 hex digits.
std::string IncarnationName(uint64_t incarnation);

}  // namespace ps

#endif  // PS_COMMON_WIRE_MESSAGES_H_
