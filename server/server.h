#ifndef PS_SERVER_SERVER_H_
#define PS_SERVER_SERVER_H_

// A parameter server: binds a ROUTER socket for workers, registers with the
// scheduler, holds the slices the partition map places on it and answers
// push, pull and stats requests until the scheduler ends the job.
//
// Thread-safety: Create() and Run() from one thread; RequestStop() and
// endpoint() from any thread. Everything else runs on Run()'s thread.

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {

struct ServerOptions {
  // The scheduler: "HOST:PORT", "tcp://HOST:PORT" or "ipc://PATH". Required.
  std::string scheduler;
  // Where workers reach this server. Port 0: an ephemeral port.
  std::string bind = "tcp://127.0.0.1:0";
  // Host announced to workers when `bind` uses a wildcard host (0.0.0.0, *).
  std::string advertise_host = "127.0.0.1";
  // Threads applying updates to different slices at once; 0: one per core.
  int num_threads = 0;
  // Accept NaN and Inf in gradients (rejected by default).
  bool allow_nonfinite = false;
  // Memory the model's slices, optimizer state and sync sums may take on
  // this server; a model that needs more is refused (kResourceExhausted)
  // instead of crashing the server. 0: half of this machine's memory.
  uint64_t max_memory_bytes = 0;
  // How long to wait for the scheduler's reply and for the cluster to form;
  // longer than the scheduler's own default, so that its error (naming who
  // is missing) arrives first.
  absl::Duration register_timeout = absl::Seconds(90);
  // The longest a pull may wait (for sync steps or ssp clocks) when the
  // request names no timeout.
  absl::Duration default_pull_timeout = absl::Seconds(60);

  // kInvalidArgument naming the field.
  absl::Status Validate() const;
};

class Server {
 public:
  // Binds the socket. kInvalidArgument for bad options, kUnavailable when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The endpoint workers connect to (with the real port).
  const std::string& endpoint() const;

  // Registers and serves. OK after an orderly shutdown by the scheduler;
  // kDeadlineExceeded when the scheduler does not answer or the cluster does
  // not form in time; kAborted when the scheduler ends the job with an error;
  // kCancelled after RequestStop().
  absl::Status Run();

  // Makes Run() return soon. Thread-safe.
  void RequestStop();

 private:
  class Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_H_
