// PieceReadAhead: one read of a file at a time, done on a worker thread while
// the thread that asked for it works on something else (TraceReader checks
// one piece of a trace while the next is read: docs/trace-format.md §4,
// "Reading ahead").
//
// The worker makes exactly the reads it is asked for, in the order asked,
// one at a time; the asking thread waits for a read before it calls the file
// itself, so the file sees one sequence of calls and never two at once (a
// RandomAccessFile is not thread-safe, and a FaultInjectingFileSystem counts
// calls in that order).
//
// Threads are bounded process-wide: Start() takes one of ReadAheadThreadLimit()
// slots and returns null when none is free (or no thread can be started), and
// the slot is given back when the object is destroyed. A caller without one
// reads on its own thread, with the same results.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "base/file_system.h"
#include "base/status.h"

namespace dgrr::trace {

// At most this many PieceReadAhead workers live in the process at once: the
// hardware threads, at least 1, unless set.
int ReadAheadThreadLimit();
// Sets the limit (0: no reader reads ahead); for benchmarks and tests, which
// time or check readers with and without the thread in one process. Workers
// already running stay.
void SetReadAheadThreadLimit(int limit);
// How many live now (for tests).
int ReadAheadThreadsRunning();

class PieceReadAhead {
 public:
  // A worker reading `file` (not owned: it must outlive this object) into a
  // buffer of `capacity` bytes, or null when the process has its limit of
  // workers or the system gives no thread.
  static std::unique_ptr<PieceReadAhead> Start(RandomAccessFile* file, size_t capacity);
  // Waits for the read in flight (if any), then stops the worker.
  ~PieceReadAhead();
  PieceReadAhead(const PieceReadAhead&) = delete;
  PieceReadAhead& operator=(const PieceReadAhead&) = delete;

  // Starts the read of `n` (at most capacity) bytes at `offset` into the
  // spare buffer. At most one read is issued at a time.
  void Issue(uint64_t offset, size_t n);
  bool issued() const { return issued_; }
  uint64_t offset() const { return offset_; }
  size_t length() const { return length_; }

  // Waits for the read issued to end (at once when it has, or when none is
  // issued): after it the file is the caller's again. The result stays for
  // Take.
  void Wait();
  // The result of the read issued (file->Read's), after waiting for it; the
  // read is then no longer issued. A successful read's bytes are handed over
  // by swapping: *buffer (of `capacity` bytes) holds them, and the old
  // *buffer becomes the spare one.
  StatusOr<size_t> Take(std::unique_ptr<uint8_t[]>* buffer);

 private:
  PieceReadAhead(RandomAccessFile* file, size_t capacity);
  void Run();

  RandomAccessFile* const file_;
  std::unique_ptr<uint8_t[]> spare_;
  // The asking thread's view: what it issued (only it touches these).
  bool issued_ = false;
  uint64_t offset_ = 0;
  size_t length_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  bool requested_ = false;  // a read waits for the worker
  bool finished_ = false;   // the worker has done it; result_ holds its result
  bool stop_ = false;
  uint64_t request_offset_ = 0;
  size_t request_length_ = 0;
  StatusOr<size_t> result_{size_t{0}};
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace dgrr::trace
