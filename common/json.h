#ifndef PS_COMMON_JSON_H_
#define PS_COMMON_JSON_H_

// The JSON lines the binaries print (progress, events, benchmark figures):
// strings quoted and escaped as RFC 8259 requires, so a tensor name, a path
// or an error message with a quote, a backslash or a control character still
// gives a line that parses. Thread-safe (no state).

#include <string>
#include "absl/strings/string_view.h"

namespace ps {

// `s` as a JSON string: in double quotes, with ", \ and control characters
// escaped (\n, \t, ... or \u00XX). Bytes >= 0x80 pass through (UTF-8).
std::string JsonQuote(absl::string_view s);

}  // namespace ps

#endif  // PS_COMMON_JSON_H_
