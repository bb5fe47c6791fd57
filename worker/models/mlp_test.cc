#include "worker/models/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/model/initializer.h"
#include "common/model/model_spec.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/cpu/cpu_backend.h"
#include "worker/models/mlp_testing.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// Runs every op on a CpuBackend but can pretend its memory is not host
// memory, so that the copy paths a GPU backend takes are exercised; counts
// the copies and Gemm calls either way, and notes copies to the device from
// memory that AllocHost did not give.
//
// With `defer_downloads` it also behaves like a device's asynchronous
// download: CopyToHost takes the source as it is when issued (after the
// compute issued before it, which on the cpu has run) but writes the
// destination only once a ticket recorded after it completes, by WaitFor or
// by a Done() that answers true. Done() answers false the first
// `polls_until_done` times it is asked about a ticket.
//
// FailAllocHost(k): the k-th AllocHost from now (0: the next) fails as
// pinned memory that cannot be had does on a GPU; FailReserve: so does
// ReserveLossRows. It counts the host and device buffers given and not
// taken back.
class WrappedBackend final : public ComputeBackend {
 public:
  explicit WrappedBackend(bool host_memory, bool defer_downloads = false, int polls_until_done = 0)
      : host_memory_(host_memory), defer_downloads_(defer_downloads), polls_until_done_(polls_until_done) {}
  std::string name() const override { return "wrapped"; }
  bool host_memory() const override { return host_memory_; }
  float* Alloc(size_t n) override {
    ++live_;
    return cpu_.Alloc(n);
  }
  void Free(float* d) override {
    live_ -= d != nullptr ? 1 : 0;
    cpu_.Free(d);
  }
  absl::StatusOr<float*> AllocHost(size_t n) override {
    if (host_allocs_until_failure_-- == 0) {
      return absl::ResourceExhaustedError(absl::StrCat("GPU 0: pinned host memory: cudaHostAlloc of ",
                                                       n * sizeof(float),
                                                       " bytes failed: cudaErrorMemoryAllocation: out of memory"));
    }
    ++live_;
    float* h = *cpu_.AllocHost(n);
    host_blocks_.push_back({h, n});
    return h;
  }
  void FreeHost(float* h) override {
    live_ -= h != nullptr ? 1 : 0;
    cpu_.FreeHost(h);
  }
  absl::Status ReserveLossRows(int rows) override {
    reserved_rows_ = rows;
    return fail_reserve_ ? absl::ResourceExhaustedError(
                               "GPU 0: pinned host memory for the labels of "
                               "SoftmaxCrossEntropy: cudaHostAlloc failed")
                         : absl::OkStatus();
  }
  void FailAllocHost(int k) { host_allocs_until_failure_ = k; }
  void FailReserve() { fail_reserve_ = true; }
  int live() const { return live_; }
  int reserved_rows() const { return reserved_rows_; }
  void CopyToDevice(float* d_dst, const float* src, size_t n) override {
    ++copies_;
    if (!FromAllocHost(src, n)) ++unpinned_uploads_;
    cpu_.CopyToDevice(d_dst, src, n);
  }
  void CopyToHost(float* dst, const float* d_src, size_t n) override {
    ++copies_;
    if (!defer_downloads_) {
      cpu_.CopyToHost(dst, d_src, n);
      return;
    }
    pending_.push_back({last_ticket_ + 1, dst, std::vector<float>(d_src, d_src + n)});
  }
  Ticket Record() override { return ++last_ticket_; }
  bool Done(Ticket ticket) override {
    CHECK_LE(ticket, last_ticket_);
    if (ticket <= completed_) return true;
    if (polls_[ticket]++ < polls_until_done_) return false;
    Complete(ticket);
    return true;
  }
  void WaitFor(Ticket ticket) override {
    CHECK_LE(ticket, last_ticket_);
    Complete(ticket);
  }
  void Synchronize() override { Complete(last_ticket_); }
  void GemmLd(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a, const float* d_b,
              float beta, float* d_c, Ld ld) override {
    ++gemms_;
    cpu_.GemmLd(trans_a, trans_b, m, n, k, alpha, d_a, d_b, beta, d_c, ld);
  }
  void BiasActivation(float* d_y, const float* d_bias, int rows, int cols, bool relu) override {
    cpu_.BiasActivation(d_y, d_bias, rows, cols, relu);
  }
  void ReluGrad(float* d_dy, const float* d_y, size_t n) override { cpu_.ReluGrad(d_dy, d_y, n); }
  void BiasGrad(const float* d_dy, int rows, int cols, float* d_db) override { cpu_.BiasGrad(d_dy, rows, cols, d_db); }
  float SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols, float* d_dlogits,
                            int* correct) override {
    return cpu_.SoftmaxCrossEntropy(d_logits, labels, rows, cols, d_dlogits, correct);
  }
  int copies() const { return copies_; }
  int gemms() const { return gemms_; }
  int unpinned_uploads() const { return unpinned_uploads_; }
  size_t pending_downloads() const { return pending_.size(); }

 private:
  struct Download {
    Ticket ticket;  // the first ticket recorded after it was issued
    float* dst;
    std::vector<float> data;
  };

  void Complete(Ticket ticket) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->ticket > ticket) {
        ++it;
        continue;
      }
      std::copy(it->data.begin(), it->data.end(), it->dst);
      it = pending_.erase(it);
    }
    completed_ = std::max(completed_, ticket);
  }

  bool FromAllocHost(const float* p, size_t n) const {
    for (const auto& [h, size] : host_blocks_) {
      if (p >= h && p + n <= h + size) return true;
    }
    return false;
  }

  CpuBackend cpu_{1};
  const bool host_memory_;
  const bool defer_downloads_;
  const int polls_until_done_;
  int host_allocs_until_failure_ = -1;
  bool fail_reserve_ = false;
  int live_ = 0;  // buffers given and not taken back
  int reserved_rows_ = 0;
  int copies_ = 0;
  int gemms_ = 0;
  int unpinned_uploads_ = 0;
  std::vector<std::pair<const float*, size_t>> host_blocks_;
  std::vector<Download> pending_;
  std::map<Ticket, int> polls_;
  Ticket last_ticket_ = 0;
  Ticket completed_ = 0;
};

