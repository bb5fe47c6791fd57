#ifndef PS_SERVER_REPLICATION_REPLICA_PROTOCOL_H_
#define PS_SERVER_REPLICATION_REPLICA_PROTOCOL_H_

// A server's side of --replicas beyond the links to the backups
// (replicator.h, which it owns): the replies that wait for the backups,
// the numbering of pushes made for other servers' slices (slice_seqs.h),
// requests that wait for a newer cluster view, the copies that bring a
// slice back to K copies (a primary sends one, a new backup takes it), the
// releases of a move, the repair of a copy that diverged, and sync steps
// forwarded as their sums (server/store/step_forwarding.h; its code in
// replica_steps.cc).
//
// The server reaches it through a few calls: a push it applies goes in
// (ForwardPush, or ApplySummedPush for slices that sum their steps) and
// the token its reply waits for comes out; a pull's table rows likewise
// (ForwardPulledRows, AwaitBackups); the backups' answers come from the
// poll (OnReady), forwards and copies from other servers (OnForward,
// OnSliceCopy), the scheduler's requests (OnAddCopy) and each view
// (OnView). What it needs of the server (replies, pulls, the apply of a
// forwarded push, checkpoints) it asks through Host. Without replicas
// (replicated() false), ForwardPush, ForwardPulledRows and HasSummedSlices
// return at once.
//
// Not thread-safe: the server's loop owns it.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/net/node_runtime.h"
#include "common/net/poll_set.h"
#include "common/net/security.h"
#include "common/net/transport.h"
#include "common/wire/messages.h"
#include "server/membership/membership.h"
#include "server/replication/counted_pulls.h"
#include "server/replication/replicator.h"
#include "server/replication/slice_seqs.h"
#include "server/store/slice_store.h"

namespace ps {

class ReplicaProtocol {
 public:
  // What the protocol asks of the server it runs in. Called on the
  // server's loop, from inside ReplicaProtocol's calls.
  class Host {
   public:
    virtual ~Host() = default;
    // A reply to a worker or a server (`worker` >= 0: that worker's, which
    // tells it its durable seq), and a refusal.
    virtual void ReplyTo(const zmq::message_t& routing_id, uint64_t request_id, Body body,
                         std::vector<zmq::message_t> payloads, int worker) = 0;
    virtual void RefuseTo(const zmq::message_t& routing_id, uint64_t request_id, const absl::Status& status,
                          int worker) = 0;
    // The pull that rode on a push whose backups all have it.
    virtual void PullAfterPush(zmq::message_t& routing_id, int worker, uint64_t request_id,
                               const PullRequestMsg& pull) = 0;
    virtual void ToScheduler(uint64_t request_id, Body body) = 0;
    // Checkpoints: whether they are written at all; one now; one push more
    // counted towards the next.
    virtual bool CheckpointsEnabled() const = 0;
    virtual void Checkpoint(const char* why) = 0;
    virtual void CountPush() = 0;
    // Which slices of `push` lack it (none: nullopt; all: empty), and their
    // apply as `worker`'s push (the server's numbering and update path).
    virtual std::optional<std::vector<bool>> Fresh(const PushRequestMsg& push, int worker) = 0;
    virtual absl::Status ApplyFresh(RawMessage& raw, int worker, const PushRequestMsg& push,
                                    const std::vector<bool>& fresh) = 0;
    // A request held for a newer view, handled again.
    virtual void HandleAgain(RawMessage raw) = 0;
    // The store's active workers brought in line with the live ones.
    virtual void ApplyLiveWorkers() = 0;
    // Parked pulls that may be answered now, answered.
    virtual void AnswerReadyPulls() = 0;
    // After a hand-over began: waiting requests for slices led elsewhere now refused.
    virtual void LetMovedSlicesGo() = 0;
  };

