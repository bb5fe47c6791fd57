#ifndef PS_SERVER_REPLICATOR_H_
#define PS_SERVER_REPLICATOR_H_

// WIP (issue 32, branch issue32-replication): a primary's side of
// ps_scheduler --replicas=K. It knows each slice's copies (from the
// scheduler's CreateSlices), keeps a DEALER link to each backup server
// (addresses and keys from the cluster view), forwards every push it
// applied to its slices' backups (PushRequestMsg::for_worker names the
// worker, so that a backup applies it as that worker's, with its seq), and
// says when every backup has acknowledged a forwarded push, so that the
// worker's reply can go then: an update reaches every copy before the
// worker hears of it.
//
// Not yet: the backups' side in the server (apply a forwarded push, answer
// the primary), failover (the scheduler promoting a backup), re-replication.
// One thread (the server's loop).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/messages.h"
#include "common/poll_set.h"
#include "common/security.h"
#include "common/transport.h"

namespace ps {

class Replicator {
 public:
  Replicator(zmq::context_t& context, const NodeSecurity& security) : context_(context), security_(security) {}

  // The servers holding each slice this server holds, primary first
  // (CreateSlicesRequestMsg::copies; empty: one copy each).
  void SetCopies(const std::vector<Slice>& slices, const std::vector<std::vector<int32_t>>& copies);
  // The server nodes of a new view: links to backups that moved are redialled.
  void SetPeers(const ClusterViewMsg& view);

  // The backups of the slices `push` writes, for a push this server
  // applied as their primary (rank `self_rank`); empty: nothing to forward.
  std::vector<int32_t> BackupsOf(const PushRequestMsg& push, int32_t self_rank) const;
  // Sends the push (its pull part dropped, for_worker = worker) with copies
  // of its payloads to each of `backups`; `token` names it in Acked.
  absl::Status Forward(uint64_t token, uint32_t self_node, int worker, const PushRequestMsg& push,
                       const std::vector<zmq::message_t>& payloads, const std::vector<int32_t>& backups);

  // Poll integration: the links' sockets under `tag` + rank.
  void AddToPoll(PollSet& poll, int tag);
  // Reads the links that poll says are readable; the tokens of forwarded
  // pushes every backup has now acknowledged, and the errors backups sent.
  std::vector<uint64_t> OnReady(PollSet& poll, int tag, std::vector<absl::Status>* errors);

  bool empty() const { return copies_.empty(); }

 private:
  struct Link {
    std::string address;
    std::string public_key;
    zmq::socket_t socket;
    bool unsettled = false;
  };
  struct Pending {
    int waiting = 0;  // backups yet to acknowledge
  };

  zmq::context_t& context_;
  const NodeSecurity& security_;
  absl::flat_hash_map<uint32_t, std::vector<int32_t>> copies_;  // slice key -> servers
  std::map<int32_t, Link> links_;                               // by server rank
  absl::flat_hash_map<uint64_t, Pending> pending_;              // by token
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATOR_H_
