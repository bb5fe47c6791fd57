# Every message on the wire of the parameter-server system.
#
# A ZeroMQ multipart message carries one Header (frame 0, this schema) and then
# zero or more raw payload frames (little-endian float32 tensors), in the order
# the header lists them. Payloads never pass through Cap'n Proto.
@0xc3b5a2e4f1d0a9b7;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("ps::wire");

# Bumped on any incompatible change; a peer with another version gets an error.
const protocolVersion :UInt32 = 3;

enum Role { scheduler @0; server @1; worker @2; }
enum InitKind { zeros @0; constant @1; uniform @2; normal @3; he @4; }
enum OptimizerKind { sgd @0; momentum @1; adam @2; adagrad @3; ftrl @4; }
enum ConsistencyMode { sync @0; async @1; ssp @2; }
enum PlacementRule { auto @0; layer @1; }
enum LrSchedule { constant @0; cosine @1; }

struct TensorSpec {
  name @0 :Text;
  shape @1 :List(Int64);
  initKind @2 :InitKind;
  initA @3 :Float32;
  initB @4 :Float32;
  initSeed @5 :UInt64;
  stage @6 :Int32;         # pipeline stage whose workers hold it (ModelSpec.stages > 1)
  buffer @7 :Bool;         # set by assign only (running statistics), never by an optimizer
  hasCompression @8 :Bool; # false: the model's
  compression @9 :Compression;
}

# How a tensor or table travels (common/compress/compressor.h): the push's kind (a
# CompressionKind) and ratio, and the pull's (none, fp16 or bf16).
struct Compression {
  kind @0 :UInt8;
  ratio @1 :Float64 = 1.0;
  pull @2 :UInt8;
  warmup @3 :UInt32;       # steps of the ratio's warm-up (topk, randomk)
  rawIds @4 :Bool;         # a table's ids as they are, not delta coded (common/wire/id_coding.h)
}

struct OptimizerConfig {
  kind @0 :OptimizerKind;
  learningRate @1 :Float32;
  momentum @2 :Float32;
  nesterov @3 :Bool;
  beta1 @4 :Float32;
  beta2 @5 :Float32;
  epsilon @6 :Float32;
  weightDecay @7 :Float32;
  lrSchedule @8 :LrSchedule;
  decaySteps @9 :UInt64;
  minLrRatio @10 :Float32;
  l1 @11 :Float32;         # ftrl
  l2 @12 :Float32;         # ftrl
  ftrlBeta @13 :Float32;   # ftrl
}

# An embedding table: rows of `dim` floats by any 64-bit id, created on
# first touch, hash-sharded over every server (common/placement/partition_map.h).
struct TableSpec {
  name @0 :Text;
  dim @1 :UInt32;
  initKind @2 :InitKind;
  initA @3 :Float32;
  initB @4 :Float32;
  initSeed @5 :UInt64;
  hasOptimizer @6 :Bool;          # false: the model's optimizer
  optimizer @7 :OptimizerConfig;
  admitAfter @8 :UInt32;          # create a row once its id was pulled this often (0, 1: at once)
  hasConsistency @9 :Bool;        # false: the model's consistency mode
  consistency @10 :ConsistencyMode;
  staleness @11 :Int32;
  expireAfterSteps @12 :UInt64;   # drop a row untouched for this many updates of its shard (0: never)
  hasCompression @13 :Bool;       # false: the model's pull kind
  compression @14 :Compression;
}

struct ExplicitPlacement {
  tensor @0 :Text;
  server @1 :Int32;
}

struct ModelSpec {
  tensors @0 :List(TensorSpec);
  optimizer @1 :OptimizerConfig;
  consistency @2 :ConsistencyMode;
  staleness @3 :Int32;
  placementRule @4 :PlacementRule;
  sliceBytes @5 :UInt64;
  explicitRanks @6 :List(ExplicitPlacement);
  tables @7 :List(TableSpec);
  stages @8 :Int32;        # pipeline stages per replica group; 0 (older peers) means 1
  tableShards @9 :UInt32;  # shards per table (PlacementSpec::table_shards); 0: one per server
  compression @10 :Compression;             # tensors' unless their own
  compressMinBytes @11 :UInt64 = 65536;     # smaller tensors travel as float32
}

struct Slice {
  key @0 :UInt32;
  tensor @1 :UInt32;
  offset @2 :UInt64;
  length @3 :UInt64;
  server @4 :Int32;
  table @5 :Bool;    # a table's shard on `server`: `tensor` indexes the tables, offset/length 0
}

