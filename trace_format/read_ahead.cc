#include "trace_format/read_ahead.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <utility>

namespace dgrr::trace {
namespace {

std::atomic<int> running_workers{0};
std::atomic<int> limit_set{-1};  // -1: the default

// Takes a slot under the limit; false when all are taken.
bool TakeSlot() {
  const int limit = ReadAheadThreadLimit();
  int now = running_workers.load(std::memory_order_relaxed);
  while (now < limit) {
    if (running_workers.compare_exchange_weak(now, now + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void GiveSlotBack() { running_workers.fetch_sub(1, std::memory_order_relaxed); }

}  // namespace

int ReadAheadThreadLimit() {
  static const int by_default = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int set = limit_set.load(std::memory_order_relaxed);
  return set >= 0 ? set : by_default;
}

void SetReadAheadThreadLimit(int limit) { limit_set.store(std::max(0, limit), std::memory_order_relaxed); }

int ReadAheadThreadsRunning() { return running_workers.load(std::memory_order_relaxed); }

PieceReadAhead::PieceReadAhead(RandomAccessFile* file, size_t capacity)
    : file_(file), spare_(new uint8_t[capacity]) {}

std::unique_ptr<PieceReadAhead> PieceReadAhead::Start(RandomAccessFile* file, size_t capacity) {
  if (!TakeSlot()) return nullptr;
  std::unique_ptr<PieceReadAhead> worker(new PieceReadAhead(file, capacity));
  try {
    worker->thread_ = std::thread([w = worker.get()] { w->Run(); });
  } catch (const std::system_error&) {
    GiveSlotBack();
    return nullptr;  // its destructor sees no thread to join
  }
  return worker;
}

PieceReadAhead::~PieceReadAhead() {
  if (!thread_.joinable()) return;  // Start failed: it holds no slot
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();  // a read in flight ends first
  GiveSlotBack();
}

void PieceReadAhead::Issue(uint64_t offset, size_t n) {
  issued_ = true;
  offset_ = offset;
  length_ = n;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    request_offset_ = offset;
    request_length_ = n;
    requested_ = true;
    finished_ = false;
  }
  changed_.notify_all();
}

void PieceReadAhead::Wait() {
  if (!issued_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return finished_; });
}

StatusOr<size_t> PieceReadAhead::Take(std::unique_ptr<uint8_t[]>* buffer) {
  Wait();
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = false;
  issued_ = false;
  StatusOr<size_t> result = std::move(result_);
  result_ = size_t{0};
  if (result.ok()) std::swap(*buffer, spare_);
  return result;
}

void PieceReadAhead::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return requested_ || stop_; });
    if (!requested_) return;  // stopped, nothing asked
    requested_ = false;
    const uint64_t offset = request_offset_;
    const size_t n = request_length_;
    // The spare buffer and the file belong to this thread until finished_
    // is set: the asking thread touches neither while a read is issued.
    lock.unlock();
    StatusOr<size_t> got = file_->Read(offset, n, spare_.get());
    lock.lock();
    result_ = std::move(got);
    finished_ = true;
    changed_.notify_all();
  }
}

}  // namespace dgrr::trace
