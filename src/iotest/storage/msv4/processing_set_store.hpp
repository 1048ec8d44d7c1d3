// Where an MSv4 processing set lives and how its life goes
// (output/output_store.hpp): on a folder or under an S3 prefix, written
// by every writer of the run (an MSv4 each) and published by its claim,
// which writes the root's zarr.json, with every node's metadata
// consolidated, last: before it, xradio and zarr open nothing.
// - On a folder: the file system's claim of a folder output (O_EXCL
//   mkdir, the lock, one rename; file_claim.hpp); the root is written
//   once the set has its final name, so no folder, partial or final, is
//   ever a complete set before the run has published it.
// - On S3: the claim is the root key's multipart upload (the s3
//   back-end's claim, s3_store.hpp: of two runs, the older upload goes
//   ahead); the writers' objects go under the set's own prefix, and
//   completing the root's upload publishes the set whole. An object store
//   cannot swap a whole prefix, so a run refuses a name that holds a
//   published set (remove it first) and clears what a failed run left
//   under it (no root: nothing published).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "iotest/storage/msv4/zarr_store.hpp"
#include "iotest/storage/output/output_store.hpp"

namespace iotest::storage::msv4 {

const OutputStore& processing_set_store();

// The root's zarr.json of the set in `store`, from its MSv4 groups'
// (stem_0, stem_1, ... as many as their iotest attribute says), each
// written last by its writer; std::runtime_error where one is missing.
nlohmann::json root_of(ZarrStore& store, const std::string& stem);

}  // namespace iotest::storage::msv4
