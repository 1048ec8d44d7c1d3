// What the operating system tells about this process and machine.
#pragma once

#include "iotest/common/array.hpp"

namespace iotest {

// Peak resident set size of this process so far, in bytes.
index_t peak_rss_bytes();
// Bytes this machine can still give (MemAvailable), or -1 when unknown.
index_t available_memory_bytes();

}  // namespace iotest
