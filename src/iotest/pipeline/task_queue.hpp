// A streamer's work queue, shared by both directions: its receiving thread
// pushes tasks and runs one itself when idle; the other threads block on a
// condition variable (never spin: 2 cores starve quickly).
//
// Why a queue of our own rather than OpenMP tasks: libgomp's taskyield does
// nothing, so the receiving thread could not run one task when idle and
// return to MPI; with the queue it can.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "iotest/common/array.hpp"
#include "iotest/common/parallel.hpp"

namespace iotest::pipeline {

// Work for the streamer's threads. push never blocks (the receiving thread
// bounds what it starts by outstanding()).
class TaskQueue {
 public:
  using Task = std::function<void(int thread)>;
  void push(Task task) {
    {
      const std::lock_guard<std::mutex> hold(lock_);
      tasks_.push_back(std::move(task));
      high_water_ = std::max(high_water_, ++outstanding_);
    }
    ready_.notify_one();
  }
  // Runs one task if there is one (the receiving thread, when idle).
  bool try_run(int thread) {
    Task task;
    {
      const std::lock_guard<std::mutex> hold(lock_);
      if (tasks_.empty()) return false;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    execute(task, thread);
    return true;
  }
  // The other threads: run tasks until closed.
  void serve(int thread) {
    while (true) {
      Task task;
      {
        std::unique_lock<std::mutex> hold(lock_);
        ready_.wait(hold, [&] { return !tasks_.empty() || closed_; });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      execute(task, thread);
    }
  }
  void close() {
    {
      const std::lock_guard<std::mutex> hold(lock_);
      closed_ = true;
    }
    ready_.notify_all();
  }
  index_t outstanding() {
    const std::lock_guard<std::mutex> hold(lock_);
    return outstanding_;
  }
  index_t high_water() {
    const std::lock_guard<std::mutex> hold(lock_);
    return high_water_;
  }
  ExceptionCollector failures;
  std::atomic<bool> failed{false};

 private:
  void execute(Task& task, int thread) {
    // After a failure the rank is about to abort: queued work is dropped,
    // not run (degridding it could take long).
    if (!failed)
      failures.capture([&] {
        try {
          task(thread);
        } catch (...) {
          failed = true;
          throw;
        }
      });
    const std::lock_guard<std::mutex> hold(lock_);
    --outstanding_;
  }
  std::mutex lock_;
  std::condition_variable ready_;
  std::deque<Task> tasks_;
  index_t outstanding_ = 0, high_water_ = 0;
  bool closed_ = false;
};

}  // namespace iotest::pipeline
