#include "common/wire/codec.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "capnp/any.h"
#include "capnp/message.h"
#include "capnp/serialize.h"
#include "common/wire/codec_internal.h"
#include "common/wire/id_coding.h"
#include "kj/exception.h"
#include "schemas/ps.capnp.h"

namespace ps {
namespace {

using codec_internal::BadEnum;
using codec_internal::Capped;
using codec_internal::CheckedEnum;
using codec_internal::Get;
using codec_internal::Malformed;
using codec_internal::Put;
using codec_internal::Str;
using codec_internal::TooLong;
using codec_internal::Txt;

// A slice's copies (ClusterView.copies, CreateSlicesRequest.copies): per
// slice, the servers holding one, primary first.
template <typename Builder>
void PutCopies(const std::vector<std::vector<int32_t>>& copies, Builder out) {
  for (size_t i = 0; i < copies.size(); ++i) {
    auto servers = out.init(i, copies[i].size());
    for (size_t j = 0; j < copies[i].size(); ++j) servers.set(j, copies[i][j]);
  }
}
template <typename Reader>
std::vector<std::vector<int32_t>> GetCopies(Reader in) {
  std::vector<std::vector<int32_t>> copies;
  for (auto servers : Capped(in, kMaxSlicesPerMessage, "slices' copies")) {
    std::vector<int32_t>& held = copies.emplace_back();
    for (int32_t server : Capped(servers, kMaxServersPerSlice, "copies of a slice")) held.push_back(server);
  }
  return copies;
}

// ---- encoding -------------------------------------------------------------

void Put(const std::vector<Slice>& in, capnp::List<wire::Slice>::Builder out) {
  for (size_t i = 0; i < in.size(); ++i) {
    out[i].setKey(in[i].key);
    out[i].setTensor(in[i].tensor);
    out[i].setOffset(in[i].offset);
    out[i].setLength(in[i].length);
    out[i].setServer(in[i].server);
    out[i].setTable(in[i].table);
  }
}

void Put(const std::vector<SliceData>& in, capnp::List<wire::SliceData>::Builder out) {
  for (size_t i = 0; i < in.size(); ++i) {
    out[i].setKey(in[i].key);
    out[i].setLength(in[i].length);
    out[i].setVersion(in[i].version);
    out[i].setRows(in[i].rows);
    out[i].setCompressed(in[i].compressed);
    out[i].setBase(in[i].base);
  }
}

void PutTexts(const std::vector<std::string>& in, capnp::List<capnp::Text>::Builder out) {
  for (size_t i = 0; i < in.size(); ++i) out.set(static_cast<unsigned>(i), Txt(in[i]));
}

std::vector<std::string> GetTexts(capnp::List<capnp::Text>::Reader in) {
  std::vector<std::string> out;
  out.reserve(in.size());
  for (auto t : in) out.push_back(Str(t));
  return out;
}

template <typename T>
void PutList(const std::vector<T>& in, typename capnp::List<T>::Builder out) {
  for (size_t i = 0; i < in.size(); ++i) out.set(i, in[i]);
}

void PutParts(const std::vector<ServingPart>& in, capnp::List<wire::ServingPart>::Builder out) {
  for (size_t i = 0; i < in.size(); ++i) {
    auto p = out[i];
    p.setKey(in[i].key);
    p.setVersion(in[i].version);
    p.setCut(in[i].cut);
    p.setValues(in[i].values);
    p.setSnapshot(in[i].snapshot);
    p.setRows(in[i].rows);
    p.setRemoved(in[i].removed);
  }
}

void Put(const NodeInfo& in, wire::NodeInfo::Builder out) {
  out.setNodeId(in.node_id);
  out.setRole(static_cast<wire::Role>(in.role));
  out.setRank(in.rank);
  out.setAddress(Txt(in.address));
  out.setPublicKey(Txt(in.public_key));
}

void Put(const PullRequestMsg& in, wire::PullRequest::Builder out) {
  out.setClock(in.clock);
  PutList<uint32_t>(in.keys, out.initKeys(in.keys.size()));
  out.setTimeoutMs(in.timeout_ms);
  PutList<uint64_t>(in.have, out.initHave(in.have.size()));
  out.setPullId(in.pull_id);
  auto rows = out.initRows(in.rows.size());
  for (size_t i = 0; i < in.rows.size(); ++i) {
    rows[i].setKey(in.rows[i].key);
    const std::vector<uint64_t>& ids = in.rows[i].ids;
    std::string coded;  // where they ascend close together (common/wire/id_coding.h)
    if (in.rows[i].delta_ids && AppendDeltaIds(ids, &coded)) {
      rows[i].setCoded(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(coded.data()), coded.size()));
    } else {
      PutList<uint64_t>(ids, rows[i].initIds(ids.size()));
    }
  }
}

struct BodyEncoder {
  wire::Header::Body::Builder b;

