#ifndef PS_TESTS_PROCESS_CLUSTER_H_
#define PS_TESTS_PROCESS_CLUSTER_H_

// A job of real binaries, each its own process on 127.0.0.1 (or ipc://
// sockets) with ephemeral ports; every process is killed by its pid when the
// object goes away, pass or fail. Not thread-safe.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"

namespace ps::testing {

class ProcessCluster {
 public:
  ProcessCluster() : dir_(temp_.path()) {}

  // Starts the scheduler and `servers` servers; returns the scheduler address.
  // With `ipc`, every endpoint is an ipc:// socket file in the test's directory.
  absl::StatusOr<std::string> StartCore(int servers, int workers, int register_timeout_s = 30,
                                        bool ipc = false) {
    auto sched = ChildProcess::Start(
        "ps_scheduler",
        {ipc ? "--bind=ipc://" + dir_ + "/scheduler.sock" : "--port=0",
         absl::StrCat("--num_servers=", servers), absl::StrCat("--num_workers=", workers),
         absl::StrCat("--register_timeout_s=", register_timeout_s)},
        dir_ + "/scheduler.log");
    if (!sched.ok()) return sched.status();
    scheduler_.push_back(*std::move(sched));
    auto endpoint = scheduler_[0].WaitForLine("ps_scheduler listening on ", absl::Seconds(20));
    if (!endpoint.ok()) return endpoint.status();
    for (int i = 0; i < servers; ++i) {
      auto s = ChildProcess::Start(
          "ps_server",
          {"--scheduler=" + *endpoint, "--num_threads=1",
           ipc ? absl::StrCat("--bind=ipc://", dir_, "/server", i, ".sock") : "--port=0"},
          absl::StrCat(dir_, "/server", i, ".log"));
      if (!s.ok()) return s.status();
      servers_.push_back(*std::move(s));
    }
    return *endpoint;
  }

  // Starts `workers` copies of `binary` (ps_exchange, ps_worker) with `flags`.
  absl::Status StartWorkers(const std::string& binary, const std::string& endpoint, int workers,
                            std::vector<std::string> flags) {
    flags.push_back("--scheduler=" + endpoint);
    for (int i = 0; i < workers; ++i) {
      auto w = ChildProcess::Start(binary, flags, absl::StrCat(dir_, "/worker", i, ".log"));
      if (!w.ok()) return w.status();
      workers_.push_back(*std::move(w));
    }
    return absl::OkStatus();
  }

  // StartCore, then `workers` copies of `binary` with `flags`.
  absl::Status StartJob(int servers, int workers, const std::string& binary, std::vector<std::string> flags) {
    absl::StatusOr<std::string> endpoint = StartCore(servers, workers);
    if (!endpoint.ok()) return endpoint.status();
    return StartWorkers(binary, *endpoint, workers, std::move(flags));
  }

  // Every process must exit 0 before the deadline.
  void ExpectAllExitZero(absl::Duration deadline = absl::Seconds(90)) {
    for (auto* group : {&workers_, &servers_, &scheduler_}) {
      for (auto& p : *group) {
        auto code = p.WaitExit(deadline);
        ASSERT_TRUE(code.ok()) << code.status();
        EXPECT_EQ(*code, 0) << "pid " << p.pid() << " stderr:\n" << p.StderrText();
      }
    }
  }

  std::vector<ChildProcess>& workers() { return workers_; }
  std::vector<ChildProcess>& servers() { return servers_; }
  ChildProcess& scheduler() { return scheduler_[0]; }

 private:
  ScopedTempDir temp_;  // outlives the processes below, which die first
  const std::string dir_;
  std::vector<ChildProcess> scheduler_, servers_, workers_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_PROCESS_CLUSTER_H_