std::unique_ptr<Mlp> MakeMlp(const std::vector<int>& layers, int max_batch, ComputeBackend* backend) {
  absl::StatusOr<std::unique_ptr<Mlp>> mlp = Mlp::Create(layers, max_batch, backend);
  EXPECT_TRUE(mlp.ok()) << mlp.status();
  return mlp.ok() ? std::move(mlp).value() : nullptr;
}

void InitParams(Mlp& mlp, uint64_t seed) {
  const std::vector<TensorSpec> specs = mlp.TensorSpecs(seed);
  for (int t = 0; t < mlp.num_tensors(); ++t) FillInitialValues(specs[t], 0, mlp.host_param(t));
  for (int layer = 0; layer < mlp.num_layers(); ++layer) mlp.ParamsToDevice(layer);
}

std::vector<float> RandomInputs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::vector<float>> Grads(const Mlp& mlp) {
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < mlp.num_tensors(); ++t) {
    grads.emplace_back(mlp.host_grad(t).begin(), mlp.host_grad(t).end());
  }
  return grads;
}

const auto kNoCallback = [](int) {};

TEST(MlpTest, MnistShapeHas535818Parameters) {
  CpuBackend backend(1);
  std::unique_ptr<Mlp> mlp = MakeMlp({784, 512, 256, 10}, 64, &backend);
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->NumParameters(), 535818);
  EXPECT_EQ(mlp->num_layers(), 3);
  EXPECT_EQ(mlp->num_tensors(), 6);
  int64_t total = 0;
  for (const TensorSpec& spec : mlp->TensorSpecs(1)) total += spec.NumElements();
  EXPECT_EQ(total, 535818);
}

