#ifndef PS_SERVER_STORE_SLICE_STORE_H_
#define PS_SERVER_STORE_SLICE_STORE_H_

// The parameter slices one server holds, their optimizer state and version
// clocks, and the consistency rules (sync, async, ssp:K) that decide when a
// push is applied and when a pull may be answered. Knows no sockets.
//
// Not thread-safe: one thread (the server's request thread) calls every
// method. Push() itself spreads the per-slice work over the ThreadPool.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "common/wire/messages.h"
#include "server/disk/table_disk.h"
#include "server/optim/optimizer.h"
#include "server/store/slice_state.h"
#include "server/store/table_shard.h"

namespace ps {

class ConsistencyPolicy;  // server/store/consistency_policy.h

// A store's whole state as a checkpoint holds it (what SliceStore::Adopt
// takes over): built by server/store/checkpoint_codec.h. Not thread-safe.
struct StoreContents {
  ModelSpec model;
  std::vector<Slice> slices;  // in Create's order
  int num_workers = 0;
  std::vector<uint8_t> active;  // per worker, 1: active
  // Of the counters only pushes_applied, updates_applied, staleness_max and
  // staleness_histogram are kept; the rest start again.
  StatsReplyMsg stats;
  // Per table, its optimizer; the table shards in `states` refer to them.
  std::vector<std::unique_ptr<Optimizer>> table_optimizers;
  absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states;  // per slice key
};

// The optimizers of `model`'s tables, in table order (each table's own, or
// the model's).
absl::StatusOr<std::vector<std::unique_ptr<Optimizer>>> TableOptimizers(const ModelSpec& model);

class SliceStore {
 public:
  // `pool` is borrowed and must outlive the store. `max_bytes` bounds the
  // memory the slices, their optimizer state and sync sums may take (0: no
  // bound).
  SliceStore(ThreadPool* pool, bool allow_nonfinite, uint64_t max_bytes = 0);
  ~SliceStore();
  SliceStore(const SliceStore&) = delete;
  SliceStore& operator=(const SliceStore&) = delete;

  // Allocates and initialises `slices` of `model` for a job of `num_workers`.
  // kInvalidArgument for a bad model or slice; kFailedPrecondition when a
  // different model is already held (the same one again is a no-op);
  // kResourceExhausted when it needs more than max_bytes or memory runs out.
  // `between` runs after each slice is made: initialising a large model
  // takes seconds, in which the server's loop still sends its heartbeats.
  absl::Status Create(
      const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
      absl::FunctionRef<void()> between = [] {});
  bool has_model() const { return model_ != nullptr; }
  // The held model. Requires has_model().
  const ModelSpec& model() const { return *model_; }

  // Validates the whole push first and changes nothing unless every slice is
  // acceptable; then applies it (sync: adds to the step's sum and runs the
  // optimizer once every active worker's push is in, see SetWorkerActive).
  // `payloads[i]` holds the gradient of push.slices[i]. Errors, each naming
  // the slice:
  //   kFailedPrecondition: no model yet; a worker that has been removed from
  //     the job (SetWorkerActive false); sync push for a step already applied,
  //     for a step the slice has not reached, or, by a worker that re-joined,
  //     for a step before the one it joined at;
  //   kAlreadyExists: sync push this worker already made for this step;
  //   kNotFound: unknown slice key; kInvalidArgument: clock outside [0, 2^53], duplicate key in the
  //     push, payload length not matching the header or the slice, NaN or Inf
  //     in a gradient (unless allowed), worker rank out of range.
  //
  // A push with `assign` sets values instead (PushRequestMsg::assign): the
  // same checks but for the step's (any clock, not part of a step), then
  // each dense slice takes its frame and each table shard the frame's rows
  // for its ids (created, admitted or not; an id beyond the memory budget
  // evicts another row as a pull would), with their optimizer state and
  // per-row step count reset. Counted in stats().assigns_applied.
  absl::Status Push(int worker, const PushRequestMsg& push, absl::Span<const absl::Span<const float>> payloads);