struct NodeInfo {
  nodeId @0 :UInt32;
  role @1 :Role;
  rank @2 :Int32;
  address @3 :Text;
  publicKey @4 :Text;    # the CurveZMQ key (Z85) the node registered with; empty without keys
}

# Control plane: node <-> scheduler.
struct RegisterRequest {
  role @0 :Role;
  address @1 :Text;
  rank @2 :Int32 = -1;   # >= 0: take this rank back (a restarted server or worker)
  publicKey @3 :Text;    # the node's CurveZMQ key (Z85): a server's is what workers trust; empty without keys
  nodeId @4 :UInt32;     # != 0: the id this node holds already (re-registering with a restarted
                         # scheduler); the header's incarnation says which job it belongs to
  restored @5 :Bool;     # a server: it holds its rank's state from a checkpoint (a rank asked without
                         # it is for a forming job only: rejoining would reset that rank's slices)
  join @7 :Bool;         # a server joining a running job under a new rank (ps_server --join)
  held @6 :List(SliceData);  # a restored server: each slice its checkpoint holds, with its version
                             # (a whole job restarted with --replicas keeps each slice's most advanced copy)
}
struct RegisterReply {
  nodeId @0 :UInt32;
  rank @1 :Int32;
  incarnation @2 :UInt64;
  replicas @3 :Int32 = 1;  # copies the job keeps of every slice (ps_scheduler --replicas)
}
struct ClusterView {
  numServers @0 :Int32;
  numWorkers @1 :Int32;
  nodes @2 :List(NodeInfo);
  dead @3 :List(UInt32);   # node ids declared dead (silent past the heartbeat timeout)
  epoch @4 :UInt64;        # views are numbered; a later view replaces an earlier one
  incarnation @5 :UInt64;  # the job incarnation (see Header.incarnation)
  # --replicas K > 1, once the model is placed: per slice key, the servers
  # holding a copy now, primary first (failover promotes the next). Empty
  # with one copy: each slice on its Slice.server.
  copies @6 :List(List(Int32));
  # != 0: a change to view baseEpoch (nodes new or changed, ids newly dead,
  # copies when they changed), not a whole view (common/wire/cluster_view.h).
  baseEpoch @7 :UInt64;
  # A change to some slices' copies only: copies[i] holds slice copyKeys[i]'s
  # servers now. Empty: copies lists every slice's.
  copyKeys @8 :List(UInt32);
}
struct DefineModelRequest { model @0 :ModelSpec; }
struct DefineModelReply {
  model @0 :ModelSpec;
  slices @1 :List(Slice);
  mapServers @2 :Int32;  # the servers the map was placed on (0: the view's count, from older peers)
}
struct CreateSlicesRequest {
  model @0 :ModelSpec;
  slices @1 :List(Slice);
  numWorkers @2 :Int32;
  # With --replicas K > 1: per slice (in slices' order), the servers holding
  # a copy, its primary first. Empty: one copy each, on its slice.server.
  copies @3 :List(List(Int32));
}
struct BarrierRequest { name @0 :Text; timeoutMs @1 :UInt64; }
struct WorkerDone {}
struct Shutdown {
  reason @0 :Text;
  left @1 :Bool;  # to a drained server only: it left the job, whose slices live on the others
}
struct Ack {}
# node -> scheduler every interval, answered with an Ack; worker -> server, a
# probe of a server its requests wait on, answered with an Ack at once.
struct Heartbeat {
  unreachable @0 :List(Unreachable);  # worker -> scheduler: the servers it cannot reach now
}
# A server a worker's requests got no answer from for its heartbeat timeout.
struct Unreachable {
  server @0 :Int32;       # its rank
  silentMs @1 :Int64;     # since the worker last heard from it
  hearsOthers @2 :Bool;   # the worker hears other servers meanwhile (its own network works)
}