TEST(MlpTest, TensorSpecsNameShapeAndInit) {
  CpuBackend backend(1);
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 3}, 4, &backend);
  ASSERT_NE(mlp, nullptr);
  const std::vector<TensorSpec> want = {
      {"fc0.weight", {6, 5}, Initializer::He(7)},
      {"fc0.bias", {5}, Initializer::Zeros()},
      {"fc1.weight", {5, 3}, Initializer::He(8)},
      {"fc1.bias", {3}, Initializer::Zeros()},
  };
  EXPECT_EQ(mlp->TensorSpecs(7), want);
  for (int t = 0; t < mlp->num_tensors(); ++t) {
    EXPECT_EQ(static_cast<int64_t>(mlp->host_param(t).size()), want[t].NumElements()) << t;
    EXPECT_EQ(static_cast<int64_t>(mlp->host_grad(t).size()), want[t].NumElements()) << t;
  }
}

TEST(MlpTest, CreateRejectsBadShapes) {
  CpuBackend backend(1);
  struct Case {
    std::vector<int> layers;
    int max_batch;
    std::string message;
  };
  const Case cases[] = {
      {{}, 4, "got 0"},
      {{5}, 4, "got 1"},
      {{5, 0, 3}, 4, "layer 1 has size 0"},
      {{0, 3}, 4, "layer 0 has size 0"},
      {{5, 3, -2}, 4, "layer 2 has size -2"},
      {{5, 65537}, 4, "layer 1 has size 65537"},
      {{5, 3}, 0, "max_batch 0"},
      {{5, 3}, -1, "max_batch -1"},
  };
  for (const Case& c : cases) {
    const absl::Status status = Mlp::Create(c.layers, c.max_batch, &backend).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
  }
  EXPECT_EQ(Mlp::Create({5, 3}, 4, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Mlp::Create({1, 65536}, 1, &backend).ok());
}

// A host buffer the backend cannot give (pinned memory on a GPU) is Create's
// kResourceExhausted naming the buffer and its size, not an abort; whatever
// was allocated before it goes back to the backend. The loss buffers are
// reserved for max_batch rows, and their failure is Create's too.
TEST(MlpTest, AHostBufferTheBackendCannotGiveFailsCreateNamingItAndItsSize) {
  struct Case {
    int fail_at;  // which AllocHost fails: fc0.weight's parameters, gradient; fc0.bias's; then the input's staging
    std::string names;
  };
  const Case cases[] = {
      {0, "no host buffer for the parameters of tensor 'fc0.weight' (15 floats, 60 bytes): "},
      {1, "no host buffer for the gradient of tensor 'fc0.weight' (15 floats, 60 bytes): "},
      {3, "no host buffer for the gradient of tensor 'fc0.bias' (3 floats, 12 bytes): "},
      {4, "no host buffer to stage the input through (4 rows of 5 floats, 80 bytes): "},
  };
  for (const Case& c : cases) {
    WrappedBackend backend(/*host_memory=*/false);
    backend.FailAllocHost(c.fail_at);
    const absl::Status status = Mlp::Create({5, 3}, 4, &backend).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.names + "GPU 0: pinned host memory: cudaHostAlloc of "));
    EXPECT_EQ(backend.live(), 0) << c.names;
  }
  WrappedBackend backend(/*host_memory=*/false);
  backend.FailReserve();
  const absl::Status status = Mlp::Create({5, 3}, 4, &backend).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("the labels of SoftmaxCrossEntropy"));
  EXPECT_EQ(backend.reserved_rows(), 4);
  EXPECT_EQ(backend.live(), 0);
  WrappedBackend fine(/*host_memory=*/false);
  EXPECT_TRUE(Mlp::Create({5, 3}, 4, &fine).ok());
  EXPECT_EQ(fine.live(), 0);
}