  void operator()(const ErrorMsg& m) {
    auto e = b.initError();
    e.setCode(static_cast<uint32_t>(m.code));
    e.setMessage(Txt(m.message));
    e.setViewEpoch(m.view_epoch);
    e.setPushApplied(m.push_applied);
    e.setPushHeld(m.push_held);
    PutList<uint32_t>(m.slices, e.initSlices(m.slices.size()));
  }
  void operator()(const AckMsg&) { b.initAck(); }
  void operator()(const RegisterRequestMsg& m) {
    auto r = b.initRegisterRequest();
    r.setRole(static_cast<wire::Role>(m.role));
    r.setAddress(Txt(m.address));
    r.setRank(m.rank);
    r.setPublicKey(Txt(m.public_key));
    r.setNodeId(m.node_id);
    r.setRestored(m.restored);
    Put(m.held, r.initHeld(m.held.size()));
    r.setJoin(m.join);
  }
  void operator()(const RegisterReplyMsg& m) {
    auto r = b.initRegisterReply();
    r.setNodeId(m.node_id);
    r.setRank(m.rank);
    r.setIncarnation(m.incarnation);
    r.setReplicas(m.replicas);
  }
  void operator()(const ClusterViewMsg& m) {
    auto v = b.initClusterView();
    v.setNumServers(m.num_servers);
    v.setNumWorkers(m.num_workers);
    auto nodes = v.initNodes(m.nodes.size());
    for (size_t i = 0; i < m.nodes.size(); ++i) Put(m.nodes[i], nodes[i]);
    PutList<uint32_t>(m.dead, v.initDead(m.dead.size()));
    v.setEpoch(m.epoch);
    v.setIncarnation(m.incarnation);
    PutCopies(m.copies, v.initCopies(m.copies.size()));
    v.setBaseEpoch(m.base_epoch);
    PutList<uint32_t>(m.copy_keys, v.initCopyKeys(m.copy_keys.size()));
  }
  void operator()(const DefineModelRequestMsg& m) { Put(m.model, b.initDefineModelRequest().initModel()); }
  void operator()(const DefineModelReplyMsg& m) {
    auto r = b.initDefineModelReply();
    Put(m.model, r.initModel());
    Put(m.slices, r.initSlices(m.slices.size()));
    r.setMapServers(m.map_servers);
  }
  void operator()(const CreateSlicesRequestMsg& m) {
    auto r = b.initCreateSlicesRequest();
    Put(m.model, r.initModel());
    Put(m.slices, r.initSlices(m.slices.size()));
    r.setNumWorkers(m.num_workers);
    PutCopies(m.copies, r.initCopies(m.copies.size()));
  }
  void operator()(const BarrierRequestMsg& m) {
    auto r = b.initBarrierRequest();
    r.setName(Txt(m.name));
    r.setTimeoutMs(m.timeout_ms);
  }
  void operator()(const WorkerDoneMsg&) { b.initWorkerDone(); }
  void operator()(const ShutdownMsg& m) {
    auto r = b.initShutdown();
    r.setReason(Txt(m.reason));
    r.setLeft(m.left);
  }
  void operator()(const PushRequestMsg& m) {
    auto r = b.initPushRequest();
    r.setClock(m.clock);
    Put(m.slices, r.initSlices(m.slices.size()));
    if (m.then_pull.has_value()) Put(*m.then_pull, r.initThenPull());
    r.setSeq(m.seq);
    r.setWantCheckpoint(m.want_checkpoint);
    r.setAssign(m.assign);
    r.setForWorker(m.for_worker);
    r.setOrigin(m.origin);
    r.setViewEpoch(m.view_epoch);
    r.setPulled(m.pulled);
    r.setStepSum(m.step_sum);
  }
  void operator()(const PullRequestMsg& m) { Put(m, b.initPullRequest()); }
  void operator()(const PullReplyMsg& m) {
    auto r = b.initPullReply();
    Put(m.slices, r.initSlices(m.slices.size()));
  }
  void operator()(const StatsRequestMsg&) { b.initStatsRequest(); }
  void operator()(const StatsReplyMsg& m) {
    auto r = b.initStatsReply();
    r.setPushesApplied(m.pushes_applied);
    r.setUpdatesApplied(m.updates_applied);
    r.setPullsServed(m.pulls_served);
    r.setErrorsReplied(m.errors_replied);
    r.setBytesIn(m.bytes_in);
    r.setBytesOut(m.bytes_out);
    PutList<uint64_t>(m.staleness_histogram, r.initStalenessHistogram(m.staleness_histogram.size()));
    r.setStalenessMax(m.staleness_max);
    r.setSlicesHeld(m.slices_held);
    r.setWaitedPullMicros(m.waited_pull_micros);
    PutList<uint32_t>(m.held_keys, r.initHeldKeys(m.held_keys.size()));
    PutList<int64_t>(m.worker_clocks, r.initWorkerClocks(m.worker_clocks.size()));
    r.setMaxVersion(m.max_version);
    r.setSlicesSkipped(m.slices_skipped);
    r.setDuplicatesDropped(m.duplicates_dropped);
    r.setAssignsApplied(m.assigns_applied);
    auto tables = r.initTables(m.tables.size());
    for (size_t i = 0; i < m.tables.size(); ++i) {
      const TableStatsMsg& t = m.tables[i];
      tables[i].setTable(t.table);
      tables[i].setRows(t.rows);
      tables[i].setBytes(t.bytes);
      tables[i].setEvictions(t.evictions);
      tables[i].setAdmissions(t.admissions);
      tables[i].setRejections(t.rejections);
      tables[i].setGradientsDropped(t.gradients_dropped);
      tables[i].setRowsPulled(t.rows_pulled);
      tables[i].setRowsPushed(t.rows_pushed);
      tables[i].setDiskRows(t.disk_rows);
      tables[i].setDiskReads(t.disk_reads);
      tables[i].setDiskWrites(t.disk_writes);
      tables[i].setDiskRefusals(t.disk_refusals);
      tables[i].setExpired(t.expired);
    }
  }
  void operator()(const HeartbeatMsg& m) {
    auto list = b.initHeartbeat().initUnreachable(static_cast<unsigned>(m.unreachable.size()));
    for (size_t i = 0; i < m.unreachable.size(); ++i) {
      list[i].setServer(m.unreachable[i].server);
      list[i].setSilentMs(m.unreachable[i].silent_ms);
      list[i].setHearsOthers(m.unreachable[i].hears_others);
    }
  }
  void operator()(const ShmOfferMsg&) { b.initShmOffer(); }
  void operator()(const AddCopyRequestMsg& m) {
    auto r = b.initAddCopyRequest();
    r.setKey(m.key);
    r.setServer(m.server);
    r.setReleaseEpoch(m.release_epoch);
  }
  void operator()(const DrainRequestMsg& m) { b.initDrainRequest().setServer(m.server); }
  void operator()(const ServingRequestMsg& m) {
    auto r = b.initServingRequest();
    r.setKind(static_cast<wire::ServingKind>(m.kind));
    r.setName(Txt(m.name));
    PutParts(m.held, r.initHeld(m.held.size()));
    r.setTargetStep(m.target_step);
    r.setWaitMs(m.wait_ms);
  }
  void operator()(const ServingReplyMsg& m) {
    auto r = b.initServingReply();
    r.setStep(m.step);
    r.setSyncedAtMs(m.synced_at_ms);
    r.setExact(m.exact);
    r.setSource(Txt(m.source));
    PutList<int64_t>(m.shape, r.initShape(m.shape.size()));
    PutTexts(m.tensors, r.initTensors(m.tensors.size()));
    PutTexts(m.tables, r.initTables(m.tables.size()));
    PutList<uint32_t>(m.table_dims, r.initTableDims(m.table_dims.size()));
    PutParts(m.parts, r.initParts(m.parts.size()));
    r.setJobEnded(m.job_ended);
  }
  void operator()(const SliceCopyMsg& m) {
    auto r = b.initSliceCopy();
    r.setKey(m.key);
    std::vector<int32_t> origins, workers;
    std::vector<uint64_t> seqs;
    for (const OriginSeq& s : m.seqs) {
      origins.push_back(s.origin);
      workers.push_back(s.worker);
      seqs.push_back(s.last_seq);
    }
    PutList<int32_t>(origins, r.initOrigins(origins.size()));
    PutList<int32_t>(workers, r.initWorkers(workers.size()));
    PutList<uint64_t>(seqs, r.initLastSeqs(seqs.size()));
    std::vector<int32_t> pull_workers;
    std::vector<uint64_t> pull_ids;
    for (const CountedPullId& p : m.pulls) {
      pull_workers.push_back(p.worker);
      pull_ids.push_back(p.pull_id);
    }
    PutList<int32_t>(pull_workers, r.initPullWorkers(pull_workers.size()));
    PutList<uint64_t>(pull_ids, r.initPullIds(pull_ids.size()));
    r.setViewEpoch(m.view_epoch);
  }
  void operator()(const ShmGrantMsg& m) {
    auto r = b.initShmGrant();
    r.setSocketName(Txt(m.socket_name));
    r.setToken(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(m.token.data()), m.token.size()));
    r.setRingBytes(m.ring_bytes);
  }
};

