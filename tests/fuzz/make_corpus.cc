// Writes the seed corpus of the fuzz targets from the codec itself:
//   OUT/codec/  one header of every body type, filled and default, raw mode,
//               plus one framed input holding several of them;
//   OUT/push/   push and pull messages that fit push_fuzzer's model (valid
//               ones, so the fuzzer starts from accepted pushes, and a few
//               refused ones), for every consistency mode and optimizer;
//   OUT/shm/    shared-memory rings as a client leaves them (shm_fuzzer's
//               input: the write position, then the ring's bytes).
// Usage: fuzz_make_corpus OUT  (tests/fuzz/README.md says when to rerun it).
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/compress/compressor.h"
#include "common/net/shm_channel.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "common/wire/wire_frames.h"
#include "tests/fuzz/fuzz_frames.h"
#include "tests/fuzz/fuzz_model.h"

namespace ps::fuzz {
namespace {

Frame HeaderFrame(const Envelope& env) {
  const kj::Array<capnp::word> words = EncodeEnvelope(env);
  const auto* p = reinterpret_cast<const uint8_t*>(words.begin());
  return Frame(p, p + words.size() * sizeof(capnp::word));
}

Frame FloatFrame(size_t n, float value) {
  std::vector<float> v(n, value);
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return Frame(p, p + n * sizeof(float));
}

ModelSpec ExampleModel() {
  ModelSpec m;
  m.tensors = {{"layer1.w", {4, 3}, Initializer::He(7)},
               {"layer1.b", {3}, Initializer::Constant(0.5f)},
               {"emb", {10}, Initializer::Uniform(-1, 1, 3)}};
  m.optimizer.kind = OptimizerKind::kAdam;
  m.optimizer.lr_schedule = LrSchedule::kCosine;
  m.optimizer.decay_steps = 100;
  m.consistency = Consistency{ConsistencyMode::kSsp, 2};
  m.placement.rule = PlacementRule::kLayer;
  m.placement.slice_bytes = 16;
  m.placement.explicit_ranks["emb"] = 1;
  return m;
}

std::vector<Slice> ExampleSlices() { return {Slice{0, 0, 0, 12, 0}, Slice{1, 1, 0, 3, 1}, Slice{2, 2, 0, 10, 1}}; }

std::vector<std::pair<std::string, Body>> FilledBodies() {
  StatsReplyMsg stats;
  stats.pushes_applied = 5;
  stats.staleness_histogram = {3, 2, 0, 1};
  stats.held_keys = {0, 2, 5};
  return {
      {"error", ErrorMsg{absl::StatusCode::kNotFound, "unknown slice key 9"}},
      {"ack", AckMsg{}},
      {"registerRequest", RegisterRequestMsg{Role::kServer, "tcp://127.0.0.1:5555"}},
      {"registerReply", RegisterReplyMsg{3, 1}},
      {"clusterView",
       ClusterViewMsg{
           1,
           2,
           {{1, Role::kServer, 0, "tcp://127.0.0.1:5555"}, {2, Role::kWorker, 0, ""}, {3, Role::kWorker, 1, ""}}}},
      {"defineModelRequest", DefineModelRequestMsg{ExampleModel()}},
      {"defineModelReply", DefineModelReplyMsg{ExampleModel(), ExampleSlices()}},
      {"createSlicesRequest", CreateSlicesRequestMsg{ExampleModel(), ExampleSlices(), 2}},
      {"barrierRequest", BarrierRequestMsg{"epoch-1", 5000}},
      {"workerDone", WorkerDoneMsg{}},
      {"shutdown", ShutdownMsg{"worker 1 failed"}},
      {"pushRequest", PushRequestMsg{4, {{0, 3, 4}, {1, 16, 3}}, PullRequestMsg{5, {0, 1}, 1000}}},
      {"pullRequest", PullRequestMsg{2, {0, 1, 2, 3}, 250}},
      // Table rows whose ids travel delta coded (common/wire/id_coding.h).
      {"pullRequestRows", PullRequestMsg{2, {}, 250, {RowsRequest{4, {3, 5, 90, 1000, 70000}, true}}}},
      {"pullReply", PullReplyMsg{{{0, 3, 7}, {3, 8, 7}}}},
      {"statsRequest", StatsRequestMsg{}},
      {"statsReply", stats},
  };
}

// One default-constructed body of every alternative, so that a body type
// added to messages.h gets a seed without an edit here.
template <size_t... I>
std::vector<Body> DefaultBodies(std::index_sequence<I...>) {
  return {Body(std::in_place_index<I>)...};
}

void Write(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string Raw(const Frame& frame) { return std::string(1, '\0') + std::string(frame.begin(), frame.end()); }

void WriteCodecSeeds(const std::filesystem::path& dir) {
  std::vector<Message> several;
  uint64_t id = 1;
  for (auto& [name, body] : FilledBodies()) {
    const Frame f = HeaderFrame(Envelope{kProtocolVersion, id++, 2, body});
    Write(dir / ("raw-" + name), Raw(f));
    several.push_back(Message{f});
  }
  for (Body& body : DefaultBodies(std::make_index_sequence<std::variant_size_v<Body>>())) {
    Write(dir / (std::string("raw-default-") + BodyName(body)), Raw(HeaderFrame(Envelope{0, 0, 0, body})));
  }
  Write(dir / "framed-several", JoinMessages(several));
}

// Slice lengths of push_fuzzer's model, by key.
std::vector<uint64_t> SliceLengths() {
  const absl::StatusOr<FuzzModel> model = MakeFuzzModel(1);
  std::vector<uint64_t> out;
  if (!model.ok()) return out;
  for (const Slice& s : model->slices) out.push_back(s.length);
  return out;
}

Message PushMessage(uint32_t sender, int64_t clock, std::vector<uint32_t> keys, bool then_pull, float grad = 1.0f) {
  PushRequestMsg push{clock, {}, std::nullopt};
  Message m{Frame()};
  static const std::vector<uint64_t> length = SliceLengths();
  for (uint32_t k : keys) {
    push.slices.push_back(SliceData{k, length[k], static_cast<uint64_t>(clock)});
    m.push_back(FloatFrame(length[k], grad));
  }
  if (then_pull) push.then_pull = PullRequestMsg{clock + 1, keys, 100};
  m[0] = HeaderFrame(Envelope{kProtocolVersion, static_cast<uint64_t>(clock) + 1, sender, push});
  return m;
}

Message PullMessage(uint32_t sender, int64_t clock, std::vector<uint32_t> keys) {
  return Message{HeaderFrame(Envelope{kProtocolVersion, 99, sender, PullRequestMsg{clock, keys, 100}})};
}

// A push of rows `ids` of the model's table (each row all `grad`), and, with
// then_pull, a pull of the same rows for the next step.
Message RowPushMessage(uint32_t sender, int64_t clock, const std::vector<uint64_t>& ids, bool then_pull,
                       float grad = 1.0f) {
  const auto n = static_cast<uint32_t>(ids.size());
  PushRequestMsg push{clock, {SliceData{kFuzzTableKey, uint64_t{n} * kFuzzTableDim, 0, n}}, std::nullopt};
  if (then_pull) push.then_pull = PullRequestMsg{clock + 1, {}, 100, {RowsRequest{kFuzzTableKey, ids}}};
  Frame frame(ids.size() * (sizeof(uint64_t) + kFuzzTableDim * sizeof(float)));
  std::memcpy(frame.data(), ids.data(), ids.size() * sizeof(uint64_t));
  for (size_t i = 0; i < ids.size() * kFuzzTableDim; ++i) {
    std::memcpy(frame.data() + ids.size() * sizeof(uint64_t) + i * sizeof(float), &grad, sizeof(float));
  }
  return Message{HeaderFrame(Envelope{kProtocolVersion, static_cast<uint64_t>(clock) + 50, sender, push}), frame};
}

// A push of slice `key` (all `grad`) compressed as `spec` says, or of
// table rows in 16 bits: the frames the server decodes before its store.
Message CompressedPushMessage(uint32_t sender, int64_t clock, uint32_t key, const char* spec, float grad = 1.0f) {
  static const std::vector<uint64_t> length = SliceLengths();
  const std::vector<float> values(length[key], grad);
  std::string bytes;
  Compressor::Create(*CompressionSpec::Parse(spec))->Encode(values, 7, &bytes);
  SliceData slice{key, length[key], static_cast<uint64_t>(clock), 0, /*compressed=*/true};
  return Message{HeaderFrame(Envelope{kProtocolVersion, 60, sender, PushRequestMsg{clock, {slice}, std::nullopt}}),
                 Frame(bytes.begin(), bytes.end())};
}

Message CompressedRowPushMessage(uint32_t sender, int64_t clock, const std::vector<uint64_t>& ids) {
  const std::vector<float> values(ids.size() * kFuzzTableDim, 0.5f);
  const std::string bytes =
      RowsFrame(ids, /*delta_ids=*/true, values, *Compressor::Create({.kind = CompressionKind::kBf16}));
  const auto n = static_cast<uint32_t>(ids.size());
  SliceData slice{kFuzzTableKey, uint64_t{n} * kFuzzTableDim, 0, n, /*compressed=*/true};
  return Message{HeaderFrame(Envelope{kProtocolVersion, 61, sender, PushRequestMsg{clock, {slice}, std::nullopt}}),
                 Frame(bytes.begin(), bytes.end())};
}

void WriteCompressedSeeds(const std::filesystem::path& dir) {
  std::vector<Message> messages = {CompressedPushMessage(2, 0, 1, "topk:0.25"), CompressedPushMessage(3, 0, 1, "bf16"),
                                   CompressedPushMessage(2, 1, 2, "randomk:0.5"),
                                   CompressedPushMessage(3, 1, 3, "onebit", -2.0f),
                                   CompressedRowPushMessage(2, 0, {7, 9})};
  // Refused: a count that is not the slice's, an index past the end, a NaN scale.
  Message wrong_count = CompressedPushMessage(2, 2, 1, "fp16");
  wrong_count[1].resize(wrong_count[1].size() - 2);
  Message past_end = CompressedPushMessage(2, 2, 1, "topk:0.1");
  const uint32_t past = 1000;
  std::memcpy(past_end[1].data() + kCompressionHeaderBytes + 8, &past, sizeof(past));
  Message nan_scale = CompressedPushMessage(2, 2, 1, "onebit");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_scale[1].data() + kCompressionHeaderBytes, &nan, sizeof(nan));
  for (Message* m : {&wrong_count, &past_end, &nan_scale}) messages.push_back(*m);
  for (int mode = 0; mode < 3; ++mode) {
    Write(dir / ("compressed-mode" + std::to_string(mode)),
          JoinMessages(messages, static_cast<uint8_t>(1 | (mode << 1))));
  }
}

void WritePushSeeds(const std::filesystem::path& dir) {
  WriteCompressedSeeds(dir);
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  // Two steps of both workers (senders 2 and 3 are ranks 0 and 1), then pulls.
  const std::vector<Message> steps = {PushMessage(2, 0, all, false), PushMessage(3, 0, all, true),
                                      PullMessage(2, 1, all), PushMessage(2, 1, {1, 3}, true),
                                      PushMessage(3, 1, all, false), PullMessage(3, 2, {0, 3}),
                                      // The table: both workers' rows of a step (one with none), pulls that admit rows.
                                      RowPushMessage(2, 0, {7, 1ULL << 40}, true), RowPushMessage(3, 0, {}, true),
                                      RowPushMessage(2, 1, {7}, true), RowPushMessage(3, 1, {7, 9}, false)};
  // Refused: wrong length, unknown key, NaN, one payload frame short, repeated key.
  Message short_frame = PushMessage(2, 0, {1}, false);
  short_frame[1].resize(short_frame[1].size() - sizeof(float));
  Message missing = PushMessage(2, 0, {0, 1}, false);
  missing.pop_back();
  std::vector<Message> refused = {
      short_frame,
      Message{HeaderFrame(Envelope{kProtocolVersion, 7, 2, PushRequestMsg{0, {{9, 3, 0}}, std::nullopt}}),
              FloatFrame(3, 1.0f)},
      PushMessage(2, 0, {2}, false, std::numeric_limits<float>::quiet_NaN()),
      missing,
      Message{HeaderFrame(Envelope{kProtocolVersion, 8, 2, PushRequestMsg{0, {{0, 3, 0}, {0, 3, 0}}, std::nullopt}}),
              FloatFrame(3, 1.0f), FloatFrame(3, 1.0f)},
      PullMessage(2, -1, {0}),
      RowPushMessage(2, 0, {5}, false, std::numeric_limits<float>::quiet_NaN()),
  };
  // Rows: a frame a float short.
  Message short_rows = RowPushMessage(2, 0, {5, 6}, false);
  short_rows[1].resize(short_rows[1].size() - sizeof(float));
  refused.push_back(short_rows);
  for (int mode = 0; mode < 3; ++mode) {
    for (int opt = 0; opt < 5; ++opt) {
      const auto first = static_cast<uint8_t>(1 | (mode << 1) | (opt << 3));
      Write(dir / ("steps-mode" + std::to_string(mode) + "-opt" + std::to_string(opt)), JoinMessages(steps, first));
    }
    Write(dir / ("refused-mode" + std::to_string(mode)), JoinMessages(refused, static_cast<uint8_t>(1 | (mode << 1))));
  }
}

// The ring a client's channel wrote `messages` into, as shm_fuzzer reads it.
std::string RingSeed(const std::vector<std::pair<Envelope, std::vector<size_t>>>& messages) {
  auto server = ShmChannel::Create(kShmMinRingBytes);
  const ShmFds f = (*server)->fds();
  auto client = ShmChannel::Adopt(ShmFds{dup(f.memfd), dup(f.to_server), dup(f.to_client)}, (*server)->ring_bytes());
  uint64_t write_pos = 0;
  for (const auto& [env, sizes] : messages) {
    std::vector<zmq::message_t> payloads;
    for (size_t n : sizes) {
      const Frame floats = FloatFrame(n, 1.5f);
      payloads.emplace_back(floats.data(), floats.size());
    }
    std::vector<uint64_t> bytes;
    for (size_t n : sizes) bytes.push_back(n * sizeof(float));
    write_pos += ShmRecordBytes(EncodeEnvelope(env).size() * sizeof(capnp::word), bytes);
    (void)(*client)->Send(env, std::move(payloads));
  }
  const absl::Span<const uint8_t> ring = (*server)->incoming_ring();
  std::string out(reinterpret_cast<const char*>(&write_pos), sizeof(write_pos));
  out.append(reinterpret_cast<const char*>(ring.data()), write_pos);
  return out;
}

void WriteShmSeeds(const std::filesystem::path& dir) {
  PullRequestMsg pull;
  pull.keys = {0, 1};
  const PushRequestMsg push{3, {SliceData{0, 12, 0}, SliceData{1, 3, 0}}, pull};
  Write(dir / "push-then-pull", RingSeed({{Envelope{kProtocolVersion, 1, 2, push}, {12, 3}}}));
  Write(dir / "three-messages", RingSeed({{Envelope{kProtocolVersion, 1, 2, StatsRequestMsg{}}, {}},
                                          {Envelope{kProtocolVersion, 2, 2, push}, {12, 0}},
                                          {Envelope{kProtocolVersion, 3, 2, pull}, {}}}));
  Write(dir / "large-payload", RingSeed({{Envelope{kProtocolVersion, 4, 2, push}, {4000, 3}}}));
}

}  // namespace
}  // namespace ps::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out(argv[1]);
  std::filesystem::create_directories(out / "codec");
  std::filesystem::create_directories(out / "push");
  std::filesystem::create_directories(out / "shm");
  ps::fuzz::WriteCodecSeeds(out / "codec");
  ps::fuzz::WritePushSeeds(out / "push");
  ps::fuzz::WriteShmSeeds(out / "shm");
  std::printf("seeds written under %s\n", argv[1]);
  return 0;
}
