#ifndef PS_SCHEDULER_BARRIERS_H_
#define PS_SCHEDULER_BARRIERS_H_

// The named barriers of a job's workers: who has arrived, and when each
// arrival gives up. Knows no sockets: it returns whom to answer and with
// what. Not thread-safe (the scheduler's thread owns it).

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {

// A request answered later (a barrier arrival, a model definition).
struct Waiter {
  std::string identity;  // the node's connection
  uint64_t request_id = 0;
  int rank = 0;
  absl::Time deadline;
};

class Barriers {
 public:
  // `arrival` enters barrier `name`. kAlreadyExists when its rank is in it
  // already. Returns the arrivals to acknowledge: every one of the barrier's
  // once `live` workers are in (the barrier is then gone), else none.
  absl::StatusOr<std::vector<Waiter>> Arrive(const std::string& name, Waiter arrival, int live);
  // Completes every barrier that `live` workers have all entered (none when
  // live is 0): their arrivals to acknowledge, by barrier name.
  std::map<std::string, std::vector<Waiter>> Complete(int live);
  // Removes the arrivals past their deadline at `now`, each with the error
  // to answer (kDeadlineExceeded naming the barrier and the ranks in
  // [0, num_workers) that had not arrived).
  std::vector<std::pair<Waiter, absl::Status>> Expire(absl::Time now, int num_workers);
  // Forgets the arrivals made over `identity` (its node died).
  void Forget(const std::string& identity);

 private:
  std::map<std::string, std::vector<Waiter>> waiting_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_BARRIERS_H_
