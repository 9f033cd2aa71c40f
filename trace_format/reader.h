// TraceReader: validates and decodes a trace, record by record.
//
// Every record is checked on its own (CRC, known type, field ranges, reserved
// bytes zero) and against what came before (a NAME sequence continues where
// the previous chunk stopped; a BOUNDARY names a completely defined name and a
// sequence number above the previous one). The first violation is corruption:
// Next() returns Status::Corruption naming file, record index, byte offset and
// reason, and last_error() gives the same as fields. The reader has no policy;
// its caller decides what to do.
//
// The end of the trace: a short final record (file length not a whole number
// of records), or whole records of nothing but zero bytes running to the end
// of the file (a filesystem that grew the file before the data landed), is a
// torn tail: a clean end, reported by torn_tail_bytes()/torn_tail_warning().
// A whole final record that is not all zeros and fails its CRC is corruption.
// A reader of a trace still being written reads every complete record; after
// Next() reports done, calling it again picks up records appended since.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/file_system.h"
#include "base/status.h"
#include "trace_format/record.h"

namespace dgrr::trace {

// Where validation failed, as fields (Status carries the same as text).
struct TraceError {
  bool in_header = false;
  uint64_t record_index = 0;  // meaningful when !in_header
  uint64_t offset = 0;        // byte offset in the file
  std::string reason;
};

class PieceReadAhead;  // trace_format/read_ahead.h

// How a reader reads. Whatever the options, the records, errors, warnings
// and state are the same; only the speed and the threads differ.
struct ReaderOptions {
  // Reading ahead: once the buffer has its full size, the next pieces of the
  // file are read on a second thread while this one is checked (pieces the
  // reader would read, at the offsets it would read them, issued in its
  // order; docs/trace-format.md §4; how many: share_reads). kAuto reads
  // ahead when the file held at least kReadAheadMinBytes at open; kAlways
  // whatever its size (tests); kNever not at all. Either way only pieces that
  // lie within the size the file had at open are read ahead, only while the
  // process has a read-ahead thread free (read_ahead.h), and never for a file
  // in memory.
  enum class ReadAhead : uint8_t { kAuto, kAlways, kNever };
  ReadAhead read_ahead = ReadAhead::kAuto;
  // Sharing the reads: where the file allows two reads at once
  // (RandomAccessFile::reads_may_overlap(): a file on disk), the thread
  // reads every other piece, and the CRCs of its records, while the reader
  // reads the pieces between them itself, so the copy out of the page cache
  // is split between two cores (up to kSharedReadAheadPieces issued).
  // Otherwise (false, or a file that needs its calls one at a time) the
  // thread reads every piece, in order, up to kReadAheadPieces ahead, and
  // the reader makes no call on the file while one is issued.
  bool share_reads = true;
};
// Below this (16 pieces of 256 KiB), a second thread costs more than it saves.
inline constexpr uint64_t kReadAheadMinBytes = uint64_t{4} << 20;
// Pieces read ahead at most. The reader checks a piece in well under the
// time the worker's pread of one takes, so the worker is the slower stage:
// with two queued it goes straight on to the next read instead of waiting
// for the reader to wake up and ask.
inline constexpr size_t kReadAheadPieces = 2;
// Sharing the reads, the thread's pieces are every other one, up to three of
// them issued: at most six pieces (1.5 MiB) beyond the reader's. One at a
// time, the thread sleeps and is woken at every piece, and verify ran slower
// than with no thread; two to four measured best, eight worse (the buffers
// no longer fit a 2 MiB L2): bench/README.md, "Shared reads".
inline constexpr size_t kSharedReadAheadPieces = 3;

// Consecutive BOUNDARY records that passed every check of the reader, in
// their encoded bytes (read them through BoundaryView): valid until the
// reader's next call.
struct BoundaryRun {
  const uint8_t* bytes = nullptr;  // count * kRecordSize bytes
  size_t count = 0;
  uint64_t first_index = 0;  // record index of the first
};

class TraceReader {
 public:
  // Opens `path` and validates its header. NotFound/IOError when it cannot be
  // read; Corruption (naming "header" and an offset) when the header is bad.
  static StatusOr<std::unique_ptr<TraceReader>> Open(const std::string& path);
  // Same, filling *error on corruption of the header.
  static StatusOr<std::unique_ptr<TraceReader>> Open(const std::string& path, TraceError* error);
  // Reads the trace from `file` (taken over), which names it by file->path():
  // the entry point for bytes that are not on disk, e.g. a fuzz target's
  // input through NewMemoryFile(name, bytes) (base/file_system.h). The paths
  // above open the file through FileSystem::Default(), which refuses a
  // directory, FIFO or device before reading a byte. Nothing is read beyond
  // what the file holds: records are streamed through a buffer of at most
  // 256 KiB (and, reading ahead, kReadAheadPieces more), whatever the file's
  // length. `error` may be null.
  static StatusOr<std::unique_ptr<TraceReader>> Open(std::unique_ptr<RandomAccessFile> file,
                                                     TraceError* error = nullptr,
                                                     const ReaderOptions& options = {});
  // Open(path, error) with options.
  static StatusOr<std::unique_ptr<TraceReader>> Open(const std::string& path, TraceError* error,
                                                     const ReaderOptions& options);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const TraceHeader& header() const { return header_; }
  const std::string& path() const { return path_; }

