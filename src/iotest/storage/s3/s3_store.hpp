// The object store's side of an output's life (output/output_store.hpp),
// for `--storage=s3`. An object store has no rename, no lock and no free
// space to ask of; an object appears whole when its multipart upload is
// completed, and an upload never completed is invisible. So:
// - the claim begins the output's upload, before any work: the upload is
//   where the writer writes (partial(): the object's URL and its upload);
// - of the uploads of one key begun and not finished, the oldest goes
//   ahead: a run that finds an older one gives way at once, aborting its
//   own, and says which (a run that died leaves its upload until it is
//   aborted: `rclone backend cleanup`, or the store's lifecycle rule);
// - take() finds whether another run's object took the name since the
//   claim (the clash, as on files); commit() completes the upload, which
//   publishes the object; keep() and the claim's end abort it, so nothing
//   of a run that failed is visible and no upload is left holding space.
#pragma once

#include <string>

#include "iotest/storage/output/output_store.hpp"
#include "iotest/storage/s3/object_url.hpp"

namespace iotest::storage::s3 {

const OutputStore& s3_store();

// Where an S3 writer writes: its object and the upload the claim began,
// as OutputClaim::partial() carries them ("s3://BUCKET/KEY?uploadId=ID").
struct UploadTarget {
  ObjectUrl object;
  std::string upload_id;
};
std::string upload_name(const UploadTarget& target);
UploadTarget parse_upload_name(const std::string& partial);

}  // namespace iotest::storage::s3
