// PieceReadAhead: reads of a file done on a worker thread while the thread
// that asked for them works on something else (TraceReader checks one piece
// of a trace while the next ones are read: docs/trace-format.md §4, "Reading
// ahead").
//
// The worker makes exactly the reads it is asked for, in the order asked,
// one at a time, up to `depth` of them ahead of the asking thread. Whether
// the asking thread may call the file while reads are issued is the
// caller's to decide: only where file->reads_may_overlap() (a pread of a
// descriptor) may it; otherwise it waits for every read issued first, so
// the file sees one sequence of calls, fixed by the asking thread's
// progress, and never two at once (a FaultInjectingFileSystem counts calls
// in that order).
//
// The worker can also compute the CRC32C of each whole trace record of a
// piece it read (crc32c::ValueOfBlocks over kRecordSize blocks, the bytes a
// record's CRC covers), while the bytes are still in its cache: the reader
// then has the same values it would have computed itself.
//
// Threads are bounded process-wide: Start() takes one of ReadAheadThreadLimit()
// slots and returns null when none is free (or no thread can be started), and
// the slot is given back when the object is destroyed. A caller without one
// reads on its own thread, with the same results. A caller that reads traces
// on threads of its own (compare reads its second side on one) holds a
// ReadingThreadSlot for each, so that read-ahead does not crowd them out.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/file_system.h"
#include "base/status.h"

namespace dgrr::trace {

// At most this many PieceReadAhead workers (and ReadingThreadSlots) live in
// the process at once: unless set, one less than the hardware threads, the
// one left being the reader's own. (Measured on 2 cores: a read-ahead thread
// sharing the reads brings VerifyTrace from ~0.7x to ~1.0-1.1x of read(2) by
// wall time when the second core is free, and a thread reading every piece
// slowed compare, whose two sides already keep both cores busy:
// bench/README.md.)
int ReadAheadThreadLimit();
// Sets the limit (0: no reader reads ahead); for benchmarks and tests, which
// time or check readers with and without the thread in one process. Workers
// already running stay.
void SetReadAheadThreadLimit(int limit);
// Slots held now: workers and ReadingThreadSlots (for tests).
int ReadAheadThreadsRunning();

// One of the limit's slots, held for a thread of the caller's that reads
// traces beside the calling thread, for as long as this object lives; none
// when none is free (the thread runs anyway).
class ReadingThreadSlot {
 public:
  ReadingThreadSlot();
  ~ReadingThreadSlot();
  ReadingThreadSlot(const ReadingThreadSlot&) = delete;
  ReadingThreadSlot& operator=(const ReadingThreadSlot&) = delete;
  bool held() const { return held_; }

 private:
  bool held_;
};

class PieceReadAhead {
 public:
  // A worker reading `file` (not owned: it must outlive this object) with up
  // to `depth` reads of at most `capacity` bytes issued at once, or null when
  // the process has its limit of workers or the system gives no thread.
  // With `checksum_records`, each piece read is taken as whole records from
  // its first byte (capacity a multiple of kRecordSize) and their CRCs are
  // handed over with it (Take).
  static std::unique_ptr<PieceReadAhead> Start(RandomAccessFile* file, size_t capacity, size_t depth,
                                               bool checksum_records = false);
  // Lets the reads issued end, then stops the worker.
  ~PieceReadAhead();
  PieceReadAhead(const PieceReadAhead&) = delete;
  PieceReadAhead& operator=(const PieceReadAhead&) = delete;

  // Reads issued and not yet taken.
  size_t issued() const { return static_cast<size_t>(issued_count_ - taken_count_); }
  bool can_issue() const { return issued() < depth_; }
  // Queues the read of `n` (at most capacity) bytes at `offset`, after those
  // issued before it. Only when can_issue().
  void Issue(uint64_t offset, size_t n);
  // The oldest read issued and not taken (only when issued() > 0).
  uint64_t front_offset() const { return slots_[taken_count_ % depth_].offset; }
  size_t front_length() const { return slots_[taken_count_ % depth_].length; }

  // Waits for every read issued to end: after it the file is the caller's
  // again. The results stay for Take.
  void Wait();
  // The result of the oldest read issued (file->Read's), after waiting for
  // it; it is then no longer issued. A successful read's bytes are handed
  // over by swapping: *buffer (of `capacity` bytes) holds them, and the old
  // *buffer takes the read's place as a spare. With checksum_records, *crcs
  // (capacity / kRecordSize entries) is swapped likewise and holds the CRC
  // of each whole record read (crcs must then not be null).
  StatusOr<size_t> Take(std::unique_ptr<uint8_t[]>* buffer, std::unique_ptr<uint32_t[]>* crcs = nullptr);

 private:
  PieceReadAhead(RandomAccessFile* file, size_t capacity, size_t depth, bool checksum_records);
  void Run();

  struct Slot {
    std::unique_ptr<uint8_t[]> buffer;
    std::unique_ptr<uint32_t[]> crcs;  // with checksum_records_
    // Written by the asking thread before the read is issued, read by the
    // worker after: the mutex orders them.
    uint64_t offset = 0;
    size_t length = 0;
    // Written by the worker before it counts the read done.
    StatusOr<size_t> result{size_t{0}};
  };

  RandomAccessFile* const file_;
  const size_t depth_;
  const bool checksum_records_;
  std::vector<Slot> slots_;  // read k goes to slots_[k % depth_]
  // Counts of reads, from the first: issued (asking thread), taken (asking
  // thread), done (worker, under mutex_).
  uint64_t issued_count_ = 0;
  uint64_t taken_count_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t requested_ = 0;  // issued_count_ as the worker sees it
  uint64_t done_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace dgrr::trace