// Central differences of the loss against the analytic gradient, for every
// parameter of a 6-5-4-3 net.
TEST(MlpTest, GradientMatchesFiniteDifferences) {
  CpuBackend backend(1);
  const int batch = 4;
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 4, 3}, batch, &backend);
  ASSERT_NE(mlp, nullptr);
  InitParams(*mlp, 42);
  // Non-zero biases so that they matter too.
  for (int t = 1; t < mlp->num_tensors(); t += 2) {
    const std::vector<float> b = RandomInputs(mlp->host_param(t).size(), 100 + t);
    for (size_t i = 0; i < b.size(); ++i) mlp->host_param(t)[i] = 0.1f * b[i];
  }
  const std::vector<float> x = RandomInputs(batch * 6, 1);
  double norm = 0;
  const int checked = testing::ExpectGradientsMatchFiniteDifferences(*mlp, x, {0, 2, 1, 2}, batch, &norm);
  EXPECT_EQ(checked, 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
  // The gradient is not trivially zero anywhere but in dead units.
  EXPECT_GT(norm, 1e-3);
}

TEST(MlpTest, LayerDoneCalledLastToFirstWithFinalGradients) {
  CpuBackend backend(1);
  const int batch = 5;
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 4, 3}, batch, &backend);
  ASSERT_NE(mlp, nullptr);
  InitParams(*mlp, 3);
  const std::vector<float> x1 = RandomInputs(batch * 6, 11);
  const std::vector<float> x2 = RandomInputs(batch * 6, 12);
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1};
  mlp->TrainStep(x1.data(), labels.data(), batch, kNoCallback, nullptr);
  const std::vector<std::vector<float>> first = Grads(*mlp);

  std::vector<int> order;
  std::vector<std::vector<float>> seen(mlp->num_tensors());
  mlp->TrainStep(
      x2.data(), labels.data(), batch,
      [&](int layer) {
        order.push_back(layer);
        for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
          seen[t].assign(mlp->host_grad(t).begin(), mlp->host_grad(t).end());
        }
      },
      nullptr);
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  const std::vector<std::vector<float>> second = Grads(*mlp);
  for (int t = 0; t < mlp->num_tensors(); ++t) {
    EXPECT_EQ(seen[t], second[t]) << t;
    EXPECT_NE(seen[t], first[t]) << t;  // this step's gradients, not the last one's
  }
}

// A caller may overwrite layer i's parameters (pull the next step's values)
// as soon as layer_done(i) runs: the rest of the backward pass must not read
// them.
TEST(MlpTest, LayerParametersUnusedAfterLayerDone) {
  CpuBackend backend(1);
  const int batch = 3;
  const std::vector<float> x = RandomInputs(batch * 6, 21);
  const std::vector<int32_t> labels = {2, 0, 1};
  std::unique_ptr<Mlp> clean = MakeMlp({6, 5, 4, 3}, batch, &backend);
  std::unique_ptr<Mlp> clobbered = MakeMlp({6, 5, 4, 3}, batch, &backend);
  ASSERT_NE(clean, nullptr);
  ASSERT_NE(clobbered, nullptr);
  InitParams(*clean, 5);
  InitParams(*clobbered, 5);
  const float clean_loss = clean->TrainStep(x.data(), labels.data(), batch, kNoCallback, nullptr);
  const float loss = clobbered->TrainStep(
      x.data(), labels.data(), batch,
      [&](int layer) {
        for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
          for (float& p : clobbered->host_param(t)) p = 1e6f;
        }
        clobbered->ParamsToDevice(layer);
      },
      nullptr);
  EXPECT_EQ(loss, clean_loss);
  EXPECT_EQ(Grads(*clobbered), Grads(*clean));
}

