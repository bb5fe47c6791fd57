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
  uint64_t Exchange(const py::dict& grads, const py::list& row_grads, int64_t clock, const py::dict& out,
                    const py::list& rows_out, int64_t pull_clock) {
    Lent lent;
    std::vector<TensorBuffer> g = DenseIn(*client_, grads, lent);
    std::vector<MutableTensorBuffer> o = DenseOut(*client_, out, lent);
    std::vector<RowGradients> rg = RowsIn(*client_, row_grads, lent);
    std::vector<RowBuffer> ro = RowsOut(*client_, rows_out, lent);
    KVClient::Ticket t = client_->Exchange(
        {.grads = g, .row_grads = rg, .clock = clock, .out = o, .rows_out = ro, .pull_clock = pull_clock});
    lent_[t] = std::move(lent.objects);
    return t;
  }

  // Waits for a ticket; releases its buffers once it is complete.
  void Wait(uint64_t ticket, double timeout_s) {
    const absl::Duration timeout = timeout_s < 0 ? absl::InfiniteDuration() : absl::Seconds(timeout_s);
    absl::Status s, probe;
    {
      py::gil_scoped_release release;
      s = client_->Wait(ticket, timeout);
      // kDeadlineExceeded: our timeout (the ticket is kept, its buffers still
      // lent) or the request's own deadline (complete). A second look tells.
      if (absl::IsDeadlineExceeded(s)) probe = client_->Wait(ticket, absl::ZeroDuration());
    }
    if (!absl::IsDeadlineExceeded(s) || !absl::IsDeadlineExceeded(probe)) lent_.erase(ticket);
    ThrowIfError(s);
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
  py::class_<Client>(m, "Client")
      .def_property_readonly("rank", [](Client& c) { return c.kv().rank(); })
      .def_property_readonly("num_workers", [](Client& c) { return c.kv().num_workers(); })
      .def_property_readonly("num_servers", [](Client& c) { return c.kv().num_servers(); })
      .def("register_model", &Client::RegisterModel, py::arg("spec"))
      .def("tensor_index",
           [](Client& c, const std::string& name) { return ps::python::Value(c.kv().TensorIndex(name)); })
      .def("table_index",
           [](Client& c, const std::string& name) { return ps::python::Value(c.kv().TableIndex(name)); })
      .def("exchange", &Client::Exchange, py::arg("grads"), py::arg("row_grads"), py::arg("clock"), py::arg("out"),
           py::arg("rows_out"), py::arg("pull_clock"))
      .def("wait", &Client::Wait, py::arg("ticket"), py::arg("timeout_s") = -1.0)
      .def_property_readonly("pending", &Client::pending)
      .def("barrier",
           [](Client& c, const std::string& name, double timeout_s) {
             ps::python::ThrowIfErrorReleased([&] { return c.kv().Barrier(name, absl::Seconds(timeout_s)); });
           },
           py::arg("name"), py::arg("timeout_s") = 120.0)
      .def("finish", [](Client& c) { ps::python::ThrowIfErrorReleased([&] { return c.kv().Finish(); }); })
      .def("resume_clock",
           [](Client& c) { return ps::python::Released<int64_t>([&] { return c.kv().ResumeClock(); }); })
      .def("server_stats", [](Client& c, int rank) {
        return ps::python::StatsToDict(
            ps::python::Released<ps::StatsReplyMsg>([&] { return c.kv().ServerStats(rank); }));
      })
      .def_property_readonly("shm_servers", [](Client& c) { return c.kv().shm_servers(); })
      .def_property_readonly("metrics_url", [](Client& c) { return c.kv().metrics_url(); });
  m.def("connect", &ps::python::Connect, py::arg("options"));
  m.def("client_option_defaults", &ps::python::ClientOptionDefaults,
        "{option: default} of every option ps.connect takes (seconds as floats, *_us in microseconds).");
}