// ---- decoding -------------------------------------------------------------

std::vector<Slice> Get(capnp::List<wire::Slice>::Reader in) {
  Capped(in, kMaxSlicesPerMessage, "slices");
  std::vector<Slice> out;
  out.reserve(in.size());
  for (auto s : in) {
    out.push_back(Slice{s.getKey(), s.getTensor(), s.getOffset(), s.getLength(), s.getServer(), s.getTable()});
  }
  return out;
}

std::vector<SliceData> Get(capnp::List<wire::SliceData>::Reader in) {
  Capped(in, kMaxSlicesPerMessage, "slices");
  std::vector<SliceData> out;
  out.reserve(in.size());
  for (auto s : in)
    out.push_back(SliceData{s.getKey(), s.getLength(), s.getVersion(), s.getRows(), s.getCompressed(), s.getBase()});
  return out;
}

template <typename T>
std::vector<T> GetList(typename capnp::List<T>::Reader in) {
  Capped(in, kMaxSlicesPerMessage, "numbers");
  std::vector<T> out;
  out.reserve(in.size());
  for (T v : in) out.push_back(v);
  return out;
}

PullRequestMsg Get(wire::PullRequest::Reader r) {
  PullRequestMsg m{r.getClock(), GetList<uint32_t>(r.getKeys()), r.getTimeoutMs()};
  m.have = GetList<uint64_t>(r.getHave());
  m.pull_id = r.getPullId();
  uint64_t coded_left = kMaxCodedIdsPerMessage;
  for (auto rows : Capped(r.getRows(), kMaxSlicesPerMessage, "row requests")) {
    m.rows.push_back(RowsRequest{rows.getKey(), GetList<uint64_t>(rows.getIds())});
    if (!rows.hasCoded()) continue;
    RowsRequest& coded_rows = m.rows.back();
    const auto coded = rows.getCoded();
    const absl::string_view bytes(reinterpret_cast<const char*>(coded.begin()), coded.size());
    absl::Status s = coded_rows.ids.empty()
                         ? DecodeDeltaIds(bytes, std::min<uint64_t>(kMaxSlicesPerMessage, coded_left), &coded_rows.ids)
                         : absl::InvalidArgumentError("ids given both as a list and coded");
    if (!s.ok()) throw Malformed{absl::StrCat("row request of slice ", rows.getKey(), ": ", s.message())};
    coded_rows.delta_ids = true;
    coded_left -= coded_rows.ids.size();
  }
  return m;
}