TEST(MlpTest, HostMemoryBackendMakesNoCopies) {
  WrappedBackend backend(/*host_memory=*/true);
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 4, 3}, 4, &backend);
  ASSERT_NE(mlp, nullptr);
  InitParams(*mlp, 9);
  const std::vector<float> x = RandomInputs(4 * 6, 31);
  const std::vector<int32_t> labels = {0, 1, 2, 0};
  mlp->TrainStep(x.data(), labels.data(), 4, kNoCallback, nullptr);
  mlp->Evaluate(x.data(), labels.data(), 4);
  EXPECT_EQ(backend.copies(), 0);
}

TEST(MlpTest, DeviceMemoryBackendMatchesHostMemoryBackend) {
  WrappedBackend host_backend(/*host_memory=*/true);
  WrappedBackend device_backend(/*host_memory=*/false);
  std::unique_ptr<Mlp> host = MakeMlp({6, 5, 4, 3}, 4, &host_backend);
  std::unique_ptr<Mlp> device = MakeMlp({6, 5, 4, 3}, 4, &device_backend);
  ASSERT_NE(host, nullptr);
  ASSERT_NE(device, nullptr);
  const std::vector<float> x = RandomInputs(4 * 6, 41);
  const std::vector<int32_t> labels = {2, 2, 1, 0};
  // Without ParamsToDevice the device still has the zero parameters: every
  // logit is 0 and the loss is log(3).
  InitParams(*host, 13);
  const std::vector<TensorSpec> specs = device->TensorSpecs(13);
  for (int t = 0; t < device->num_tensors(); ++t) FillInitialValues(specs[t], 0, device->host_param(t));
  EXPECT_FLOAT_EQ(device->Evaluate(x.data(), labels.data(), 4).loss, std::log(3.0f));
  for (int layer = 0; layer < device->num_layers(); ++layer) device->ParamsToDevice(layer);

  int host_correct = -1, device_correct = -2;
  const float host_loss = host->TrainStep(x.data(), labels.data(), 4, kNoCallback, &host_correct);
  const float device_loss = device->TrainStep(x.data(), labels.data(), 4, kNoCallback, &device_correct);
  EXPECT_EQ(device_loss, host_loss);
  EXPECT_EQ(device_correct, host_correct);
  EXPECT_EQ(Grads(*device), Grads(*host));
  EXPECT_GT(device_backend.copies(), 0);
}

// Uploads come from AllocHost memory only: the parameters and the staged
// input (the caller's x is ordinary memory).
TEST(MlpTest, DeviceMemoryBackendUploadsOnlyFromAllocHost) {
  WrappedBackend backend(/*host_memory=*/false);
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 4, 3}, 4, &backend);
  ASSERT_NE(mlp, nullptr);
  InitParams(*mlp, 9);
  const std::vector<float> x = RandomInputs(4 * 6, 31);
  const std::vector<int32_t> labels = {0, 1, 2, 0};
  mlp->TrainStep(x.data(), labels.data(), 4, kNoCallback, nullptr);
  mlp->Evaluate(x.data(), labels.data(), 4);
  EXPECT_GT(backend.copies(), 0);
  EXPECT_EQ(backend.unpinned_uploads(), 0);
}

