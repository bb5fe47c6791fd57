#include "worker/python/binding/py_convert.h"

#include <pybind11/stl.h>

#include <functional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::python {
namespace {

py::object& ErrorType() {
  static py::object* type = nullptr;
  if (type == nullptr) type = new py::object();
  return *type;
}

// Refuses keys of `d` outside `known`, naming the first.
void CheckKeys(const py::dict& d, const std::set<std::string>& known, const char* what) {
  for (auto item : d) {
    const std::string key = py::str(item.first);
    if (!known.count(key)) {
      Raise(PyExc_ValueError,
            absl::StrCat(what, ": unknown key '", key, "' (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
}

template <typename T>
T Get(const py::dict& d, const char* key, T fallback) {
  return d.contains(key) ? d[key].cast<T>() : fallback;
}

// d[key], or None when absent.
py::object Item(const py::dict& d, const char* key) {
  return d.contains(key) ? py::object(d[key]) : py::object(py::none());
}

Initializer InitFromDict(const py::handle& h) {
  if (h.is_none()) return Initializer::Zeros();
  const py::dict d = h.cast<py::dict>();
  CheckKeys(d, {"kind", "a", "b", "seed"}, "initializer");
  const std::string kind = Get<std::string>(d, "kind", "zeros");
  static const std::pair<const char*, InitKind> kKinds[] = {{"zeros", InitKind::kZeros},
                                                            {"constant", InitKind::kConstant},
                                                            {"uniform", InitKind::kUniform},
                                                            {"normal", InitKind::kNormal},
                                                            {"he", InitKind::kHe}};
  for (const auto& [name, k] : kKinds) {
    if (kind == name) {
      return Initializer{k, Get<float>(d, "a", 0.0f), Get<float>(d, "b", 0.0f), Get<uint64_t>(d, "seed", 0)};
    }
  }
  Raise(PyExc_ValueError, absl::StrCat("initializer kind '", kind, "': use zeros, constant, uniform, normal or he"));
}

OptimizerConfig OptimizerFromDict(const py::dict& d) {
  CheckKeys(d,
            {"kind", "lr", "momentum", "nesterov", "beta1", "beta2", "epsilon", "weight_decay", "lr_schedule",
             "decay_steps", "min_lr_ratio", "l1", "l2", "ftrl_beta"},
            "optimizer");
  OptimizerConfig o;
  if (d.contains("kind")) o.kind = Value(ParseOptimizerKind(d["kind"].cast<std::string>()));
  o.learning_rate = Get<float>(d, "lr", o.learning_rate);
  o.momentum = Get<float>(d, "momentum", o.momentum);
  o.nesterov = Get<bool>(d, "nesterov", o.nesterov);
  o.beta1 = Get<float>(d, "beta1", o.beta1);
  o.beta2 = Get<float>(d, "beta2", o.beta2);
  o.epsilon = Get<float>(d, "epsilon", o.epsilon);
  o.weight_decay = Get<float>(d, "weight_decay", o.weight_decay);
  if (d.contains("lr_schedule")) o.lr_schedule = Value(ParseLrSchedule(d["lr_schedule"].cast<std::string>()));
  o.decay_steps = Get<uint64_t>(d, "decay_steps", o.decay_steps);
  o.min_lr_ratio = Get<float>(d, "min_lr_ratio", o.min_lr_ratio);
  o.l1 = Get<float>(d, "l1", o.l1);
  o.l2 = Get<float>(d, "l2", o.l2);
  o.ftrl_beta = Get<float>(d, "ftrl_beta", o.ftrl_beta);
  return o;
}

// d["compression"] ("topk:0.01", common/compress/compressor.h), if there and not None.
std::optional<CompressionSpec> CompressionFromDict(const py::dict& d, const std::string& who) {
  if (Item(d, "compression").is_none()) return std::nullopt;
  absl::StatusOr<CompressionSpec> c = CompressionSpec::Parse(d["compression"].cast<std::string>());
  if (!c.ok()) Raise(PyExc_ValueError, absl::StrCat(who, ": ", c.status().message()));
  return *c;
}

TensorSpec TensorFromDict(const py::dict& d) {
  CheckKeys(d, {"name", "shape", "init", "buffer", "compression"}, "tensor");
  TensorSpec t{d["name"].cast<std::string>(), d["shape"].cast<std::vector<int64_t>>(), InitFromDict(Item(d, "init"))};
  t.buffer = Get<bool>(d, "buffer", false);
  t.compression = CompressionFromDict(d, "tensor '" + t.name + "'");
  return t;
}

TableSpec TableFromDict(const py::dict& d) {
  CheckKeys(d, {"name", "dim", "init", "optimizer", "admit_after", "consistency", "expire_after_steps", "compression"},
            "table");
  TableSpec t{d["name"].cast<std::string>(), d["dim"].cast<int32_t>(), InitFromDict(Item(d, "init"))};
  if (!Item(d, "optimizer").is_none()) t.optimizer = OptimizerFromDict(d["optimizer"].cast<py::dict>());
  t.admit_after = Get<uint32_t>(d, "admit_after", 0);
  t.expire_after_steps = Get<uint64_t>(d, "expire_after_steps", 0);
  if (!Item(d, "consistency").is_none()) {
    absl::StatusOr<Consistency> c = Consistency::Parse(d["consistency"].cast<std::string>());
    if (!c.ok()) Raise(PyExc_ValueError, absl::StrCat("table '", t.name, "': ", c.status().message()));
    t.consistency = *c;
  }
  t.compression = CompressionFromDict(d, "table '" + t.name + "'");
  return t;
}

// Raises ValueError for errors of the model's own checks.
void ThrowIfInvalid(const absl::Status& s) {
  if (!s.ok()) Raise(PyExc_ValueError, std::string(s.message()));
}

}  // namespace

void RegisterError(py::module_& m) {
  ErrorType() = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc("ps._ps.Error", "A parameter-server error: .code (e.g. 'DEADLINE_EXCEEDED'), .message",
                                PyExc_RuntimeError, nullptr));
  m.attr("Error") = ErrorType();
}

void ThrowIfError(const absl::Status& s) {
  if (s.ok()) return;
  py::object error = ErrorType()(absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message()));
  error.attr("code") = absl::StatusCodeToString(s.code());
  error.attr("message") = std::string(s.message());
  PyErr_SetObject(ErrorType().ptr(), error.ptr());
  throw py::error_already_set();
}

namespace {

// One option of ps.connect: its name (that of the worker binaries' flag,
// worker/client/client_flags.h, where they have one) and how it is read from
// and written to KVClientOptions.
struct PyOption {
  const char* name;
  std::function<py::object(const KVClientOptions&)> get;
  std::function<void(KVClientOptions&, const py::handle&)> set;
};

// An option held in field(options) as a C++ `Value`, given in Python as a
// `Py` (to_py and from_py convert; both plain casts for most).
template <typename Py, typename Field, typename ToPy, typename FromPy>
PyOption Converted(const char* name, Field field, ToPy to_py, FromPy from_py) {
  return {name, [field, to_py](const KVClientOptions& o) { return py::cast(to_py(field(o))); },
          [field, from_py](KVClientOptions& o, const py::handle& v) { field(o) = from_py(v.cast<Py>()); }};
}

template <typename T, typename Field>
PyOption Plain(const char* name, Field field) {
  auto same = [](const T& v) { return v; };
  return Converted<T>(name, field, same, same);
}

// A duration: given as a datetime.timedelta or a number of seconds, read
// back as a timedelta (the flag of the same name takes "30s", "100us").
template <typename Field>
PyOption InDuration(const char* name, Field field) {
  return {name,
          [field](const KVClientOptions& o) {
            return py::module_::import("datetime")
                .attr("timedelta")(py::arg("microseconds") = absl::ToInt64Microseconds(field(o)));
          },
          [field](KVClientOptions& o, const py::handle& v) {
            if (py::isinstance<py::bool_>(v)) throw py::cast_error("a bool is not a duration");
            const py::object timedelta = py::module_::import("datetime").attr("timedelta");
            const double seconds =
                py::isinstance(v, timedelta) ? v.attr("total_seconds")().cast<double>() : v.cast<double>();
            field(o) = absl::Seconds(seconds);
          }};
}

// The field `expr` of an options struct, const or not.
#define PS_FIELD(expr) \
  [](auto& o) -> auto& { return o.expr; }

const std::vector<PyOption>& PyOptions() {
  static const auto* options = new std::vector<PyOption>{
      Plain<std::string>("scheduler", PS_FIELD(scheduler)),
      Plain<int>("rank", PS_FIELD(rank)),
      InDuration("register_timeout", PS_FIELD(register_timeout)),
      InDuration("request_timeout", PS_FIELD(request_timeout)),
      Plain<uint64_t>("max_request_bytes", PS_FIELD(max_request_bytes)),
      InDuration("heartbeat_interval", PS_FIELD(heartbeat_interval)),
      InDuration("heartbeat_timeout", PS_FIELD(heartbeat_timeout)),
      InDuration("scheduler_recovery_timeout", PS_FIELD(scheduler_recovery_timeout)),
      InDuration("server_recovery_timeout", PS_FIELD(server_recovery_timeout)),
      Plain<uint64_t>("max_replay_bytes", PS_FIELD(max_replay_bytes)),
      Plain<bool>("shm", PS_FIELD(shm)),
      InDuration("shm_spin", PS_FIELD(shm_spin)),
      Plain<bool>("caller_io", PS_FIELD(caller_io)),
      InDuration("caller_spin", PS_FIELD(caller_spin)),
      Plain<int>("compress_threads", PS_FIELD(compress_threads)),
      Plain<int>("metrics_port", PS_FIELD(metrics.port)),
      Plain<std::string>("metrics_host", PS_FIELD(metrics.host)),
      InDuration("metrics_linger", PS_FIELD(metrics.linger)),
      Plain<std::string>("advertise", PS_FIELD(advertise)),
      Plain<std::string>("secret_key_file", PS_FIELD(security.secret_key_file)),
      Plain<std::string>("scheduler_public_key", PS_FIELD(security.scheduler_public_key)),
      Plain<bool>("insecure", PS_FIELD(security.insecure)),
  };
  return *options;
}

#undef PS_FIELD

}  // namespace

KVClientOptions OptionsFromDict(const py::dict& d) {
  std::set<std::string> known;
  for (const PyOption& option : PyOptions()) known.insert(option.name);
  CheckKeys(d, known, "connect options");
  KVClientOptions o;
  for (const PyOption& option : PyOptions()) {
    if (!d.contains(option.name) || d[option.name].is_none()) continue;
    try {
      option.set(o, d[option.name]);
    } catch (const py::cast_error&) {
      Raise(PyExc_TypeError,
            absl::StrCat("connect: ", option.name, ": ", std::string(py::repr(d[option.name])),
                         " is not of the kind its default ", std::string(py::repr(option.get(o))), " is"));
    }
  }
  if (absl::Status s = o.Validate(); !s.ok()) Raise(PyExc_ValueError, absl::StrCat("connect: ", s.message()));
  return o;
}

py::dict ClientOptionDefaults() {
  const KVClientOptions defaults;
  py::dict d;
  for (const PyOption& option : PyOptions()) d[option.name] = option.get(defaults);
  return d;
}

ModelSpec ModelFromDict(const py::dict& d) {
  CheckKeys(d, {"tensors", "tables", "optimizer", "consistency", "placement", "compression", "compress_min_bytes"},
            "model");
  ModelSpec m;
  if (d.contains("tensors")) {
    for (auto t : d["tensors"].cast<py::list>()) m.tensors.push_back(TensorFromDict(t.cast<py::dict>()));
  }
  if (d.contains("tables")) {
    for (auto t : d["tables"].cast<py::list>()) m.tables.push_back(TableFromDict(t.cast<py::dict>()));
  }
  if (d.contains("optimizer")) m.optimizer = OptimizerFromDict(d["optimizer"].cast<py::dict>());
  if (d.contains("consistency")) {
    absl::StatusOr<Consistency> c = Consistency::Parse(d["consistency"].cast<std::string>());
    ThrowIfInvalid(c.status());
    m.consistency = *c;
  }
  if (const auto c = CompressionFromDict(d, "model"); c.has_value()) m.compression = *c;
  m.compress_min_bytes = Get<uint64_t>(d, "compress_min_bytes", m.compress_min_bytes);
  if (d.contains("placement")) {
    const py::dict p = d["placement"].cast<py::dict>();
    CheckKeys(p, {"rule", "slice_bytes", "explicit", "table_shards"}, "placement");
    const std::string rule = Get<std::string>(p, "rule", "auto");
    if (rule != "auto" && rule != "layer") Raise(PyExc_ValueError, "placement rule: use auto or layer");
    m.placement.rule = rule == "layer" ? PlacementRule::kLayer : PlacementRule::kAuto;
    m.placement.slice_bytes = Get<uint64_t>(p, "slice_bytes", m.placement.slice_bytes);
    m.placement.table_shards = Get<uint32_t>(p, "table_shards", 0);
    if (p.contains("explicit")) m.placement.explicit_ranks = p["explicit"].cast<std::map<std::string, int32_t>>();
  }
  ThrowIfInvalid(m.Validate());
  return m;
}

void Raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

}  // namespace ps::python