NodeInfo Get(wire::NodeInfo::Reader in) {
  return NodeInfo{in.getNodeId(), CheckedEnum(in.getRole(), Role::kWorker, "role"), in.getRank(), Str(in.getAddress()),
                  Str(in.getPublicKey())};
}

StatsReplyMsg Get(wire::StatsReply::Reader r) {
  StatsReplyMsg m;
  m.pushes_applied = r.getPushesApplied();
  m.updates_applied = r.getUpdatesApplied();
  m.pulls_served = r.getPullsServed();
  m.errors_replied = r.getErrorsReplied();
  m.bytes_in = r.getBytesIn();
  m.bytes_out = r.getBytesOut();
  m.staleness_histogram = GetList<uint64_t>(r.getStalenessHistogram());
  m.staleness_max = r.getStalenessMax();
  m.slices_held = r.getSlicesHeld();
  m.waited_pull_micros = r.getWaitedPullMicros();
  m.held_keys = GetList<uint32_t>(r.getHeldKeys());
  m.worker_clocks = GetList<int64_t>(r.getWorkerClocks());
  m.max_version = r.getMaxVersion();
  m.slices_skipped = r.getSlicesSkipped();
  m.duplicates_dropped = r.getDuplicatesDropped();
  m.assigns_applied = r.getAssignsApplied();
  for (auto t : Capped(r.getTables(), kMaxSlicesPerMessage, "table stats")) {
    m.tables.push_back(TableStatsMsg{t.getTable(), t.getRows(), t.getBytes(), t.getEvictions(), t.getAdmissions(),
                                     t.getRejections(), t.getGradientsDropped(), t.getRowsPulled(), t.getRowsPushed(),
                                     t.getDiskRows(), t.getDiskReads(), t.getDiskWrites(), t.getDiskRefusals(),
                                     t.getExpired()});
  }
  return m;
}

