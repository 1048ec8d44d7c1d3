// The store a run's outputs went to, as its back-end describes it for the
// report, as io500 asks a file system to be named: an object store's
// endpoint, its software (the Server header it answers with) and its
// bucket, and how the back-end used it (part size, requests in flight). A
// file system's outputs carry none (their paths say where).
#pragma once

#include <cstdint>
#include <string>

namespace iotest {

struct StoreDescription {
  std::string kind;                     // what the store is, as its back-end says
  std::string endpoint;                 // "http://10.84.1.101:7480"
  std::string server;                   // its Server header ("Ceph Object Gateway (pacific)")
  std::string bucket;                   // where the outputs are
  std::string region;                   // signed into the requests
  std::string credentials_from;         // "environment", or a file and profile (never a key)
  std::int64_t part_bytes = 0;          // bytes a request sends (a multipart upload's part)
  std::int64_t requests_in_flight = 0;  // per writer
};

}  // namespace iotest