  struct Options {
    bool shm = false;                                          // backups on this host over shared memory
    absl::Duration view_wait = absl::Seconds(60);              // how long a request waits for a newer view
    size_t max_view_waiters = 4096;                            // requests held for a newer view, at most
    std::function<absl::Status(const PushRequestMsg&)> fault;  // a test's: refuses a forwarded push
  };

  // Borrows everything for its life: `store` and `counted_pulls` (the
  // server's state), `self` (who this server is), `runtime` (the view
  // epoch and the clock), `host`.
  ReplicaProtocol(Options options, zmq::context_t& context, const NodeSecurity& security, SliceStore* store,
                  CountedPulls* counted_pulls, const Membership& self, const NodeRuntime& runtime, Host* host)
      : options_(std::move(options)),
        replicator_(context, security, options_.shm),
        store_(*store),
        counted_pulls_(*counted_pulls),
        self_(self),
        runtime_(runtime),
        host_(*host) {}
  ReplicaProtocol(const ReplicaProtocol&) = delete;
  ReplicaProtocol& operator=(const ReplicaProtocol&) = delete;

  bool replicated() const { return replicator_.replicated(); }
  bool IsPrimary(uint32_t key) const { return replicator_.IsPrimary(key, self_.rank()); }
  // --replicas: which numbered pushes each slice holds.
  SliceSeqs& slice_seqs() { return slice_seqs_; }
  const SliceSeqs& slice_seqs() const { return slice_seqs_; }
  // The job keeps one copy of each slice (RegisterReplyMsg::replicas < 2).
  void set_one_copy(bool one_copy) { one_copy_ = one_copy; }
  // The servers holding each of `slices` (CreateSlicesRequestMsg::copies).
  void SetCopies(const std::vector<Slice>& slices, const std::vector<std::vector<int32_t>>& copies) {
    replicator_.SetCopies(slices, copies);
  }
  // A view: its copies and servers (who may forward), what thereby
  // settled, and the last steps of the slices this server leads now sent
  // again (ResendLastSteps).
  void OnView(const ClusterViewMsg& view);
  // What the metrics say of the copies (none without replicas).
  std::optional<ReplicationStats> Stats() const;

  // ---- the poll ----
  void AddToPoll(PollSet& poll, int tag) { replicator_.AddToPoll(poll, tag); }
  // The backups' answers poll found: the replies they free go.
  void OnReady(PollSet& poll, int tag);
  int shm_links() const { return replicator_.shm_links(); }
  bool AnyIncoming() const { return replicator_.AnyIncoming(); }

  // ---- where requests may go ----
  // The keys this server serves to workers now: MovedError (at the view's
  // epoch, or at a hand-over's) for one led elsewhere or being handed over.
  absl::Status CheckServes(const std::vector<uint32_t>& keys) const;
  // A worker's push: Replicator::CheckApply, and that this server leads
  // what its pull reads.
  absl::Status CheckLeads(const PushRequestMsg& push) const;
  // The keys a pull reads (dense slices and table shards).
  static std::vector<uint32_t> PullKeys(const PullRequestMsg& pull);
  // A push (or a slice copy) that `refusal` turned away for its slices'
  // copies: held until this server has the newer view `epoch` its sender
  // acted on, else the refusal. `worker` >= 0: a push of that worker
  // numbered by this server, which its later ones wait behind (AwaitBehind).
  // kResourceExhausted when too many requests wait already.
  absl::Status AwaitView(uint64_t epoch, RawMessage& raw, const absl::Status& refusal, int worker = -1);
  // Whether a push of `worker` numbered by this server waits for a newer view.
  bool HoldsPushOf(int worker) const;
  // A later push of such a worker numbered by this server: held behind it,
  // and handled again after it (RetryAwaitingView), whatever the view.
  // Pushes are numbered in the order sent (server/push_sequencer.h): one
  // applied ahead of an earlier one would make that one look like a re-send
  // of a push the state holds, dropped. kResourceExhausted as AwaitView.
  absl::Status AwaitBehind(int worker, RawMessage& raw);
  // After a view: the held requests are handled again, in the order they
  // came (one held again keeps its first deadline).
  void RetryAwaitingView();
  // Those past their deadline: refused; the pushes that waited behind one
  // of them are handled again.
  void ExpireAwaitingView();
  // The rank of the server that sent `env`: kPermissionDenied for a node
  // the view names no server.
  absl::StatusOr<int32_t> ServerPeerRank(const Envelope& env) const {
    if (auto it = server_nodes_.find(env.sender); it != server_nodes_.end()) return it->second;
    return absl::PermissionDeniedError(absl::StrCat("node ", env.sender, " is not a server of this job: no forward"));
  }

