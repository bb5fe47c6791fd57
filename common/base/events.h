#ifndef PS_COMMON_BASE_EVENTS_H_
#define PS_COMMON_BASE_EVENTS_H_

// A node's structured events: one JSON line for each change of the job's
// state that an operator's tooling (or a test) watches for, appended to the
// file --events names:
//
//   {"event":"server_lost","time":1764412345.123,"rank":1,"promoted":12,"lacking":12}
//
// The log says the same in prose for people; these lines are for programs:
// their kinds and field names are part of the output (docs/metrics.md
// lists them). Process-wide, like the log: a process writes one file. Each
// line is written whole and flushed, so a reader polling the file never
// sees half of one. Thread-safe.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/json.h"

namespace ps {

// Appends this process's events to `path` from now on ("" : none, the
// default). Errors: the file cannot be opened for appending.
absl::Status OpenEventFile(const std::string& path);

// Writes {"event":KIND,"time":UNIX_SECONDS,...fields} when an event file is
// open; nothing otherwise.
void EmitEvent(absl::string_view kind, const JsonLine& fields = JsonLine());

// Stops writing events and closes the file (a test's or a main's end).
void CloseEventFile();

}  // namespace ps

#endif  // PS_COMMON_BASE_EVENTS_H_
