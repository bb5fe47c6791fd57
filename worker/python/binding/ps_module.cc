// ps._ps: KVClient for Python (pybind11). The package around it
// (worker/python/ps/__init__.py) adds names for tensors and tables, torch
// tensors and a friendlier surface; this module takes indices and objects
// with the buffer protocol (numpy arrays), never copies them, and keeps every
// buffer lent to a request alive until the request is complete.
//
// Errors: ps.Error (a RuntimeError) with .code (the absl status code's name,
// e.g. "DEADLINE_EXCEEDED") and .message; TypeError for a buffer of the wrong
// dtype, ValueError for a wrong size, a buffer that is not contiguous, or a
// bad model description. Calls that wait release the GIL.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "worker/client/kv_client.h"
#include "worker/python/binding/py_convert.h"

namespace py = pybind11;

namespace ps::python {
namespace {

// A connected client and the Python objects lent to its unfinished tickets.
// Every method runs with the GIL held except where it says it releases it;
// the keep-alive map is only touched with the GIL held.
class Client {
 public:
  explicit Client(std::unique_ptr<KVClient> client) : client_(std::move(client)) {}
  ~Client() {
    py::gil_scoped_release release;  // the I/O thread may be waiting for a buffer release callback
    client_.reset();
  }

  KVClient& kv() { return *client_; }

  void RegisterModel(const py::dict& spec) {
    const ModelSpec model = ModelFromDict(spec);
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->RegisterModel(model);
    }
    ThrowIfError(s);
  }

  // Submits one step (any part may be empty) and keeps its buffers alive.
  // `assign`: the pushed buffers are values to set (KVClient::Assign).
  uint64_t Exchange(const py::dict& push, const py::list& push_rows, int64_t step, const py::dict& pull,
                    const py::list& pull_rows, int64_t pull_step, bool assign) {
    Lent lent;
    std::vector<ConstTensorBuffer> grads = DenseIn(*client_, push, lent);
    std::vector<TensorBuffer> params = DenseOut(*client_, pull, lent);
    std::vector<ConstRowBuffer> row_grads = RowsIn(*client_, push_rows, lent);
    std::vector<RowBuffer> rows = RowsOut(*client_, pull_rows, lent);
    KVClient::Ticket t = client_->Exchange({.push = grads,
                                            .push_rows = row_grads,
                                            .step = step,
                                            .pull = params,
                                            .pull_rows = rows,
                                            .pull_step = pull_step,
                                            .assign = assign});
    lent_[t] = std::move(lent.objects);
    return t;
  }

  // Waits for a ticket to complete, releases its buffers and raises its error.
  void Wait(uint64_t ticket) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->Wait(ticket);
    }
    lent_.erase(ticket);
    ThrowIfError(s);
  }

  // Whether a ticket completes within `timeout_s` (not collected).
  bool Ready(uint64_t ticket, double timeout_s) {
    absl::StatusOr<bool> ready;
    {
      py::gil_scoped_release release;
      ready = client_->Ready(ticket, absl::Seconds(timeout_s));
    }
    return Value(std::move(ready));
  }

  // Tickets not waited for yet, whose buffers are still held.
  size_t pending() const { return lent_.size(); }

 private:
  std::unique_ptr<KVClient> client_;
  std::unordered_map<uint64_t, std::vector<py::object>> lent_;
};

std::unique_ptr<Client> Connect(const py::dict& options) {
  const KVClientOptions o = OptionsFromDict(options);
  absl::StatusOr<std::unique_ptr<KVClient>> c;
  {
    py::gil_scoped_release release;
    c = KVClient::Connect(o);
  }
  ThrowIfError(c.status());
  return std::make_unique<Client>(*std::move(c));
}

// Runs `call` without the GIL and raises its error.
template <typename T, typename Call>
T Released(Call call) {
  absl::StatusOr<T> r;
  {
    py::gil_scoped_release release;
    r = call();
  }
  ThrowIfError(r.status());
  return *std::move(r);
}

void ThrowIfErrorReleased(const std::function<absl::Status()>& call) {
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = call();
  }
  ThrowIfError(s);
}

// A duration as the C++ flags take it ("90s", "1.5s", "0"), in
// microseconds; ValueError naming the text otherwise.
int64_t ParseDurationMicros(const std::string& text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    throw py::value_error(absl::StrCat("not a duration: '", text,
                                       "' (a number and its unit, as the flags take it: 90s, 1.5s, 500ms, 100us, 2m)"));
  }
  return absl::ToInt64Microseconds(d);
}

}  // namespace
}  // namespace ps::python

PYBIND11_MODULE(_ps, m) {
  using ps::python::Client;
  m.doc() = "KVClient of the ps parameter server (use the ps package).";
  // The client's logs: warnings and errors, to stderr (a Python program did
  // not ask for its INFO lines).
  if (!google::IsGoogleLoggingInitialized()) {
    FLAGS_logtostderr = true;
    FLAGS_minloglevel = google::GLOG_WARNING;
    google::InitGoogleLogging("ps");
  }
  ps::python::RegisterError(m);
  ps::python::RegisterServing(m);
  py::class_<Client>(m, "Client")
      .def_property_readonly("rank", [](Client& c) { return c.kv().rank(); })
      .def_property_readonly("num_workers", [](Client& c) { return c.kv().num_workers(); })
      .def_property_readonly("num_servers", [](Client& c) { return c.kv().num_servers(); })
      .def("register_model", &Client::RegisterModel, py::arg("spec"))
      .def("tensor_index",
           [](Client& c, const std::string& name) { return ps::python::Value(c.kv().TensorIndex(name)); })
      .def("table_index", [](Client& c, const std::string& name) { return ps::python::Value(c.kv().TableIndex(name)); })
      .def("exchange", &Client::Exchange, py::arg("push"), py::arg("push_rows"), py::arg("step"), py::arg("pull"),
           py::arg("pull_rows"), py::arg("pull_step"), py::arg("assign") = false)
      .def("wait", &Client::Wait, py::arg("ticket"))
      .def("ready", &Client::Ready, py::arg("ticket"), py::arg("timeout_s"))
      .def_property_readonly("pending", &Client::pending)
      .def(
          "barrier",
          [](Client& c, const std::string& name, double timeout_s) {
            ps::python::ThrowIfErrorReleased([&] { return c.kv().Barrier(name, absl::Seconds(timeout_s)); });
          },
          py::arg("name"), py::arg("timeout_s") = 120.0)
      .def("finish", [](Client& c) { ps::python::ThrowIfErrorReleased([&] { return c.kv().Finish(); }); })
      .def("resume_step", [](Client& c) { return ps::python::Released<int64_t>([&] { return c.kv().ResumeStep(); }); })
      .def("server_stats",
           [](Client& c, int rank) -> py::object {  // None: dead, its slices led by backups (--replicas)
             std::optional<ps::ServerStats> st =
                 ps::python::Released<std::optional<ps::ServerStats>>([&] { return c.kv().LiveServerStats(rank); });
             if (!st.has_value()) return py::none();
             return ps::python::StatsToDict(*st);
           })
      .def("stats", [](Client& c) { return ps::python::ClientStatsToDict(c.kv().stats()); });
  m.def("connect", &ps::python::Connect, py::arg("options"));
  m.def("client_option_defaults", &ps::python::ClientOptionDefaults,
        "{option: default} of every option ps.connect takes (durations as datetime.timedelta).");
  m.def("parse_duration_us", &ps::python::ParseDurationMicros, py::arg("text"),
        "A duration as absl::ParseDuration (the C++ flags) reads it, in microseconds.");
}
