#include "tests/job.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/model_file/model_file_reader.h"
#include "gtest/gtest.h"
#include "server/export/exporter.h"

namespace ps::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

int64_t IntField(const std::string& line, const std::string& key) {
  const std::string tag = key + "=";
  size_t at = line.find(tag);
  // Only a whole key: at the start or after a space.
  while (at != std::string::npos && at > 0 && line[at - 1] != ' ') at = line.find(tag, at + 1);
  if (at == std::string::npos) return -1;
  const size_t begin = at + tag.size();
  const size_t end = std::min(line.find(' ', begin), line.size());
  int64_t v = -1;
  return absl::SimpleAtoi(line.substr(begin, end - begin), &v) ? v : -1;
}

double DoubleField(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return -1;
  const size_t from = at + key.size() + 2;
  double v = -1;
  return absl::SimpleAtod(line.substr(from, line.find(' ', from) - from), &v) ? v : -1;
}

std::optional<std::string> JsonField(const std::string& line, const std::string& key) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '{') return std::nullopt;
  int depth = 0;
  bool in_string = false;
  size_t string_start = 0, value_start = std::string::npos;
  std::string last_key;
  for (; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        if (depth == 1 && value_start == std::string::npos) last_key = line.substr(string_start, i - string_start);
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      string_start = i + 1;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (depth == 1 && c == ':') {
      value_start = i + 1;
    } else if ((depth == 1 && c == ',') || ((c == '}' || c == ']') && depth-- == 1)) {
      if (value_start != std::string::npos && last_key == key) {
        return std::string(absl::StripAsciiWhitespace(line.substr(value_start, i - value_start)));
      }
      value_start = std::string::npos;
    }
  }
  return std::nullopt;
}

std::vector<std::string> JsonEvents(const std::string& text, const std::string& event) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::string l(line);
    if (JsonField(l, "event") == "\"" + event + "\"") out.push_back(l);
  }
  return out;
}

double JsonNumber(const std::string& line, const std::string& key, double fallback) {
  const std::optional<std::string> v = JsonField(line, key);
  double d = fallback;
  return v.has_value() && absl::SimpleAtod(*v, &d) ? d : fallback;
}

double FinalAccuracy(const std::string& stdout_text) {
  for (const std::string& done : JsonEvents(stdout_text, "done")) {
    if (JsonField(done, "rank") == "0") return JsonNumber(done, "test_accuracy");
  }
  return -1;
}

uint32_t SoakSeed() {
  uint32_t seed = 0;
  const char* text = std::getenv("PS_SOAK_SEED");
  if (text != nullptr && absl::SimpleAtoi(text, &seed)) return seed;
  return std::random_device()();
}

std::vector<std::string> SoakLiveness() {
  return {"--heartbeat_interval=0.2s", "--heartbeat_timeout=2s", "--scheduler_recovery_timeout=30s"};
}

std::vector<std::string> SoakWorkerFlags(int rank, int steps, int64_t dense, int step_ms,
                                         const std::string& consistency) {
  std::vector<std::string> flags = {absl::StrCat("--steps=", steps),          "--consistency=" + consistency,
                                    absl::StrCat("--dense_elements=", dense), "--slice_bytes=16384",
                                    absl::StrCat("--step_ms=", step_ms),      absl::StrCat("--rank=", rank)};
  const std::vector<std::string> live = SoakLiveness();
  flags.insert(flags.end(), live.begin(), live.end());
  return flags;
}

absl::StatusOr<double> ExportedSum(const std::string& checkpoint_dir, const std::string& npz,
                                   const std::string& tensor) {
  PS_RETURN_IF_ERROR(ExportCheckpoints(checkpoint_dir, npz).status());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ModelFileReader> model, ModelFileReader::Open(npz));
  PS_ASSIGN_OR_RETURN(std::string bytes, model->ReadAll(tensor));
  double sum = 0;
  for (size_t i = 0; i + sizeof(float) <= bytes.size(); i += sizeof(float)) {
    float v;
    std::memcpy(&v, bytes.data() + i, sizeof(v));
    sum += v;
  }
  return sum;
}

void ExpectExitZero(ChildProcess& p, const std::string& what, absl::Duration deadline) {
  auto code = p.WaitExit(deadline);
  ASSERT_TRUE(code.ok()) << what << ": " << code.status();
  EXPECT_EQ(*code, 0) << what << " stderr:\n" << p.StderrText();
}

Job::Job() : dir_(temp_.path()) {}

std::string Job::NextLogName(const std::string& base) {
  int used = 0;
  for (const auto* logs : {&scheduler_logs_, &server_logs_, &worker_logs_}) {
    for (const std::string& name : *logs) {
      if (name == base || name.rfind(base + ".restart", 0) == 0) ++used;
    }
  }
  if (used == 0) return base;
  return used == 1 ? base + ".restart" : absl::StrCat(base, ".restart", used);
}

