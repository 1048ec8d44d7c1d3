// Where a back-end's outputs are kept, and every call of an output's life
// there that is not a write or a read: claim, free space, "is it there",
// where an unclaimed writer writes, where a run's output is kept aside.
// IOR keeps such calls in its back-ends' one table (create, stat, rename,
// remove); here they are this table, and a back-end names its store
// (BackendSpec::store). Files and folders share one (file_store.hpp); an
// object store has its own in its back-end's folder.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "iotest/storage/output/output_claim.hpp"

namespace iotest::storage {

class OutputStore {
 public:
  virtual ~OutputStore() = default;
  // Whether `path` names a place of this store: its URL's scheme
  // (s3://...), or, the file system's, no scheme.
  virtual bool holds(const std::string& path) const = 0;
  // What such names are, for a message: "a path", "an s3://BUCKET/KEY URL".
  virtual std::string names() const = 0;
  // The run's claim on output `path` (UsageError(option) where it cannot
  // be made: an unwritable place, another live run writing it).
  virtual std::unique_ptr<OutputClaim> claim(const std::string& path, std::uint32_t nonce,
                                             const std::string& option) const = 0;
  // Whether an output can be made at `path`, before any work, without
  // claiming it (a writer of a shared output that another rank claims).
  virtual void check_creatable(const std::string& path, const std::string& option) const = 0;
  // What `plan` checks on a login node before a job waits in the queue:
  // where this host sees the place (a file system), as check_creatable;
  // elsewhere the name's form only (a store the compute nodes reach, with
  // the keys of the job's environment).
  virtual void check_name(const std::string& path, const std::string& option) const {
    check_creatable(path, option);
  }
  // Where a writer of a shared output it did not claim writes: the claim's
  // partial(), found from the run's nonce.
  virtual std::string partial_of(const std::string& path, std::uint32_t nonce) const = 0;
  // The place outputs share room in (a folder, a bucket), and the bytes
  // free there; nothing where the store cannot say.
  virtual std::string place_of(const std::string& path) const = 0;
  virtual std::optional<double> free_bytes(const std::string& place) const = 0;
  // Whether an output is at `path` (a reader's first question).
  virtual bool exists(const std::string& path) const = 0;
  // One name per output, however given (out/./a.h5 and out/a.h5), so a
  // set does not take one output twice.
  virtual std::string identity(const std::string& path) const = 0;
  // Whether an output begun and not published holds anything that a run
  // ending early must take back (an object store's uploads: invisible,
  // but holding space; a file's .partial needs nothing), and the taking:
  // every unpublished output under these names, whichever rank began it.
  virtual bool keeps_unpublished() const { return false; }
  virtual void drop_unpublished(const std::vector<std::string>& /*paths*/) const {}
};

// The store that holds `path` (registry.cpp); UsageError(path) where none does.
const OutputStore& store_of(const std::string& path);

}  // namespace iotest::storage