  // Table shards: push.slices[i].rows distinct ids and their gradient rows
  // travel in one frame (common/wire/messages.h), which payloads[i] spans whole,
  // as floats. Their errors: kInvalidArgument for a frame that does not
  // hold `rows` ids and rows x dim floats, more than kMaxRowsPerRequest
  // rows, or NaN or Inf in a row. A push of no rows is a table's empty push
  // (in sync, every worker pushes every shard each step).
  //
  // kNotFound for unknown keys, kInvalidArgument for repeated keys, a
  // clock outside [0, 2^53], a dense key among the rows or a table shard
  // among the dense keys, more than kMaxRowsPerRequest ids for a shard;
  // kFailedPrecondition before the model exists.
  absl::Status CheckPull(const PullRequestMsg& pull) const;
  // Whether a compressed frame that `meta` describes may be decoded: its
  // slice is held here and the sizes it declares are the slice's (a dense
  // slice's length; a table shard's rows of its dim, at most
  // kMaxRowsPerRequest), so that decoding it allocates no more than the
  // slice takes. Push's errors otherwise.
  absl::Status CheckDeclared(const SliceData& meta) const;
  // Whether a pull at `clock` may see the slices now: sync, every slice has
  // applied step clock-1 (version >= clock); ssp:K, every active worker has
  // pushed up to clock-K-1 to every slice; async, always. Requires CheckPull
  // ok.
  bool PullReady(const PullRequestMsg& pull) const;
  // Sync only: whether some slice of `push` has not reached the push's step
  // yet (a push re-sent after a restart can run ahead of the other workers'
  // re-sends; the server holds it back instead of refusing it). False in
  // other modes, without a model, and for keys it does not hold (applying
  // the push names those).
  bool PushAhead(const PushRequestMsg& push) const;
  // What a pull that is not ready waits for, for a deadline error.
  std::string DescribeWait(const PullRequestMsg& pull) const;

  // The current values and version of a slice. Requires a known key; the
  // span stays valid until the next Push or Create.
  absl::Span<const float> Values(uint32_t key) const;
  uint64_t Version(uint32_t key) const;
  // How slice `key` travels: its tensor's or table's ModelSpec compression
  // (ModelSpec::TensorCompression, TableCompression). Requires a known key.
  CompressionSpec Compression(uint32_t key) const;
  // A delta pull of dense slice `key` (Compression(key).delta_pull()) by a
  // worker holding version `have` (server/store/delta_pull.h). Requires a known
  // key; the reply's views stay valid until the next Push or Create.
  DeltaReply PullDelta(uint32_t key, uint64_t have);
  // The table shard of slice `key`, or null for a dense slice. Requires a
  // known key. A pull reads rows through it (TableShard::Read creates the
  // rows of admitted ids).
  TableShard* Table(uint32_t key);
  // Counters of every table shard held, in key order.
  std::vector<TableStatsMsg> TableStats() const;

  // The most rows one request may carry for one table shard.
  static constexpr uint32_t kMaxRowsPerRequest = 1u << 17;

  // Counters since start (slices_held, pushes, updates, staleness).
  const StatsReplyMsg& stats() const { return stats_; }

  // ---- workers leaving and joining ----------------------------------------
  //
  // Every worker starts active. An inactive worker is not waited for:
  //   sync: step v of a slice completes once every active worker counted at
  //     step v has pushed it, and the optimizer gets the mean over the pushes
  //     that arrived (sum / arrived). A step nobody pushed but nobody active
  //     is counted at any more (only a re-joining worker, counted from v+1)
  //     completes empty: the version advances, values and optimizer state do
  //     not change. With no active worker at all, nothing completes.
  //   ssp: pulls do not wait for inactive workers' clocks.
  //   all modes: pushes from an inactive worker are refused.
  // Re-activation counts the worker from the next step: sync, from step
  // version+1 of each slice (its pushes for earlier steps are refused, and
  // its clock here is raised to that step); ssp, its clock on each slice is
  // raised to the slowest other active worker's, so it does not hold the
  // others back; async, nothing waits on clocks, so it resumes where its
  // pushes ended.
  //
  // Call with false when the scheduler reports the worker dead or removed,
  // with true when it (re)joins; setting the state it already has is a
  // no-op. Returns true when pull readiness may have changed, i.e. the
  // caller should re-check its parked pulls: a sync step completed on some
  // slice (updates are counted in stats()), or an ssp worker stopped being
  // waited for. Requires has_model() and 0 <= worker < num_workers()
  // (CHECKed: ranks come from the scheduler, not from a peer's bytes).
  bool SetWorkerActive(int worker, bool active);
  bool IsWorkerActive(int worker) const;  // requires has_model(), worker in range
  int num_workers() const { return num_workers_; }