  // Decodes the next record into *record and sets *done = false, or sets
  // *done = true at the end of the complete records. After a corruption
  // every call returns the same error.
  Status Next(Record* record, bool* done);

  // The scan of a caller that wants only the BOUNDARY records: the next one
  // into *record (its index into *index), every record before it validated
  // and consumed exactly as Next() would (names defined, steps and events
  // checked), so errors, warnings and state are those of calling Next() and
  // skipping the rest; *done at the end. Faster than Next(): a boundary that
  // breaks no rule is decoded straight from the buffer, without building a
  // RecordBody or a Status.
  Status NextBoundary(BoundaryRecord* record, uint64_t* index, bool* done);

  // The fastest scan, for callers that read a few fields: up to `max` (at
  // least 1) boundaries as a run of bytes (run->count > 0), or, when the next
  // record is anything else, that record decoded into *record (run->count ==
  // 0). Validation, errors, warnings and state are exactly Next()'s; a run
  // stops at the end of the reader's buffer and before any record that is
  // not a boundary or breaks a rule (which then goes through Next()).
  Status NextRecords(size_t max, BoundaryRun* run, Record* record, bool* done);
  // NextRecords, skipping every record that is not a boundary.
  Status NextBoundaryRun(size_t max, BoundaryRun* run, bool* done);

  // Random access for bisect: reads record `index` and validates it on its
  // own (CRC, type, fields). The cross-record rules need a scan (Next); names
  // are those the scan has defined so far. Past the end: NotFound.
  Status ReadRecordAt(uint64_t index, Record* record);
  // Whole records currently in the file (a scan may have read fewer).
  StatusOr<uint64_t> CountRecordsInFile();

