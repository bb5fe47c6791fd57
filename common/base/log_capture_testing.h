#ifndef PS_COMMON_BASE_LOG_CAPTURE_TESTING_H_
#define PS_COMMON_BASE_LOG_CAPTURE_TESTING_H_

// Tests only: collects every glog line logged in this process while it lives,
// so a test can assert what a component logged (a refusal, a warning).
// Thread-safe.

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"

namespace ps::testing {

class LogCapture : public google::LogSink {
 public:
  LogCapture() { google::AddLogSink(this); }
  ~LogCapture() override { google::RemoveLogSink(this); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  void send(google::LogSeverity, const char*, const char*, int, const google::LogMessageTime&, const char* message,
            size_t length) override {
    absl::MutexLock lock(&mu_);
    text_.append(message, length).append("\n");
  }
  // Every line so far, each ending in a newline.
  std::string text() {
    absl::MutexLock lock(&mu_);
    return text_;
  }

 private:
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::testing

#endif  // PS_COMMON_BASE_LOG_CAPTURE_TESTING_H_
