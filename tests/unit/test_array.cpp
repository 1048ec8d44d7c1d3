// Large buffers are their own mappings, made resident in one call: what
// they must still be is zero, aligned, and resident when asked (mincore).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "iotest/common/array.hpp"

namespace iotest {
namespace {

// Resident pages of [p, p + bytes), the start rounded down to a page.
index_t resident_pages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(p) / page * page;
  const size_t length = reinterpret_cast<uintptr_t>(p) + bytes - start;
  std::vector<unsigned char> flags((length + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(start), length, flags.data()) != 0) return -1;
  index_t n = 0;
  for (unsigned char f : flags) n += f & 1;
  return n;
}

bool all_zero(const cplx* p, index_t n) {
  for (index_t i = 0; i < n; ++i)
    if (p[i] != cplx{}) return false;
  return true;
}

TEST(AlignedBuffer, ALargeOneIsZeroResidentAndOnA2MiBBoundary) {
  const index_t n = (index_t{6} << 20) / 16 + 3;  // 6 MiB and a bit: mapped
  const AlignedBuffer zeroed(n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(zeroed.data()) % (uintptr_t{2} << 20), 0u);
  const size_t bytes = static_cast<size_t>(n) * sizeof(cplx);
  const index_t pages = static_cast<index_t>((bytes + 4095) / 4096);
  EXPECT_EQ(resident_pages(zeroed.data(), bytes), pages);
  EXPECT_TRUE(all_zero(zeroed.data(), n));
}

TEST(AlignedBuffer, AnUnzeroedLargeOneBecomesResidentWhereAsked) {
  const index_t n = (index_t{8} << 20) / 16;
  AlignedBuffer lazy(n, false);
  const size_t bytes = static_cast<size_t>(n) * sizeof(cplx);
  EXPECT_EQ(resident_pages(lazy.data(), bytes), 0);  // nothing touched yet
  const index_t first = 1000, count = (index_t{1} << 20) / 16;  // 1 MiB from an odd start
  lazy.make_resident(first, count);
  const index_t touched = resident_pages(lazy.data() + first, count * 16);
  EXPECT_EQ(touched, static_cast<index_t>((count * 16) / 4096 + 1));  // straddles a page more
  EXPECT_LT(resident_pages(lazy.data(), bytes), static_cast<index_t>(bytes / 4096 / 2));
  EXPECT_TRUE(all_zero(lazy.data() + first, count));
}

TEST(AlignedBuffer, TouchedBuffersAreZeroAndWhollyResident) {
  const auto buffers = touched_buffers(3, 300, 2048, 2);  // 9.4 MiB each
  ASSERT_EQ(buffers.size(), 3u);
  for (const auto& b : buffers) {
    EXPECT_EQ(resident_pages(b.data(), static_cast<size_t>(b.bytes())),
              static_cast<index_t>((b.bytes() + 4095) / 4096));
    EXPECT_TRUE(all_zero(b.data(), b.size()));
  }
}

TEST(AlignedBuffer, SmallOnesAreZeroedAndMovesKeepTheirData) {
  AlignedBuffer small(100);
  EXPECT_TRUE(all_zero(small.data(), 100));
  small.data()[7] = {1, 2};
  AlignedBuffer large((index_t{4} << 20) / 16);
  large.data()[9] = {3, 4};
  AlignedBuffer moved(std::move(large));
  EXPECT_EQ(moved.data()[9], cplx(3, 4));
  moved = std::move(small);  // the large mapping goes to `small`, freed with it
  EXPECT_EQ(moved.data()[7], cplx(1, 2));
  EXPECT_EQ(moved.size(), 100);
}

}  // namespace
}  // namespace iotest
