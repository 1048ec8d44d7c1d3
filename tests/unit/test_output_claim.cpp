// A run's outputs are its own (storage/output_claim.hpp): in-progress
// files named per run and created exclusively, another live run's claim
// refused before any work, publishing that replaces only the file that was
// there when the run began, all or none, and a clash kept under the run's
// name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "iotest/common/errors.hpp"
#include "iotest/storage/output/file_claim.hpp"

namespace iotest::storage {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const auto dir =
      fs::path(::testing::TempDir()) / ("iotest_claim_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void put(const fs::path& file, const std::string& text) {
  std::ofstream(file) << text;
}
std::string got(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), {}};
}
size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), {}));
}
// `what` 300 ms from now, on a thread of its own (another run's doing,
// while this one waits in a claim); joined when it goes out of scope.
std::jthread in_a_moment(std::function<void()> what) {
  return std::jthread([what = std::move(what)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    what();
  });
}

TEST(FileClaim, NamesCarryTheRun) {
  EXPECT_EQ(partial_path("d/out0.h5", 0x1a2b3c4d), "d/out0.h5.run-439041101.partial");
  EXPECT_EQ(kept_path("d/out0.h5", 0x1a2b3c4d), "d/out0.run-439041101.h5");
  EXPECT_EQ(kept_path("d/out%d.h5", 7), "d/out%d.run-7.h5");
  EXPECT_EQ(kept_path("d.x/out", 7), "d.x/out.run-7");  // no extension
  EXPECT_EQ(kept_path(".hidden", 7), ".hidden.run-7");
  EXPECT_EQ(folder_of("out.h5"), ".");
  EXPECT_EQ(folder_of("a/b/out.h5"), "a/b");
}

// Published: the output under its final name and nothing else, whether
// the name was free or held an earlier run's file, which it replaces.
TEST(FileClaim, PublishesAndLeavesNothingElse) {
  for (const bool file_at_start : {false, true}) {
    const auto dir = scratch(file_at_start ? "replace" : "publish");
    const auto path = (dir / "out.h5").string();
    if (file_at_start) put(path, "an earlier run");
    {
      FileClaim claim(path, 1);
      EXPECT_TRUE(fs::exists(claim.partial()));               // created at once, empty
      EXPECT_TRUE(fs::exists(path + ".run-1.lock.partial"));  // its lock's, beside it
      EXPECT_EQ(claim.replaces(), file_at_start);
      put(claim.partial(), "run 1");
      publish(claim);
    }
    EXPECT_EQ(got(path), "run 1");
    EXPECT_EQ(entries(dir), 1U);
    fs::remove_all(dir);
  }
}

TEST(FileClaim, DroppedUnpublishedLeavesNothing) {
  const auto dir = scratch("dropped");
  { FileClaim claim((dir / "out.h5").string(), 1); }
  EXPECT_EQ(entries(dir), 0U);
  fs::remove_all(dir);
}

