#include "common/base/events.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace ps {
namespace {

struct EventFile {
  absl::Mutex mu;
  std::FILE* file ABSL_GUARDED_BY(mu) = nullptr;
};

EventFile& Events() {
  static EventFile* const events = new EventFile;  // never destroyed: usable until exit
  return *events;
}

}  // namespace

absl::Status OpenEventFile(const std::string& path) {
  CloseEventFile();
  if (path.empty()) return absl::OkStatus();
  std::FILE* file = std::fopen(path.c_str(), "ae");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--events: cannot open '", path, "' for appending: ", std::strerror(errno)));
  }
  EventFile& events = Events();
  absl::MutexLock lock(&events.mu);
  events.file = file;
  return absl::OkStatus();
}

void EmitEvent(absl::string_view kind, const JsonLine& fields) {
  EventFile& events = Events();
  absl::MutexLock lock(&events.mu);
  if (events.file == nullptr) return;
  const std::string rest = fields.Str();  // "{...}"
  JsonLine head;
  head.Add("event", kind).Add("time", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()), 3);
  std::string line = head.Str();
  line.pop_back();  // the closing brace: the fields follow
  if (rest.size() > 2)
    absl::StrAppend(&line, ",", absl::string_view(rest).substr(1));
  else
    line.push_back('}');
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), events.file);
  std::fflush(events.file);
}

void CloseEventFile() {
  EventFile& events = Events();
  absl::MutexLock lock(&events.mu);
  if (events.file != nullptr) std::fclose(events.file);
  events.file = nullptr;
}

}  // namespace ps
