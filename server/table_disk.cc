#include "server/table_disk.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/file_errors.h"
#include "common/raw_bytes.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_buffer_manager.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr size_t kKeyBytes = 12;
constexpr size_t kHeaderBytes = 16;  // steps, last_seen

void PutBigEndian(char* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
}

uint64_t GetBigEndian(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

struct Key {
  char bytes[kKeyBytes];
  Key(uint32_t shard, uint64_t id) {
    PutBigEndian(bytes, shard, 4);
    PutBigEndian(bytes + 4, id, 8);
  }
  rocksdb::Slice slice() const { return rocksdb::Slice(bytes, kKeyBytes); }
};

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  return absl::InternalError(message);
}

// Parses a stored value; false when its size is not a row's.
bool ParseRow(const rocksdb::Slice& v, size_t row_floats, TableDisk::Row* row) {
  if (v.size() != kHeaderBytes + row_floats * sizeof(float)) return false;
  std::memcpy(&row->steps, v.data(), 8);
  std::memcpy(&row->last_seen, v.data() + 8, 8);
  row->floats.resize(row_floats);
  std::memcpy(row->floats.data(), v.data() + kHeaderBytes, row_floats * sizeof(float));
  return true;
}

rocksdb::Options StoreOptions(const TableDisk::Options& o, const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::Options opts;
  opts.create_if_missing = true;
  opts.compression = rocksdb::kNoCompression;  // trained floats do not compress
  // One background job: on a small machine compaction competes with the
  // server's own thread (measured: a second job lowered rows/s).
  opts.max_background_jobs = 1;
  opts.max_open_files = 512;
  // Evicted rows are rewritten often: universal compaction, allowed 4x
  // space amplification and 8 sorted runs before it merges, rewrites each
  // byte far fewer times than leveled (measured in table_disk_bench:
  // leveled compaction took a core of 2; this doubled the disk rows/s).
  opts.compaction_style = rocksdb::kCompactionStyleUniversal;
  opts.compaction_options_universal.max_size_amplification_percent = 400;
  opts.compaction_options_universal.size_ratio = 20;
  opts.level0_file_num_compaction_trigger = 8;
  opts.use_direct_reads = o.direct_reads;
  // A quarter of the store's memory per memtable, two of them, charged to
  // the cache with the index and filter blocks.
  opts.write_buffer_size = std::max<uint64_t>(o.memory_bytes / 4, 1 << 20);
  opts.max_write_buffer_number = 2;
  opts.write_buffer_manager = std::make_shared<rocksdb::WriteBufferManager>(o.memory_bytes / 2, cache);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  // Index and filters partitioned, their top levels pinned, the partitions
  // cached with high priority: lookups read at most the row's block even
  // when the cache is small next to the store.
  table.cache_index_and_filter_blocks = true;
  table.cache_index_and_filter_blocks_with_high_priority = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.pin_top_level_index_and_filter = true;
  table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table.partition_filters = true;
  // New ids miss the disk: the filter answers them without a read.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.block_size = 8192;
  opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return opts;
}

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

// Copies `source` into a new `target`: hard links for table files (never
// changed once written), copies for the rest (RocksDB appends to them).
absl::Status CopyStore(const std::string& source, const std::string& target) {
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot make ", target, ": ", ec.message()));
  for (const fs::directory_entry& e : fs::directory_iterator(source, ec)) {
    const fs::path to = fs::path(target) / e.path().filename();
    if (e.path().extension() == ".sst") {
      fs::create_hard_link(e.path(), to, ec);
      if (!ec) continue;
    }
    fs::copy_file(e.path(), to, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot copy ", e.path().string(), ": ", ec.message()));
  }
  if (ec) return absl::NotFoundError(absl::StrCat("table snapshot ", source, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

TableDisk::TableDisk(Options options, int lock_fd)
    : options_(std::move(options)), lock_fd_(lock_fd), cache_(rocksdb::NewLRUCache(options_.memory_bytes)) {}

TableDisk::~TableDisk() {
  CloseDb();
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

absl::Status TableDisk::OpenDb() {
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(StoreOptions(options_, cache_), options_.dir + "/live", &db);
  if (!s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("table store ", options_.dir, "/live: ", s.ToString()));
  }
  db_.reset(db);
  return absl::OkStatus();
}

void TableDisk::CloseDb() {
  if (db_ == nullptr) return;
  if (rocksdb::Status s = db_->Close(); !s.ok()) LOG(WARNING) << "table store " << options_.dir << ": " << s.ToString();
  db_.reset();
}

absl::Status TableDisk::RestoreFrom(const std::string& source) {
  CloseDb();
  const std::string live = options_.dir + "/live";
  std::error_code ec;
  fs::remove_all(live, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", live, ": ", ec.message()));
  if (!source.empty()) PS_RETURN_IF_ERROR(CopyStore(source, live));
  return OpenDb();
}

absl::Status TableDisk::Snapshot(const std::string& target) {
  rocksdb::FlushOptions flush;
  PS_RETURN_IF_ERROR(FromRocks(db_->Flush(flush), absl::StrCat("flushing the table store ", options_.dir)));
  rocksdb::Checkpoint* raw = nullptr;
  PS_RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), "table store checkpoint"));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  return FromRocks(checkpoint->CreateCheckpoint(target), absl::StrCat("table store snapshot ", target));
}

uint64_t TableDisk::DiskBytes() const {
  uint64_t sst = 0, mem = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kLiveSstFilesSize, &sst);
  db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &mem);
  return sst + mem;
}

