#include "server/serving/serving_http.h"

#include <httplib.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/json.h"
#include "common/net/security_options.h"

namespace ps {
namespace {

constexpr int kFloatDigits = 9;  // enough for a float32 to read back the same

std::string Floats(absl::Span<const float> v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? "," : "", JsonSignificant(v[i], kFloatDigits));
  return out + "]";
}

JsonLine Versioned(const ServingVersion& v) {
  JsonLine line;
  line.Add("step", v.step)
      .Add("synced_at", absl::ToDoubleSeconds(v.synced_at - absl::UnixEpoch()), 3)
      .Add("exact", v.exact)
      .Add("source", v.source);
  return line;
}

void Reply(httplib::Response& res, int status, const std::string& json) {
  res.status = status;
  res.set_content(json, "application/json");
}

void Refuse(httplib::Response& res, int status, absl::string_view message) {
  Reply(res, status, JsonLine().Add("error", message).Str());
}

int HttpStatus(const absl::Status& s) {
  return s.code() == absl::StatusCode::kNotFound ? 404 : s.code() == absl::StatusCode::kInvalidArgument ? 400 : 500;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServingHttp>> ServingHttp::Start(const ServingModel* model, const std::string& host,
                                                                int port, uint64_t max_lookup_ids, bool insecure) {
  if (!insecure && !IsLoopbackEndpoint(absl::StrCat("tcp://", host, ":1"))) {
    return absl::InvalidArgumentError(absl::StrCat("--http_port on host ", host,
                                                   " would serve plain HTTP beyond this machine; give --insecure "
                                                   "to allow it (or put a TLS proxy in front)"));
  }
  std::unique_ptr<ServingHttp> http(new ServingHttp());
  http->model_ = model;
  http->max_lookup_ids_ = max_lookup_ids;
  http->server_ = std::make_unique<httplib::Server>();
  http->Routes();
  const int bound = port == 0 ? http->server_->bind_to_any_port(host) : port;
  if (bound < 0 || (port != 0 && !http->server_->bind_to_port(host, port))) {
    return absl::UnavailableError(absl::StrCat("--http_port: cannot listen on ", host, ":", port));
  }
  http->url_ = absl::StrCat("http://", host, ":", bound);
  httplib::Server* server = http->server_.get();
  http->thread_ = std::thread([server] { server->listen_after_bind(); });
  // stop() acts only on a running server: wait (bounded) until it runs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server->is_running() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  return http;
}

ServingHttp::~ServingHttp() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void ServingHttp::Routes() {
  server_->Get("/v1/version", [this](const httplib::Request&, httplib::Response& res) { Version(res); });
  server_->Get(R"(/v1/tables/([^/]+)/rows)",
               [this](const httplib::Request& req, httplib::Response& res) { Rows(req, res); });
  server_->Get(R"(/v1/dense/([^/]+))",
               [this](const httplib::Request& req, httplib::Response& res) { Dense(req, res); });
  const auto read_only = [](const httplib::Request& req, httplib::Response& res) {
    Refuse(res, 405, absl::StrCat(req.method, " ", req.path, ": a serving replica is read-only (GET only)"));
  };
  server_->Post(".*", read_only);
  server_->Put(".*", read_only);
  server_->Patch(".*", read_only);
  server_->Delete(".*", read_only);
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) {
      Refuse(
          res, res.status,
          absl::StrCat("no such endpoint: ", req.path, " (/v1/version, /v1/tables/NAME/rows?ids=..., /v1/dense/NAME)"));
    }
  });
}

void ServingHttp::Version(httplib::Response& res) const {
  const ServingModel::Contents contents = model_->Describe();
  std::vector<std::string> tensors, tables;
  for (const std::string& t : contents.tensors) tensors.push_back(JsonQuote(t));
  for (const auto& [name, dim] : contents.tables) tables.push_back(absl::StrCat(JsonQuote(name), ":", dim));
  Reply(res, 200,
        Versioned(contents.version)
            .AddRaw("tensors", absl::StrCat("[", absl::StrJoin(tensors, ","), "]"))
            .AddRaw("tables", absl::StrCat("{", absl::StrJoin(tables, ","), "}"))
            .Str());
}

void ServingHttp::Rows(const httplib::Request& req, httplib::Response& res) const {
  const std::string table = req.matches[1];
  std::vector<uint64_t> ids;
  const std::string given = req.has_param("ids") ? req.get_param_value("ids") : "";
  for (absl::string_view s : absl::StrSplit(given, ',', absl::SkipEmpty())) {
    uint64_t id;
    if (!absl::SimpleAtoi(s, &id))
      return Refuse(res, 400, absl::StrCat("ids: '", s, "' is not an unsigned integer id"));
    ids.push_back(id);
  }
  if (ids.size() > max_lookup_ids_) {
    return Refuse(res, 400,
                  absl::StrCat("a lookup of ", ids.size(), " ids of table '", table, "': at most ", max_lookup_ids_,
                               " (--max_lookup_ids)"));
  }
  absl::StatusOr<uint32_t> dim = model_->TableDim(table);
  if (!dim.ok()) return Refuse(res, HttpStatus(dim.status()), dim.status().message());
  const ServingVersion version = model_->version();
  std::vector<float> rows(ids.size() * *dim);
  std::vector<uint8_t> found(ids.size());
  if (absl::Status s = model_->Lookup(table, ids, absl::MakeSpan(rows), absl::MakeSpan(found)); !s.ok()) {
    return Refuse(res, HttpStatus(s), s.message());
  }
  std::vector<std::string> row_json, found_json;
  for (size_t i = 0; i < ids.size(); ++i) {
    row_json.push_back(Floats(absl::MakeConstSpan(rows).subspan(i * *dim, *dim)));
    found_json.push_back(found[i] ? "true" : "false");
  }
  Reply(res, 200,
        Versioned(version)
            .Add("table", table)
            .Add("dim", *dim)
            .AddRaw("rows", absl::StrCat("[", absl::StrJoin(row_json, ","), "]"))
            .AddRaw("found", absl::StrCat("[", absl::StrJoin(found_json, ","), "]"))
            .Str());
}

void ServingHttp::Dense(const httplib::Request& req, httplib::Response& res) const {
  const std::string name = req.matches[1];
  const ServingVersion version = model_->version();
  absl::StatusOr<ServingModel::Tensor> tensor = model_->Dense(name);
  if (!tensor.ok()) return Refuse(res, HttpStatus(tensor.status()), tensor.status().message());
  Reply(res, 200,
        Versioned(version)
            .Add("name", name)
            .AddRaw("shape", absl::StrCat("[", absl::StrJoin(tensor->shape, ","), "]"))
            .AddRaw("values", Floats(tensor->values))
            .Str());
}

}  // namespace ps
