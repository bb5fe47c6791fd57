// The control plane at scale: N simulated workers and S simulated servers,
// all in this process, speak the real protocol (common/wire/codec.h over ZeroMQ
// DEALER sockets, one per node, as ps_worker and ps_server do) to a real
// ps_scheduler, and the bench measures what that scheduler costs as N grows:
//
//   formation   from the first registration sent to the last node holding
//               its rank and the first cluster view, and the view bytes
//               every node received for it (views only, here and below);
//   heartbeats  the scheduler's CPU (its /proc utime + stime) while every
//               node sends one heartbeat per --heartbeat_interval, as a
//               fraction of one core;
//   barrier     from the first worker's BarrierRequest to the last Ack;
//   a death     worker N-1 falls silent: from then to every live node
//               holding the view that drops it (the heartbeat timeout
//               included), and the bytes each node received for it;
//   a rejoin    a new node registers for rank N-1: to every node holding
//               the view that has it back, and the bytes per node;
//   a server    worker 0 has defined a model of --tensors slices with
//               --replicas copies each (the simulated servers acknowledge
//               their slices and the copies they are asked to make); server
//               S-1 falls silent: to every node holding the view where
//               other copies lead its slices, to a view with every slice's
//               copies again, and the bytes per node for all those views;
//               then a new server takes its rank: to the view with it.
//
// The simulated nodes do only what the scheduler sees of a node: they
// register, heartbeat, wait at barriers, answer the scheduler's requests
// to servers at once, and read (decode) every message they get. Nothing is
// trained.
//
//   control_plane_bench [--workers=64,512,4096] [--servers=64]
//       [--heartbeat_interval=1s] [--heartbeat_timeout=3s] [--window=5s]
//       [--replicas=2] [--tensors=128]
//
// One JSON line per N on stdout; progress on stderr.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "tests/child_process.h"

ABSL_FLAG(std::vector<std::string>, workers, std::vector<std::string>({"64", "512", "4096"}),
          "Simulated worker counts, one job each.");
ABSL_FLAG(int, servers, 64, "Simulated servers in every job.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "Each node's heartbeat period.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(3), "The scheduler's --heartbeat_timeout.");
ABSL_FLAG(absl::Duration, window, absl::Seconds(5), "How long the heartbeats' CPU is measured.");
ABSL_FLAG(int, replicas, 2, "The scheduler's --replicas: copies of every slice of the model worker 0 defines.");
ABSL_FLAG(int, tensors, 128, "Tensors of that model (4 KiB each, one slice each).");

namespace ps::bench {
namespace {

using ::ps::testing::ChildProcess;

struct FakeNode {
  Role role = Role::kWorker;
  int rank = 0;
  uint32_t node_id = 0;
  zmq::socket_t socket;
  bool live = true;
  bool registered = false;
  uint64_t epoch = 0;       // of the latest view received
  uint64_t view_bytes = 0;  // cluster view bytes received since the last reset
  int acks = 0;
  bool model = false;  // worker 0: the model's definition was answered
  absl::Time next_heartbeat;
};

// The scheduler's CPU time so far (user + system), from /proc.
absl::Duration CpuOf(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return absl::ZeroDuration();
  std::vector<std::string> f = absl::StrSplit(text.substr(close + 2), ' ');
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return absl::ZeroDuration();
  }
  return absl::Seconds(static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK)));
}

class Simulation {
 public:
  Simulation(int workers, int servers) : workers_(workers), servers_(servers) {
    context_.set(zmq::ctxopt::max_sockets, workers + servers + 64);
    context_.set(zmq::ctxopt::io_threads, 2);
  }

  absl::Status Start(const std::string& dir) {
    PS_ASSIGN_OR_RETURN(
        ChildProcess child,
        ChildProcess::Start(
            "ps_scheduler",
            {"--port=0", absl::StrCat("--num_servers=", servers_), absl::StrCat("--num_workers=", workers_),
             "--heartbeat_timeout=" + absl::FormatDuration(absl::GetFlag(FLAGS_heartbeat_timeout)),
             "--register_timeout=600s", absl::StrCat("--replicas=", absl::GetFlag(FLAGS_replicas))},
            dir + "/scheduler.log"));
    scheduler_.emplace(std::move(child));
    PS_ASSIGN_OR_RETURN(endpoint_, scheduler_->WaitForLine("ps_scheduler listening on ", absl::Seconds(30)));
    return absl::OkStatus();
  }

