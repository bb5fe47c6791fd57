// ps_export: the trained model out of a job's checkpoints into a file numpy
// and PyTorch read (server/export/exporter.h says what it holds).
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "common/base/json.h"
#include "common/base/main_support.h"
#include "server/export/exporter.h"

ABSL_FLAG(std::string, checkpoint_dir, "", "The job's checkpoint directory (the servers' --checkpoint_dir).");
ABSL_FLAG(std::string, out, "", "The file to write: FILE.npz or FILE.safetensors.");

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "ps_export --checkpoint_dir=DIR --out=FILE.npz|FILE.safetensors: exports a trained model.");
  if (absl::GetFlag(FLAGS_checkpoint_dir).empty() || absl::GetFlag(FLAGS_out).empty()) {
    return ps::ExitCode(absl::InvalidArgumentError("--checkpoint_dir and --out are both required"), "ps_export");
  }
  const absl::StatusOr<ps::ExportSummary> summary =
      ps::ExportCheckpoints(absl::GetFlag(FLAGS_checkpoint_dir), absl::GetFlag(FLAGS_out));
  if (!summary.ok()) return ps::ExitCode(summary.status(), "ps_export");
  std::printf("%s\n", ps::JsonLine()
                          .Add("event", "exported")
                          .Add("out", absl::GetFlag(FLAGS_out))
                          .Add("servers", summary->servers)
                          .Add("tensors", summary->tensors)
                          .Add("tables", summary->model.tables.size())
                          .Add("table_rows", summary->table_rows)
                          .Add("bytes", summary->bytes)
                          .Add("consistency", summary->model.consistency.ToString())
                          .AddRaw("steps", "[" + absl::StrJoin(summary->steps, ",") + "]")
                          .Str()
                          .c_str());
  return 0;
}
