// Buffers lent by Python (the buffer protocol) as spans into the caller's
// memory, checked for dtype, size and layout; and the stats dict.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/python/binding/py_convert.h"

namespace ps::python {
namespace {

// Whether the buffer's elements lie one after the other in row-major order.
bool CContiguous(const py::buffer_info& info) {
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect) return false;
    expect *= info.shape[d];
  }
  return true;
}

// The buffer of `obj`, checked: `format_ok(format)`, itemsize `itemsize`,
// C-contiguous, `n` elements (n < 0: any), writable when `writable`.
py::buffer_info Checked(const py::handle& obj, const std::string& what, const char* dtype, bool (*format_ok)(char),
                        py::ssize_t itemsize, int64_t n, bool writable) {
  if (!PyObject_CheckBuffer(obj.ptr())) {
    Raise(PyExc_TypeError, absl::StrCat(what, ": expected a ", dtype, " array (buffer protocol), got ",
                                        std::string(py::str(obj.get_type().attr("__name__")))));
  }
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  const char f = info.format.empty() ? '?' : info.format.back();
  if (info.itemsize != itemsize || info.format.size() > 2 || !format_ok(f)) {
    Raise(PyExc_TypeError, absl::StrCat(what, ": expected ", dtype, ", got format '", info.format, "' of ",
                                        info.itemsize, "-byte items"));
  }
  if (!CContiguous(info)) Raise(PyExc_ValueError, absl::StrCat(what, ": the buffer is not contiguous"));
  if (n >= 0 && info.size != n) {
    Raise(PyExc_ValueError, absl::StrCat(what, ": expected ", n, " elements, the buffer has ", info.size));
  }
  return info;
}

bool IsFloat32(char f) { return f == 'f'; }
bool IsId(char f) { return f == 'q' || f == 'Q' || f == 'l' || f == 'L'; }

template <typename Buffer, typename Element>
std::vector<Buffer> Dense(const KVClient& client, const py::dict& buffers, Lent& lent, bool writable) {
  std::vector<Buffer> out;
  for (auto item : buffers) {
    const int t = item.first.cast<int>();
    if (t < 0 || t >= static_cast<int>(client.model().tensors.size())) {
      Raise(PyExc_ValueError, absl::StrCat("tensor index ", t, " is not in the registered model"));
    }
    const TensorSpec& spec = client.model().tensors[t];
    py::buffer_info info = Checked(item.second, absl::StrCat("tensor '", spec.name, "'"), "float32", IsFloat32,
                                   sizeof(float), spec.NumElements(), writable);
    out.push_back(Buffer{t, absl::Span<Element>(static_cast<Element*>(info.ptr), info.size)});
    lent.objects.push_back(py::reinterpret_borrow<py::object>(item.second));
  }
  return out;
}

// (table, ids, rows) with ids int64/uint64 and rows float32 of len(ids) x dim.
template <typename Buffer, typename Element>
std::vector<Buffer> Rows(const KVClient& client, const py::list& rows, Lent& lent, bool writable) {
  std::vector<Buffer> out;
  for (auto entry : rows) {
    const py::tuple t = entry.cast<py::tuple>();
    if (t.size() != 3) Raise(PyExc_ValueError, "rows: expected (table index, ids, rows) tuples");
    const int table = t[0].cast<int>();
    if (table < 0 || table >= static_cast<int>(client.model().tables.size())) {
      Raise(PyExc_ValueError, absl::StrCat("table index ", table, " is not in the registered model"));
    }
    const TableSpec& spec = client.model().tables[table];
    const std::string name = absl::StrCat("table '", spec.name, "'");
    py::buffer_info ids = Checked(t[1], name + " ids", "int64 or uint64", IsId, 8, -1, false);
    py::buffer_info values = Checked(t[2], name + " rows", "float32", IsFloat32, sizeof(float),
                                     ids.size * static_cast<int64_t>(spec.dim), writable);
    out.push_back(Buffer{table, absl::Span<const uint64_t>(static_cast<const uint64_t*>(ids.ptr), ids.size),
                         absl::Span<Element>(static_cast<Element*>(values.ptr), values.size)});
    lent.objects.push_back(py::reinterpret_borrow<py::object>(t[1]));
    lent.objects.push_back(py::reinterpret_borrow<py::object>(t[2]));
  }
  return out;
}

}  // namespace

std::vector<ConstTensorBuffer> DenseIn(const KVClient& client, const py::dict& buffers, Lent& lent) {
  return Dense<ConstTensorBuffer, const float>(client, buffers, lent, false);
}
std::vector<TensorBuffer> DenseOut(const KVClient& client, const py::dict& buffers, Lent& lent) {
  return Dense<TensorBuffer, float>(client, buffers, lent, true);
}
std::vector<ConstRowBuffer> RowsIn(const KVClient& client, const py::list& rows, Lent& lent) {
  return Rows<ConstRowBuffer, const float>(client, rows, lent, false);
}
std::vector<RowBuffer> RowsOut(const KVClient& client, const py::list& rows, Lent& lent) {
  return Rows<RowBuffer, float>(client, rows, lent, true);
}

py::dict StatsToDict(const ServerStats& s) {
  py::dict d;
  d["pushes_applied"] = s.pushes_applied;
  d["assigns_applied"] = s.assigns_applied;
  d["updates_applied"] = s.updates_applied;
  d["pulls_served"] = s.pulls_served;
  d["errors_replied"] = s.errors_replied;
  d["bytes_in"] = s.bytes_in;
  d["bytes_out"] = s.bytes_out;
  d["staleness_histogram"] = s.staleness_histogram;
  d["staleness_max"] = s.staleness_max;
  d["worker_steps"] = s.worker_steps;
  d["max_version"] = s.max_version;
  py::list tables;
  for (const ServerStats::Table& t : s.tables) {
    py::dict td;
    td["table"] = t.table;
    td["rows"] = t.rows;
    td["bytes"] = t.bytes;
    td["evictions"] = t.evictions;
    td["admissions"] = t.admissions;
    td["rejections"] = t.rejections;
    td["gradients_dropped"] = t.gradients_dropped;
    td["rows_pulled"] = t.rows_pulled;
    td["rows_pushed"] = t.rows_pushed;
    td["disk_rows"] = t.disk_rows;
    td["disk_reads"] = t.disk_reads;
    td["disk_writes"] = t.disk_writes;
    td["disk_refusals"] = t.disk_refusals;
    td["expired"] = t.expired;
    tables.append(td);
  }
  d["tables"] = tables;
  return d;
}

py::dict ClientStatsToDict(const ClientStats& s) {
  py::dict d;
  d["pushes_resent"] = s.pushes_resent;
  d["requests_held"] = s.requests_held;
  d["replay_bytes"] = s.replay_bytes;
  d["servers_recovered"] = s.servers_recovered;
  d["requests_resent_off_shm"] = s.requests_resent_off_shm;
  d["requests_rerouted"] = s.requests_rerouted;
  d["requests_fenced"] = s.requests_fenced;
  d["servers_unreachable"] = s.servers_unreachable;
  d["requests_resent_after_cut"] = s.requests_resent_after_cut;
  d["caller_requests_sent"] = s.caller_requests_sent;
  d["caller_messages_read"] = s.caller_messages_read;
  d["shm_servers"] = s.shm_servers;
  d["metrics_url"] = s.metrics_url;
  return d;
}

}  // namespace ps::python
