#ifndef PS_SERVER_REPLICATION_REPLICATOR_H_
#define PS_SERVER_REPLICATION_REPLICATOR_H_

// A server's side of ps_scheduler --replicas=K: which servers hold a copy of
// each slice (primary first, from the scheduler's CreateSlices and, after a
// failover, from the cluster view), whether a push may be applied here
// (a worker's only by its slices' primary, a forward only from that
// primary), and, as a primary, the forwarding of every push it applied to
// its slices' backups over a DEALER link to each (addresses and keys from
// the view). A forwarded push names its worker (PushRequestMsg::for_worker)
// and the numbering its seq is in (origin), so that a backup applies it as
// that worker's, once; the worker hears of the push only when every live
// backup has acknowledged it (the server parks the reply until then): an
// update reaches every copy before the worker learns of it.
//
// A backup on this host is reached through a shared-memory channel (as a
// worker reaches its servers: common/net/shm_channel.h): the first message on a
// link offers one, what follows waits for the answer and then goes through
// the channel (or the socket where the backup is elsewhere or refuses), so
// the backup takes everything in the order it was sent.
//
// One thread (the server's loop).

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "common/net/poll_set.h"
#include "common/net/security.h"
#include "common/net/shm_channel.h"
#include "common/net/transport.h"
#include "common/wire/messages.h"
#include "server/store/checkpoint_codec.h"

namespace ps {

// What a server's metrics say of its copies (ServerMetrics).
struct ReplicationStats {
  int led = 0;      // slices this server is the primary of
  int backups = 0;  // copies it holds for other primaries
  // Per backup rank: updates forwarded to it and not acknowledged yet (how
  // far it is behind this primary).
  std::map<int32_t, uint64_t> unacknowledged;
  uint64_t refused = 0;   // forwarded updates a backup refused
  uint64_t diverged = 0;  // of those, ones this primary had applied (set by the server)
  uint64_t repaired = 0;  // fresh copies sent to backups that diverged, taken (set by the server)
  // Sync slice steps forwarded as their sums (server/store/step_forwarding.h; set by the server).
  uint64_t steps_forwarded = 0;
};

class Replicator {
 public:
  // `shm`: offer backups on this host a shared-memory channel.
  Replicator(zmq::context_t& context, const NodeSecurity& security, bool shm)
      : context_(context), security_(security), shm_(shm) {}

  // A forwarded push (or a copy) every backup it went to has answered: its
  // token, and the first refusal among the answers (OK when none refused).
  // `late`: a backup's refusal that came after its acknowledgement (a
  // backup acknowledges a forward on receipt; one it then fails to apply is
  // refused in a second answer).
  struct Settled {
    uint64_t token;
    absl::Status status;
    bool late = false;
    int32_t backup = -1;  // late: which one
    // Late: the slices the refused forward carried (empty when it is too
    // old to be remembered: the last kSettledKeys forwards are), or those
    // of them the refusal named.
    std::vector<uint32_t> keys;
    bool named = false;  // late: the refusal named its slices (ErrorMsg::slices)
  };
  static constexpr size_t kSettledKeys = 4096;

  // The servers holding each of `slices` (CreateSlicesRequestMsg::copies, in
  // slices' order; empty: one copy each).
  void SetCopies(const std::vector<Slice>& slices, const std::vector<std::vector<int32_t>>& copies);
  // A new view: its copies (when it has them) replace what is known, links
  // to servers that moved are redialled, and backups that left the view owe
  // no acknowledgement any more (a copy sent to one fails). Returns what
  // thereby settled.
  // `self`: this server's rank (a copy received stays held until a view
  // lists it here).
  std::vector<Settled> OnView(const ClusterViewMsg& view, int32_t self);

  // Whether server `self` may apply `push`: with replicas, a worker's push
  // (for_worker < 0) only when `self` is the primary of every slice in it,
  // a forward only when `forwarder` is their primary and `self` holds a
  // copy. kFailedPrecondition naming the slice and its primary otherwise
  // (a worker or a server acting on an older view).
  absl::Status CheckApply(const PushRequestMsg& push, int32_t self, int32_t forwarder) const;
  // The backups of the slices `push` writes, for a push this server
  // applied as their primary (rank `self`); empty: nothing to forward.
  std::vector<int32_t> BackupsOf(const PushRequestMsg& push, int32_t self) const;
  // The servers that get slice `key`'s updates when server `self` leads
  // it (its backups, and any copy being made); empty otherwise.
  std::vector<int32_t> BackupsOfKey(uint32_t key, int32_t self) const;
  // Sends each of `backups` the part of the push (its pull dropped,
  // for_worker = worker, origin the numbering its seq is in, view_epoch this
  // server's) whose slices it holds a copy of, with their
  // payload frames (shared, not copied; two a slice for a step_sum push);
  // `token` names it in OnReady.
  absl::Status Forward(uint64_t token, uint32_t self_node, int32_t self, uint64_t view_epoch, int worker,
                       const PushRequestMsg& push, std::vector<zmq::message_t>& payloads,
                       const std::vector<int32_t>& backups);