  uint64_t records_read() const { return next_index_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::string* name(uint32_t id) const { return id < names_.size() ? &names_[id] : nullptr; }
  bool has_boundary() const { return has_seq_; }
  uint64_t last_seq() const { return last_seq_; }
  // Records up to the last point where no NAME sequence was half-way: where a
  // writer that goes on appending must cut the file.
  uint64_t clean_prefix_records() const { return clean_prefix_records_; }
  bool name_pending() const { return pending_.has_value(); }

  // At the last end seen: bytes after the last complete record (0 if none).
  uint64_t torn_tail_bytes() const { return torn_tail_bytes_; }
  uint64_t torn_tail_offset() const { return RecordOffset(next_index_); }
  // "FILE: torn tail at offset O: N bytes ignored (...)", empty when none.
  std::string torn_tail_warning() const;
  const TraceError& last_error() const { return error_; }

  // Pieces so far that a read-ahead thread read (0 when none did).
  uint64_t pieces_read_ahead() const { return pieces_read_ahead_; }

 private:
  TraceReader(std::unique_ptr<RandomAccessFile> file, const TraceHeader& header,
              const ReaderOptions& options);
  // Makes at least one whole record available at buffer_[pos_]; false at end.
  Status Fill(bool* have_record);
  // After a read that filled the whole buffer at its full size: has the
  // read-ahead thread read the next pieces, when that pays (ReaderOptions).
  void MaybeReadAhead();
  // Waits for the reads issued ahead: every call of the reader's own on file_
  // comes after them (the file sees one sequence of calls).
  void SettleReadAhead();
  Status CheckSequence(const RecordBody& body);
  // The fast path shared by Next and NextBoundary: when the record at pos_
  // is a boundary that passes every check (CRC, fields, sequence rules),
  // decodes it into *out, consumes it and returns true. False leaves the
  // reader untouched, for the general path to find the reason.
  bool TakeCleanBoundary(BoundaryRecord* out);
  // Consumes up to `max` consecutive records at pos_ that are boundaries
  // passing every check; returns how many (0 leaves the reader untouched).
  size_t TakeCleanBoundaries(size_t max);
  Status Fail(uint64_t index, std::string reason);
  StatusOr<bool> RestOfFileIsZero(uint64_t from_offset);

  const std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  const TraceHeader header_;
  const ReaderOptions options_;

  // Starts small (a short trace costs little to open) and grows while reads
  // fill it, up to 256 KiB (one pread per 2048 records; the CRC and check
  // passes then take it a run at a time, from L1: ChecksumUpTo).
  // Not zero-filled.
  size_t capacity_;
  std::unique_ptr<uint8_t[]> buffer_;
  std::unique_ptr<uint32_t[]> crcs_;  // computed CRC of each whole record in buffer_
  size_t checksummed_ = 0;            // records at the start of buffer_ that crcs_ holds
  // Makes crcs_ hold the first `records` records of buffer_ (all whole ones).
  void ChecksumUpTo(size_t records);
  size_t pos_ = 0;   // next unread byte in buffer_
  size_t end_ = 0;   // bytes of buffer_ holding file data
  uint64_t next_index_ = 0;

  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> ids_by_name_;  // a name is defined once
  struct PendingName {
    uint32_t id;
    uint16_t total_length;
    std::string bytes;
  };
  std::optional<PendingName> pending_;
  bool has_seq_ = false;
  uint64_t last_seq_ = 0;
  uint64_t clean_prefix_records_ = 0;
  uint64_t torn_tail_bytes_ = 0;
  bool torn_by_zeros_ = false;
  uint64_t first_data_after_zeros_ = 0;  // set when RestOfFileIsZero finds data
  Status failure_;
  TraceError error_;
  Record scratch_;  // NextBoundary's record for the general path

  // Reading ahead (null while no thread reads ahead): after file_ and
  // buffer_, so that it is stopped before they go.
  std::unique_ptr<PieceReadAhead> read_ahead_;
  uint64_t pieces_read_ahead_ = 0;
  const bool share_reads_;      // options_.share_reads and the file allows it
  uint64_t read_ahead_next_ = 0;  // offset of the next piece to issue, while read_ahead_ lives
};

// A whole trace decoded in memory (compare and inspect use it).
struct Trace {
  std::string path;
  TraceHeader header;
  std::vector<std::string> names;  // by id
  std::vector<Record> records;     // every record, NAME chunks included; records[i].index == i
  uint64_t torn_tail_bytes = 0;
  std::string warning;  // torn tail or incomplete name at the end; empty when none
};
StatusOr<Trace> ReadWholeTrace(const std::string& path);

// Cuts the trace at `path` so that it keeps records [0, keep_records): the
// file ends at RecordOffset(keep_records), fsync'd. Rollback and resume use
// it. InvalidArgument when the file has fewer whole records.
Status TruncateTraceAt(const std::string& path, uint64_t keep_records);

struct VerifySummary {
  std::string path;
  TraceHeader header;
  uint64_t records = 0;
  uint64_t names = 0;
  uint64_t boundaries = 0;
  uint64_t steps = 0;  // STEP records, begin and end
  uint64_t events = 0;
  bool has_step = false;
  uint64_t last_step = 0;  // highest step named by any record
  uint64_t torn_tail_bytes = 0;
  uint64_t torn_tail_offset = 0;
  std::string warning;  // empty when the trace ended cleanly
  TraceError error;     // filled when VerifyTrace returns Corruption
};
// Validates the whole trace. OK (possibly with a warning) or the first error.
Status VerifyTrace(const std::string& path, VerifySummary* summary);
Status VerifyTrace(const std::string& path, VerifySummary* summary, const ReaderOptions& options);

}  // namespace dgrr::trace
