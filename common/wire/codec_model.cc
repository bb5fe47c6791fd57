// The model spec on the wire (schemas/ps.capnp ModelSpec): its tensors,
// tables, optimizer, consistency, placement and compression.
#include <algorithm>

#include "common/wire/codec.h"
#include "common/wire/codec_internal.h"

namespace ps::codec_internal {
namespace {

// A tensor's or a table's initializer: the same four fields in both structs.
template <typename Builder>
void PutInit(const Initializer& init, Builder out) {
  out.setInitKind(static_cast<wire::InitKind>(init.kind));
  out.setInitA(init.a);
  out.setInitB(init.b);
  out.setInitSeed(init.seed);
}

void PutCompression(const CompressionSpec& in, wire::Compression::Builder out) {
  out.setKind(static_cast<uint8_t>(in.kind));
  out.setRatio(in.ratio);
  out.setPull(static_cast<uint8_t>(in.pull));
  out.setWarmup(in.warmup);
  out.setRawIds(in.raw_ids);
}

void Put(const TensorSpec& in, wire::TensorSpec::Builder out) {
  out.setName(Txt(in.name));
  auto shape = out.initShape(in.shape.size());
  for (size_t i = 0; i < in.shape.size(); ++i) shape.set(i, in.shape[i]);
  PutInit(in.init, out);
  out.setStage(in.stage);
  out.setBuffer(in.buffer);
  out.setHasCompression(in.compression.has_value());
  if (in.compression.has_value()) PutCompression(*in.compression, out.initCompression());
}

void Put(const OptimizerConfig& in, wire::OptimizerConfig::Builder opt) {
  opt.setKind(static_cast<wire::OptimizerKind>(in.kind));
  opt.setLearningRate(in.learning_rate);
  opt.setMomentum(in.momentum);
  opt.setNesterov(in.nesterov);
  opt.setBeta1(in.beta1);
  opt.setBeta2(in.beta2);
  opt.setEpsilon(in.epsilon);
  opt.setWeightDecay(in.weight_decay);
  opt.setLrSchedule(static_cast<wire::LrSchedule>(in.lr_schedule));
  opt.setDecaySteps(in.decay_steps);
  opt.setMinLrRatio(in.min_lr_ratio);
  opt.setL1(in.l1);
  opt.setL2(in.l2);
  opt.setFtrlBeta(in.ftrl_beta);
}

void Put(const TableSpec& in, wire::TableSpec::Builder out) {
  out.setName(Txt(in.name));
  out.setDim(static_cast<uint32_t>(in.dim));
  PutInit(in.init, out);
  out.setHasOptimizer(in.optimizer.has_value());
  if (in.optimizer.has_value()) Put(*in.optimizer, out.initOptimizer());
  out.setAdmitAfter(in.admit_after);
  out.setExpireAfterSteps(in.expire_after_steps);
  out.setHasConsistency(in.consistency.has_value());
  if (in.consistency.has_value()) {
    out.setConsistency(static_cast<wire::ConsistencyMode>(in.consistency->mode));
    out.setStaleness(in.consistency->staleness);
  }
  out.setHasCompression(in.compression.has_value());
  if (in.compression.has_value()) PutCompression(*in.compression, out.initCompression());
}

template <typename Reader>
Initializer GetInit(Reader in) {
  return Initializer{CheckedEnum(in.getInitKind(), InitKind::kHe, "initializer kind"), in.getInitA(), in.getInitB(),
                     in.getInitSeed()};
}

// ModelSpec::Validate refuses kinds it does not know.
CompressionSpec GetCompression(wire::Compression::Reader in) {
  return CompressionSpec{static_cast<CompressionKind>(in.getKind()), in.getRatio(),
                         static_cast<CompressionKind>(in.getPull()), in.getWarmup(), in.getRawIds()};
}

TensorSpec Get(wire::TensorSpec::Reader in) {
  TensorSpec out;
  out.name = Str(in.getName());
  for (int64_t d : Capped(in.getShape(), kMaxShapeRank, "shape dimensions")) out.shape.push_back(d);
  out.init = GetInit(in);
  out.stage = in.getStage();
  out.buffer = in.getBuffer();
  if (in.getHasCompression()) out.compression = GetCompression(in.getCompression());
  return out;
}

OptimizerConfig Get(wire::OptimizerConfig::Reader opt) {
  OptimizerConfig out;
  out.kind = CheckedEnum(opt.getKind(), OptimizerKind::kFtrl, "optimizer kind");
  out.learning_rate = opt.getLearningRate();
  out.momentum = opt.getMomentum();
  out.nesterov = opt.getNesterov();
  out.beta1 = opt.getBeta1();
  out.beta2 = opt.getBeta2();
  out.epsilon = opt.getEpsilon();
  out.weight_decay = opt.getWeightDecay();
  out.lr_schedule = CheckedEnum(opt.getLrSchedule(), LrSchedule::kCosine, "lr schedule");
  out.decay_steps = opt.getDecaySteps();
  out.min_lr_ratio = opt.getMinLrRatio();
  out.l1 = opt.getL1();
  out.l2 = opt.getL2();
  out.ftrl_beta = opt.getFtrlBeta();
  return out;
}

TableSpec Get(wire::TableSpec::Reader in) {
  TableSpec out;
  out.name = Str(in.getName());
  // Past int32 saturates; Validate refuses anything over kMaxTableDim.
  out.dim = static_cast<int32_t>(std::min<uint32_t>(in.getDim(), 0x7fffffffu));
  out.init = GetInit(in);
  if (in.getHasOptimizer()) out.optimizer = Get(in.getOptimizer());
  out.admit_after = in.getAdmitAfter();
  out.expire_after_steps = in.getExpireAfterSteps();
  if (in.getHasConsistency()) {
    out.consistency = Consistency{CheckedEnum(in.getConsistency(), ConsistencyMode::kSsp, "table consistency mode"),
                                  in.getStaleness()};
  }
  if (in.getHasCompression()) out.compression = GetCompression(in.getCompression());
  return out;
}

}  // namespace

void Put(const ModelSpec& in, wire::ModelSpec::Builder out) {
  auto tensors = out.initTensors(in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) Put(in.tensors[i], tensors[i]);
  Put(in.optimizer, out.initOptimizer());
  auto tables = out.initTables(in.tables.size());
  for (size_t i = 0; i < in.tables.size(); ++i) Put(in.tables[i], tables[i]);
  out.setConsistency(static_cast<wire::ConsistencyMode>(in.consistency.mode));
  out.setStaleness(in.consistency.staleness);
  out.setStages(in.stages);
  out.setPlacementRule(static_cast<wire::PlacementRule>(in.placement.rule));
  out.setSliceBytes(in.placement.slice_bytes);
  out.setTableShards(in.placement.table_shards);
  PutCompression(in.compression, out.initCompression());
  out.setCompressMinBytes(in.compress_min_bytes);
  auto ranks = out.initExplicitRanks(in.placement.explicit_ranks.size());
  size_t i = 0;
  for (const auto& [name, rank] : in.placement.explicit_ranks) {
    ranks[i].setTensor(Txt(name));
    ranks[i].setServer(rank);
    ++i;
  }
}

ModelSpec Get(wire::ModelSpec::Reader in) {
  ModelSpec out;
  for (auto t : Capped(in.getTensors(), kMaxTensorsPerModel, "tensors")) out.tensors.push_back(Get(t));
  out.optimizer = Get(in.getOptimizer());
  for (auto t : Capped(in.getTables(), kMaxTensorsPerModel, "tables")) out.tables.push_back(Get(t));
  out.consistency.mode = CheckedEnum(in.getConsistency(), ConsistencyMode::kSsp, "consistency mode");
  out.consistency.staleness = in.getStaleness();
  out.stages = in.getStages() == 0 ? 1 : in.getStages();  // 0: a peer or file from before stages
  out.placement.rule = CheckedEnum(in.getPlacementRule(), PlacementRule::kLayer, "placement rule");
  out.placement.slice_bytes = in.getSliceBytes();
  out.placement.table_shards = in.getTableShards();
  out.compression = GetCompression(in.getCompression());
  out.compress_min_bytes = in.getCompressMinBytes();
  for (auto e : Capped(in.getExplicitRanks(), kMaxTensorsPerModel, "explicit placements")) {
    out.placement.explicit_ranks[Str(e.getTensor())] = e.getServer();
  }
  return out;
}

}  // namespace ps::codec_internal
