#include "server/disk/table_disk.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/file_errors.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

// Reads in flight at once past the page cache (measured in
// table_disk_bench's disk_direct mode: <kDirectReaders> threads against one).
constexpr int kDirectReaders = 32;

absl::Status CheckWritableDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--table_disk_dir ", dir, ": cannot make it: ", ec.message()));
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--table_disk_dir ", dir, ": not a directory"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--table_disk_dir ", dir, ": not writable: ", strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TableDisk::TableDisk(Options options, int lock_fd)
    : options_(std::move(options)),
      lock_fd_(lock_fd),
      readers_(options_.direct_reads ? std::make_unique<ThreadPool>(kDirectReaders) : nullptr) {}

TableDisk::~TableDisk() {
  CloseAll();
  close(lock_fd_);  // releases the flock
}

absl::StatusOr<std::unique_ptr<TableDisk>> TableDisk::Open(const Options& options, const std::string& owner,
                                                           bool restoring) {
  PS_RETURN_IF_ERROR(CheckWritableDir(options.dir));
  const std::string lock = options.dir + "/LOCK";
  const int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot open", lock);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const std::string holder = ReadSmallFile(lock);
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("--table_disk_dir ", options.dir,
                                                      " is in use by another process (", holder,
                                                      "): each server needs a directory of its own"));
  }
  const std::string me = absl::StrCat("pid ", getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    close(fd);
    return ErrnoError(err, "cannot write", lock);
  }
  const std::string owner_file = options.dir + "/OWNER";
  std::error_code ec;
  if (fs::exists(options.dir + "/live", ec)) {
    const std::string was = ReadSmallFile(owner_file);
    if (!restoring || was != owner) {
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "--table_disk_dir ", options.dir, " holds the table store of ", was.empty() ? "an unknown server" : was,
          restoring ? "" : "; a new server starts with an empty one",
          ": give each server of each job an empty directory, or remove ", options.dir, "/live"));
    }
  }
  std::ofstream(owner_file, std::ios::trunc) << owner;
  std::unique_ptr<TableDisk> disk(new TableDisk(options, fd));
  PS_RETURN_IF_ERROR(disk->RestoreFrom(""));
  return disk;
}

void TableDisk::CloseAll() {
  {
    absl::MutexLock lock(&mu_);
    shards_.clear();
    file_bytes_ = 0;
    memory_ = 0;
  }
  Recharge();
}

void TableDisk::Recharge() {
  absl::MutexLock lock(&charge_mu_);
  const uint64_t total = memory_.load();  // read under the lock: the last to charge sees every change
  const uint64_t over = total > options_.memory_bytes ? total - options_.memory_bytes : 0;
  if (charge_to_ != nullptr) *charge_to_ += over - charged_;  // unsigned wrap-around takes a decrease
  charged_ = over;
}

void TableDisk::ChargeTo(std::atomic<uint64_t>* used) {
  absl::MutexLock lock(&charge_mu_);
  charge_to_ = used;
  charged_ = 0;
}

void TableDisk::Account(Shard& s) {
  const uint64_t file = s.log->file_bytes(), memory = s.log->memory_bytes();
  file_bytes_ += file - s.file_bytes;  // unsigned wrap-around adds a decrease
  s.file_bytes = file;
  if (memory == s.memory) return;
  memory_ += memory - s.memory;
  s.memory = memory;
  Recharge();
}

TableDisk::Shard* TableDisk::Find(uint32_t shard) const {
  absl::MutexLock lock(&mu_);
  auto it = shards_.find(shard);
  return it == shards_.end() ? nullptr : it->second.get();
}

absl::StatusOr<TableDisk::Shard*> TableDisk::Make(uint32_t shard, size_t row_floats) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Shard>& s = shards_[shard];
  if (s == nullptr) s = std::make_unique<Shard>();
  absl::ReleasableMutexLock shard_lock(&s->mu);  // after mu_, as everywhere
  if (s->log == nullptr) {
    absl::StatusOr<std::unique_ptr<TableLog>> log =
        TableLog::Create(absl::StrCat(LiveDir(), "/", shard), row_floats, options_.direct_reads);
    if (!log.ok()) {
      shard_lock.Release();
      shards_.erase(shard);  // no entry without a log
      return log.status();
    }
    s->log = *std::move(log);
  }
  if (s->log->row_floats() != row_floats) {
    return absl::InvalidArgumentError(absl::StrCat("table store ", options_.dir, ": slice ", shard, " holds rows of ",
                                                   s->log->row_floats(), " floats, not ", row_floats));
  }
  return s.get();
}