absl::Status TableDisk::Put(uint32_t shard, uint64_t id, uint64_t steps, uint64_t last_seen,
                            absl::Span<const float> floats) {
  if (options_.max_bytes > 0 && DiskBytes() >= options_.max_bytes) {
    refusals_.fetch_add(1);
    return absl::ResourceExhaustedError(
        absl::StrCat("table store ", options_.dir, " is at --table_disk_max_gb (", options_.max_bytes, " bytes)"));
  }
  std::string value(kHeaderBytes + floats.size() * sizeof(float), '\0');
  std::memcpy(value.data(), &steps, 8);
  std::memcpy(value.data() + 8, &last_seen, 8);
  std::memcpy(value.data() + kHeaderBytes, floats.data(), floats.size() * sizeof(float));
  rocksdb::WriteOptions w;
  w.disableWAL = true;  // checkpoints flush first: they are the durability
  const absl::Status s = FromRocks(db_->Put(w, Key(shard, id).slice(), value), "table store write");
  if (!s.ok()) {
    refusals_.fetch_add(1);
    return s;
  }
  writes_.fetch_add(1);
  return absl::OkStatus();
}

void TableDisk::MultiGet(uint32_t shard, absl::Span<const uint64_t> ids, size_t row_floats, std::vector<Row>* rows,
                         std::vector<bool>* found) {
  const size_t n = ids.size();
  rows->resize(n);
  found->assign(n, false);
  if (n == 0) return;
  std::vector<Key> keys;
  keys.reserve(n);
  std::vector<rocksdb::Slice> slices;
  slices.reserve(n);
  for (uint64_t id : ids) {
    keys.emplace_back(shard, id);
    slices.push_back(keys.back().slice());
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions r;
  r.fill_cache = false;  // rows come into the shard's memory, not the cache
  db_->MultiGet(r, db_->DefaultColumnFamily(), n, slices.data(), values.data(), statuses.data());
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok() || !ParseRow(values[i], row_floats, &(*rows)[i])) {
      LOG_EVERY_N(ERROR, 1000) << "table store " << options_.dir << ": row " << ids[i] << " of slice " << shard
                               << " unreadable: " << (statuses[i].ok() ? "wrong size" : statuses[i].ToString());
      continue;
    }
    (*found)[i] = true;
    reads_.fetch_add(1);
  }
}

absl::Status TableDisk::Delete(uint32_t shard, uint64_t id) {
  rocksdb::WriteOptions w;
  w.disableWAL = true;
  return FromRocks(db_->Delete(w, Key(shard, id).slice()), "table store delete");
}

absl::Status TableDisk::ForEachId(uint32_t shard, absl::FunctionRef<void(uint64_t)> fn) const {
  rocksdb::ReadOptions r;
  r.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(r));
  for (it->Seek(Key(shard, 0).slice()); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != kKeyBytes || GetBigEndian(k.data(), 4) != shard) break;
    fn(GetBigEndian(k.data() + 4, 8));
  }
  return FromRocks(it->status(), absl::StrCat("listing table store ", options_.dir));
}

absl::Status TableDisk::ForEachRow(const std::string& path, uint32_t shard, size_t row_floats,
                                   absl::FunctionRef<absl::Status(uint64_t id, const Row& row)> fn) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Options opts;
  PS_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(opts, path, &raw), absl::StrCat("table snapshot ", path)));
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::ReadOptions r;
  r.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(r));
  const Key first(shard, 0);
  Row row;
  for (it->Seek(first.slice()); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != kKeyBytes || GetBigEndian(k.data(), 4) != shard) break;
    const uint64_t id = GetBigEndian(k.data() + 4, 8);
    if (!ParseRow(it->value(), row_floats, &row)) {
      return absl::DataLossError(absl::StrCat("table snapshot ", path, ": row ", id, " of slice ", shard, " has ",
                                              it->value().size(), " bytes, not a row of ", row_floats, " floats"));
    }
    PS_RETURN_IF_ERROR(fn(id, row));
  }
  return FromRocks(it->status(), absl::StrCat("reading table snapshot ", path));
}

}  // namespace ps
