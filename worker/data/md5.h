#ifndef PS_WORKER_DATA_MD5_H_
#define PS_WORKER_DATA_MD5_H_

// MD5 (RFC 1321), written here from the RFC. For checking that data files
// are the ones a manifest names, not for anything that needs a secure hash:
// MD5 collisions are cheap to make.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ps {

// Incremental MD5: Update() any number of times, then Finish() once.
// Not thread-safe; copyable (a copy continues from the same state).
class Md5 {
 public:
  using Digest = std::array<uint8_t, 16>;

  Md5();

  // Appends `data` to the message. Requires: Finish() not yet called.
  void Update(std::string_view data);

  // Pads the message, returns its digest and leaves this object spent:
  // requires no further Update() or Finish() (CHECKed).
  Digest Finish();

 private:
  void Block(const uint8_t* block);  // one 64-byte block into state_

  std::array<uint32_t, 4> state_;
  std::array<uint8_t, 64> buffer_{};
  uint64_t length_ = 0;  // bytes appended so far
  bool finished_ = false;
};

// The digest of `data` in one call.
Md5::Digest Md5Digest(std::string_view data);

// The digest as 32 lower-case hex digits, as md5sum prints it.
std::string Md5Hex(std::string_view data);

// `digest` as 32 lower-case hex digits.
std::string Md5ToHex(const Md5::Digest& digest);

}  // namespace ps

#endif  // PS_WORKER_DATA_MD5_H_
