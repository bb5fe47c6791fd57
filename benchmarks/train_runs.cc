#include "benchmarks/train_runs.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "worker/client/kv_client.h"
#include "worker/compute/compute_backend.h"
#include "worker/models/mlp.h"

namespace ps::bench {

absl::StatusOr<TrainFigures> TrainAgainst(TrainerOptions o, const std::string& scheduler, int64_t warmup) {
  o.client.scheduler = scheduler;
  // The clock starts at the progress event of step `warmup`: one event per
  // step, of which the rest are dropped here.
  o.progress_every = absl::Nanoseconds(1);
  double warm_s = 0, warm_wait_s = 0;
  std::string pieces;
  std::vector<std::string> trace;
  const auto on_event = [&](const TrainEvent& event) {
    if (event.kind == "span") trace.push_back(event.ToJson());
    if (event.kind == "start") {
      for (const auto& [name, value] : event.fields) {
        if (name == "pieces") pieces = value.size() >= 2 ? value.substr(1, value.size() - 2) : value;
      }
    }
    if (warmup == 0 || event.kind != "progress" || warm_s > 0) return;
    std::map<std::string, double> v;
    for (const auto& [name, value] : event.fields) v[name] = std::atof(value.c_str());
    if (v["step"] < warmup) return;
    warm_s = v["elapsed_s"];
    warm_wait_s = v["wait_s"];
  };
  PS_ASSIGN_OR_RETURN(TrainResult r, Train(o, on_event));
  if (warmup > 0 && warm_s == 0) return absl::InternalError("no progress event after the warm-up steps");
  const double timed_s = r.wall_s - warm_s;
  TrainFigures fig;
  fig.samples_per_s = static_cast<double>(r.samples - warmup * o.batch_size) / timed_s;
  fig.steps_per_s = static_cast<double>(r.steps - warmup) / timed_s;
  fig.wait_share = (r.wait_s - warm_wait_s) / timed_s;
  fig.pieces = pieces;
  fig.trace = std::move(trace);
  fig.test_accuracy = r.test_accuracy;
  fig.data_plane = r.shm_servers > 0 ? "shm" : "tcp";
  return fig;
}

absl::StatusOr<double> ExchangeAgainst(TrainerOptions o, const std::string& scheduler, int64_t steps, int64_t warmup) {
  o.client.scheduler = scheduler;
  BackendOptions memory_only = o.backend;
  memory_only.device = "null";  // the model's buffers, no arithmetic
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ComputeBackend> backend, CreateBackend(memory_only));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp, Mlp::Create(o.layers, o.batch_size, backend.get()));
  ModelSpec model;
  model.tensors = mlp->TensorSpecs(o.seed);
  model.consistency = o.consistency;
  model.optimizer = o.optimizer;
  model.optimizer.decay_steps = steps;  // a schedule over the run, as the trainer sets it
  PS_ASSIGN_OR_RETURN(std::unique_ptr<KVClient> client, KVClient::Connect(o.client));
  PS_ASSIGN_OR_RETURN(model.placement,
                      ParsePlacement(o.placement, model.tensors, client->num_servers(), o.slice_bytes));
  PS_RETURN_IF_ERROR(client->RegisterModel(model));
  std::vector<ConstTensorBuffer> grads;
  std::vector<TensorBuffer> params;
  for (int t = 0; t < mlp->num_tensors(); ++t) {
    grads.push_back({t, mlp->host_grad(t)});
    params.push_back({t, mlp->host_param(t)});
  }
  absl::Time t0 = absl::Now();
  for (int64_t step = 0; step < steps; ++step) {
    if (step == warmup) t0 = absl::Now();
    PS_RETURN_IF_ERROR(client->Wait(client->PushPull(grads, params, step)));
  }
  const double timed_s = absl::ToDoubleSeconds(absl::Now() - t0);
  PS_RETURN_IF_ERROR(client->Finish());
  return static_cast<double>(steps - warmup) / timed_s;
}

}  // namespace ps::bench
