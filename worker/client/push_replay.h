#ifndef PS_WORKER_CLIENT_PUSH_REPLAY_H_
#define PS_WORKER_CLIENT_PUSH_REPLAY_H_

// The worker's half of the replay protocol with one server (the server's
// half is server/push_sequencer.h): numbers every push, keeps a copy of each
// until a reply says the server's checkpoint holds it, asks for an early
// checkpoint when the copies grow large, and holds what to re-send, in order,
// after the server restarts from its checkpoint.
//
// Not thread-safe: the client's I/O thread owns it.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps {

// A push kept until a checkpoint of its server holds it: its header (without
// the pull that rode on it) and its payload, copied or shared.
struct KeptPush {
  PushRequestMsg push;
  std::vector<std::string> frames;
  // The frames themselves, shared (no copy of their bytes): frames that own
  // their bytes (encoded, or lent with their owner), or, in replicated jobs
  // without checkpoints, the caller's (valid until the push is answered,
  // when the copy goes).
  mutable std::vector<zmq::message_t> shared;
  uint64_t bytes = 0;
  bool acked = false;  // replicated jobs: answered (see PushReplay::set_replicated)

  // Frames that copy the kept payload (for a re-send).
  std::vector<zmq::message_t> Frames() const;
};

class PushReplay {
 public:
  // Past a quarter of `max_bytes` of copies, the next push asks for a checkpoint.
  explicit PushReplay(uint64_t max_bytes = uint64_t{256} << 20) : max_bytes_(max_bytes) {}

  // Gives `push` the next sequence number and keeps a copy of it and its
  // payload, unless the server keeps no checkpoints; sets want_checkpoint on
  // it when the copies pass a quarter of max_bytes (once until the next
  // checkpoint holds some of them). Returns the bytes this copy added.
  // The payload frames are shared instead of copied (no copy of their
  // bytes) when `owned` (every frame owns its bytes), and in replicated jobs
  // whose server keeps no checkpoints (see OnAcked and Forget).
  uint64_t Number(PushRequestMsg& push, std::vector<zmq::message_t>& payloads, bool owned = false);

  // A reply said the server's checkpoint holds every push up to `durable`
  // (kNothingToKeep: it keeps no checkpoints, so no copy is ever useful).
  // Drops those copies; returns the bytes released.
  uint64_t OnDurable(uint64_t durable);

  // The job keeps copies of every slice on several servers (--replicas):
  // a copy is kept until the push is answered (its server answers only once
  // every backup has it, and re-sends go to a backup promoted meanwhile),
  // and until a checkpoint holds it where the server keeps checkpoints.
  void set_replicated() { replicated_ = true; }
  bool replicated() const { return replicated_; }
  // Push `seq` was answered; returns the bytes released.
  uint64_t OnAcked(uint64_t seq);
  // Push `seq` failed (its caller is told): no copy of it is kept.
  uint64_t Forget(uint64_t seq);
  // Forgets every copy (a failover re-sent them elsewhere); returns the bytes released.
  uint64_t Clear();

  // False once the server said it keeps no checkpoints (and the job keeps
  // one copy of each slice).
  bool keeps() const { return keep_; }
  // The pushes its checkpoint may lack, by sequence number: what to re-send,
  // in this order, after it restarts.
  const std::map<uint64_t, KeptPush>& kept() const { return kept_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t max_bytes() const { return max_bytes_; }
  // The copies fill the budget (max_bytes): the server's checkpoint lags
  // behind, and a new push must wait for it rather than grow them further.
  bool full() const { return keep_ && bytes_ >= max_bytes_; }

 private:
  uint64_t max_bytes_;
  uint64_t next_seq_ = 0;  // the last seq given
  uint64_t durable_ = 0;   // pushes up to here are in its checkpoint
  bool keep_ = true;
  bool replicated_ = false;
  bool no_checkpoints_ = false;  // replicated: the server said it keeps none
  bool asked_checkpoint_ = false;
  std::map<uint64_t, KeptPush> kept_;
  uint64_t bytes_ = 0;
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_PUSH_REPLAY_H_
