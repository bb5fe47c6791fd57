#ifndef PS_WORKER_PYTHON_BINDING_PY_CONVERT_H_
#define PS_WORKER_PYTHON_BINDING_PY_CONVERT_H_

// Python values to the client's C++ values and back, for ps_module.cc: the
// model and options from dicts, buffers (the buffer protocol) as spans that
// point into the caller's memory, statuses as ps.Error. Call with the GIL
// held.

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/model_spec.h"
#include "worker/client/kv_client.h"

namespace ps::python {

namespace py = pybind11;

// Raises the Python exception `type` (PyExc_TypeError, ...) with `message`.
[[noreturn]] void Raise(PyObject* type, const std::string& message);

// Adds ps._ps.Error (a RuntimeError with .code and .message) to `m`.
void RegisterError(py::module_& m);
// Adds ps._ps.ServingClient (binding/py_serving.cc) to `m`.
void RegisterServing(py::module_& m);
// Raises ps.Error carrying `s`'s code and message unless it is OK.
void ThrowIfError(const absl::Status& s);
template <typename T>
T Value(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return *std::move(v);
}

// ValueError naming the key for keys it does not know or values of the wrong
// kind, and the model's own validation error (kInvalidArgument) as ValueError.
// Keys are the options of ps.connect (ClientOptionDefaults' keys); a value
// of None takes the default.
KVClientOptions OptionsFromDict(const py::dict& d);
// {option: its default}: what ps.connect and the Python workers' flags
// (examples/ps_worker_events.py) take.
py::dict ClientOptionDefaults();
ModelSpec ModelFromDict(const py::dict& d);

py::dict StatsToDict(const ServerStats& stats);
py::dict ClientStatsToDict(const ClientStats& stats);

// The Python objects whose buffers a request borrows.
struct Lent {
  std::vector<py::object> objects;
};

// {tensor index: float32 buffer of the tensor's size}; the objects go into
// `lent`. TypeError / ValueError naming the tensor for a wrong dtype, size
// or layout.
std::vector<ConstTensorBuffer> DenseIn(const KVClient& client, const py::dict& buffers, Lent& lent);
std::vector<TensorBuffer> DenseOut(const KVClient& client, const py::dict& buffers, Lent& lent);
// [(table index, ids: int64 or uint64 buffer, rows: float32 buffer of
// len(ids) x dim)].
std::vector<ConstRowBuffer> RowsIn(const KVClient& client, const py::list& rows, Lent& lent);
std::vector<RowBuffer> RowsOut(const KVClient& client, const py::list& rows, Lent& lent);

}  // namespace ps::python

#endif  // PS_WORKER_PYTHON_BINDING_PY_CONVERT_H_
