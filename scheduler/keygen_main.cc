// ps_keygen: makes one node's CurveZMQ key pair.
//
//   ps_keygen --out_dir=DIR --name=NAME
//
// writes DIR/NAME.key (public and secret key; created mode 0600 with O_EXCL,
// so it is never readable by others and never overwritten) and DIR/NAME.pub
// (the public key, to hand to the nodes that must admit this one), and
// prints the public key.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/main_support.h"
#include "common/net/security.h"

ABSL_FLAG(std::string, out_dir, "", "Directory for NAME.key and NAME.pub (created, mode 0700, if missing).");
ABSL_FLAG(std::string, name, "", "Name of the node: the files are NAME.key and NAME.pub.");

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "ps_keygen --out_dir=DIR --name=NAME: writes a CurveZMQ key pair.");
  const std::string dir = absl::GetFlag(FLAGS_out_dir);
  const std::string name = absl::GetFlag(FLAGS_name);
  if (dir.empty()) return ps::ExitCode(absl::InvalidArgumentError("out_dir: required"), "ps_keygen");
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ps::ExitCode(
        absl::UnavailableError(absl::StrCat("out_dir: cannot create ", dir, ": ", std::strerror(errno))), "ps_keygen");
  }
  auto keys = ps::GenerateCurveKeyPair();
  if (!keys.ok()) return ps::ExitCode(keys.status(), "ps_keygen");
  if (absl::Status s = ps::WriteKeyPair(dir, name, *keys); !s.ok()) return ps::ExitCode(s, "ps_keygen");
  std::printf("wrote %s/%s.key (secret, mode 0600) and %s/%s.pub\npublic key %s (fingerprint %s)\n", dir.c_str(),
              name.c_str(), dir.c_str(), name.c_str(), keys->public_key.c_str(),
              ps::KeyFingerprint(keys->public_key).c_str());
  return 0;
}
