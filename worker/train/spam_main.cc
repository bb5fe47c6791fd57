// ps_spam_worker: trains the spam/ham text classifier on the SpamAssassin
// corpus as one data-parallel worker of a job (token embeddings in the
// servers' table "tokens", see worker/train/spam_trainer.h), printing its progress
// as JSON lines on stdout, as ps_worker does.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/events_flags.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "worker/client/client_flags.h"
#include "worker/train/spam_trainer.h"

ABSL_FLAG(std::string, consistency, "",
          "sync, async or ssp:K (every worker must agree); empty: $PS_CONSISTENCY (the launchers set it), else sync.");
ABSL_FLAG(int, epochs, 3, "Passes over this worker's shard.");
ABSL_FLAG(int, batch_size, 32, "Messages per step per worker.");
ABSL_FLAG(std::string, data_dir, ps::kDefaultSpamDir, "The corpus (scripts/fetch_spam_assassin.sh).");
ABSL_FLAG(int, dim, 32, "Embedding width (the table's row size).");
ABSL_FLAG(int, hidden, 0, "Width of the ReLU layer; 0: a linear head.");
ABSL_FLAG(double, row_lr, 0.2, "Adagrad learning rate of the embedding rows.");
ABSL_FLAG(double, dense_lr, 0.05, "Adagrad learning rate of the dense tensors.");
ABSL_FLAG(double, init_scale, 0.1, "Rows start uniform in [-init_scale, init_scale).");
ABSL_FLAG(uint32_t, admit_after, 0, "Create a row only once its id was pulled this many times (0, 1: at once).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of initialisation and shuffling.");
ABSL_FLAG(int64_t, max_tokens, 20000, "Tokens read per message.");
ABSL_FLAG(bool, bigrams, true, "Use bigrams as well as unigrams.");
ABSL_FLAG(std::string, device, "cpu", "Compute backend: cpu (the only one the text classifier has).");
ABSL_FLAG(std::string, placement, "auto", "Dense tensors: auto, layer or FILE (the table is hash-sharded).");
ABSL_FLAG(int64_t, slice_bytes, 1 << 20, "Largest slice of a tensor under auto placement.");
ABSL_FLAG(int64_t, table_shards, 0, "Shards of the table, moved whole when servers join or leave (0: one per server).");
ABSL_FLAG(absl::Duration, progress_every, absl::Seconds(1.0), "Time between progress lines.");
ABSL_FLAG(absl::Duration, finish_timeout, absl::Seconds(1800), "How long a finished worker waits for the others.");

namespace {

absl::StatusOr<ps::SpamTrainerOptions> OptionsFromFlags() {
  if (absl::GetFlag(FLAGS_device) != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("device: '", absl::GetFlag(FLAGS_device), "'; the text classifier runs on the cpu only"));
  }
  if (absl::GetFlag(FLAGS_max_tokens) < 1) return absl::InvalidArgumentError("max_tokens: must be >= 1");
  ps::SpamTrainerOptions o;
  o.client = ps::ClientOptionsFromFlags();
  PS_ASSIGN_OR_RETURN(o.consistency, ps::Consistency::Parse(ps::WorkerConsistency(absl::GetFlag(FLAGS_consistency))));
  PS_RETURN_IF_ERROR(ps::CompressionFromFlags(&o.compression, &o.compress_min_bytes));
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.tokens.max_tokens = static_cast<size_t>(absl::GetFlag(FLAGS_max_tokens));
  o.tokens.bigrams = absl::GetFlag(FLAGS_bigrams);
  o.model.dim = absl::GetFlag(FLAGS_dim);
  o.model.hidden = absl::GetFlag(FLAGS_hidden);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.row_lr = static_cast<float>(absl::GetFlag(FLAGS_row_lr));
  o.dense_lr = static_cast<float>(absl::GetFlag(FLAGS_dense_lr));
  o.init_scale = static_cast<float>(absl::GetFlag(FLAGS_init_scale));
  o.admit_after = absl::GetFlag(FLAGS_admit_after);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.placement = absl::GetFlag(FLAGS_placement);
  o.slice_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_slice_bytes));
  o.table_shards = absl::GetFlag(FLAGS_table_shards);
  o.progress_every = absl::GetFlag(FLAGS_progress_every);
  o.finish_timeout = absl::GetFlag(FLAGS_finish_timeout);
  PS_RETURN_IF_ERROR(o.Validate());
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "ps_spam_worker --scheduler=HOST:PORT: trains the SpamAssassin text classifier through the servers.");
  if (absl::Status s = ps::OpenEventFileFromFlags(); !s.ok()) return ps::ExitCode(s, "ps_spam_worker");
  auto options = OptionsFromFlags();
  if (!options.ok()) return ps::ExitCode(options.status(), "ps_spam_worker");
  auto result = ps::TrainSpam(*options, [](const ps::TrainEvent& e) {
    std::printf("%s\n", e.ToJson().c_str());
    std::fflush(stdout);
  });
  return ps::ExitCode(result.status(), "ps_spam_worker");
}