  // The worker rank starts again under a new node (a restarted worker, or
  // every worker of a job restarted from its checkpoints) that resumes from
  // WorkerClock: from now on, a push of `worker` for a step below its clock
  // on a slice now skips that slice (counted in stats().slices_skipped), as
  // the state holds that step from the rank's previous node. A push whose
  // every slice is skipped changes nothing and is not an error. (A rank's
  // steps cannot be told apart by sequence numbers across nodes: this is
  // what keeps a step that was half applied when its node died, or that one
  // server's checkpoint holds and another's lacks, from being applied
  // twice.) Kept in checkpoints. Requires has_model() and
  // worker in range (CHECKed).
  void SkipStepsAlreadyApplied(int worker);

  // The clock `worker` should push next here: the minimum over this server's
  // slices of one past the last clock it pushed to the slice, raised on
  // re-activation to the step it joins at (sync) or the slowest worker's
  // clock (ssp). A restarted worker resumes from the minimum of this over
  // all servers. 0 when the server holds no slices. Requires has_model(),
  // worker in range.
  int64_t WorkerClock(int worker) const;
  // The smallest and largest version over this server's slices (0 when it
  // holds none or has no model).
  uint64_t MinVersion() const;
  uint64_t MaxVersion() const;

  // ---- --replicas, sync: a step forwarded once (server/store/step_forwarding.h) ---
  //
  // A primary forwards a dense sync slice's step to its backups as the
  // step's sum once it completes, not each worker's push; a backup completes
  // the step with that sum as the primary did (the same optimizer call, so
  // the same bytes).

  // A step of a slice as it completed: the workers whose pushes it summed
  // (ascending; none for a step that completed empty) and their sum (the
  // slice's length; empty with no worker).
  struct CompletedStep {
    uint32_t key = 0;
    uint64_t step = 0;
    std::vector<int32_t> workers;
    std::vector<float> sum;
  };
  // Whether slice `key`'s steps travel as their sums: a dense slice of a
  // sync model, no buffer, held by two workers or more (with one, the sum
  // is the push), whose pushes are not smaller on the wire than the sum is
  // (4 bytes a value against the pushes of its workers: uncompressed
  // always, 16-bit too, top-k and random-k only with enough workers,
  // one-bit never). False for a key not held.
  bool ForwardsSteps(uint32_t key) const;
  // From now on, each step that completes here (in Push, SetWorkerActive,
  // Resettle) of a slice `record` names is kept for TakeCompletedSteps; the
  // slices `follow` names (a backup's) complete steps only by ApplyStep or
  // a push, never because a worker left: their primary sends that step.
  // A push that gives such a step its last push leaves the optimizer to
  // CompleteDueSteps, so that the sum can go to the backups first.
  void SetStepForwarding(std::function<bool(uint32_t)> record, std::function<bool(uint32_t)> follow);
  // The steps recorded since the last call, in the order they completed.
  std::vector<CompletedStep> TakeCompletedSteps();
  // Runs the optimizer of the steps Push left due (after their sums were
  // taken); the caller's next call to the store after a Push that recorded
  // steps. Nothing when none is due.
  void CompleteDueSteps();
  // A backup completes `step` of its slice as the primary did: the sum
  // replaces what the slice's step holds (a copy's partial step, taken with
  // its image). Returns false, changing nothing, when the slice is past
  // that step already. kNotFound for an unknown key; kFailedPrecondition for
  // a slice whose steps do not travel as sums or that is behind the step (a
  // lost forward); kInvalidArgument for a sum not of the slice's length (or
  // one with no worker), workers out of range or not ascending, NaN or Inf
  // (unless allowed).
  absl::StatusOr<bool> ApplyStep(CompletedStep step);
  // ApplyStep for each of `steps` (one forward's, in order), all or none:
  // every step is checked first (a later step of a slice against the
  // version its earlier ones reach), and the first refusal changes
  // nothing. Returns, per step, whether it applied.
  absl::StatusOr<std::vector<bool>> ApplySteps(std::vector<CompletedStep> steps);
  // Whether slice `key` holds `step` as its last step already, but with
  // another sum (or summed from other workers): a primary that died had
  // summed it, its successor summed the re-sent pushes again in another
  // order. False when the slice does not keep that step's sum (past it, in
  // a step since, or a copy's image) or the step completed empty.
  bool HoldsStepWithAnotherSum(const CompletedStep& step, absl::Span<const int32_t> last_workers) const;
  // Whether `worker`'s push of step `clock` is in slice `key`'s step in
  // progress (sync: the slice is at that step and holds the worker's push);
  // whether that push skips the slice (SkipStepsAlreadyApplied). False for
  // a key not held.
  bool InStep(uint32_t key, int worker, int64_t clock) const;
  bool Skips(uint32_t key, int worker, int64_t clock) const;
  // Completes every step that waits only for workers no longer waited for,
  // as SetWorkerActive does (for slices a backup followed and now leads).
  // Returns true when a pull may be ready.
  bool Resettle();

