#include "server/store/step_forwarding.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

constexpr size_t kWorkerBytes = sizeof(int32_t);
constexpr size_t kSeqBytes = 2 * sizeof(int32_t) + sizeof(uint64_t);

}  // namespace

void AppendStep(SliceStore::CompletedStep step, const std::vector<OriginSeq>& seqs, PushRequestMsg* push,
                std::vector<zmq::message_t>* frames) {
  push->slices.push_back(SliceData{step.key, step.sum.size(), step.step, static_cast<uint32_t>(step.workers.size())});
  auto* sum = new std::vector<float>(std::move(step.sum));  // freed by the frame once sent
  frames->emplace_back(
      sum->data(), sum->size() * sizeof(float),
      [](void*, void* owner) { delete static_cast<std::vector<float>*>(owner); }, sum);
  zmq::message_t& record = frames->emplace_back(step.workers.size() * kWorkerBytes + seqs.size() * kSeqBytes);
  auto* out = static_cast<char*>(record.data());
  for (int32_t w : step.workers) {
    std::memcpy(out, &w, kWorkerBytes);
    out += kWorkerBytes;
  }
  for (const OriginSeq& s : seqs) {
    std::memcpy(out, &s.origin, sizeof(int32_t));
    std::memcpy(out + sizeof(int32_t), &s.worker, sizeof(int32_t));
    std::memcpy(out + 2 * sizeof(int32_t), &s.last_seq, sizeof(uint64_t));
    out += kSeqBytes;
  }
}

absl::StatusOr<std::vector<ForwardedStep>> DecodeSteps(const PushRequestMsg& push,
                                                       const std::vector<zmq::message_t>& frames) {
  if (frames.size() != 2 * push.slices.size()) {
    return absl::InvalidArgumentError(absl::StrCat("forwarded steps of ", push.slices.size(), " slices in ",
                                                   frames.size(), " payload frames (two a slice)"));
  }
  std::vector<ForwardedStep> out;
  for (size_t i = 0; i < push.slices.size(); ++i) {
    const SliceData& meta = push.slices[i];
    const zmq::message_t& sum = frames[2 * i];
    const zmq::message_t& record = frames[2 * i + 1];
    const uint64_t workers_bytes = uint64_t{meta.rows} * kWorkerBytes;
    if (sum.size() != meta.length * sizeof(float) || meta.length > sum.size() || record.size() < workers_bytes ||
        (record.size() - workers_bytes) % kSeqBytes != 0) {
      return absl::InvalidArgumentError(absl::StrCat("forwarded step ", meta.version, " of slice ", meta.key, ": ",
                                                     sum.size(), " bytes for a sum of ", meta.length, " floats and ",
                                                     record.size(), " for the record of ", meta.rows, " workers"));
    }
    ForwardedStep& f = out.emplace_back();
    f.step.key = meta.key;
    f.step.step = meta.version;
    f.step.sum.resize(meta.length);
    std::memcpy(f.step.sum.data(), sum.data(), sum.size());
    const auto* in = static_cast<const char*>(record.data());
    f.step.workers.resize(meta.rows);
    std::memcpy(f.step.workers.data(), in, workers_bytes);
    in += workers_bytes;
    f.seqs.resize((record.size() - workers_bytes) / kSeqBytes);
    for (OriginSeq& s : f.seqs) {
      std::memcpy(&s.origin, in, sizeof(int32_t));
      std::memcpy(&s.worker, in + sizeof(int32_t), sizeof(int32_t));
      std::memcpy(&s.last_seq, in + 2 * sizeof(int32_t), sizeof(uint64_t));
      in += kSeqBytes;
    }
  }
  return out;
}

}  // namespace ps
