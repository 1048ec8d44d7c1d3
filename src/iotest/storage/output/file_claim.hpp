// A run's outputs are its own (docs/storage.md, "Outputs that belong to
// their run"). Jobs share scratch folders: the tasks of a job array, a job
// re-submitted while the first still runs, two people with the same
// defaults. So:
// - while a run writes PATH, its output is PATH.run-<nonce>.partial,
//   created exclusively (O_EXCL): no other run opens, truncates, replaces
//   or renames it, whatever its options or host;
// - the run holds a lock (an open-file-description lock, the kind NFS,
//   Lustre, GPFS and CephFS carry between hosts) on a file beside it,
//   PATH.run-<nonce>.lock.partial, until the output is published or
//   dropped, so another run tells a live writer of PATH from the leftovers
//   of one that died, and refuses before any work, without opening the
//   output itself (which on a parallel file system costs the writer);
// - a run whose every claim is made goes ahead (go_ahead()), and another
//   run that finds it then gives way at once; of two runs that claim PATH
//   together, both still looking, the smaller nonce gets it;
// - the output takes its final name only through take()/commit(), which
//   never replace a file other than the one that was under PATH when the
//   run began (a run re-run in one folder replaces its earlier outputs, as
//   IOR and fio do); another run's output that appeared meanwhile is left
//   alone, and this run's is kept as kept_path() instead.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "iotest/common/file_layout.hpp"
#include "iotest/storage/output/output_claim.hpp"

namespace iotest::storage {

// Where an output is written until it is complete: PATH.run-<nonce>.partial
// (the nonce in decimal, as reports and `verify --nonce` give it).
std::string partial_path(const std::string& path, std::uint32_t nonce);
// Where a complete output stays when another run's output took its final
// name: the run before the extension, out0.run-<nonce>.h5 (works on a
// pattern too: out%d.run-<nonce>.h5 is what `verify` takes).
std::string kept_path(const std::string& path, std::uint32_t nonce);
// `text` before the path's extension (after its name if it has none):
// out.h5 -> out<text>.h5. A leading dot is not an extension.
std::string before_extension(const std::string& path, const std::string& text);
// The folder an output goes to ("." for a bare name).
std::string folder_of(const std::string& path);

// Whether a file can be created at `path`, before any work: not a folder,
// its folder there and taking new files (found by creating and removing a
// probe of this process's own name: a read-only mount or an immutable
// folder, which access() lets root through). UsageError(option) otherwise.
// `folder`: the output is a folder (a MeasurementSet, a casacore table):
// a folder there is replaced only if it is a casacore table, so a mistyped
// name never takes a folder of the user's.
void check_creatable(const std::string& path, const std::string& option, bool folder = false);

// A file's identity: device, inode and modification time (an inode number
// freed and used again by a file made later has a later time).
struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  time_t mtime_s = 0;
  long mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// A run's claim on one file (or folder) output. Throws UsageError(option) if the path cannot
// take a file (check_creatable), or another live run writes to the same
// final name (naming its in-progress file).
//
// A folder output (`folder`: a MeasurementSet) is claimed the same way:
// its in-progress folder made exclusively (mkdir), its lock file beside
// it, published whole by one rename
// (renameat2 exchange or no-replace; folders take no hard link), and
// removed whole when dropped.
class FileClaim final : public OutputClaim {
 public:
  // A run that goes ahead (go_ahead()) keeps its outputs; of two runs
  // that claim the same name at once, still looking, the one of the
  // smaller nonce gets it, and the other is refused. A claim that finds
  // only larger nonces' claims, still looking, waits up to `tie_wait` for
  // them to give way or go ahead.
  static constexpr std::chrono::milliseconds kTieWait{10000};
  FileClaim(std::string path, std::uint32_t nonce, std::string option = "OUTPUT",
            bool folder = false, std::chrono::milliseconds tie_wait = kTieWait);
  FileClaim(FileClaim&& other) noexcept;
  FileClaim& operator=(FileClaim&&) = delete;
  FileClaim(const FileClaim&) = delete;
  // Unless published or kept: its in-progress file removed (if still ours).
  ~FileClaim() override;

  // Every claim of this run made, none given way: another run that finds
  // this claim from now on gives way at once, whatever its nonce. (Until
  // then it is still looking, and the smaller nonce wins.)
  void go_ahead() const override;

  const std::string& path() const override { return path_; }
  const std::string& partial() const override { return partial_; }
  // A file was under the final name when the claim was made: publishing
  // replaces it.
  bool replaces() const override { return replaces_; }
  std::string kept_name() const override { return kept_path(path_, nonce_); }

  // --file-layout: sets `request` on the in-progress file while it is
  // still empty (a folder output: on the folder, which what is made in it
  // inherits). The back-ends write into that file, truncating it at most
  // (which keeps a layout; removing and creating it again would lose
  // it). Empty, or why not (common/file_layout.hpp).
  std::string set_layout(const FileLayout& request) const override {
    return set_file_layout(fd_, partial_, folder_, request);
  }

  // Publishing is in two steps, so that a run of many outputs (ranks)
  // publishes all of them or none. take() gives the output its final name
  // while the partial name, or the file it replaces, is still at hand;
  // empty, or the one line saying which other run's file holds the name.
  std::string take() override;
  // Every output of the run taken: the partial name (or the replaced file)
  // let go, the claim ends.
  void commit() override;
  // Some output could not be taken: the final name as it was before take(),
  // then this output under kept_path(); returns that name.
  std::string keep() override;

 private:
  enum class State { claimed, linked, swapped, renamed, published, kept };
  std::string another_runs() const;
  bool is_ours(const std::string& name) const;
  void release() noexcept;

  std::string path_, partial_, lock_path_;
  std::uint32_t nonce_ = 0;
  int fd_ = -1;       // the in-progress output's
  int lock_fd_ = -1;  // its lock file's, holding the lock
  dev_t own_dev_ = 0;
  ino_t own_ino_ = 0;
  bool replaces_ = false;
  bool folder_ = false;
  FileIdentity replaced_;  // what is replaced
  State state_ = State::claimed;
};

}  // namespace iotest::storage