ErrorMsg Get(wire::Error::Reader r) {
  const uint32_t code = r.getCode();
  // An error must never read as success: 0 (OK) and codes outside the
  // canonical range arrive as kUnknown.
  return ErrorMsg{code >= 1 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown,
                  Str(r.getMessage()),
                  r.getViewEpoch(),
                  r.getPushApplied(),
                  r.getPushHeld(),
                  GetList<uint32_t>(r.getSlices())};
}

ClusterViewMsg Get(wire::ClusterView::Reader v) {
  ClusterViewMsg m{v.getNumServers(), v.getNumWorkers(), {}};
  for (auto n : Capped(v.getNodes(), kMaxNodesPerView, "nodes")) m.nodes.push_back(Get(n));
  m.dead = GetList<uint32_t>(v.getDead());
  m.epoch = v.getEpoch();
  m.incarnation = v.getIncarnation();
  m.copies = GetCopies(v.getCopies());
  m.base_epoch = v.getBaseEpoch();
  m.copy_keys = GetList<uint32_t>(v.getCopyKeys());
  if (!m.copy_keys.empty() && m.copy_keys.size() != m.copies.size()) {
    throw Malformed{
        absl::StrCat("cluster view changes the copies of ", m.copy_keys.size(), " slices and lists ", m.copies.size())};
  }
  return m;
}

HeartbeatMsg Get(wire::Heartbeat::Reader r) {
  HeartbeatMsg m;
  for (auto u : r.getUnreachable()) {
    m.unreachable.push_back(UnreachableServer{u.getServer(), u.getSilentMs(), u.getHearsOthers()});
  }
  return m;
}

AddCopyRequestMsg Get(wire::AddCopyRequest::Reader r) {
  return AddCopyRequestMsg{r.getKey(), r.getServer(), r.getReleaseEpoch()};
}

DefineModelReplyMsg Get(wire::DefineModelReply::Reader r) {
  return DefineModelReplyMsg{Get(r.getModel()), Get(r.getSlices()), r.getMapServers()};
}

SliceCopyMsg Get(wire::SliceCopy::Reader r) {
  const std::vector<int32_t> origins = GetList<int32_t>(r.getOrigins());
  const std::vector<int32_t> workers = GetList<int32_t>(r.getWorkers());
  const std::vector<uint64_t> seqs = GetList<uint64_t>(r.getLastSeqs());
  if (workers.size() != origins.size() || seqs.size() != origins.size()) {
    throw Malformed{absl::StrCat("slice copy lists ", origins.size(), " origins, ", workers.size(), " workers and ",
                                 seqs.size(), " sequence numbers")};
  }
  const std::vector<int32_t> pull_workers = GetList<int32_t>(r.getPullWorkers());
  const std::vector<uint64_t> pull_ids = GetList<uint64_t>(r.getPullIds());
  if (pull_ids.size() != pull_workers.size()) {
    throw Malformed{absl::StrCat("slice copy lists ", pull_workers.size(), " workers of counted pulls and ",
                                 pull_ids.size(), " pull ids")};
  }
  SliceCopyMsg m{r.getKey(), {}, {}};
  for (size_t i = 0; i < origins.size(); ++i) m.seqs.push_back(OriginSeq{origins[i], workers[i], seqs[i]});
  for (size_t i = 0; i < pull_ids.size(); ++i) m.pulls.push_back(CountedPullId{pull_workers[i], pull_ids[i]});
  m.view_epoch = r.getViewEpoch();
  return m;
}