  // Every node registers; returns once each holds its rank and a view.
  absl::StatusOr<absl::Duration> Form() {
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < servers_ + workers_; ++i) {
      FakeNode& n = nodes_.emplace_back();
      n.role = i < servers_ ? Role::kServer : Role::kWorker;
      n.rank = i < servers_ ? i : i - servers_;
      PS_RETURN_IF_ERROR(Register(n));
    }
    PS_RETURN_IF_ERROR(RunUntil([&] { return AllHold(1); }, absl::Seconds(600), "formation"));
    return absl::Now() - t0;
  }

  // The scheduler's CPU per second of wall time while only heartbeats flow.
  absl::StatusOr<double> HeartbeatCpu(absl::Duration window) {
    const absl::Duration cpu0 = CpuOf(scheduler_->pid());
    const absl::Time t0 = absl::Now();
    PS_RETURN_IF_ERROR(RunUntil([] { return false; }, window, ""));
    return absl::FDivDuration(CpuOf(scheduler_->pid()) - cpu0, absl::Now() - t0);
  }

  absl::StatusOr<absl::Duration> Barrier() {
    const absl::Time t0 = absl::Now();
    for (FakeNode& n : nodes_) {
      if (n.role == Role::kWorker) PS_RETURN_IF_ERROR(Send(n, BarrierRequestMsg{"bench", 600000}));
    }
    PS_RETURN_IF_ERROR(RunUntil(
        [&] {
          return std::all_of(nodes_.begin(), nodes_.end(),
                             [](const FakeNode& n) { return n.role != Role::kWorker || n.acks > 0; });
        },
        absl::Seconds(600), "the barrier"));
    return absl::Now() - t0;
  }

  // Worker 0 defines a model of --tensors tensors (one slice each); the
  // simulated servers acknowledge their slices. Until worker 0 has the answer.
  absl::StatusOr<absl::Duration> DefineModel() {
    ModelSpec model;
    for (int t = 0; t < absl::GetFlag(FLAGS_tensors); ++t) {
      model.tensors.push_back(TensorSpec{absl::StrCat("t", t), {1024}});
    }
    const absl::Time t0 = absl::Now();
    FakeNode& worker0 = nodes_[servers_];
    PS_RETURN_IF_ERROR(Send(worker0, DefineModelRequestMsg{model}));
    PS_RETURN_IF_ERROR(RunUntil([&] { return worker0.model; }, absl::Seconds(120), "the model's definition"));
    return absl::Now() - t0;
  }

  // Server S-1 falls silent: until every live node holds the view without
  // it (its slices led by their other copies), and until one view shows
  // every slice with its copies again (`*again`).
  absl::StatusOr<absl::Duration> ServerDeath(absl::Duration* again) {
    FakeNode& victim = nodes_[servers_ - 1];
    victim.socket.close();
    victim.live = false;
    full_copies_ = false;
    const absl::Time t0 = absl::Now();
    PS_ASSIGN_OR_RETURN(absl::Duration dead, AwaitNewView("the view without server " + std::to_string(victim.rank)));
    PS_RETURN_IF_ERROR(RunUntil([&] { return full_copies_; }, absl::Seconds(120), "every slice's copies again"));
    *again = absl::Now() - t0;
    return dead;
  }

  // A new server takes rank S-1 back (a server joining a running job with
  // replicas: slices move to it): until every node holds the view with it.
  // Then the views of the moves it starts, until none has come for half a
  // second, so that the bytes counted are the whole join's, not as many
  // moves as happened to finish before the first view.
  absl::StatusOr<absl::Duration> ServerJoin() {
    FakeNode& n = nodes_[servers_ - 1];
    n = FakeNode{.role = Role::kServer, .rank = servers_ - 1};
    PS_RETURN_IF_ERROR(Register(n));
    PS_ASSIGN_OR_RETURN(absl::Duration joined,
                        AwaitNewView("the view with server " + std::to_string(n.rank) + " back"));
    for (uint64_t seen = 0; seen != LatestEpoch();) {
      seen = LatestEpoch();
      PS_RETURN_IF_ERROR(RunUntil([] { return false; }, absl::Milliseconds(500), ""));
    }
    return joined;
  }

  // Worker N-1 falls silent (its socket closed): until every live node holds the view without it.
  absl::StatusOr<absl::Duration> Death() {
    FakeNode& victim = nodes_.back();
    victim.socket.close();
    victim.live = false;
    return AwaitNewView("the view without worker " + std::to_string(victim.rank));
  }

  // A new node takes rank N-1 back.
  absl::StatusOr<absl::Duration> Rejoin() {
    FakeNode& n = nodes_.back();
    n = FakeNode{.role = Role::kWorker, .rank = workers_ - 1};
    PS_RETURN_IF_ERROR(Register(n));
    return AwaitNewView("the view with worker " + std::to_string(n.rank) + " back");
  }

  // Cluster view bytes received by the live nodes since the last call.
  std::pair<uint64_t, int> TakeBytes() {
    uint64_t total = 0;
    int live = 0;
    for (FakeNode& n : nodes_) {
      if (!n.live) continue;
      total += n.view_bytes;
      n.view_bytes = 0;
      ++live;
    }
    return {total, live};
  }

  uint64_t incarnation() const { return incarnation_; }

 private:
  template <typename T>
  static T Flag(const absl::Flag<T>& f) {
    return absl::GetFlag(f);
  }

  absl::Status Register(FakeNode& n) {
    PS_ASSIGN_OR_RETURN(n.socket, ConnectDealer(context_, endpoint_, NodeSecurity(), Traffic::kControl));
    n.live = true;
    n.next_heartbeat = absl::Now() + absl::GetFlag(FLAGS_heartbeat_interval);
    RegisterRequestMsg m{n.role, n.role == Role::kServer ? absl::StrCat("tcp://127.0.0.1:", 20000 + n.rank) : "",
                         n.rank};
    return Send(n, std::move(m));
  }

  absl::Status Send(FakeNode& n, Body body) {
    Envelope env{kProtocolVersion, ++next_request_, n.node_id, std::move(body)};
    env.incarnation = incarnation_;
    return SendMessage(n.socket, nullptr, env);
  }

  bool AllHold(uint64_t epoch) const {
    return std::all_of(nodes_.begin(), nodes_.end(),
                       [&](const FakeNode& n) { return !n.live || (n.registered && n.epoch >= epoch); });
  }

  uint64_t LatestEpoch() const {
    uint64_t latest = 0;
    for (const FakeNode& n : nodes_) latest = std::max(latest, n.epoch);
    return latest;
  }

  absl::StatusOr<absl::Duration> AwaitNewView(const std::string& what) {
    const uint64_t before = LatestEpoch();
    const absl::Time t0 = absl::Now();
    PS_RETURN_IF_ERROR(RunUntil([&] { return AllHold(before + 1); }, absl::Seconds(120), what));
    return absl::Now() - t0;
  }

  // Heartbeats and reads until `done` or `timeout`; an error names `what`
  // when it times out (an empty `what`: the timeout is the plan).
  absl::Status RunUntil(const std::function<bool()>& done, absl::Duration timeout, const std::string& what) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        return what.empty() ? absl::OkStatus()
                            : absl::DeadlineExceededError(
                                  absl::StrCat(what, " did not come within ", absl::FormatDuration(timeout)));
      }
      for (FakeNode& n : nodes_) {
        if (!n.live || !n.registered || n.next_heartbeat > now) continue;
        PS_RETURN_IF_ERROR(Send(n, HeartbeatMsg{}));
        n.next_heartbeat += absl::GetFlag(FLAGS_heartbeat_interval);
      }
      PS_RETURN_IF_ERROR(Pump(absl::Milliseconds(5)));
    }
    return absl::OkStatus();
  }

  absl::Status Pump(absl::Duration timeout) {
    items_.clear();
    index_.clear();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!nodes_[i].live) continue;
      items_.push_back(zmq::pollitem_t{nodes_[i].socket.handle(), 0, ZMQ_POLLIN, 0});
      index_.push_back(i);
    }
    zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    for (size_t j = 0; j < items_.size(); ++j) {
      if ((items_[j].revents & ZMQ_POLLIN) == 0) continue;
      FakeNode& n = nodes_[index_[j]];
      while (true) {
        absl::StatusOr<RawMessage> raw = ReceiveMessage(n.socket, /*routed=*/false);
        if (absl::IsUnavailable(raw.status())) break;
        PS_RETURN_IF_ERROR(raw.status());
        PS_RETURN_IF_ERROR(OnMessage(n, *raw));
      }
    }
    return absl::OkStatus();
  }

  absl::Status OnMessage(FakeNode& n, const RawMessage& raw) {
    PS_ASSIGN_OR_RETURN(Envelope env, DecodeEnvelope(Bytes(raw.header)));
    if (const auto* reply = std::get_if<RegisterReplyMsg>(&env.body)) {
      n.node_id = reply->node_id;
      n.registered = true;
      incarnation_ = reply->incarnation;
    } else if (const auto* view = std::get_if<ClusterViewMsg>(&env.body)) {
      n.epoch = std::max(n.epoch, view->epoch);
      n.view_bytes += raw.header.size();
      if (n.role == Role::kServer && !view->copies.empty()) {
        full_copies_ = std::all_of(view->copies.begin(), view->copies.end(), [](const std::vector<int32_t>& c) {
          return static_cast<int>(c.size()) == absl::GetFlag(FLAGS_replicas);
        });
      }
    } else if (std::holds_alternative<CreateSlicesRequestMsg>(env.body) ||
               std::holds_alternative<AddCopyRequestMsg>(env.body)) {
      // A server's part: take the slices, or send a copy (nothing to copy here).
      Envelope ack{kProtocolVersion, env.request_id, n.node_id, AckMsg{}};
      ack.incarnation = incarnation_;
      return SendMessage(n.socket, nullptr, ack);
    } else if (std::holds_alternative<DefineModelReplyMsg>(env.body)) {
      n.model = true;
    } else if (std::holds_alternative<AckMsg>(env.body)) {
      ++n.acks;
    } else if (const auto* error = std::get_if<ErrorMsg>(&env.body)) {
      return absl::Status(error->code,
                          absl::StrCat(RoleName(n.role), " ", n.rank, ": the scheduler says ", error->message));
    }
    return absl::OkStatus();
  }

  const int workers_, servers_;
  zmq::context_t context_;
  std::optional<ChildProcess> scheduler_;
  std::string endpoint_;
  std::vector<FakeNode> nodes_;
  std::vector<zmq::pollitem_t> items_;
  std::vector<size_t> index_;
  uint64_t next_request_ = 0;
  uint64_t incarnation_ = 0;
  bool full_copies_ = false;  // the latest view a server got has every slice's copies
};

