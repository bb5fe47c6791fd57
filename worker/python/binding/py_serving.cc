// ps._ps.ServingClient: the serving replicas' client (worker/client/
// serving_client.h) for Python; ps/serving.py wraps it. Ids come in as any
// integer numpy array (converted to uint64), answers go out as new numpy
// arrays. Calls release the GIL while they wait.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "worker/client/serving_client.h"
#include "worker/python/binding/py_convert.h"

namespace ps::python {
namespace {

py::dict VersionDict(const ServedVersion& v) {
  py::dict d;
  d["step"] = v.step;
  d["synced_at"] = absl::ToDoubleSeconds(v.synced_at - absl::UnixEpoch());
  d["exact"] = v.exact;
  d["source"] = v.source;
  d["replica"] = v.replica;
  return d;
}

class PyServingClient {
 public:
  PyServingClient(std::vector<std::string> endpoints, double timeout_s) {
    if (!(timeout_s > 0)) throw py::value_error("timeout must be > 0 seconds");
    ServingClientOptions options;
    options.endpoints = std::move(endpoints);
    options.timeout = absl::Seconds(timeout_s);
    client_ = Value(ServingClient::Connect(options));
  }

  // (rows float32 (n, dim), found bool (n,), version dict)
  py::tuple Lookup(const std::string& table,
                   const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& ids) {
    if (ids.ndim() != 1) throw py::value_error("ids: a 1-D array of integer ids");
    const absl::Span<const uint64_t> span(ids.data(), static_cast<size_t>(ids.size()));
    absl::StatusOr<ServingClient::Rows> rows;
    {
      py::gil_scoped_release release;
      rows = client_->Lookup(table, span);
    }
    ThrowIfError(rows.status());
    py::array_t<float> values({static_cast<py::ssize_t>(span.size()), static_cast<py::ssize_t>(rows->dim)});
    if (!rows->values.empty()) std::memcpy(values.mutable_data(), rows->values.data(), rows->values.size() * 4);
    py::array_t<bool> found(static_cast<py::ssize_t>(span.size()));
    for (size_t i = 0; i < span.size(); ++i) found.mutable_data()[i] = rows->found[i] != 0;
    return py::make_tuple(values, found, VersionDict(rows->version));
  }

  py::tuple Dense(const std::string& name) {
    absl::StatusOr<ServingClient::Tensor> tensor;
    {
      py::gil_scoped_release release;
      tensor = client_->Dense(name);
    }
    ThrowIfError(tensor.status());
    std::vector<py::ssize_t> shape(tensor->shape.begin(), tensor->shape.end());
    py::array_t<float> values(shape);
    if (!tensor->values.empty()) std::memcpy(values.mutable_data(), tensor->values.data(), tensor->values.size() * 4);
    return py::make_tuple(values, VersionDict(tensor->version));
  }

  py::dict Version() {
    absl::StatusOr<ServingClient::Model> model;
    {
      py::gil_scoped_release release;
      model = client_->Version();
    }
    ThrowIfError(model.status());
    py::dict d = VersionDict(model->version);
    d["tensors"] = model->tensors;
    py::dict tables;
    for (size_t i = 0; i < model->tables.size(); ++i) tables[py::str(model->tables[i])] = model->table_dims[i];
    d["tables"] = tables;
    return d;
  }

 private:
  std::unique_ptr<ServingClient> client_;
};

}  // namespace

void RegisterServing(py::module_& m) {
  py::class_<PyServingClient>(m, "ServingClient")
      .def(py::init<std::vector<std::string>, double>(), py::arg("endpoints"), py::arg("timeout_s"))
      .def("lookup", &PyServingClient::Lookup, py::arg("table"), py::arg("ids"))
      .def("dense", &PyServingClient::Dense, py::arg("name"))
      .def("version", &PyServingClient::Version);
}

}  // namespace ps::python