PushRequestMsg Get(wire::PushRequest::Reader r) {
  PushRequestMsg m{r.getClock(), Get(r.getSlices()), std::nullopt};
  if (r.hasThenPull()) m.then_pull = Get(r.getThenPull());
  m.seq = r.getSeq();
  m.want_checkpoint = r.getWantCheckpoint();
  m.assign = r.getAssign();
  m.for_worker = r.getForWorker();
  m.origin = r.getOrigin();
  m.view_epoch = r.getViewEpoch();
  m.pulled = r.getPulled();
  m.step_sum = r.getStepSum();
  return m;
}

ShmGrantMsg Get(wire::ShmGrant::Reader r) {
  auto token = r.getToken();
  return ShmGrantMsg{Str(r.getSocketName()), std::string(token.begin(), token.end()), r.getRingBytes()};
}

std::vector<ServingPart> Get(capnp::List<wire::ServingPart>::Reader in) {
  std::vector<ServingPart> out;
  out.reserve(in.size());
  for (auto p : in) {
    out.push_back(ServingPart{p.getKey(), p.getVersion(), p.getCut(), p.getValues(), p.getSnapshot(), p.getRows(),
                              p.getRemoved()});
  }
  return out;
}

ServingRequestMsg Get(wire::ServingRequest::Reader r) {
  return ServingRequestMsg{CheckedEnum(r.getKind(), ServingKind::kRound, "serving kind"), Str(r.getName()),
                           Get(r.getHeld()), r.getTargetStep(), r.getWaitMs()};
}

ServingReplyMsg Get(wire::ServingReply::Reader r) {
  return ServingReplyMsg{r.getStep(),
                         r.getSyncedAtMs(),
                         r.getExact(),
                         Str(r.getSource()),
                         GetList<int64_t>(r.getShape()),
                         GetTexts(r.getTensors()),
                         GetTexts(r.getTables()),
                         GetList<uint32_t>(r.getTableDims()),
                         Get(r.getParts()),
                         r.getJobEnded()};
}

Body GetBody(wire::Header::Body::Reader b) {
  using W = wire::Header::Body;
  switch (b.which()) {
    case W::ERROR: return Get(b.getError());
    case W::ACK: return AckMsg{};
    case W::REGISTER_REQUEST: {
      auto r = b.getRegisterRequest();
      return RegisterRequestMsg{CheckedEnum(r.getRole(), Role::kWorker, "role"),
                                Str(r.getAddress()),
                                r.getRank(),
                                Str(r.getPublicKey()),
                                r.getNodeId(),
                                r.getRestored(),
                                Get(r.getHeld()),
                                r.getJoin()};
    }
    case W::REGISTER_REPLY: {
      auto r = b.getRegisterReply();
      return RegisterReplyMsg{r.getNodeId(), r.getRank(), r.getIncarnation(), r.getReplicas()};
    }
    case W::CLUSTER_VIEW: return Get(b.getClusterView());
    case W::DEFINE_MODEL_REQUEST: return DefineModelRequestMsg{Get(b.getDefineModelRequest().getModel())};
    case W::DEFINE_MODEL_REPLY: return Get(b.getDefineModelReply());
    case W::CREATE_SLICES_REQUEST: {
      auto r = b.getCreateSlicesRequest();
      return CreateSlicesRequestMsg{Get(r.getModel()), Get(r.getSlices()), r.getNumWorkers(), GetCopies(r.getCopies())};
    }
    case W::BARRIER_REQUEST:
      return BarrierRequestMsg{Str(b.getBarrierRequest().getName()), b.getBarrierRequest().getTimeoutMs()};
    case W::WORKER_DONE: return WorkerDoneMsg{};
    case W::SHUTDOWN: return ShutdownMsg{Str(b.getShutdown().getReason()), b.getShutdown().getLeft()};
    case W::PUSH_REQUEST: return Get(b.getPushRequest());
    case W::PULL_REQUEST: return Get(b.getPullRequest());
    case W::PULL_REPLY: return PullReplyMsg{Get(b.getPullReply().getSlices())};
    case W::STATS_REQUEST: return StatsRequestMsg{};
    case W::STATS_REPLY: return Get(b.getStatsReply());
    case W::HEARTBEAT: return Get(b.getHeartbeat());
    case W::SHM_OFFER: return ShmOfferMsg{};
    case W::SHM_GRANT: return Get(b.getShmGrant());
    case W::ADD_COPY_REQUEST: return Get(b.getAddCopyRequest());
    case W::SLICE_COPY: return Get(b.getSliceCopy());
    case W::DRAIN_REQUEST: return DrainRequestMsg{b.getDrainRequest().getServer()};
    case W::SERVING_REQUEST: return Get(b.getServingRequest());
    case W::SERVING_REPLY: return Get(b.getServingReply());
  }
  throw BadEnum{"message body", static_cast<uint32_t>(b.which())};
}

}  // namespace

