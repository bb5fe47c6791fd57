#ifndef PS_SERVER_PARKED_H_
#define PS_SERVER_PARKED_H_

// What a server holds back (server.cc): pushes and pulls that must wait for
// a sync step or the ssp bound, each with its deadline.

#include <cstdint>

#include "absl/time/time.h"
#include "common/net/transport.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps {

// Pulls waiting for a sync step or the ssp bound; a real job parks at most a
// few per worker, so this only stops a peer flooding the server with them.
inline constexpr size_t kMaxParkedPulls = 4096;

// A numbered sync push (re-sent after a restart) for a step its slices have
// not reached yet.
struct ParkedPush {
  RawMessage raw;
  int worker = -1;
  uint64_t request_id = 0;
  PushRequestMsg push;
  absl::Time since;
  absl::Time deadline;
};

// A pull that must wait for a sync step or the ssp bound.
struct ParkedPull {
  zmq::message_t routing_id;
  int worker = -1;
  uint64_t request_id = 0;
  PullRequestMsg request;
  absl::Time since;
  absl::Time deadline;
  // The pull of a push request whose push was applied (PushRequestMsg::
  // then_pull): a refusal must say so, so that only the pull goes again.
  bool after_push = false;
};

}  // namespace ps

#endif  // PS_SERVER_PARKED_H_