// Downloads that complete only when waited for: every layer_done comes after
// the whole backward pass was enqueued, still last layer first, each with
// this step's gradients; TrainStep leaves nothing in flight.
TEST(MlpTest, LayerDoneWaitsForEachLayersTicket) {
  const int batch = 5;
  const std::vector<float> x = RandomInputs(batch * 6, 12);
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1};
  WrappedBackend reference_backend(/*host_memory=*/true);
  std::unique_ptr<Mlp> reference = MakeMlp({6, 5, 4, 3}, batch, &reference_backend);
  ASSERT_NE(reference, nullptr);
  InitParams(*reference, 3);
  reference->TrainStep(x.data(), labels.data(), batch, kNoCallback, nullptr);

  WrappedBackend backend(/*host_memory=*/false, /*defer_downloads=*/true,
                         /*polls_until_done=*/1000000);
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 4, 3}, batch, &backend);
  ASSERT_NE(mlp, nullptr);
  InitParams(*mlp, 3);
  std::vector<int> order, gemms_at;
  std::vector<std::vector<float>> seen(mlp->num_tensors());
  mlp->TrainStep(
      x.data(), labels.data(), batch,
      [&](int layer) {
        order.push_back(layer);
        gemms_at.push_back(backend.gemms());
        for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
          seen[t].assign(mlp->host_grad(t).begin(), mlp->host_grad(t).end());
        }
      },
      nullptr);
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  // Forward 3 Gemms, backward 2 + 2 + 1: all issued before the first report.
  EXPECT_EQ(gemms_at, (std::vector<int>{8, 8, 8}));
  EXPECT_EQ(backend.pending_downloads(), 0u);
  EXPECT_EQ(seen, Grads(*reference));
  EXPECT_EQ(Grads(*mlp), Grads(*reference));
}

// Tickets that are done when first asked: each layer is reported right
// after its own backward pass, before the next layer's, as on the cpu.
TEST(MlpTest, LayerDoneRightAfterItsBackwardWhenTicketIsDone) {
  const int batch = 5;
  const std::vector<float> x = RandomInputs(batch * 6, 13);
  const std::vector<int32_t> labels = {2, 1, 0, 0, 1};
  WrappedBackend backend(/*host_memory=*/false, /*defer_downloads=*/true,
                         /*polls_until_done=*/0);
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 4, 3}, batch, &backend);
  ASSERT_NE(mlp, nullptr);
  InitParams(*mlp, 4);
  std::vector<int> order, gemms_at;
  mlp->TrainStep(
      x.data(), labels.data(), batch,
      [&](int layer) {
        order.push_back(layer);
        gemms_at.push_back(backend.gemms());
      },
      nullptr);
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(gemms_at, (std::vector<int>{5, 7, 8}));
}

// Layers in pieces compute what whole layers do. On a device whose
// downloads land late, each piece is reported once its rows have landed, in
// order, before its layer; the forward pass asks for each piece's rows
// before it reads them.
TEST(MlpTest, WeightPiecesGiveTheSameStepAndReportRowsInOrder) {
  const int batch = 7;
  const std::vector<int> layers = {9, 6, 5, 3};
  const std::vector<float> x = RandomInputs(batch * 9, 21);
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2, 2};
  WrappedBackend reference_backend(/*host_memory=*/true);
  std::unique_ptr<Mlp> reference = MakeMlp(layers, batch, &reference_backend);
  ASSERT_NE(reference, nullptr);
  InitParams(*reference, 5);
  const float reference_loss = reference->TrainStep(x.data(), labels.data(), batch, kNoCallback, nullptr);

  for (bool host_memory : {true, false}) {
    SCOPED_TRACE(host_memory ? "host memory" : "device");
    WrappedBackend backend(host_memory, /*defer_downloads=*/!host_memory, /*polls_until_done=*/2);
    std::unique_ptr<Mlp> mlp = MakeMlp(layers, batch, &backend);
    ASSERT_NE(mlp, nullptr);
    InitParams(*mlp, 5);
    ASSERT_TRUE(mlp->SetWeightPieces(0, {2, 3, 7, 9}).ok());
    ASSERT_TRUE(mlp->SetWeightPieces(1, {4, 6}).ok());
    std::vector<std::string> events;
    Mlp::StepHooks hooks;
    hooks.need_rows = [&](int layer, int rows) { events.push_back(absl::StrCat("need ", layer, ":", rows)); };
    hooks.rows_done = [&](int layer, int rows) {
      events.push_back(absl::StrCat("rows ", layer, ":", rows));
      const auto got = mlp->host_grad(2 * layer).first(static_cast<size_t>(rows) * layers[layer + 1]);
      const auto want = reference->host_grad(2 * layer).first(got.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << "element " << i;
    };
    hooks.layer_done = [&](int layer) { events.push_back(absl::StrCat("layer ", layer)); };
    const float loss = mlp->TrainStep(x.data(), labels.data(), batch, hooks, nullptr);
    EXPECT_NEAR(loss, reference_loss, 1e-6);
    EXPECT_EQ(events, (std::vector<std::string>{"need 0:2", "need 0:3", "need 0:7", "need 0:9", "need 1:4", "need 1:6",
                                                "layer 2", "rows 1:4", "rows 1:6", "layer 1", "rows 0:2", "rows 0:3",
                                                "rows 0:7", "rows 0:9", "layer 0"}));
    const auto want = Grads(*reference);
    const auto got = Grads(*mlp);
    for (size_t t = 0; t < want.size(); ++t) {
      ASSERT_EQ(got[t].size(), want[t].size());
      for (size_t i = 0; i < want[t].size(); ++i) EXPECT_NEAR(got[t][i], want[t][i], 1e-5) << t << ":" << i;
    }
  }
}