  // ---- for checkpoints (server/store/checkpoint_codec.h) -------------------------
  //
  // The codec reads the store through these and builds a restored one with
  // Adopt; the byte format is the codec's alone.

  // Pushes at or beyond this staleness share the last histogram bucket.
  static constexpr size_t kStalenessBuckets = 256;

  // The memory budget the table shards share: what max_bytes leaves after
  // the dense slices (unbounded without max_bytes). The codec builds
  // restored shards against it.
  TableBudget* table_budget() const { return &table_budget_; }
  // The disk tier the tables spill to (server/disk/table_disk.h; borrowed, must
  // outlive the store), before the model is created or restored; its memory
  // comes out of the tables' budget. Null: none.
  void SetTableDisk(TableDisk* disk) {
    table_budget_.disk = disk;
    if (disk != nullptr) disk->ChargeTo(&table_budget_.used);
  }
  TableDisk* table_disk() const { return table_budget_.disk; }
  // Rows on the disk tier, over the table shards.
  uint64_t DiskRows() const;
  // The table shards whose disk rows share their table's log (restored
  // from store format 4), each alone of its table's shards here: that log
  // to restore as the shard's own where it holds the shard's rows alone.
  // Then OwnDiskLogs gives the shards the logs renamed (`done`).
  std::vector<TableDisk::Rename> DiskLogRenames() const;
  void OwnDiskLogs(const std::vector<TableDisk::Rename>& renames);
  // Sets the tables' share of max_bytes for `slices` of `model` (Create
  // does; the codec before it builds restored shards).
  void SetTableBudget(const ModelSpec& model, const std::vector<Slice>& slices, const Optimizer& optimizer) const;

  // The slice list as Create (or Adopt) got it, the per-worker active flags
  // (1: active), and the state of the slice `key` (requires a known key).
  // Require has_model(); valid until the next call that changes the store.
  const std::vector<Slice>& slice_list() const { return slice_list_; }
  absl::Span<const uint8_t> active() const { return active_; }
  const SliceState& State(uint32_t key) const;

  // kResourceExhausted, naming the budget, when `slices` of `model` with
  // `optimizer`'s state (and in sync mode a step sum) need more than
  // max_bytes; OK otherwise.
  absl::Status CheckMemory(const ModelSpec& model, const std::vector<Slice>& slices, const Optimizer& optimizer) const;

  // Takes over `contents`, a whole store as a checkpoint holds it; afterwards
  // Create() with the same model, slices and num_workers is the usual no-op.
  // Requires !has_model() and contents as the codec builds them: one state
  // per slice, every per-worker vector of num_workers entries (CHECKed).
  // Errors leave the store empty: kResourceExhausted as CheckMemory; the
  // status of Optimizer::Create for an optimizer that does not validate.
  absl::Status Adopt(StoreContents contents);
  // --replicas: adds the slices of `contents` (a copy another server sent,
  // server/store/checkpoint_codec.h AddSliceImage) to a store that holds the same
  // model and worker count, replacing a copy it held of any of them.
  // kFailedPrecondition for another model, no model, or per-worker state of
  // another size.
  absl::Status AddCopies(StoreContents contents);
  // AddCopies' checks alone, changing nothing.
  absl::Status CheckCopies(const StoreContents& contents) const;
  // --replicas, a restored store: keeps only `slices` (the copies the job
  // keeps here; the others are made again from a more advanced copy) and
  // drops the rest. kFailedPrecondition, changing nothing, for no model,
  // another model or worker count, or a slice of `slices` not held as it is.
  absl::Status Retain(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers);
  // Forgets slice `key` (moved to another server), a table shard's rows on
  // the disk tier with it; nothing when not held.
  void Drop(uint32_t key);
  // Each slice held (key, length, version, table rows), in slice order.
  std::vector<SliceData> Held() const;

