#include "worker/client/delta_pulls.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/compress/compressor.h"

namespace ps {

DeltaPulls::DeltaPulls(const ModelSpec& model, const PartitionMap& map) : slices_(map.slices().size()) {
  for (const Slice& slice : map.slices()) {
    if (!slice.table && model.TensorCompression(slice.tensor).delta_pull())
      slices_[slice.key] = std::make_unique<Held>();
  }
}

uint64_t DeltaPulls::Ask(uint32_t key) {
  Held& held = *slices_[key];
  absl::MutexLock lock(&held.mu);
  return held.version;
}

absl::Status DeltaPulls::Deliver(const SliceData& meta, absl::string_view payload, absl::Span<float> out) {
  Held& held = *slices_[meta.key];
  absl::MutexLock lock(&held.mu);
  if (meta.base == 0) {  // whole: float32 values (the reply's sizes were checked)
    held.values.resize(out.size());
    std::memcpy(held.values.data(), payload.data(), out.size() * sizeof(float));
  } else {
    if (meta.base != held.version || held.values.size() != out.size()) {
      if (meta.version != held.version) {
        return absl::DataLossError(absl::StrCat("delta pull of slice ", meta.key, ": a frame from version ", meta.base,
                                                " to ", meta.version, ", and this worker holds version ", held.version,
                                                " (replies of one slice out of order)"));
      }
      std::memcpy(out.data(), held.values.data(), out.size() * sizeof(float));  // this frame's values, held already
      return absl::OkStatus();
    }
    std::vector<float> change(out.size());
    if (absl::Status s = DecodeFrame(payload, absl::MakeSpan(change)); !s.ok()) {
      return absl::DataLossError(absl::StrCat("delta pull of slice ", meta.key, ": ", s.message()));
    }
    for (size_t i = 0; i < change.size(); ++i) held.values[i] += change[i];
  }
  held.version = meta.version;
  std::memcpy(out.data(), held.values.data(), out.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace ps