absl::Status Job::Start(const std::string& binary, std::vector<std::string> flags, const std::string& log,
                        std::vector<ChildProcess>* into, std::vector<std::string>* logs) {
  if (binary == "ps_scheduler" || binary == "ps_server" || binary == "ps_worker" || binary == "ps_exact_sum") {
    flags.insert(flags.begin(), absl::StrCat("--events=", dir_, "/", log, ".events"));
  }
  auto p = ChildProcess::Start(binary, flags, absl::StrCat(dir_, "/", log, ".log"));
  if (!p.ok()) return p.status();
  into->push_back(*std::move(p));
  logs->push_back(log);
  return absl::OkStatus();
}

absl::Status Job::StartScheduler(int servers, int workers, std::vector<std::string> flags) {
  // Ours first: a later flag overrides an earlier one.
  flags.insert(flags.begin(), {"--port=0", absl::StrCat("--num_servers=", servers),
                               absl::StrCat("--num_workers=", workers), "--register_timeout=30s"});
  absl::Status started = Start("ps_scheduler", flags, NextLogName("scheduler"), &schedulers_, &scheduler_logs_);
  if (!started.ok()) return started;
  auto endpoint = schedulers_.back().WaitForLine("ps_scheduler listening on ", absl::Seconds(20));
  if (!endpoint.ok()) return endpoint.status();
  endpoint_ = *endpoint;
  return absl::OkStatus();
}

absl::Status Job::StartServer(int i, std::vector<std::string> flags) {
  flags.insert(flags.begin(), {"--scheduler=" + endpoint_, "--num_threads=1", "--port=0"});
  return Start("ps_server", flags, NextLogName(absl::StrCat("server", i)), &servers_, &server_logs_);
}

absl::Status Job::StartWorker(const std::string& binary, std::vector<std::string> flags) {
  flags.insert(flags.begin(), "--scheduler=" + endpoint_);
  return Start(binary, flags, absl::StrCat("worker", workers_.size()), &workers_, &worker_logs_);
}

absl::Status Job::StartWorkers(const std::string& binary, int workers, const std::vector<std::string>& flags) {
  for (int i = 0; i < workers; ++i) {
    if (absl::Status s = StartWorker(binary, flags); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Job::StartJob(int servers, int workers, const std::string& binary, const std::vector<std::string>& flags) {
  if (absl::Status s = StartScheduler(servers, workers); !s.ok()) return s;
  for (int i = 0; i < servers; ++i) {
    if (absl::Status s = StartServer(i); !s.ok()) return s;
  }
  return StartWorkers(binary, workers, flags);
}

void Job::ExpectAllExitZero(absl::Duration deadline) {
  for (auto* group : {&workers_, &servers_, &schedulers_}) {
    for (ChildProcess& p : *group) ExpectExitZero(p, absl::StrCat("pid ", p.pid()), deadline);
  }
}

std::string Job::Log(const std::string& name) const { return ReadFile(absl::StrCat(dir_, "/", name, ".log")); }

bool Job::AnyWorkerExited() {
  for (ChildProcess& p : workers_) {
    if (p.WaitExit(absl::Milliseconds(1)).ok()) return true;
  }
  return false;
}

std::vector<std::string> Job::Events(const std::string& name, const std::string& kind, const Fields& where) const {
  std::vector<std::string> out;
  for (std::string& line : JsonEvents(ReadFile(absl::StrCat(dir_, "/", name, ".events")), kind)) {
    const bool matches = std::all_of(where.begin(), where.end(), [&](const auto& field) {
      const std::optional<std::string> v = JsonField(line, field.first);
      return v.has_value() && (*v == field.second || *v == absl::StrCat("\"", field.second, "\""));
    });
    if (matches) out.push_back(std::move(line));
  }
  return out;
}

std::vector<std::string> Job::SchedulerEvents(const std::string& kind, const Fields& where) const {
  std::vector<std::string> out;
  for (const std::string& name : scheduler_logs_) {
    std::vector<std::string> of_one = Events(name, kind, where);
    out.insert(out.end(), of_one.begin(), of_one.end());
  }
  return out;
}

bool Job::WaitForSchedulerEvents(const std::string& kind, const Fields& where, int n, absl::Duration timeout) const {
  return WaitFor([&] { return CountSchedulerEvents(kind, where) >= n; }, timeout);
}

bool Job::WaitForEvents(const std::string& name, const std::string& kind, const Fields& where, int n,
                        absl::Duration timeout) const {
  return WaitFor([&] { return static_cast<int>(Events(name, kind, where).size()) >= n; }, timeout);
}

int Job::SlicesLackingAfterLoss(int rank) const {
  const std::vector<std::string> lost = SchedulerEvents("server_lost", {{"rank", absl::StrCat(rank)}});
  return lost.empty() ? -1 : static_cast<int>(JsonNumber(lost.back(), "lacking"));
}

int Job::ServerWithRank(int rank, absl::Duration timeout) const {
  int found = -1;
  WaitFor(
      [&] {
        for (size_t i = 0; i < server_logs_.size() && found < 0; ++i) {
          if (!Events(server_logs_[i], "registered", {{"rank", absl::StrCat(rank)}}).empty()) {
            found = static_cast<int>(i);
          }
        }
        return found >= 0;
      },
      timeout);
  return found;
}

}  // namespace ps::testing
