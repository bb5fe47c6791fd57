#include "server/store/delta_pull.h"

#include "glog/logging.h"

namespace ps {

DeltaReply PullDelta(DeltaPull& state, uint64_t version, absl::Span<const float> values, uint64_t have,
                     const CompressionSpec& spec) {
  if (state.ref.size() != values.size()) {  // new: the values as they are
    state = DeltaPull{std::vector<float>(values.begin(), values.end()), version, 0, {}};
  } else if (state.version != version) {
    std::vector<float> change(values.size());
    for (size_t i = 0; i < values.size(); ++i) change[i] = values[i] - state.ref[i];
    state.frame.clear();
    Compressor::Create(spec.AtStep(static_cast<int64_t>(version)))->Encode(change, version, &state.frame);
    const absl::Status s = DecodeFrame(state.frame, absl::MakeSpan(change));
    CHECK(s.ok()) << "a frame this server encoded does not decode: " << s;
    for (size_t i = 0; i < values.size(); ++i) state.ref[i] += change[i];
    state.base = state.version;
    state.version = version;
  }
  if (have != 0 && have == state.base) return DeltaReply{state.base, &state.frame, {}};
  return DeltaReply{0, nullptr, state.ref};
}

}  // namespace ps
