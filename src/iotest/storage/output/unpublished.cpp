#include "iotest/storage/output/unpublished.hpp"

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace iotest::storage {
namespace {

struct Registry {
  std::mutex lock;
  std::map<int, std::function<void()>> drops;
  int next = 0;
  std::atomic<int> count{0};
};
// Never destroyed: a drop may still run on its thread as the process ends.
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

}  // namespace

UnpublishedOutput::UnpublishedOutput(std::function<void()> drop) {
  auto& r = registry();
  const std::lock_guard<std::mutex> hold(r.lock);
  id_ = r.next++;
  r.drops.emplace(id_, std::move(drop));
  r.count.store(static_cast<int>(r.drops.size()));
}

namespace {

// The drop registered as `id`, taken out (empty if it was taken already).
std::function<void()> take(int id) {
  auto& r = registry();
  const std::lock_guard<std::mutex> hold(r.lock);
  std::function<void()> drop;
  if (const auto it = r.drops.find(id); it != r.drops.end()) {
    drop = std::move(it->second);
    r.drops.erase(it);
  }
  r.count.store(static_cast<int>(r.drops.size()));
  return drop;
}

}  // namespace

UnpublishedOutput::~UnpublishedOutput() {
  if (const auto drop = take(id_)) {
    try {
      drop();
    } catch (...) {  // the store's own clean-up (a lifecycle rule) is left
    }
  }
}

void UnpublishedOutput::release() {
  take(id_);
}

bool any_unpublished_outputs() {
  return registry().count.load() > 0;
}

bool drop_unpublished_outputs(std::chrono::milliseconds bound) {
  auto& r = registry();
  std::map<int, std::function<void()>> drops;
  {
    const std::lock_guard<std::mutex> hold(r.lock);
    drops.swap(r.drops);  // each called once, whoever asks again
    r.count.store(0);
  }
  if (drops.empty()) return true;
  struct Done {
    std::mutex lock;
    std::condition_variable changed;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  std::thread([drops = std::move(drops), done] {
    for (const auto& [id, drop] : drops) {
      try {
        drop();
      } catch (...) {  // the store's own clean-up (a lifecycle rule) is left
      }
    }
    const std::lock_guard<std::mutex> hold(done->lock);
    done->done = true;
    done->changed.notify_all();
  }).detach();
  std::unique_lock<std::mutex> hold(done->lock);
  return done->changed.wait_for(hold, bound, [&] { return done->done; });
}

}  // namespace iotest::storage