absl::Status TableDisk::RestoreFrom(const std::string& source, std::vector<Rename>* renames) {
  CloseAll();
  const std::string live = LiveDir();
  std::error_code ec;
  fs::remove_all(live, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", live, ": ", ec.message()));
  fs::create_directories(live, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot make ", live, ": ", ec.message()));
  if (source.empty()) return absl::OkStatus();
  if (fs::exists(fs::path(source) / "CURRENT", ec)) {
    return absl::DataLossError(
        absl::StrCat("table snapshot ", source, " is a RocksDB store (written by an earlier build): not readable"));
  }
  for (const fs::directory_entry& e : fs::directory_iterator(source, ec)) {
    uint32_t shard;
    if (!e.is_directory() || !absl::SimpleAtoi(e.path().filename().string(), &shard)) continue;
    PS_ASSIGN_OR_RETURN(std::unique_ptr<TableLog> log,
                        TableLog::Restore(absl::StrCat(live, "/", shard), e.path().string(), options_.direct_reads));
    PS_RETURN_IF_ERROR(MaybeRename(source, e.path().string(), renames, &shard, &log));
    auto s = std::make_unique<Shard>();
    {
      absl::MutexLock shard_lock(&s->mu);  // not shared yet; the analysis asks for it all the same
      s->log = std::move(log);
      Account(*s);
    }
    absl::MutexLock lock(&mu_);
    shards_[shard] = std::move(s);
  }
  if (ec) return absl::NotFoundError(absl::StrCat("table snapshot ", source, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status TableDisk::MaybeRename(const std::string& source, const std::string& path, std::vector<Rename>* renames,
                                    uint32_t* shard, std::unique_ptr<TableLog>* log) {
  if (renames == nullptr) return absl::OkStatus();
  auto r = std::find_if(renames->begin(), renames->end(), [&](const Rename& r) { return r.from == *shard; });
  if (r == renames->end()) return absl::OkStatus();
  std::error_code ec;
  if ((*log)->rows() != r->rows || fs::exists(fs::path(source) / std::to_string(r->to), ec)) {
    LOG(WARNING) << "table store " << options_.dir << ": log " << r->from << " holds " << (*log)->rows()
                 << " rows, not only the " << r->rows << " of the one table shard here: it stays shared";
    return absl::OkStatus();
  }
  log->reset();
  const std::string from = absl::StrCat(LiveDir(), "/", r->from);
  fs::remove_all(from, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", from, ": ", ec.message()));
  PS_ASSIGN_OR_RETURN(*log, TableLog::Restore(absl::StrCat(LiveDir(), "/", r->to), path, options_.direct_reads));
  *shard = r->to;
  r->done = true;
  return absl::OkStatus();
}

absl::Status TableDisk::Snapshot(const std::string& target) {
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot make ", target, ": ", ec.message()));
  std::vector<uint32_t> keys;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, s] : shards_) keys.push_back(key);
  }
  for (uint32_t key : keys) {
    Shard* s = Find(key);
    absl::MutexLock lock(&s->mu);
    if (s->log == nullptr) continue;  // dropped (DropShard)
    PS_RETURN_IF_ERROR(s->log->Snapshot(absl::StrCat(target, "/", key)));
    Account(*s);
  }
  return FsyncDirectory(target);
}

absl::Status TableDisk::Put(uint32_t shard, uint64_t id, uint64_t steps, uint64_t last_seen,
                            absl::Span<const float> floats, bool replaces) {
  absl::StatusOr<Shard*> made = Make(shard, floats.size());
  if (!made.ok()) {
    refusals_.fetch_add(1);
    return made.status();
  }
  Shard& s = **made;
  absl::MutexLock lock(&s.mu);
  TableLog& log = *s.log;  // Make gave it one
  const auto full = [&] { return options_.max_bytes > 0 && DiskBytes() + log.record_bytes() > options_.max_bytes; };
  if (full()) {
    // Dead records first: compaction may make the room.
    while (full() && log.Compact()) Account(s);
    if (full()) {
      refusals_.fetch_add(1);
      return absl::ResourceExhaustedError(
          absl::StrCat("table store ", options_.dir, " is at --table_disk_max_gb (", options_.max_bytes, " bytes)"));
    }
  }
  const absl::Status status = log.Put(id, steps, last_seen, floats, replaces);
  Account(s);
  (status.ok() ? writes_ : refusals_).fetch_add(1);
  return status;
}

void TableDisk::MultiGet(uint32_t shard, absl::Span<const uint64_t> ids, size_t row_floats, std::vector<Row>* rows,
                         std::vector<bool>* found) {
  rows->resize(ids.size());
  found->assign(ids.size(), false);
  Shard* s = Find(shard);
  if (s == nullptr) return;
  absl::MutexLock lock(&s->mu);
  if (s->log == nullptr || s->log->row_floats() != row_floats) return;
  const TableLog& log = *s->log;                     // the readers below read it while this thread holds the lock
  std::vector<std::pair<size_t, uint32_t>> located;  // (index in ids, location)
  std::vector<size_t> shared;                        // ids whose tag others share: read one by one
  for (size_t i = 0; i < ids.size(); ++i) {
    const LogIndex::Locations locations = s->log->Locate(ids[i]);
    if (locations.size() == 1) located.emplace_back(i, locations[0]);
    if (locations.size() > 1) shared.push_back(i);
  }
  std::vector<uint8_t> read(located.size(), 0);
  const auto read_range = [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      const auto [i, location] = located[k];
      read[k] = log.ReadRow(ids[i], location, &(*rows)[i]) ? 1 : 0;
    }
  };
  if (readers_ != nullptr && located.size() > 1) {
    const size_t parts = std::min<size_t>(located.size(), 4 * kDirectReaders);
    readers_->ParallelFor(parts,
                          [&](size_t p) { read_range(p * located.size() / parts, (p + 1) * located.size() / parts); });
  } else {
    read_range(0, located.size());
  }
  uint64_t n = 0;
  for (size_t k = 0; k < located.size(); ++k) {
    (*found)[located[k].first] = read[k] != 0;
    n += read[k];
  }
  for (size_t i : shared) {
    (*found)[i] = s->log->Get(ids[i], &(*rows)[i]);
    n += (*found)[i] ? 1 : 0;
  }
  reads_.fetch_add(n);
}

void TableDisk::Delete(uint32_t shard, uint64_t id) {
  Shard* s = Find(shard);
  if (s == nullptr) return;
  absl::MutexLock lock(&s->mu);
  if (s->log == nullptr) return;
  s->log->Delete(id);
  Account(*s);
}

uint64_t TableDisk::ScanLive(uint32_t shard, uint64_t max_records, absl::FunctionRef<bool(uint64_t, uint64_t)> drop) {
  Shard* s = Find(shard);
  if (s == nullptr) return 0;
  absl::MutexLock lock(&s->mu);
  if (s->log == nullptr) return 0;
  const uint64_t dropped = s->log->ScanLive(max_records, drop);
  Account(*s);
  return dropped;
}

absl::Status TableDisk::ExportShard(uint32_t shard, absl::FunctionRef<absl::Status(uint64_t, const Row&)> fn) {
  Shard* s = Find(shard);
  if (s == nullptr) return absl::OkStatus();
  const std::string snapshot = absl::StrCat(options_.dir, "/export-", shard);
  std::error_code ec;
  fs::remove_all(snapshot, ec);  // one an earlier export left (a crash)
  size_t row_floats = 0;
  {
    absl::MutexLock lock(&s->mu);
    if (s->log == nullptr) return absl::OkStatus();
    row_floats = s->log->row_floats();
    PS_RETURN_IF_ERROR(s->log->Snapshot(snapshot));
    Account(*s);
  }
  absl::Status status = TableLog::ForEachRow(snapshot, row_floats, fn);
  fs::remove_all(snapshot, ec);
  if (ec && status.ok()) status = absl::InternalError(absl::StrCat("cannot remove ", snapshot, ": ", ec.message()));
  return status;
}

void TableDisk::DropShard(uint32_t shard) {
  Shard* s = Find(shard);
  if (s == nullptr) return;
  {
    absl::MutexLock lock(&s->mu);
    if (s->log == nullptr) return;
    s->log.reset();  // closes its files
    file_bytes_ -= s->file_bytes;
    memory_ -= s->memory;
    s->file_bytes = s->memory = 0;
  }
  Recharge();
  const std::string dir = absl::StrCat(LiveDir(), "/", shard);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) LOG(WARNING) << "table store " << options_.dir << ": cannot remove " << dir << ": " << ec.message();
}

absl::Status TableDisk::ForEachRow(const std::string& path, uint32_t shard, size_t row_floats,
                                   absl::FunctionRef<absl::Status(uint64_t id, const Row& row)> fn) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return absl::NotFoundError(absl::StrCat("table snapshot ", path, ": missing"));
  const std::string source = absl::StrCat(path, "/", shard);
  if (!fs::exists(source, ec)) return absl::OkStatus();  // the shard had no row on disk
  return TableLog::ForEachRow(source, row_floats, fn);
}

}  // namespace ps