const char* BodyName(const Body& body) {
  static constexpr const char* kNames[] = {"error",
                                           "ack",
                                           "registerRequest",
                                           "registerReply",
                                           "clusterView",
                                           "defineModelRequest",
                                           "defineModelReply",
                                           "createSlicesRequest",
                                           "barrierRequest",
                                           "workerDone",
                                           "shutdown",
                                           "pushRequest",
                                           "pullRequest",
                                           "pullReply",
                                           "statsRequest",
                                           "statsReply",
                                           "heartbeat",
                                           "shmOffer",
                                           "shmGrant",
                                           "addCopyRequest",
                                           "sliceCopy",
                                           "drainRequest",
                                           "servingRequest",
                                           "servingReply"};
  static_assert(std::size(kNames) == std::variant_size_v<Body>);
  return kNames[body.index()];
}

std::string IncarnationName(uint64_t incarnation) { return absl::StrFormat("%016x", incarnation); }

kj::Array<capnp::word> EncodeEnvelope(const Envelope& envelope) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  header.setVersion(envelope.version);
  header.setRequestId(envelope.request_id);
  header.setSender(envelope.sender);
  header.setDurableSeq(envelope.durable_seq);
  header.setIncarnation(envelope.incarnation);
  header.setPriority(envelope.priority);
  std::visit(BodyEncoder{header.initBody()}, envelope.body);
  return capnp::messageToFlatArray(builder);
}

namespace {

// Decodes a frame whose root is `Root` with `get` under the limits of
// codec.h; every Cap'n Proto or range error becomes a Status.
template <typename Root, typename T, typename Getter>
absl::StatusOr<T> DecodeRoot(absl::Span<const uint8_t> bytes, Getter get) {
  if (bytes.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("header frame of ", bytes.size(), " bytes is over the ", kMaxHeaderBytes, "-byte limit"));
  }
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return absl::DataLossError(
        absl::StrCat("header frame of ", bytes.size(), " bytes is not a whole number of 8-byte words"));
  }
  // ZeroMQ gives no alignment guarantee for frame data; Cap'n Proto needs words.
  auto words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  options.traversalLimitInWords =
      std::min<uint64_t>(kMaxHeaderWords, kTraversalPerFrameWord * words.size() + kTraversalSlackWords);
  options.nestingLimit = kMaxHeaderNesting;
  try {
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getRoot<capnp::AnyPointer>().isNull()) {
      return absl::DataLossError("header frame holds no message");
    }
    return get(reader.getRoot<Root>());
  } catch (const kj::Exception& e) {
    return absl::DataLossError(absl::StrCat("malformed header frame: ", e.getDescription().cStr()));
  } catch (const BadEnum& e) {
    return absl::InvalidArgumentError(absl::StrCat("header has unknown ", e.what, " ", e.value));
  } catch (const TooLong& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("header lists ", e.size, " ", e.what, " in one list; at most ", e.max, " allowed"));
  } catch (const Malformed& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed header: ", e.what));
  }
}

}  // namespace

absl::StatusOr<Envelope> DecodeEnvelope(absl::Span<const uint8_t> bytes) {
  return DecodeRoot<wire::Header, Envelope>(bytes, [](wire::Header::Reader header) {
    Envelope out;
    out.version = header.getVersion();
    out.request_id = header.getRequestId();
    out.sender = header.getSender();
    out.durable_seq = header.getDurableSeq();
    out.incarnation = header.getIncarnation();
    out.priority = header.getPriority();
    out.body = GetBody(header.getBody());
    return out;
  });
}