// A worker on a device uploads each piece's rows as its pull lands
// (RowsToDevice in need_rows): the forward pass reads the rows it was given,
// and a piece not yet uploaded still holds the old values.
TEST(MlpTest, PiecesUploadedRowByRowOnADevice) {
  const int batch = 5;
  const std::vector<int> layers = {8, 6, 3};
  const std::vector<float> x = RandomInputs(batch * 8, 23);
  const std::vector<int32_t> labels = {0, 1, 2, 1, 0};
  WrappedBackend host_backend(/*host_memory=*/true);
  std::unique_ptr<Mlp> reference = MakeMlp(layers, batch, &host_backend);
  WrappedBackend device_backend(/*host_memory=*/false);
  std::unique_ptr<Mlp> device = MakeMlp(layers, batch, &device_backend);
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(device, nullptr);
  InitParams(*reference, 3);
  InitParams(*device, 3);  // in host_param only: nothing uploaded yet
  ASSERT_TRUE(device->SetWeightPieces(0, {3, 8}).ok());
  const float want = reference->TrainStep(x.data(), labels.data(), batch, kNoCallback, nullptr);
  std::vector<std::string> uploads;
  Mlp::StepHooks hooks;
  hooks.need_rows = [&](int layer, int end_row) {
    const int from = uploads.empty() ? 0 : 3;
    device->RowsToDevice(layer, from, end_row);
    uploads.push_back(absl::StrCat(layer, ":", from, "-", end_row));
  };
  device->ParamsToDevice(1);  // the layer in one piece
  // Each step's gradient in a buffer of its own, as a trainer lends them.
  std::vector<std::vector<float>> lent;
  for (int t = 0; t < device->num_tensors(); ++t) {
    lent.emplace_back(device->host_grad(t).size(), -1.0f);
    device->SetHostGrad(t, lent.back().data());
  }
  const float got = device->TrainStep(x.data(), labels.data(), batch, hooks, nullptr);
  EXPECT_NEAR(got, want, 1e-6);  // pieces sum the rows in another order
  EXPECT_EQ(uploads, (std::vector<std::string>{"0:0-3", "0:3-8"}));
  for (int t = 0; t < device->num_tensors(); ++t) {
    EXPECT_EQ(device->host_grad(t).data(), lent[t].data());
    for (size_t i = 0; i < lent[t].size(); ++i) {
      ASSERT_NEAR(lent[t][i], reference->host_grad(t)[i], 1e-5) << "tensor " << t << " element " << i;
    }
    device->SetHostGrad(t, nullptr);  // the model's own again
    EXPECT_NE(device->host_grad(t).data(), lent[t].data());
  }
}

