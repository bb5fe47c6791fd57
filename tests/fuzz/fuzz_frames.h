#ifndef PS_TESTS_FUZZ_FUZZ_FRAMES_H_
#define PS_TESTS_FUZZ_FUZZ_FRAMES_H_

// The byte format the fuzz targets read: one fuzzer input is a sequence of
// ZeroMQ multipart messages, so that the fuzzer explores headers with payload
// frames, messages with too few or too many frames and several messages in a
// row. Header-only; not thread-safe (plain values).
//
//   byte 0 == 0     raw mode: the rest of the input is one message of one frame.
//   byte 0 != 0     framed mode: records follow until the input ends, each
//                     [flags: 1 byte][length: 2 bytes little-endian][bytes]
//                   flags bit 0 set: the next record is another frame of the
//                   same message (ZeroMQ's "more"); clear: the message ends.
//                   A length past the end of the input takes what is left.
//                   At most kMaxFrames frames in all; the rest is ignored.
//
// Every frame is copied into its own heap buffer of exactly its size, so
// AddressSanitizer sees any read past a frame's end.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ps::fuzz {

inline constexpr size_t kMaxFrames = 256;

using Frame = std::vector<uint8_t>;
using Message = std::vector<Frame>;

inline std::vector<Message> SplitMessages(const uint8_t* data, size_t size) {
  std::vector<Message> out;
  if (size == 0) return out;
  if (data[0] == 0) {
    out.push_back(Message{Frame(data + 1, data + size)});
    return out;
  }
  size_t pos = 1, frames = 0;
  bool more = false;
  while (pos < size && frames < kMaxFrames) {
    const uint8_t flags = data[pos++];
    size_t length = 0;
    if (pos < size) length = data[pos++];
    if (pos < size) length |= static_cast<size_t>(data[pos++]) << 8;
    if (length > size - pos) length = size - pos;
    if (!more) out.emplace_back();
    out.back().emplace_back(data + pos, data + pos + length);
    pos += length;
    ++frames;
    more = (flags & 1) != 0;
  }
  return out;
}

// The inverse, for the seed generator: `messages` in framed mode, after
// `first` (not 0; the push fuzzer reads its bits as the model's settings).
// Requires frames of at most 65535 bytes.
inline std::string JoinMessages(const std::vector<Message>& messages, uint8_t first = 1) {
  std::string out(1, static_cast<char>(first));
  for (const Message& m : messages) {
    for (size_t i = 0; i < m.size(); ++i) {
      out.push_back(i + 1 < m.size() ? '\x01' : '\x00');
      out.push_back(static_cast<char>(m[i].size() & 0xff));
      out.push_back(static_cast<char>((m[i].size() >> 8) & 0xff));
      out.append(m[i].begin(), m[i].end());
    }
  }
  return out;
}

}  // namespace ps::fuzz

#endif  // PS_TESTS_FUZZ_FUZZ_FRAMES_H_
