#include "trace_format/read_ahead.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <utility>

#include "trace_format/crc32c.h"
#include "trace_format/record.h"

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
  static const int by_default = std::max(0, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  const int set = limit_set.load(std::memory_order_relaxed);
  return set >= 0 ? set : by_default;
}

void SetReadAheadThreadLimit(int limit) { limit_set.store(std::max(0, limit), std::memory_order_relaxed); }

int ReadAheadThreadsRunning() { return running_workers.load(std::memory_order_relaxed); }

ReadingThreadSlot::ReadingThreadSlot() : held_(TakeSlot()) {}

ReadingThreadSlot::~ReadingThreadSlot() {
  if (held_) GiveSlotBack();
}

PieceReadAhead::PieceReadAhead(RandomAccessFile* file, size_t capacity, size_t depth,
                               bool checksum_records)
    : file_(file), depth_(std::max<size_t>(1, depth)), checksum_records_(checksum_records), slots_(depth_) {
  for (Slot& slot : slots_) {
    slot.buffer.reset(new uint8_t[capacity]);
    if (checksum_records_) slot.crcs.reset(new uint32_t[capacity / kRecordSize]);
  }
}

std::unique_ptr<PieceReadAhead> PieceReadAhead::Start(RandomAccessFile* file, size_t capacity,
                                                      size_t depth, bool checksum_records) {
  if (!TakeSlot()) return nullptr;
  std::unique_ptr<PieceReadAhead> worker(new PieceReadAhead(file, capacity, depth, checksum_records));
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
  thread_.join();  // the reads issued end first
  GiveSlotBack();
}

void PieceReadAhead::Issue(uint64_t offset, size_t n) {
  Slot& slot = slots_[issued_count_ % depth_];
  slot.offset = offset;
  slot.length = n;
  ++issued_count_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_ = issued_count_;
  }
  changed_.notify_all();
}

void PieceReadAhead::Wait() {
  if (issued() == 0) return;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return done_ == requested_; });
}

StatusOr<size_t> PieceReadAhead::Take(std::unique_ptr<uint8_t[]>* buffer, std::unique_ptr<uint32_t[]>* crcs) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return done_ > taken_count_; });
  }
  Slot& slot = slots_[taken_count_ % depth_];
  ++taken_count_;
  StatusOr<size_t> result = std::move(slot.result);
  slot.result = size_t{0};
  if (result.ok()) {
    std::swap(*buffer, slot.buffer);
    if (checksum_records_) std::swap(*crcs, slot.crcs);
  }
  return result;
}

void PieceReadAhead::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return done_ < requested_ || stop_; });
    if (done_ == requested_) return;  // stopped, every read issued done
    Slot& slot = slots_[done_ % depth_];
    // The slot and the file belong to this thread until the read is counted
    // done: the asking thread touches neither meanwhile.
    lock.unlock();
    StatusOr<size_t> got = file_->Read(slot.offset, slot.length, slot.buffer.get());
    if (checksum_records_ && got.ok()) {
      crc32c::ValueOfBlocks(slot.buffer.get(), kRecordSize, kRecordCrcOffset, *got / kRecordSize,
                            slot.crcs.get());
    }
    slot.result = std::move(got);
    lock.lock();
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace dgrr::trace