 private:
  // ApplyStep's checks, with slice `step.key` at version `at`: false when it
  // holds the step already.
  absl::StatusOr<bool> CheckStep(const CompletedStep& step, uint64_t at) const;
  // ApplyStep's work, for a step CheckStep said applies.
  void CompleteStep(CompletedStep step);
  void CountHeld();  // stats_'s slices_held and held_keys, from slice_list_
  // A table shard leaving: its own log on the disk tier goes too.
  void DropDiskRows(const SliceState& s);
  absl::Status Allocate(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
                        std::unique_ptr<Optimizer> optimizer, absl::FunctionRef<void()> between);
  // A slice with every per-worker vector sized and zero, no values yet.
  static std::unique_ptr<SliceState> EmptySlice(const Slice& slice, int num_workers);
  // Takes over a fully built state (Allocate and Adopt end here).
  void Install(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
               std::unique_ptr<Optimizer> optimizer, std::vector<std::unique_ptr<Optimizer>> table_optimizers,
               absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states, std::vector<uint8_t> active);
  // The checks that do not depend on the slices: model, worker, clock,
  // and one payload frame per slice.
  absl::Status CheckPushHeader(int worker, const PushRequestMsg& push, size_t frames) const;
  // Checks the whole push; fills *grads with each slice's gradient.
  absl::Status ValidatePush(int worker, const PushRequestMsg& push, absl::Span<const absl::Span<const float>> payloads,
                            std::vector<Gradient>* grads) const;
  // The gradient of table shard `s` in `payload` (its whole frame as floats).
  absl::StatusOr<Gradient> TableGradient(const SliceState& s, const SliceData& meta,
                                         absl::Span<const float> payload) const;
  // Applies a validated push of values (`values[i]` for push.slices[i]).
  void Assign(const PushRequestMsg& push, absl::Span<const Gradient> values);

  // Runs each slice's policy's Settle (SetWorkerActive, Resettle); true
  // when some step completed.
  bool SettleAll();
  // Step recording (SetStepForwarding): who pushed `s`'s current step so
  // far, taken before Settle may complete it; and, afterwards, the step it
  // completed, if it did. Per slice: called for different slices at once.
  struct StepWatch {
    bool on = false;
    uint64_t version = 0;
    int arrived = 0;
    std::vector<int32_t> workers;
  };
  StepWatch Watch(const SliceState& s) const;
  static std::optional<CompletedStep> Completed(const SliceState& s, StepWatch watch);
  // Whether `s`'s steps are recorded (SetStepForwarding); the step `s`
  // holds every push of, not applied yet (a push's, in Push).
  bool Recorded(const SliceState& s) const;
  static CompletedStep Due(const SliceState& s);
  // Whether `worker`'s push at `clock` skips slice `s` (SkipStepsAlreadyApplied).
  static bool Skipped(const SliceState& s, int worker, int64_t clock);
  const SliceState* Find(uint32_t key) const;
  std::string SliceName(const SliceState& s) const;
  // The workers `s` waits for (HoldersOf): active_, or with pipeline stages
  // the active workers of its stage. Refreshed whenever active_ changes.
  absl::Span<const uint8_t> Waited(const SliceState& s) const;
  void RefreshWaited();
  // Whether `worker`'s stage holds `s` (always, without stages);
  // CheckHolder: kFailedPrecondition naming both stages when not.
  bool Holds(const SliceState& s, int worker) const;
  // A slice of a buffer tensor (TensorSpec::buffer): set by assign only; no
  // clock or version of it counts for steps.
  bool IsBuffer(const SliceState& s) const;
  // The rules slice `s` follows: its table's mode, or the model's.
  const ConsistencyPolicy& PolicyOf(const SliceState& s) const;
  absl::Status CheckHolder(const SliceState& s, int worker) const;

  ThreadPool* const pool_;
  const bool allow_nonfinite_;
  const uint64_t max_bytes_;
  std::unique_ptr<ModelSpec> model_;
  std::vector<Slice> slice_list_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<ConsistencyPolicy> policy_;  // of the model's consistency mode
  // Per table: the policy of its own mode (TableSpec::consistency), or null.
  std::vector<std::unique_ptr<ConsistencyPolicy>> table_policies_;
  std::vector<std::unique_ptr<Optimizer>> table_optimizers_;  // per table
  // The table optimizers of copies added (AddCopies), which their shards refer to.
  std::vector<std::unique_ptr<Optimizer>> copied_optimizers_;
  mutable TableBudget table_budget_;
  int num_workers_ = 0;
  std::vector<uint8_t> active_;                     // per worker: 1 = waited for, pushes accepted
  std::vector<std::vector<uint8_t>> stage_active_;  // stages > 1: per stage, active_ and holding it
  absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> slices_;
  StatsReplyMsg stats_;
  std::function<bool(uint32_t)> record_steps_;  // SetStepForwarding
  std::function<bool(uint32_t)> follow_steps_;
  std::vector<CompletedStep> completed_;
  std::vector<SliceState*> due_;  // steps Push left to CompleteDueSteps
};

}  // namespace ps

#endif  // PS_SERVER_STORE_SLICE_STORE_H_
