// libFuzzer target for what a server does with a received message: decode the
// header frame (common/wire/codec.h), refuse another protocol version, turn the
// payload frames into float spans as server/server.cc does, and hand a push
// (with or without its then-pull) or a pull to a SliceStore
// (server/store/slice_store.h) that holds a small model of four slices and a table. Each input
// gets a fresh store; its first byte picks the consistency mode and the
// optimizer, so that sync sums, ssp clocks and every update rule are reached.
// Beyond not crashing, leaking or reading out of bounds, the store must keep
// its contract: a refused push changes no value, version or counter, and
// refusals carry only the codes slice_store.h documents. A broken contract
// aborts with a line saying which. Compressed frames (common/wire/wire_frames.h)
// are decoded first, as the server does: a frame refused there is
// kInvalidArgument and never reaches the store.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "common/wire/wire_frames.h"
#include "server/store/slice_store.h"
#include "tests/fuzz/fuzz_frames.h"
#include "tests/fuzz/fuzz_model.h"

namespace ps::fuzz {
namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "push_fuzzer: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

// Every value, version and the counters: what a refused push must not change.
// (A table shard's rows show in its counters: rows pushed, created, dropped.)
struct Snapshot {
  std::vector<std::vector<float>> values;
  std::vector<uint64_t> versions;
  uint64_t pushes = 0, updates = 0;
  std::vector<TableStatsMsg> tables;

  static Snapshot Of(const SliceStore& store, const std::vector<Slice>& slices) {
    Snapshot s;
    for (const Slice& slice : slices) {
      absl::Span<const float> v = store.Values(slice.key);
      s.values.emplace_back(v.begin(), v.end());
      s.versions.push_back(store.Version(slice.key));
    }
    s.pushes = store.stats().pushes_applied;
    s.updates = store.stats().updates_applied;
    s.tables = store.TableStats();
    return s;
  }

  // Bitwise, so that NaN compares equal to itself.
  bool SameAs(const Snapshot& o) const {
    if (versions != o.versions || pushes != o.pushes || updates != o.updates || tables != o.tables) return false;
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].size() != o.values[i].size() ||
          (!values[i].empty() &&  // (a table shard's are: no pointer to compare)
           std::memcmp(values[i].data(), o.values[i].data(), values[i].size() * sizeof(float)) != 0)) {
        return false;
      }
    }
    return true;
  }
};

bool DocumentedPushRefusal(absl::StatusCode code) {
  return code == absl::StatusCode::kFailedPrecondition || code == absl::StatusCode::kAlreadyExists ||
         code == absl::StatusCode::kNotFound || code == absl::StatusCode::kInvalidArgument;
}

bool DocumentedPullRefusal(absl::StatusCode code) {
  return code == absl::StatusCode::kNotFound || code == absl::StatusCode::kInvalidArgument;
}

// What a server reads of a pull it may answer (rows of a table shard are
// created as they are read).
void ReadPull(SliceStore& store, const PullRequestMsg& pull) {
  if (!store.PullReady(pull)) {
    (void)store.DescribeWait(pull);
    return;
  }
  volatile float sink = 0;
  for (uint32_t key : pull.keys) {
    for (float v : store.Values(key)) sink = sink + v;
    (void)store.Version(key);
  }
  for (const RowsRequest& rows : pull.rows) {
    TableShard* table = store.Table(rows.key);
    std::vector<float> out(rows.ids.size() * table->dim());
    table->Read(rows.ids, absl::MakeSpan(out));
    for (float v : out) sink = sink + v;
  }
}

void CheckPull(SliceStore& store, const PullRequestMsg& pull) {
  const absl::Status s = store.CheckPull(pull);
  if (!s.ok()) {
    if (!DocumentedPullRefusal(s.code())) Fail("pull refused with an undocumented code", s);
    return;
  }
  ReadPull(store, pull);
}

void Push(SliceStore& store, const FuzzModel& model, int worker, const PushRequestMsg& push, const Message& message) {
  if (push.then_pull.has_value()) {
    const absl::Status s = store.CheckPull(*push.then_pull);
    if (!s.ok()) {
      if (!DocumentedPullRefusal(s.code())) Fail("then-pull refused with an undocumented code", s);
      return;
    }
  }
  std::vector<absl::Span<const float>> grads;
  std::vector<std::vector<float>> decoded(message.size());
  for (size_t i = 1; i < message.size(); ++i) {
    const Frame& frame = message[i];
    if (i - 1 < push.slices.size() && push.slices[i - 1].compressed) {
      // As the server: the declared sizes checked against the slice first.
      absl::Status s = store.CheckDeclared(push.slices[i - 1]);
      if (s.ok()) {
        s = DecodePayload(push.slices[i - 1],
                          absl::string_view(reinterpret_cast<const char*>(frame.data()), frame.size()), &decoded[i]);
      }
      if (!s.ok()) {
        if (s.code() != absl::StatusCode::kInvalidArgument && s.code() != absl::StatusCode::kNotFound) {
          Fail("a compressed frame refused with another code", s);
        }
        return;
      }
      grads.emplace_back(decoded[i]);
      continue;
    }
    if (frame.size() % sizeof(float) != 0) return;  // the server refuses it before the store
    // A Frame's buffer comes from operator new: aligned for float, as the
    // server's realigned copy would be.
    grads.emplace_back(reinterpret_cast<const float*>(frame.data()), frame.size() / sizeof(float));
  }
  const Snapshot before = Snapshot::Of(store, model.slices);
  const absl::Status s = store.Push(worker, push, grads);
  if (!s.ok()) {
    if (!DocumentedPushRefusal(s.code())) Fail("push refused with an undocumented code", s);
    if (!before.SameAs(Snapshot::Of(store, model.slices))) Fail("a refused push changed the store", s);
    return;
  }
  if (push.then_pull.has_value()) ReadPull(store, *push.then_pull);
}

void Serve(SliceStore& store, const FuzzModel& model, const Message& message) {
  if (message.empty()) return;
  absl::StatusOr<Envelope> env = DecodeEnvelope(absl::MakeConstSpan(message[0]));
  if (!env.ok() || env->version != kProtocolVersion) return;
  // The server maps a registered sender to its rank; any rank of the job will do.
  const int worker = static_cast<int>(env->sender % kFuzzWorkers);
  if (const auto* push = std::get_if<PushRequestMsg>(&env->body)) {
    Push(store, model, worker, *push, message);
  } else if (const auto* pull = std::get_if<PullRequestMsg>(&env->body)) {
    CheckPull(store, *pull);
  }
}

}  // namespace
}  // namespace ps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ps::fuzz;
  if (size == 0) return 0;
  // One thread: the caller runs every ParallelFor iteration, so runs replay.
  static ps::ThreadPool* pool = new ps::ThreadPool(1);
  const absl::StatusOr<FuzzModel> model = MakeFuzzModel(data[0]);
  if (!model.ok()) Fail("the fuzz model does not place", model.status());
  ps::SliceStore store(pool, /*allow_nonfinite=*/false, /*max_bytes=*/1 << 20);
  if (absl::Status s = store.Create(model->spec, model->slices, kFuzzWorkers); !s.ok()) {
    Fail("the fuzz model is refused", s);
  }
  for (const Message& message : SplitMessages(data, size)) Serve(store, *model, message);
  return 0;
}
