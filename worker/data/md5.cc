#include "worker/data/md5.h"

#include <algorithm>
#include <cstring>

#include "glog/logging.h"

namespace ps {
namespace {

// T[i] = floor(2^32 * |sin(i + 1)|), RFC 1321 section 3.4.
constexpr uint32_t kSine[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};

// Left-rotation amounts, four per round.
constexpr int kShift[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};

uint32_t RotateLeft(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

// The round function and message-word index of step i (0..63).
uint32_t RoundFunction(int i, uint32_t b, uint32_t c, uint32_t d, int* word) {
  switch (i / 16) {
    case 0: *word = i; return (b & c) | (~b & d);                 // F
    case 1: *word = (5 * i + 1) % 16; return (b & d) | (c & ~d);  // G
    case 2: *word = (3 * i + 5) % 16; return b ^ c ^ d;           // H
    default: *word = (7 * i) % 16; return c ^ (b | ~d);           // I
  }
}

}  // namespace

Md5::Md5() : state_{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476} {}

void Md5::Block(const uint8_t* block) {
  uint32_t x[16];
  for (int j = 0; j < 16; ++j) {  // little-endian words, whatever the host
    x[j] = uint32_t{block[4 * j]} | uint32_t{block[4 * j + 1]} << 8 | uint32_t{block[4 * j + 2]} << 16 |
           uint32_t{block[4 * j + 3]} << 24;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  for (int i = 0; i < 64; ++i) {
    int word = 0;
    const uint32_t f = RoundFunction(i, b, c, d, &word);
    const uint32_t rotated = RotateLeft(a + f + x[word] + kSine[i], kShift[i / 16][i % 4]);
    a = d;
    d = c;
    c = b;
    b = b + rotated;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
}

void Md5::Update(std::string_view data) {
  CHECK(!finished_) << "Md5::Update after Finish";
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = data.size();
  size_t used = length_ % 64;
  length_ += n;
  if (used > 0) {
    const size_t take = std::min(n, 64 - used);
    std::memcpy(buffer_.data() + used, p, take);
    p += take;
    n -= take;
    if (used + take < 64) return;
    Block(buffer_.data());
  }
  for (; n >= 64; p += 64, n -= 64) Block(p);
  if (n > 0) std::memcpy(buffer_.data(), p, n);
}

Md5::Digest Md5::Finish() {
  CHECK(!finished_) << "Md5::Finish called twice";
  const uint64_t bits = length_ * 8;
  // A 1 bit, zeros up to 56 mod 64, then the length in bits, little-endian.
  const size_t used = length_ % 64;
  const size_t pad = used < 56 ? 56 - used : 120 - used;
  char tail[72] = {static_cast<char>(0x80)};
  for (int j = 0; j < 8; ++j) tail[pad + j] = static_cast<char>(bits >> (8 * j));
  Update(std::string_view(tail, pad + 8));
  finished_ = true;
  Digest out;
  for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(state_[j / 4] >> (8 * (j % 4)));
  return out;
}

Md5::Digest Md5Digest(std::string_view data) {
  Md5 md5;
  md5.Update(data);
  return md5.Finish();
}

std::string Md5ToHex(const Md5::Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(32, '0');
  for (int j = 0; j < 16; ++j) {
    hex[2 * j] = kHex[digest[j] >> 4];
    hex[2 * j + 1] = kHex[digest[j] & 15];
  }
  return hex;
}

std::string Md5Hex(std::string_view data) { return Md5ToHex(Md5Digest(data)); }

}  // namespace ps