  // ---- a primary's pushes and pulls ----
  // Sends a worker's push this primary applies (`raw`: its frames) to the
  // backups of its slices; its reply waits for them (AnswerPush). Returns
  // the forward's token, 0 when nothing went (then the server answers).
  absl::StatusOr<uint64_t> ForwardPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push);
  // The push forwarded under `token` was refused here: the worker hears
  // why now (the backups refuse it alike).
  void RefusedHere(uint64_t token);
  // Sends the backups of `pull`'s table shards the ids it reads
  // (PushRequestMsg::pulled); returns the token its reply waits for, 0
  // when nothing went.
  uint64_t ForwardPulledRows(int worker, const PullRequestMsg& pull);
  // The reply to a pull, ready, held until the backups read its table rows too.
  void AwaitBackups(uint64_t token, const zmq::message_t& routing_id, int worker, uint64_t request_id,
                    PullReplyMsg reply, std::vector<zmq::message_t> payloads);

  // ---- sync steps forwarded as their sums (replica_steps.cc) ----
  // Whether slice `key`'s steps travel to its copies as sums.
  // (Jobs that keep one copy, --elastic, forward each push to a slice's new
  // copy during a move, as before.)
  bool SumsSteps(uint32_t key) const { return replicator_.replicated() && !one_copy_ && store_.ForwardsSteps(key); }
  // Whether some slice of `push` (a worker's, to this primary) sums its steps.
  bool HasSummedSlices(const PushRequestMsg& push) const;
  // ApplyPush for such a push: applies it, forwards its other slices as
  // before, and answers once every step it joined (or, re-sent, that holds
  // it) reached the backups, and the rest's forward too.
  absl::Status ApplySummedPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push,
                               const std::optional<std::vector<bool>>& fresh);
  // Forwards the steps the store completed since the last call to the
  // backups of the slices this server leads (one message), then runs the
  // optimizer of those a push left due; the replies waiting for those steps
  // now wait for its acknowledgement. Called after every store change that
  // may complete a step.
  void ForwardCompletedSteps();
  // After a view or a hand-over: replies waiting for steps of slices led
  // elsewhere now fail as moved, held (their workers re-send them, numbered
  // as they were, to the new primary, which applies each once); the steps
  // this server now leads that a worker left behind complete.
  void TakeOverSteps();
  // Slices this server keeps no copy of any more (moved to another server): dropped.
  void DropMovedSlices();

  // ---- a backup's side ----
  // A primary's forward (--replicas): applied as that worker's push, in its
  // order, once this server's view names the sender the slices' primary.
  absl::Status OnForward(const Envelope& env, const PushRequestMsg& push, RawMessage& raw);
  // A copy from a server that leads the slice only in a newer view than
  // this server's waits for that view (AwaitView).
  absl::Status OnSliceCopy(const Envelope& env, const SliceCopyMsg& copy, RawMessage& raw);

  // ---- the scheduler's ----
  // Back to K copies: the scheduler asks this primary to copy a slice to a
  // server (or, with release_epoch, to release one: StartRelease).
  void OnAddCopy(uint64_t request_id, const AddCopyRequestMsg& add);

 private:
  struct AwaitingBackups {
    zmq::message_t routing_id;
    int worker;
    uint64_t request_id;
    std::optional<PullRequestMsg> then_pull;
    // A pull's reply, ready, held until the backups read its table rows too.
    std::optional<PullReplyMsg> reply;
    std::vector<zmq::message_t> payloads;
  };
  struct Release {
    uint64_t request_id = 0;
    uint64_t before_token = 0;
    uint64_t durable_token = 0;  // AskDurable's, waited for too (0: none)
  };
  struct AwaitingView {
    RawMessage raw;
    absl::Time deadline;
    int worker = -1;  // a push of this worker numbered by this server (AwaitView's `worker`)
  };
  // AwaitView's and AwaitBehind's: `raw` held until `deadline`.
  absl::Status Hold(RawMessage& raw, uint64_t epoch, int worker);
  struct PushReply {
    AwaitingBackups a;
    int waits = 0;
    absl::Status status;
  };
  struct CopyRequest {
    uint64_t request_id;  // the scheduler's
    uint32_t key;
    int32_t server;
    bool repair = false;  // RepairCopies' (no scheduler waits for it)
  };
  // A backup that refused an update this primary applied gets a fresh copy
  // of the slice (RepairCopies), at most kMaxRepairs times.
  static constexpr int kMaxRepairs = 3;

  // Every backup answered a forwarded push (the worker's reply goes), or
  // the new copy answered (the scheduler hears).
  void OnReplicated(const Replicator::Settled& settled);
  // OnReplicated's work: the reply, copy answer or error `settled` frees.
  void OnSettled(const Replicator::Settled& settled);
  // A backup refused, after acknowledging it, an update this primary
  // applied (`refused`, late): its copy of each slice of that update
  // differs, so it gets the slice's whole state again (a copy, as to a new
  // backup; its later updates follow it), unless a repair of that copy is
  // under way or kMaxRepairs were made (then it stays counted as diverged).
  void RepairCopies(const Replicator::Settled& refused);
  // The repair of backup `backup`'s copy of slice `key` settled.
  void OnRepaired(uint32_t key, int32_t backup, const absl::Status& status);
  // The copy `token` names (a scheduler's AddCopy, or a repair) settled.
  void OnCopySettled(uint64_t token, const absl::Status& status);
  // AddCopyRequestMsg::release_epoch: the primary stops forwarding a slice
  // to the released backup, or stops serving it (handing_over_); the
  // scheduler hears once every forward made before is settled.
  absl::Status StartRelease(uint64_t request_id, const AddCopyRequestMsg& release);
  void FinishReleases();
  // One copy of each slice (--elastic): asks the server that takes slice
  // `key` over to write a checkpoint once it applied every update forwarded
  // before, so that the slice this server drops is durable there (its
  // answer settles the token returned; 0: nothing asked).
  uint64_t AskDurable(uint32_t key);
  // A server's request from a node this server knows neither as a server
  // nor as a live worker: held for the newer view `epoch` its sender acted
  // on (a server that joined, or came back as a new node), else `refusal`.
  absl::Status AwaitUnknownPeer(const Envelope& env, uint64_t epoch, RawMessage& raw, const absl::Status& refusal) {
    return self_.IsWorker(env.sender) ? refusal : AwaitView(epoch, raw, refusal);
  }
  // A primary's forward, applied as the worker's push (acknowledged first).
  void ApplyForwarded(uint64_t request_id, int32_t primary, const PushRequestMsg& push, RawMessage& raw);
  // A backup: reads the rows a pull read on the primary.
  absl::Status ReadPulledRows(const PushRequestMsg& pulled, const RawMessage& raw);
  // Forwards the slices of `push` whose steps are not summed to their
  // backups, as the worker's push; the forward's token (0: nothing went).
  absl::StatusOr<uint64_t> ForwardUnsummed(int worker, const PushRequestMsg& push, RawMessage& raw);
  // A backup: completes the forwarded steps with their sums. A step it
  // holds with another sum (K = 3 after a failover) is refused once the
  // rest applied, its slice named in *differ.
  absl::Status ApplyForwardedSteps(const PushRequestMsg& push, const RawMessage& raw, std::vector<uint32_t>* differ);
  // A view's first act: the last step of each slice this server leads since
  // it goes to the backups again (one may lack it: the old primary died
  // while forwarding it, with K = 3), before any step completes here.
  void ResendLastSteps();
  // One of a push reply's waits ended (with `status`): answered after the last.
  void EndWait(uint64_t reply_id, const absl::Status& status);
  // Answers a push whose backups all have it: the error, the pull riding on it, or an Ack.
  void AnswerPush(AwaitingBackups& a, const absl::Status& status);
  // Remembers that this server refused the forward `token` itself.
  void NoteRefusedHere(uint64_t token) {
    if (refused_here_.size() > 4096) refused_here_.clear();
    refused_here_.insert(token);
  }

  const Options options_;
  // Forwarding to backups, and the links to them.
  Replicator replicator_;
  SliceStore& store_;
  // The pulls whose table rows this server counted towards admission, as
  // primary or as a backup the rows were forwarded to.
  CountedPulls& counted_pulls_;
  const Membership& self_;
  const NodeRuntime& runtime_;
  Host& host_;

  absl::flat_hash_map<uint64_t, AwaitingBackups> awaiting_backups_;  // by forward token
  // Slices this primary hands over to another server (a move), each with
  // the view epoch that moves it; and the releases not answered yet: each
  // waits for the forwards made before it (tokens below before_token).
  absl::flat_hash_map<uint32_t, uint64_t> handing_over_;
  std::vector<Release> releases_;
  bool one_copy_ = false;                       // RegisterReplyMsg::replicas < 2
  absl::flat_hash_set<uint64_t> durable_asks_;  // AskDurable tokens not answered yet
  uint64_t next_forward_ = 1;
  absl::flat_hash_map<uint32_t, int32_t> server_nodes_;  // the view's servers (node -> rank): who may forward
  // Which numbered pushes each slice holds (duplicates are told apart per
  // slice: slice_seqs.h).
  SliceSeqs slice_seqs_;
  std::deque<AwaitingView> awaiting_view_;

  // Sync steps forwarded as their sums.
  std::map<uint64_t, PushReply> push_replies_;  // by id
  uint64_t next_push_reply_ = 1;
  // A forward's token -> the push replies waiting for it (a reply waiting
  // for two steps it carries is listed twice).
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> token_replies_;
  // Slice key -> the push replies waiting for its step in progress.
  absl::flat_hash_map<uint32_t, std::vector<uint64_t>> step_waiters_;
  // Slice key -> the workers its last completed step summed (what a new
  // primary forwards again), for the slices that sum their steps.
  absl::flat_hash_map<uint32_t, std::vector<int32_t>> last_step_workers_;
  absl::flat_hash_set<uint32_t> leading_;  // slices summing steps this server led at the last view
  // Slice key -> the token of its last step sent again (ResendLastSteps),
  // until the backups answer: re-sent pushes of that step wait for it.
  absl::flat_hash_map<uint32_t, uint64_t> resent_steps_;
  uint64_t steps_forwarded_ = 0;  // slice steps sent to backups as sums

  // Updates a backup refused that this primary applied (its copy differs),
  // and the forwarded pushes this primary refused itself (recent ones).
  uint64_t diverged_ = 0;
  absl::flat_hash_set<uint64_t> refused_here_;
  // The (slice, backup) repairs in flight, and how many were made.
  absl::flat_hash_set<std::pair<uint32_t, int32_t>> repairing_;
  absl::flat_hash_map<std::pair<uint32_t, int32_t>, int> repairs_made_;
  uint64_t copies_repaired_ = 0;
  absl::flat_hash_map<uint64_t, CopyRequest> copy_requests_;  // by token
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_REPLICA_PROTOCOL_H_