# Data plane: worker <-> server. Payload frame i belongs to slices[i].
struct SliceData {
  key @0 :UInt32;
  length @1 :UInt64;       # elements in the payload frame
  version @2 :UInt64;      # push: version the gradient was computed from; pull reply: version returned
  rows @3 :UInt32;         # table shards: rows in the frame (push: that many uint64 ids, then
                           # rows x dim floats; pull reply: rows x dim floats); 0 for dense slices
  compressed @4 :Bool;     # the payload's values are a compressed frame (common/compress/compressor.h):
                           # a dense slice's whole frame; a table's rows after its ids, which are
                           # then an id section (common/wire/id_coding.h: delta coded where shorter)
  base @5 :UInt64;         # pull reply, compressed: != 0, the frame is the change from this version
                           # (a delta pull, server/store/delta_pull.h) to `version`
}
# The rows of `ids` (distinct) of a table shard: given in `ids`, or in
# `coded` (an id section, common/wire/id_coding.h) where that is shorter.
struct RowsRequest { key @0 :UInt32; ids @1 :List(UInt64); coded @2 :Data; }
struct PullRequest {
  clock @0 :Int64;
  keys @1 :List(UInt32);
  timeoutMs @2 :UInt64;
  rows @3 :List(RowsRequest);   # answered after the dense keys, in this order
  have @4 :List(UInt64);        # empty, or per key: the version the worker holds (delta pulls)
  pullId @5 :UInt64;            # != 0: the worker's number for this pull, the same in its re-sends: a table
                                # shard counts its rows towards admission once per (worker, pullId)
}
# With thenPull set, the server applies the push and answers with the pull's
# PullReply instead of an Ack: one round trip for the common training step.
struct PushRequest {
  clock @0 :Int64;
  slices @1 :List(SliceData);
  thenPull @2 :PullRequest;
  seq @3 :UInt64;             # per (worker, server), from 1: the server applies each seq once
  wantCheckpoint @4 :Bool;    # the worker's replay buffer is large: checkpoint soon
  assign @5 :Bool;            # the payloads are values to set, not gradients (SliceStore::Push)
  forWorker @6 :Int32 = -1;   # --replicas: a primary forwarding the push of this worker to a backup
  viewEpoch @8 :UInt64;       # --replicas: the cluster view the sender routed by (a later one than the receiver's waits for it)
  origin @7 :Int32 = -1;      # --replicas: seq numbers the worker's pushes to this server rank's slices (-1: the receiver's)
  pulled @9 :Bool;            # --replicas, forwarded only: the table rows a pull read on the primary (each frame
                              # the ids alone, `rows` of them; no gradients): the backup reads them too;
                              # `seq` is then the pull's pullId
  stepSum @10 :Bool;          # --replicas, forwarded only: sync steps the primary completed, each slice's summed
                              # gradient (`version` the step) and the pushes it summed (server/store/step_forwarding.h)
}
struct PullReply { slices @0 :List(SliceData); }
struct StatsRequest {}
# Same-host data plane (common/net/shm_channel.h). A worker asks a server for a
# shared-memory channel; the server grants one to a registered worker only
# (over the authenticated socket): the abstract Unix socket to fetch the
# region's file descriptors from, the one-time token to present there, and
# the bytes of each of the region's two rings.
struct ShmOffer {}
struct ShmGrant { socketName @0 :Text; token @1 :Data; ringBytes @2 :UInt64; }
struct StatsReply {
  pushesApplied @0 :UInt64;
  updatesApplied @1 :UInt64;
  pullsServed @2 :UInt64;
  errorsReplied @3 :UInt64;
  bytesIn @4 :UInt64;
  bytesOut @5 :UInt64;
  stalenessHistogram @6 :List(UInt64);  # slice updates by staleness 0..n-1
  stalenessMax @7 :UInt64;
  slicesHeld @8 :UInt32;
  waitedPullMicros @9 :UInt64;          # total time pulls were parked waiting (sync/ssp)
  heldKeys @10 :List(UInt32);           # the slice keys this server holds, ascending
  workerClocks @11 :List(Int64);        # per worker rank: one past the last clock it pushed everywhere here
  maxVersion @12 :UInt64;               # the highest slice version here (sync: steps applied)
  slicesSkipped @13 :UInt64;            # pushed slices skipped: their step was applied under the
                                        # worker's previous node (a restart)
  duplicatesDropped @14 :UInt64;        # re-sent pushes dropped by sequence number (already applied)
  tables @15 :List(TableStats);         # per table shard held here, in table order
  assignsApplied @16 :UInt64;           # pushes of values (PushRequest.assign) applied
}
struct TableStats {
  table @0 :UInt32;           # index in the model's tables
  rows @1 :UInt64;            # rows held now
  bytes @2 :UInt64;           # memory they take (rows, optimizer state, index)
  evictions @3 :UInt64;       # rows dropped to stay within the memory budget
  admissions @4 :UInt64;      # rows created
  rejections @5 :UInt64;      # ids read as their initial value: not admitted yet, or no room
  gradientsDropped @6 :UInt64;  # pushed rows of ids without a row (not admitted)
  rowsPulled @7 :UInt64;
  rowsPushed @8 :UInt64;
  diskRows @9 :UInt64;        # rows only on the disk tier now (--table_disk_dir): rows + diskRows is the table
  diskReads @10 :UInt64;      # rows read back from it
  diskWrites @11 :UInt64;     # rows written to it
  diskRefusals @12 :UInt64;   # rows that could not go to it (full, failing): kept in memory or refused
  expired @13 :UInt64;        # rows dropped unseen for expire_after_steps
}

