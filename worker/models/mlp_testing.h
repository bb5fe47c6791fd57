#ifndef PS_WORKER_MODELS_MLP_TESTING_H_
#define PS_WORKER_MODELS_MLP_TESTING_H_

// Tests only: the finite-difference gradient check every compute backend's
// MLP must pass (worker/models/mlp_test.cc on the cpu, worker/compute/cuda/cuda_backend_test.cc
// on a GPU).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/models/mlp.h"

namespace ps::testing {

// Runs one TrainStep of `mlp` on `x` and `labels`, then compares every
// parameter's analytic gradient with central differences of the loss
// (float32 forward passes, so within 1% relative plus 2e-4). Returns how many
// parameters it checked and sets *norm to the analytic gradient's squared
// norm (a gradient that is zero everywhere would pass trivially).
inline int ExpectGradientsMatchFiniteDifferences(Mlp& mlp, const std::vector<float>& x,
                                                 const std::vector<int32_t>& labels, int batch, double* norm) {
  mlp.TrainStep(x.data(), labels.data(), batch, nullptr, nullptr);
  std::vector<std::vector<float>> analytic;
  for (int t = 0; t < mlp.num_tensors(); ++t) analytic.emplace_back(mlp.host_grad(t).begin(), mlp.host_grad(t).end());
  const float h = 1e-3f;
  int checked = 0;
  *norm = 0;
  for (int t = 0; t < mlp.num_tensors(); ++t) {
    for (size_t i = 0; i < mlp.host_param(t).size(); ++i) {
      float& p = mlp.host_param(t)[i];
      const float saved = p;
      p = saved + h;
      mlp.ParamsToDevice(t / 2);
      const double plus = mlp.Evaluate(x.data(), labels.data(), batch).loss;
      p = saved - h;
      mlp.ParamsToDevice(t / 2);
      const double minus = mlp.Evaluate(x.data(), labels.data(), batch).loss;
      p = saved;
      mlp.ParamsToDevice(t / 2);
      // The perturbation actually applied, after float rounding.
      const double numeric = (plus - minus) / ((static_cast<double>(saved) + h) - (static_cast<double>(saved) - h));
      const double want = analytic[t][i];
      EXPECT_NEAR(want, numeric, 1e-2 * std::max(std::abs(want), std::abs(numeric)) + 2e-4)
          << "tensor " << t << " element " << i;
      *norm += want * want;
      ++checked;
    }
  }
  return checked;
}

}  // namespace ps::testing

#endif  // PS_WORKER_MODELS_MLP_TESTING_H_
