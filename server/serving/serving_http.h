#ifndef PS_SERVER_SERVING_SERVING_HTTP_H_
#define PS_SERVER_SERVING_SERVING_HTTP_H_

// The serving replica's HTTP/JSON endpoint (ps_serve --http_port), for
// model servers in other languages, on Debian's cpp-httplib (a kept HTTP
// server: no parser of our own):
//
//   GET /v1/version                          {"step":141,"synced_at":...,"exact":true,"source":"ckpt",
//                                             "tensors":["fc1.weight",...],"tables":{"emb":16}}
//   GET /v1/tables/NAME/rows?ids=1,2,3       {"table":"emb","dim":16,"step":141,...,
//                                             "rows":[[...],[...],[...]],"found":[true,false,true]}
//   GET /v1/dense/NAME                       {"name":"fc1.weight","shape":[784,512],"step":141,...,
//                                             "values":[...]}  (row-major)
//
// Floats are written with 9 significant digits, which read back as the
// same float32. Errors are {"error": "..."} with 404 for an unknown table,
// tensor or path, 400 for ids that are not unsigned integers or more of
// them than max_lookup_ids, 405 for any method but GET (a replica is
// read-only).
//
// Thread-safety: the server runs its own threads; the model is read under
// its own lock (ServingModel is thread-safe).

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/serving/serving_model.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace ps {

class ServingHttp {
 public:
  // Listens on host:port (0: a free port). `model` is borrowed and must
  // outlive this. kInvalidArgument for a host other than loopback unless
  // `insecure` (plain HTTP); kUnavailable when the bind fails.
  static absl::StatusOr<std::unique_ptr<ServingHttp>> Start(const ServingModel* model, const std::string& host,
                                                            int port, uint64_t max_lookup_ids, bool insecure);
  ~ServingHttp();  // stops serving

  // "http://HOST:PORT"
  const std::string& url() const { return url_; }

 private:
  ServingHttp() = default;
  void Routes();
  // The GET handlers (see the top of this file).
  void Version(httplib::Response& res) const;
  void Rows(const httplib::Request& req, httplib::Response& res) const;
  void Dense(const httplib::Request& req, httplib::Response& res) const;

  const ServingModel* model_ = nullptr;
  uint64_t max_lookup_ids_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string url_;
};

}  // namespace ps

#endif  // PS_SERVER_SERVING_SERVING_HTTP_H_
