#include "tests/cluster_fixture.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace ps::testing {

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Start(int num_servers, int num_workers,
                                                                          absl::Duration register_timeout) {
  InProcessClusterOptions options;
  options.num_servers = num_servers;
  options.num_workers = num_workers;
  options.register_timeout = register_timeout;
  return Start(options);
}

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Start(const InProcessClusterOptions& options) {
  const int num_servers = options.num_servers;
  std::unique_ptr<InProcessCluster> c(new InProcessCluster());
  SchedulerOptions so;
  so.num_servers = num_servers;
  so.num_workers = options.num_workers;
  so.register_timeout = options.register_timeout;
  so.replicas = options.replicas;
  so.heartbeat_timeout = options.heartbeat_timeout;
  so.security = options.scheduler_security;
  PS_ASSIGN_OR_RETURN(c->scheduler_, Scheduler::Create(so));
  for (int i = 0; i < num_servers; ++i) {
    ServerOptions opts;
    opts.scheduler = c->scheduler_->endpoint();
    opts.num_threads = options.server_threads;
    opts.register_timeout = options.register_timeout + absl::Seconds(5);  // the scheduler reports first
    if (i < static_cast<int>(options.server_security.size())) opts.security = options.server_security[i];
    if (i < static_cast<int>(options.forward_faults.size())) opts.forward_fault = options.forward_faults[i];
    opts.heartbeat_interval = options.heartbeat_interval;
    opts.default_pull_timeout = options.default_pull_timeout;
    opts.checkpoint_dir = options.checkpoint_dir;
    PS_ASSIGN_OR_RETURN(auto server, Server::Create(opts));
    c->servers_.push_back(std::move(server));
  }
  {
    absl::MutexLock lock(&c->mu_);
    c->running_ = num_servers + 1;
    c->server_status_.resize(num_servers);
    c->server_done_.assign(num_servers, false);
  }
  InProcessCluster* self = c.get();
  self->threads_.emplace_back([self] {
    absl::Status s = self->scheduler_->Run();
    absl::MutexLock lock(&self->mu_);
    self->scheduler_status_ = s;
    --self->running_;
  });
  for (int i = 0; i < num_servers; ++i) {
    self->threads_.emplace_back([self, i] {
      absl::Status s = self->servers_[i]->Run();
      absl::MutexLock lock(&self->mu_);
      self->server_status_[i] = s;
      self->server_done_[i] = true;
      --self->running_;
    });
  }
  return c;
}

absl::Status InProcessCluster::Join(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_ == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(running_, " cluster threads still running"));
  }
  for (size_t i = 0; i < server_status_.size(); ++i) {
    if (!server_status_[i].ok()) return server_status_[i];
  }
  return scheduler_status_;
}

absl::Status InProcessCluster::StopServer(int i, absl::Duration timeout) {
  servers_[i]->RequestStop();
  absl::MutexLock lock(&mu_);
  auto done = [this, i]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return static_cast<bool>(server_done_[i]); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("server ", i, " still running"));
  }
  return server_status_[i];
}

InProcessCluster::~InProcessCluster() {
  scheduler_->RequestStop();
  for (auto& s : servers_) s->RequestStop();
  for (auto& t : threads_) t.join();
}

double ExpectedDenseSum(int workers, int steps, int64_t n) {
  double total = 0;
  for (int s = 0; s < steps; ++s)
    for (int w = 0; w < workers; ++w)
      for (int64_t i = 0; i < n; ++i) total += 1 + (w + s + i) % 5;
  return total;
}

ScopedTempDir::ScopedTempDir() {
  const char* base = std::getenv("TMPDIR");
  path_ = absl::StrCat(base != nullptr ? base : "/tmp", "/ps_test_XXXXXX");
  if (mkdtemp(path_.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << path_;
}

ScopedTempDir::~ScopedTempDir() {
  if (::testing::Test::HasFailure()) {
    std::fprintf(stderr, "logs of the failed test kept in %s\n", path_.c_str());
    return;
  }
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace ps::testing
