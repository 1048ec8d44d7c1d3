// An output's life, whatever keeps it (docs/storage.md, "Outputs that
// belong to their run"): claimed before any work, written where only its
// run writes (partial()), then published under its name, or dropped. A
// file system does this with O_EXCL, a lock and a rename (FileClaim); an
// object store with an upload that is completed or aborted. The run
// publishes in two steps, so that a run of many outputs (ranks) publishes
// all of them or none: take() each, then commit() each, or keep() each
// where one could not be taken.
#pragma once

#include <string>

#include "iotest/common/file_layout.hpp"

namespace iotest::storage {

class OutputClaim {
 public:
  virtual ~OutputClaim() = default;  // unless published or kept: the output dropped

  // Every claim of this run made, none given way: another run that finds
  // this claim from now on gives way at once.
  virtual void go_ahead() const = 0;
  // The output's name, as given.
  virtual const std::string& path() const = 0;
  // Where its writer writes until it is published: a file's in-progress
  // name, an object's upload. Only this run writes there.
  virtual const std::string& partial() const = 0;
  // A published output replaces one that was under its name before.
  virtual bool replaces() const = 0;
  // Where keep() puts this output, for the line that says so; empty where
  // keep() drops it (an object store cannot rename an upload).
  virtual std::string kept_name() const = 0;
  // --file-layout on the output while it is empty: empty, or why not.
  virtual std::string set_layout(const FileLayout& request) const = 0;
  // Gives the output its name; empty, or the one line saying which other
  // run's output holds the name.
  virtual std::string take() = 0;
  // Every output of the run taken: the claim ends, the output published.
  virtual void commit() = 0;
  // Some output could not be taken: this one kept aside (returns where),
  // and nothing published under its name by this run.
  virtual std::string keep() = 0;
};

// One output's publishing when it is the only one (a command of one
// process): take, then commit, or keep and throw std::runtime_error.
void publish(OutputClaim& claim);

}  // namespace iotest::storage