kj::Array<capnp::word> EncodeJobState(const JobState& state) {
  capnp::MallocMessageBuilder builder;
  auto out = builder.initRoot<wire::JobState>();
  out.setIncarnation(state.incarnation);
  out.setEndpoint(Txt(state.endpoint));
  out.setNumServers(state.num_servers);
  out.setNumWorkers(state.num_workers);
  out.setNextNodeId(state.next_node_id);
  out.setViewEpoch(state.view_epoch);
  auto nodes = out.initNodes(state.nodes.size());
  for (size_t i = 0; i < state.nodes.size(); ++i) {
    Put(state.nodes[i].info, nodes[i].initInfo());
    nodes[i].setDone(state.nodes[i].done);
    nodes[i].setAlive(state.nodes[i].alive);
  }
  out.setModelReady(state.model.has_value());
  if (state.model.has_value()) Put(*state.model, out.initModel());
  PutCopies(state.copies, out.initCopies(state.copies.size()));
  out.setReleasing(state.releasing.has_value());
  if (const auto& m = state.releasing; m.has_value()) {
    out.setReleasingKey(m->key);
    out.setReleasingFrom(m->from);
    out.setReleasingTo(m->to);
  }
  out.setHasConfig(state.config.has_value());
  if (const auto& c = state.config; c.has_value()) {
    auto config = out.initConfig();
    config.setReplicas(c->replicas);
    config.setElastic(c->elastic);
    config.setHeartbeatTimeoutMs(c->heartbeat_timeout_ms);
    config.setServerTimeoutMs(c->server_timeout_ms);
    config.setRegisterTimeoutMs(c->register_timeout_ms);
  }
  return capnp::messageToFlatArray(builder);
}

absl::StatusOr<JobState> DecodeJobState(absl::Span<const uint8_t> bytes) {
  return DecodeRoot<wire::JobState, JobState>(bytes, [](wire::JobState::Reader in) {
    JobState out;
    out.incarnation = in.getIncarnation();
    out.endpoint = Str(in.getEndpoint());
    out.num_servers = in.getNumServers();
    out.num_workers = in.getNumWorkers();
    out.next_node_id = in.getNextNodeId();
    out.view_epoch = in.getViewEpoch();
    for (auto n : Capped(in.getNodes(), kMaxNodesPerView, "nodes")) {
      out.nodes.push_back(JobStateNode{Get(n.getInfo()), n.getDone(), n.getAlive()});
    }
    if (in.getModelReady()) out.model = Get(in.getModel());
    out.copies = GetCopies(in.getCopies());
    if (in.getReleasing())
      out.releasing = JobStateMove{in.getReleasingKey(), in.getReleasingFrom(), in.getReleasingTo()};
    if (in.getHasConfig()) {
      auto c = in.getConfig();
      out.config = JobConfig{c.getReplicas(), c.getElastic(), c.getHeartbeatTimeoutMs(), c.getServerTimeoutMs(),
                             c.getRegisterTimeoutMs()};
    }
    return out;
  });
}

namespace {
constexpr absl::string_view kMovedPayload = "type.ps/moved_view_epoch";
constexpr absl::string_view kPushAppliedPayload = "type.ps/moved_push_applied";
constexpr absl::string_view kPushHeldPayload = "type.ps/moved_push_held";
}  // namespace

absl::Status MovedError(absl::string_view message, uint64_t view_epoch, bool push_applied) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kMovedPayload, absl::Cord(absl::StrCat(view_epoch)));
  if (push_applied) s.SetPayload(kPushAppliedPayload, absl::Cord("1"));
  return s;
}

absl::Status MovedHeldError(absl::string_view message, uint64_t view_epoch) {
  absl::Status s = MovedError(message, view_epoch);
  s.SetPayload(kPushHeldPayload, absl::Cord("1"));
  return s;
}

uint64_t MovedEpoch(const absl::Status& status) {
  const auto payload = status.GetPayload(kMovedPayload);
  uint64_t epoch = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &epoch)) return 0;
  return epoch;
}

ErrorMsg ErrorOf(const absl::Status& status) {
  return ErrorMsg{status.code(), std::string(status.message()), MovedEpoch(status),
                  status.GetPayload(kPushAppliedPayload).has_value(), status.GetPayload(kPushHeldPayload).has_value()};
}

}  // namespace ps
