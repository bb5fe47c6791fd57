#ifndef PS_COMMON_BASE_HTTP_GET_TESTING_H_
#define PS_COMMON_BASE_HTTP_GET_TESTING_H_

// For tests: one HTTP/1.0 GET to 127.0.0.1, answered within a deadline, so
// a test reads a role's /metrics without an HTTP client library.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps::testing {

// The body of GET http://127.0.0.1:port/path; kUnavailable when the
// connection fails, kDeadlineExceeded past `timeout`, kInternal for a status
// other than 200.
inline absl::StatusOr<std::string> HttpGet(int port, const std::string& path,
                                           absl::Duration timeout = absl::Seconds(10)) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to 127.0.0.1:", port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  (void)!write(fd, request.data(), request.size());
  std::string response;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0 || poll(&p, 1, ms) <= 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat("GET ", path, ": no full answer in time"));
    }
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;  // HTTP/1.0: the server closes after the body
    response.append(buf, n);
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200", 0) != 0 && response.rfind("HTTP/1.0 200", 0) != 0) {
    return absl::InternalError(absl::StrCat("GET ", path, ": ", response.substr(0, response.find('\r'))));
  }
  return body == std::string::npos ? std::string() : response.substr(body + 4);
}

}  // namespace ps::testing

#endif  // PS_COMMON_BASE_HTTP_GET_TESTING_H_