  // Back to K copies (primary side): sends server `rank` slice `key`'s
  // image (`copy` describes it), after which every update of the slice goes
  // to it too, before the view lists it; `token` names it in OnReady, where
  // it fails if `rank` leaves first.
  absl::Status SendCopy(uint64_t token, uint32_t self_node, int32_t rank, const SliceCopyMsg& copy, SliceImage image);
  // The copy failed: no more updates of `key` go to `rank` unless the view lists it.
  void DropJoining(uint32_t key, int32_t rank);
  // A move: no more updates of `key` go to backup `rank`, whose copy the
  // next views drop.
  void Exclude(uint32_t key, int32_t rank) { excluded_.insert({key, rank}); }
  // The new copy's side: this server holds slice `key` now, which the view
  // will list once the primary reported the copy complete: its forwards
  // are taken meanwhile.
  void AddHeld(uint32_t key) { held_.insert(key); }
  // With replicas: the first of `keys` server `self` does not lead now, as
  // kFailedPrecondition naming its primary (the sender routed by an older
  // view); OK for keys it leads, keys of no slice, and without replicas.
  absl::Status CheckLeads(const std::vector<uint32_t>& keys, int32_t self) const;
  // Whether server `self` keeps slice `key`: the view lists it among the
  // copies, or a copy of it came before the view that lists it. True
  // without replicas.
  bool Keeps(uint32_t key, int32_t self) const {
    const std::vector<int32_t>* copies = CopiesOf(key);
    return copies == nullptr || held_.contains(key) || std::find(copies->begin(), copies->end(), self) != copies->end();
  }
  // Whether the view lists server `rank` as a backup of slice `key` that
  // still gets its updates (not released by a move).
  bool ListedBackup(uint32_t key, int32_t rank) const {
    const std::vector<int32_t>* copies = CopiesOf(key);
    return copies != nullptr && std::find(copies->begin() + 1, copies->end(), rank) != copies->end() &&
           !excluded_.contains({key, rank});
  }
  bool IsPrimary(uint32_t key, int32_t self) const {
    const std::vector<int32_t>* copies = CopiesOf(key);
    return copies != nullptr && (*copies)[0] == self;
  }

  // Poll integration: the links' sockets under `tag` + rank, their
  // shared-memory channels under `tag` + kChannelTags + rank.
  static constexpr int kChannelTags = 1 << 15;
  void AddToPoll(PollSet& poll, int tag);
  // Reads the links that poll says are readable.
  std::vector<Settled> OnReady(PollSet& poll, int tag);

  bool replicated() const { return !copies_.empty(); }
  // For the metrics; `held`: the slice keys this server holds.
  ReplicationStats Stats(int32_t self, const std::vector<uint32_t>& held) const;
  // Forwarded pushes refused by a backup so far.
  uint64_t refused() const { return refused_; }
  // Backups reached through shared memory now.
  int shm_links() const;
  // A backup's answer waits in a channel (no syscall: for spinning).
  bool AnyIncoming() const;

 private:
  enum class Shm { kUntried, kOffered, kOn, kOff };
  struct Queued {
    Envelope envelope;
    std::vector<zmq::message_t> frames;
  };
  struct Link {
    std::string address;
    std::string public_key;
    zmq::socket_t socket;
    bool unsettled = false;
    Shm shm = Shm::kUntried;
    uint64_t offer_id = 0;
    std::unique_ptr<ShmChannel> channel;
    std::vector<Queued> queued;  // sent while the offer is unanswered
  };
  // Sends on `link` (to server `rank`): through its channel, after its
  // offer's answer, or through its socket.
  absl::Status SendTo(Link& link, int32_t rank, const Envelope& envelope, std::vector<zmq::message_t> frames);
  absl::Status SendOnSocket(Link& link, int32_t rank, const Envelope& envelope, std::vector<zmq::message_t> frames);
  // The backup answered the offer: the channel, or the socket from now on;
  // then what waited goes.
  void OnShmAnswer(Link& link, int32_t rank, const Envelope& answer);
  void CloseShm(Link& link, int32_t rank, const absl::Status& why);
  // A backup's answer to a forward or a copy.
  void OnAnswer(int32_t from, const RawMessage& raw, std::vector<Settled>* settled);
  struct Pending {
    std::vector<int32_t> waiting;  // backups yet to acknowledge
    absl::Status status;
    bool copy = false;  // a slice copy (SendCopy), which fails when its target leaves
    // A copy: its slice. A forward: the slices it carries (a refusal from a
    // server that holds none of them any more is its failed copy's, not the
    // push's).
    std::vector<uint32_t> keys;
  };
  // The servers that get `key`'s updates now, whoever leads it: its
  // backups in the view (not released by a move), and those a copy is
  // being made for.
  std::vector<int32_t> Recipients(uint32_t key) const;
  // The link to server `rank`, dialled on first use; null when it is not in the view.
  absl::StatusOr<Link*> LinkTo(int32_t rank);
  const std::vector<int32_t>* CopiesOf(uint32_t key) const {
    auto it = copies_.find(key);
    return it == copies_.end() || it->second.empty() ? nullptr : &it->second;
  }
  // OnView's first part: the view's copies, when it lists them.
  void TakeCopies(const ClusterViewMsg& view, int32_t self);
  // Backup `rank` answered (or left): `token` may be settled. `named`: the
  // slices a refusal named (ErrorMsg::slices).
  void Answered(uint64_t token, int32_t rank, const absl::Status& status, std::vector<Settled>* settled,
                const std::vector<uint32_t>& named = {});

  zmq::context_t& context_;
  const NodeSecurity& security_;
  const bool shm_;
  absl::flat_hash_map<uint32_t, std::vector<int32_t>> copies_;   // slice key -> servers, primary first
  std::map<int32_t, Link> links_;                                // by server rank
  std::map<uint64_t, Pending> pending_;                          // by token
  std::map<uint64_t, std::vector<uint32_t>> settled_keys_;       // recent settled forwards' slices, by token
  absl::flat_hash_map<uint32_t, std::vector<int32_t>> joining_;  // slice key -> servers being given a copy
  absl::flat_hash_set<uint32_t> held_;                           // copies received, not in the view yet
  std::set<std::pair<uint32_t, int32_t>> excluded_;              // (key, backup) released by a move (Exclude)
  uint64_t refused_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_REPLICATOR_H_