TEST(MlpTest, WeightPiecesThatDoNotTileTheRowsAreRefused) {
  CpuBackend backend(1);
  std::unique_ptr<Mlp> mlp = MakeMlp({9, 6, 3}, 4, &backend);
  ASSERT_NE(mlp, nullptr);
  EXPECT_THAT(mlp->SetWeightPieces(0, {3, 3, 9}).message(), HasSubstr("layer 0: piece 1 ends at row 3"));
  EXPECT_THAT(mlp->SetWeightPieces(0, {3, 10}).message(), HasSubstr("ends must increase within (0, 9]"));
  EXPECT_THAT(mlp->SetWeightPieces(1, {2, 5}).message(), HasSubstr("the last piece ends at row 5, not at 6"));
  EXPECT_EQ(mlp->SetWeightPieces(2, {1}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(mlp->SetWeightPieces(0, {}).ok());  // one piece again
}

TEST(MlpTest, EvaluateKnownCaseInSeveralBatches) {
  CpuBackend backend(1);
  std::unique_ptr<Mlp> mlp = MakeMlp({2, 2}, 2, &backend);  // one layer: logits = x W + b
  ASSERT_NE(mlp, nullptr);
  const std::vector<float> identity = {1, 0, 0, 1};
  std::copy(identity.begin(), identity.end(), mlp->host_param(0).begin());
  mlp->ParamsToDevice(0);
  const std::vector<float> x = {1, 0, 0, 1, 3, 1, 0, 2, 1, 1.5f};
  const std::vector<int32_t> labels = {0, 1, 0, 0, 1};
  const Mlp::Evaluation eval = mlp->Evaluate(x.data(), labels.data(), 5);
  EXPECT_DOUBLE_EQ(eval.accuracy, 0.8);  // row 3 has logits (0, 2) and label 0
  // Two-class cross-entropy: log(1 + exp(other - own)).
  const double want = (2 * std::log1p(std::exp(-1.0)) + std::log1p(std::exp(-2.0)) + std::log1p(std::exp(2.0)) +
                       std::log1p(std::exp(-0.5))) /
                      5;
  EXPECT_NEAR(eval.loss, want, 1e-6);
  const Mlp::Evaluation empty = mlp->Evaluate(x.data(), labels.data(), 0);
  EXPECT_EQ(empty.accuracy, 0.0);
  EXPECT_EQ(empty.loss, 0.0);
}

// Three well-separated clusters in the plane; plain SGD on host_param.
TEST(MlpTest, SgdLearnsSeparableProblem) {
  CpuBackend backend(1);
  const int n = 60;
  std::unique_ptr<Mlp> mlp = MakeMlp({2, 16, 3}, n, &backend);
  ASSERT_NE(mlp, nullptr);
  InitParams(*mlp, 77);
  const float centers[3][2] = {{2.0f, 0.0f}, {-1.0f, 1.7f}, {-1.0f, -1.7f}};
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<float> x(n * 2);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) {
    labels[i] = i % 3;
    x[2 * i] = centers[i % 3][0] + noise(rng);
    x[2 * i + 1] = centers[i % 3][1] + noise(rng);
  }
  const Mlp::Evaluation before = mlp->Evaluate(x.data(), labels.data(), n);
  float loss = 0;
  int correct = 0;
  for (int step = 0; step < 300; ++step) {
    loss = mlp->TrainStep(
        x.data(), labels.data(), n,
        [&](int layer) {
          for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
            absl::Span<float> p = mlp->host_param(t);
            absl::Span<const float> g = mlp->host_grad(t);
            for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.1f * g[i];
          }
          mlp->ParamsToDevice(layer);
        },
        &correct);
  }
  const Mlp::Evaluation after = mlp->Evaluate(x.data(), labels.data(), n);
  EXPECT_LT(after.loss, 0.05);
  EXPECT_LT(after.loss, before.loss / 10);
  EXPECT_EQ(after.accuracy, 1.0);
  EXPECT_EQ(correct, n);
  EXPECT_LT(loss, 0.05f);
}

}  // namespace
}  // namespace ps
