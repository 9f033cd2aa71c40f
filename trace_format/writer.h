// TraceWriter: appends records to one rank's trace file.
//
// The training thread only encodes a record into the current buffer (a few
// stores); a background I/O thread computes the records' CRCs and writes full
// buffers. Two buffers alternate: while the I/O thread writes one, the
// training thread fills the other; a full buffer is handed over under a mutex,
// which is the only lock on the hot path (once per buffer, not per record).
// Flush (which the session calls at every step's end) writes the partial
// buffer, so what a killed process loses is what followed its last Flush.
//
// Not safe for concurrent use: one thread appends (the rank's training
// thread). Any I/O error is sticky: the writer stops writing (so no record
// follows a gap) and every later call returns that error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/file.h"
#include "base/status.h"
#include "trace_format/record.h"

namespace dgrr::trace {

struct TraceWriterOptions {
  // Create(): replace an existing file instead of refusing.
  bool overwrite = false;
  // Size of each of the two buffers; rounded down to whole records (min 1).
  size_t buffer_bytes = 1 << 20;
  // Opens the trace for appending after its header exists on disk. Tests
  // substitute a WritableFile that fails on demand. Default: OpenWritableFile,
  // i.e. FileSystem::Default() (base/file_system.h), through which the header
  // write, the reads, the size check and the truncation of OpenForAppend go
  // as well, so a FaultInjectingFileSystem reaches every call.
  std::function<StatusOr<std::unique_ptr<WritableFile>>(const std::string& path)> open_file = {};
};

class TraceWriter {
 public:
  // Starts a new trace at `path`. The header is written atomically (temporary
  // file, fsync, rename), so a trace file never exists without a whole header.
  // Refuses an existing file unless options.overwrite.
  static StatusOr<std::unique_ptr<TraceWriter>> Create(const std::string& path,
                                                       const TraceHeader& header,
                                                       TraceWriterOptions options = {});
  // Reopens an existing trace to go on appending (resume after a cut). Reads
  // and validates it, recovers its names and last sequence number, and cuts
  // off a torn tail or a name left incomplete at its end. Corruption fails.
  static StatusOr<std::unique_ptr<TraceWriter>> OpenForAppend(const std::string& path,
                                                              TraceWriterOptions options = {});

  ~TraceWriter();  // Close()s if needed; its error is lost, so call Close().
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // The id of `name`, emitting its NAME records the first time it is seen.
  // 1..kMaxNameLength bytes, no NUL byte; otherwise InvalidArgument.
  StatusOr<uint32_t> InternName(std::string_view name);
  // Requires an interned name_id, a seq above every earlier one, valid enums.
  Status AppendBoundary(const BoundaryRecord& record);
  Status AppendStep(const StepRecord& record);
  // Requires payload.size() <= kMaxEventPayload.
  Status AppendEvent(const EventRecord& record);

  // Hands every buffered record to the OS (write(2)); returns once written.
  // No fsync: a killed process loses nothing flushed, a machine crash may.
  // The partial buffer is written on the calling thread once the I/O thread
  // is idle (cheap enough for every step's end: Session::EndStep).
  Status Flush();
  // Flush, then fsync.
  Status Sync();
  // Flush, stop the I/O thread, close the file. Leaves a complete trace.
  Status Close();

  // Index of the next record (== number of records in the file once flushed).
  uint64_t records_written() const { return records_written_; }
  // The sequence number the next boundary should carry (0 for a new trace).
  uint64_t next_seq() const { return has_seq_ ? last_seq_ + 1 : 0; }
  const TraceHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  size_t name_count() const { return names_.size(); }

 private:
  struct Buffer {
    std::unique_ptr<uint8_t[]> bytes;
    size_t used = 0;
  };

  TraceWriter(std::string path, const TraceHeader& header, std::unique_ptr<WritableFile> file,
              size_t buffer_bytes, uint64_t existing_records);
  // A slot for one record in the filling buffer, handing the buffer over when full.
  Status Reserve(uint8_t** slot) {
    if (filling_->used == capacity_) DGRR_RETURN_IF_ERROR(HandOver());
    *slot = filling_->bytes.get() + filling_->used;
    filling_->used += kRecordSize;
    ++records_written_;
    return Status::OK();
  }
  Status CheckUsable() const;
  Status HandOver();
  void WaitIdle(std::unique_lock<std::mutex>& lock);
  Status StickyError();
  void IoLoop();
  Status SealAndWrite(Buffer* buffer);

  const std::string path_;
  const TraceHeader header_;
  std::unique_ptr<WritableFile> file_;
  const size_t capacity_;
  Buffer buffers_[2];
  Buffer* filling_;  // owned by the appending thread

  uint64_t records_written_;
  bool has_seq_ = false;
  uint64_t last_seq_ = 0;
  std::unordered_map<std::string, uint32_t> name_ids_;
  std::vector<std::string_view> names_;  // views into name_ids_' keys, by id
  bool closed_ = false;
  Status close_status_;

  // Shared with the I/O thread, under mutex_.
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  Buffer* handed_over_ = nullptr;  // being written by the I/O thread
  bool stopping_ = false;
  Status io_status_;
  std::atomic<bool> io_failed_{false};  // io_status_ is not OK; read without the lock
  std::thread io_thread_;
};

}  // namespace dgrr::trace