struct Error {
  code @0 :UInt32;     # absl::StatusCode
  message @1 :Text;
  # != 0: the request was routed by an older cluster view than this, the
  # refusing server's (a slice moved away from it): the sender routes it
  # again once it holds that view (common/wire/codec.h MovedError).
  viewEpoch @2 :UInt64;
  pushApplied @3 :Bool;  # with viewEpoch: the refused request's push was applied, its pull (thenPull) was not
  pushHeld @4 :Bool;     # with viewEpoch: the push is held in this server's step in progress of a slice that
                         # moved on: sent again numbered as it was, the slice's new primary applies it once
  # A backup's refusal of a forward it acknowledged: the slices whose copy
  # differs from the primary's (empty: every slice the forward carried).
  slices @5 :List(UInt32);
}

# --replicas, back to K copies: the scheduler asks a slice's primary to give
# server `server` a copy of slice `key`; the primary answers once the copy is
# complete (the server holds the slice and gets every later update).
struct AddCopyRequest {
  key @0 :UInt32;
  server @1 :Int32;
  # != 0: no copy to make; server `server`'s copy of slice `key` goes away
  # in this view epoch or a later one (a move: servers join or leave). The
  # primary stops forwarding the slice to it (or, when it is that server,
  # stops serving it: requests are refused as routed by an older view, at
  # this epoch), and answers once every update forwarded before is settled.
  releaseEpoch @2 :UInt64;
}
# Primary -> new backup: slice `key`'s whole state in the one payload frame
# (a store image of that slice, server/store/checkpoint_codec.h), and per (origin,
# worker) the last push seq that state holds (parallel lists), so that the
# copy drops what it holds already if a failover re-sends it; for a table
# shard, the pulls (worker, pullId; parallel lists) whose rows that state
# counted towards admission, so that the copy counts none of them again.
# viewEpoch: the cluster view in which the sender leads the slice; a
# receiver whose view is older waits for it (the scheduler's view may reach
# the new backup after the primary's copy does).
struct SliceCopy {
  key @0 :UInt32;
  origins @1 :List(Int32);
  workers @2 :List(Int32);
  lastSeqs @3 :List(UInt64);
  pullWorkers @4 :List(Int32);
  pullIds @5 :List(UInt64);
  viewEpoch @6 :UInt64;
}

# --replicas: server `server` leaves a running job (ps_server --drain on
# SIGTERM, or ps_scheduler --drain_server against the job): every slice it
# holds a copy of gets its K copies on the other servers first, then it is
# told to shut down and its slices fail over to those copies. Answered (an
# Ack) once the server has left, or with the error that keeps it.
struct DrainRequest {
  server @0 :Int32;
}

# Client -> serving replica (ps_serve): a read of the model it serves.
# lookup: rows of table `name` for the ids in the one payload frame
# (little-endian uint64); dense: tensor `name`; version: what it serves.
# A read of a serving replica's model, or a replica following a job:
# subscribe asks the scheduler for the model and the servers (it answers
# DefineModelReply, then the whole ClusterView, under the request's id);
# round asks a training server for its part of a round (ServingReply with
# parts). A round names what the replica holds of the slices the server
# leads (held), the step to capture at (sync: the first moment all its sync
# slices stand at one step >= targetStep) and how long the server may wait
# for that (waitMs; past it, the slices as they are).
enum ServingKind { version @0; lookup @1; dense @2; subscribe @3; round @4; }
# One slice in a round. Held (request): the version of the values held, and
# for a table shard the server's change cut its rows are as of (0: none).
# Sent (reply): the same after the round; `values` says a payload frame
# follows for it (in parts' order): a dense slice's float32 values, or a
# table shard's `rows` ids (uint64), their rows (float32, rows x dim) and
# `removed` ids (uint64) of rows that went; `snapshot`: the rows are all the
# shard holds (the replica drops the others).
struct ServingPart {
  key @0 :UInt32;
  version @1 :UInt64;
  cut @2 :UInt64;
  values @3 :Bool;
  snapshot @4 :Bool;
  rows @5 :UInt64;
  removed @6 :UInt64;
}
struct ServingRequest {
  kind @0 :ServingKind;
  name @1 :Text;
  held @2 :List(ServingPart);
  targetStep @3 :UInt64;
  waitMs @4 :UInt32;
}
# Serving replica -> client: the model version the answer is of (the step it
# reflects, when it was synced, whether it is exactly the training model
# after that step) and, for lookup and dense, `shape` with the values as
# float32 in payload frame 0; a lookup adds frame 1, one byte per id, 1 for
# an id the table holds (0: the table's initial value). version lists the
# model's tensors and tables (tableDims parallel to tables).
struct ServingReply {
  step @0 :UInt64;
  syncedAtMs @1 :Int64;
  exact @2 :Bool;
  source @3 :Text;
  shape @4 :List(Int64);
  tensors @5 :List(Text);
  tables @6 :List(Text);
  tableDims @7 :List(UInt32);
  # A round's part: every slice the server leads; jobEnded: its last (the
  # server stops: the model after the job's last step).
  parts @8 :List(ServingPart);
  jobEnded @9 :Bool;
}