// Another live run writing the same final name is refused, naming its
// file; once it has ended (its lock gone), its leftovers block nothing.
TEST(FileClaim, AnotherLiveRunIsRefused) {
  const auto dir = scratch("live");
  const auto path = (dir / "out.h5").string();
  {
    FileClaim first(path, 1);
    try {
      FileClaim second(path, 2, "--output");
      ADD_FAILURE() << "a second run claimed a path being written";
    } catch (const UsageError& e) {
      EXPECT_EQ(e.option(), "--output");
      EXPECT_NE(std::string(e.what()).find(first.partial()), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::exists(first.partial()));
    EXPECT_EQ(entries(dir), 2U);  // the refused run left nothing: first's and its lock's
  }
  put(partial_path(path, 3), "a run that died");  // not held by anyone
  FileClaim third(path, 4);
  EXPECT_EQ(got(partial_path(path, 3)), "a run that died");
  fs::remove_all(dir);
}

// Two runs that claim a name at once and each see the other's claim,
// both still looking: the smaller nonce gets it. The larger gives way; the
// smaller waits for it to give way, or to go ahead. A run that goes ahead
// (all its claims made) is given way to at once, whatever the nonces.
TEST(FileClaim, OfTwoRunsThatSeeEachOtherTheSmallerNonceWins) {
  const auto dir = scratch("tie");
  const auto path = (dir / "out.h5").string();
  const auto forever = std::chrono::hours(1);  // (a wrong wait fails at ctest's timeout)
  {
    FileClaim smaller(path, 3);
    EXPECT_THROW(FileClaim(path, 8, "OUTPUT", false, forever), UsageError);
    EXPECT_FALSE(fs::exists(partial_path(path, 8)));
  }
  std::optional<FileClaim> larger(std::in_place, path, 9);
  std::optional<FileClaim> smaller;
  {
    // As a run that saw the smaller claim: its own removed, its lock gone.
    const auto gives_way = in_a_moment([&] { larger.reset(); });
    EXPECT_NO_THROW(smaller.emplace(path, 2, "OUTPUT", false, std::chrono::minutes(2)));
  }
  EXPECT_FALSE(fs::exists(partial_path(path, 9)));
  // Still looking and there first: a smaller nonce is refused once its wait ends.
  EXPECT_THROW(FileClaim(path, 1, "OUTPUT", false, std::chrono::milliseconds(200)), UsageError);
  // Gone ahead: refused at once, with no wait.
  smaller->go_ahead();
  EXPECT_THROW(FileClaim(path, 1, "OUTPUT", false, forever), UsageError);
  EXPECT_TRUE(fs::exists(smaller->partial()));
  smaller.reset();
  EXPECT_EQ(entries(dir), 0U);
  fs::remove_all(dir);
}

// A run that goes ahead while a smaller nonce waits on it: the smaller
// gives way as soon as it sees that.
TEST(FileClaim, ARunThatGoesAheadIsGivenWayTo) {
  const auto dir = scratch("going");
  const auto path = (dir / "out.h5").string();
  FileClaim larger(path, 9);
  {
    const auto goes_ahead = in_a_moment([&] { larger.go_ahead(); });
    EXPECT_THROW(FileClaim(path, 2, "OUTPUT", false, std::chrono::hours(1)), UsageError);
  }
  EXPECT_TRUE(fs::exists(larger.partial()));
  EXPECT_FALSE(fs::exists(partial_path(path, 2)));
  fs::remove_all(dir);
}

TEST(FileClaim, SameRunNumberIsRefused) {
  const auto dir = scratch("same");
  const auto path = (dir / "out.h5").string();
  put(partial_path(path, 5), "another's");
  EXPECT_THROW(FileClaim(path, 5), UsageError);
  EXPECT_EQ(got(partial_path(path, 5)), "another's");
  fs::remove_all(dir);
}

// Another run's output that took the name meanwhile stays; this run's is
// kept under its own name. With no file at the start, and with one.
TEST(FileClaim, AnotherRunsOutputIsNeverReplaced) {
  for (const bool file_at_start : {false, true}) {
    const auto dir = scratch(file_at_start ? "clash_replace" : "clash_new");
    const auto path = (dir / "out.h5").string();
    if (file_at_start) put(path, "an earlier run");
    FileClaim claim(path, 1);
    put(claim.partial(), "run 1");
    put(dir / "theirs", "run 2");
    fs::rename(dir / "theirs", path);  // published by another run meanwhile
    const std::string clash = claim.take();
    EXPECT_NE(clash.find(path), std::string::npos) << clash;
    EXPECT_EQ(got(path), "run 2");
    EXPECT_EQ(claim.keep(), kept_path(path, 1));
    EXPECT_EQ(got(kept_path(path, 1)), "run 1");
    EXPECT_EQ(got(path), "run 2");
    EXPECT_EQ(entries(dir), 2U);
    fs::remove_all(dir);
  }
}

// Several outputs publish all or none: one taken, the next clashing, both
// kept, and the final names as they were.
TEST(FileClaim, AllOrNone) {
  const auto dir = scratch("all_or_none");
  const auto a = (dir / "a.h5").string(), b = (dir / "b.h5").string(), c = (dir / "c.h5").string();
  put(c, "an earlier run");
  FileClaim first(a, 1), second(b, 1), third(c, 1);
  put(first.partial(), "a of run 1");
  put(third.partial(), "c of run 1");
  EXPECT_EQ(first.take(), "");
  EXPECT_EQ(third.take(), "");
  EXPECT_EQ(got(a), "a of run 1");
  EXPECT_EQ(got(c), "c of run 1");
  put(b, "b of run 2");  // another run's, published meanwhile
  EXPECT_NE(second.take(), "");
  for (auto* claim : {&first, &second, &third}) claim->keep();
  EXPECT_FALSE(fs::exists(a));
  EXPECT_EQ(got(b), "b of run 2");
  EXPECT_EQ(got(c), "an earlier run");
  EXPECT_EQ(got(kept_path(a, 1)), "a of run 1");
  EXPECT_EQ(got(kept_path(c, 1)), "c of run 1");
  EXPECT_EQ(got(kept_path(b, 1)), "");  // claimed, never written
  EXPECT_EQ(entries(dir), 5U);          // three kept; b and c as they were
  fs::remove_all(dir);
}

TEST(FileClaim, UnusablePathsAreUsageErrors) {
  const auto dir = scratch("unusable");
  fs::create_directory(dir / "folder");
  put(dir / "plain", "a file");
  for (const auto& path : {dir / "folder", dir / "missing" / "out.h5", dir / "plain" / "out.h5"}) {
    EXPECT_THROW(FileClaim(path.string(), 1), UsageError) << path;
  }
  EXPECT_EQ(entries(dir), 2U);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace iotest::storage