void Progress(const std::string& line) { std::fprintf(stderr, "[control_plane_bench] %s\n", line.c_str()); }

// `line` gets `key` = the seconds of `d`, and `bytes_key` = the cluster-view
// bytes per live node received since the last TakeBytes.
void AddPhase(JsonLine& line, Simulation& sim, absl::string_view key, absl::Duration d, absl::string_view bytes_key) {
  // Microseconds: a rejoin of a small job takes less than half a millisecond.
  line.Add(key, absl::ToDoubleSeconds(d), 6);
  const auto [bytes, nodes] = sim.TakeBytes();
  line.Add(bytes_key, static_cast<double>(bytes) / nodes, 1);
}

absl::Status RunOne(int workers, int servers, const std::string& dir) {
  Progress(absl::StrCat(workers, " workers, ", servers, " servers: forming"));
  Simulation sim(workers, servers);
  const std::string run_dir = absl::StrCat(dir, "/", workers, "w", servers, "s");
  if (mkdir(run_dir.c_str(), 0755) != 0) return absl::InternalError("cannot make " + run_dir);
  PS_RETURN_IF_ERROR(sim.Start(run_dir));
  JsonLine line;
  line.Add("bench", "control_plane").Add("workers", workers).Add("servers", servers);
  line.Add("heartbeat_interval_s", absl::ToDoubleSeconds(absl::GetFlag(FLAGS_heartbeat_interval)), 3);
  line.Add("heartbeat_timeout_s", absl::ToDoubleSeconds(absl::GetFlag(FLAGS_heartbeat_timeout)), 3);
  line.Add("replicas", absl::GetFlag(FLAGS_replicas)).Add("slices", absl::GetFlag(FLAGS_tensors));
  PS_ASSIGN_OR_RETURN(absl::Duration formation, sim.Form());
  AddPhase(line, sim, "formation_s", formation, "formation_bytes_per_node");
  Progress(absl::StrCat("formed in ", absl::FormatDuration(formation), "; heartbeats for ",
                        absl::FormatDuration(absl::GetFlag(FLAGS_window))));
  PS_ASSIGN_OR_RETURN(absl::Duration define, sim.DefineModel());
  AddPhase(line, sim, "define_model_s", define, "define_model_bytes_per_node");
  PS_ASSIGN_OR_RETURN(double heartbeat_cpu, sim.HeartbeatCpu(absl::GetFlag(FLAGS_window)));
  line.Add("heartbeat_cpu_fraction", heartbeat_cpu, 4);
  PS_ASSIGN_OR_RETURN(absl::Duration barrier, sim.Barrier());
  line.Add("barrier_s", absl::ToDoubleSeconds(barrier), 6);
  sim.TakeBytes();
  Progress("a worker dies");
  PS_ASSIGN_OR_RETURN(absl::Duration death, sim.Death());
  AddPhase(line, sim, "death_to_view_s", death, "death_bytes_per_node");
  Progress("it rejoins");
  PS_ASSIGN_OR_RETURN(absl::Duration rejoin, sim.Rejoin());
  AddPhase(line, sim, "rejoin_to_view_s", rejoin, "rejoin_bytes_per_node");
  Progress("a server dies");
  absl::Duration copies_again;
  PS_ASSIGN_OR_RETURN(absl::Duration server_death, sim.ServerDeath(&copies_again));
  line.Add("server_death_to_copies_again_s", absl::ToDoubleSeconds(copies_again), 6);  // as AddPhase
  AddPhase(line, sim, "server_death_to_view_s", server_death, "server_death_bytes_per_node");
  Progress("a server joins");
  PS_ASSIGN_OR_RETURN(absl::Duration server_join, sim.ServerJoin());
  AddPhase(line, sim, "server_join_to_view_s", server_join, "server_join_bytes_per_node");
  std::printf("%s\n", line.Str().c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps::bench

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "Simulated workers and servers against a real ps_scheduler: formation, heartbeats, barriers, a "
               "death and a rejoin, per worker count (JSON lines).");
  const int servers = absl::GetFlag(FLAGS_servers);
  if (absl::GetFlag(FLAGS_heartbeat_interval) <= absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_heartbeat_interval) * 2 > absl::GetFlag(FLAGS_heartbeat_timeout)) {
    std::fprintf(stderr,
                 "control_plane_bench: --heartbeat_interval must be positive and at most half of "
                 "--heartbeat_timeout, or live nodes are declared dead\n");
    return 2;
  }
  char tmpl[] = "/tmp/control_plane_bench.XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir == nullptr || servers < 1) {
    std::fprintf(stderr, "control_plane_bench: %s\n", dir == nullptr ? "no temporary directory" : "--servers < 1");
    return 2;
  }
  for (const std::string& w : absl::GetFlag(FLAGS_workers)) {
    int workers = 0;
    if (!absl::SimpleAtoi(w, &workers) || workers < 1) {
      std::fprintf(stderr, "control_plane_bench: --workers: '%s' is not a positive count\n", w.c_str());
      return 2;
    }
    if (absl::Status s = ps::bench::RunOne(workers, servers, dir); !s.ok()) {
      std::fprintf(stderr, "control_plane_bench: %d workers: %s (the scheduler's log is in %s)\n", workers,
                   std::string(s.message()).c_str(), dir);
      return 1;
    }
  }
  return 0;
}
