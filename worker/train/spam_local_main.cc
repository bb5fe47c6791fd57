// spam_local: trains the spam/ham text classifier in one process (no
// servers) on the 80% training split of the SpamAssassin corpus and prints,
// after each epoch, one JSON line with the test split's accuracy and AUC.
// The reference for the distributed example; see worker/train/local_text_trainer.h.
#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "common/base/status_macros.h"
#include "worker/data/spam_corpus.h"
#include "worker/train/local_text_trainer.h"

ABSL_FLAG(std::string, dir, ps::kDefaultSpamDir, "The corpus (scripts/fetch_spam_assassin.sh).");
ABSL_FLAG(int, dim, 32, "Embedding width.");
ABSL_FLAG(int, hidden, 0, "Width of the ReLU layer; 0: a linear head.");
ABSL_FLAG(int, epochs, 5, "Passes over the training split.");
ABSL_FLAG(int, batch, 32, "Messages per step.");
ABSL_FLAG(double, row_lr, 0.2, "Adagrad learning rate of the embedding rows.");
ABSL_FLAG(double, dense_lr, 0.05, "Adagrad learning rate of the dense tensors.");
ABSL_FLAG(double, init_scale, 0.1, "Rows start uniform in [-init_scale, init_scale).");
ABSL_FLAG(uint64_t, seed, 1, "Seed of initialisation and shuffling.");
ABSL_FLAG(int64_t, max_tokens, 20000, "Tokens read per message.");
ABSL_FLAG(bool, bigrams, true, "Use bigrams as well as unigrams.");

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

ps::LocalTrainOptions OptionsFromFlags() {
  ps::LocalTrainOptions o;
  o.model.dim = absl::GetFlag(FLAGS_dim);
  o.model.hidden = absl::GetFlag(FLAGS_hidden);
  o.batch_size = absl::GetFlag(FLAGS_batch);
  o.row_lr = static_cast<float>(absl::GetFlag(FLAGS_row_lr));
  o.dense_lr = static_cast<float>(absl::GetFlag(FLAGS_dense_lr));
  o.init_scale = static_cast<float>(absl::GetFlag(FLAGS_init_scale));
  o.seed = absl::GetFlag(FLAGS_seed);
  return o;
}

absl::Status Run() {
  const auto start = std::chrono::steady_clock::now();
  PS_ASSIGN_OR_RETURN(const std::vector<ps::SpamMessage> corpus, ps::ReadSpamCorpus(absl::GetFlag(FLAGS_dir)));
  const ps::TokenOptions tokens{.max_tokens = static_cast<size_t>(absl::GetFlag(FLAGS_max_tokens)),
                                .bigrams = absl::GetFlag(FLAGS_bigrams)};
  PS_ASSIGN_OR_RETURN(const std::vector<size_t> train_index, ps::TrainingShard(corpus, 0, 1));
  const std::vector<ps::LabeledTokens> train = ps::TokenizeMessages(corpus, train_index, tokens);
  const std::vector<ps::LabeledTokens> test = ps::TokenizeMessages(corpus, ps::TestMessages(corpus), tokens);
  std::printf("%s\n", ps::JsonLine()
                          .Add("train", train.size())
                          .Add("test", test.size())
                          .Add("load_s", SecondsSince(start), 2)
                          .Str()
                          .c_str());
  PS_ASSIGN_OR_RETURN(auto trainer, ps::LocalTextTrainer::Create(OptionsFromFlags()));
  for (int epoch = 1; epoch <= absl::GetFlag(FLAGS_epochs); ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(const double train_loss, trainer->TrainEpoch(train));
    const ps::Evaluation e = trainer->Evaluate(test);
    std::printf("%s\n", ps::JsonLine()
                            .Add("epoch", epoch)
                            .Add("train_loss", train_loss, 5)
                            .Add("test_loss", e.loss, 5)
                            .Add("test_accuracy", e.accuracy, 4)
                            .Add("test_auc", e.auc, 5)
                            .Add("rows", trainer->table().size())
                            .Add("epoch_s", SecondsSince(epoch_start), 2)
                            .Str()
                            .c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "spam_local: trains the spam classifier locally, reports test accuracy/AUC.");
  return ps::ExitCode(Run(), "spam_local");
}