struct Header {
  version @0 :UInt32;
  requestId @1 :UInt64;
  sender @2 :UInt32;     # node id; 0 before registration
  body :union {
    error @3 :Error;
    ack @4 :Ack;
    registerRequest @5 :RegisterRequest;
    registerReply @6 :RegisterReply;
    clusterView @7 :ClusterView;
    defineModelRequest @8 :DefineModelRequest;
    defineModelReply @9 :DefineModelReply;
    createSlicesRequest @10 :CreateSlicesRequest;
    barrierRequest @11 :BarrierRequest;
    workerDone @12 :WorkerDone;
    shutdown @13 :Shutdown;
    pushRequest @14 :PushRequest;
    pullRequest @15 :PullRequest;
    pullReply @16 :PullReply;
    statsRequest @17 :StatsRequest;
    statsReply @18 :StatsReply;
    heartbeat @19 :Heartbeat;
    shmOffer @22 :ShmOffer;
    shmGrant @23 :ShmGrant;
    addCopyRequest @24 :AddCopyRequest;
    sliceCopy @25 :SliceCopy;
    drainRequest @26 :DrainRequest;
    servingRequest @28 :ServingRequest;
    servingReply @29 :ServingReply;
  }
  # Replies of a server to a worker: the last push seq of this worker that
  # the server's latest checkpoint holds (all of them when it keeps none), so
  # the worker can drop its copies up to there.
  durableSeq @20 :UInt64;
  # The job incarnation the sender belongs to: drawn at random by a scheduler
  # forming a new job (kept by one restored from its state file), so that node
  # ids and push sequence numbers of one incarnation are never taken for
  # another's. 0: the sender does not know one yet.
  incarnation @21 :UInt64;
  # Worker requests: lower is served first among the requests a server finds
  # waiting together (server/request_order.h): the index of the request's
  # first tensor, its place in the forward pass.
  priority @27 :UInt32;
}

# The scheduler's durable state (scheduler/job_state.h frames it in a file):
# what a restarted scheduler needs to take a running job back.
struct JobStateNode {
  info @0 :NodeInfo;
  done @1 :Bool;
  alive @2 :Bool;
}
struct JobState {
  incarnation @0 :UInt64;
  endpoint @1 :Text;
  numServers @2 :Int32;
  numWorkers @3 :Int32;
  nextNodeId @4 :UInt32;
  viewEpoch @5 :UInt64;
  nodes @6 :List(JobStateNode);
  modelReady @7 :Bool;
  model @8 :ModelSpec;     # meaningful when modelReady
  copies @9 :List(List(Int32));  # --replicas: per slice key, its copies now, primary first
  releasing @10 :Bool;           # a move's old copy was being released: slice releasingKey
  releasingKey @11 :UInt32;      # goes from server releasingFrom to releasingTo
  releasingFrom @12 :Int32;
  releasingTo @13 :Int32;
  hasConfig @14 :Bool;           # false in state files of format 1
  config @15 :JobConfig;
}
# The job's configuration as its scheduler was started: what a restored
# scheduler keeps (the consistency and placement rules are the model's).
struct JobConfig {
  replicas @0 :Int32;
  elastic @1 :Bool;
  heartbeatTimeoutMs @2 :Int64;
  serverTimeoutMs @3 :Int64;
  registerTimeoutMs @4 :Int64;
}
