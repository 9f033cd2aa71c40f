#include "trace_format/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/file.h"
#include "trace_format/boundary_scan.h"
#include "trace_format/crc32c.h"
#include "trace_format/read_ahead.h"

namespace dgrr::trace {
namespace {

constexpr size_t kFirstReadBufferBytes = 8 * 1024;
constexpr size_t kMaxReadBufferBytes = 1 << 18;
static_assert(kFirstReadBufferBytes % kRecordSize == 0 && kMaxReadBufferBytes % kRecordSize == 0);

// Up to `n` bytes at `offset`; fewer only at end of file.
StatusOr<size_t> PreadFully(RandomAccessFile& file, uint8_t* dst, size_t n, uint64_t offset) {
  return file.Read(offset, n, dst);
}

bool AllZero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

uint64_t StepOf(const RecordBody& body) {
  if (auto* b = std::get_if<BoundaryRecord>(&body)) return b->step;
  if (auto* s = std::get_if<StepRecord>(&body)) return s->step;
  if (auto* e = std::get_if<EventRecord>(&body)) return e->step;
  return 0;
}

std::string PendingNameWarning(const std::string& path, const TraceReader& reader) {
  if (!reader.name_pending()) return "";
  return path + ": the trace ends inside a NAME sequence (name id " +
         std::to_string(reader.names().size()) + " is incomplete; records from " +
         std::to_string(reader.clean_prefix_records()) + " on only begin it)";
}

std::string JoinWarnings(std::string a, const std::string& b) {
  if (a.empty()) return b;
  if (!b.empty()) a += "; " + b;
  return a;
}

}  // namespace

StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  TraceError ignored;
  return Open(path, &ignored);
}

StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path,
                                                         TraceError* error) {
  return Open(path, error, ReaderOptions{});
}

StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path, TraceError* error,
                                                         const ReaderOptions& options) {
  DGRR_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenRandomAccessFile(path));
  return Open(std::move(file), error, options);
}

StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(std::unique_ptr<RandomAccessFile> file,
                                                         TraceError* error,
                                                         const ReaderOptions& options) {
  const std::string& path = file->path();
  uint8_t bytes[kHeaderSize];
  DGRR_ASSIGN_OR_RETURN(size_t got, PreadFully(*file, bytes, kHeaderSize, 0));
  TraceHeader header;
  size_t bad_offset = 0;
  Status s = DecodeHeader(bytes, got, &header, &bad_offset);
  if (!s.ok()) {
    if (error != nullptr) *error = TraceError{true, 0, bad_offset, s.message()};
    return Status::Corruption(path + ": header at offset " + std::to_string(bad_offset) + ": " +
                              s.message());
  }
  return std::unique_ptr<TraceReader>(new TraceReader(std::move(file), header, options));
}

TraceReader::TraceReader(std::unique_ptr<RandomAccessFile> file, const TraceHeader& header,
                         const ReaderOptions& options)
    : path_(file->path()), file_(std::move(file)), header_(header), options_(options),
      capacity_(kFirstReadBufferBytes),
      buffer_(new uint8_t[capacity_]),
      crcs_(new uint32_t[capacity_ / kRecordSize]),
      share_reads_(options.share_reads && file_->reads_may_overlap()) {}

TraceReader::~TraceReader() = default;

Status TraceReader::Fail(uint64_t index, std::string reason) {
  read_ahead_.reset();  // nothing more is read: the thread goes (after the reads issued)
  error_ = TraceError{false, index, RecordOffset(index), reason};
  failure_ = Status::Corruption(path_ + ": record " + std::to_string(index) + " at offset " +
                                std::to_string(RecordOffset(index)) + ": " + reason);
  return failure_;
}

Status TraceReader::Fill(bool* have_record) {
  if (end_ - pos_ >= kRecordSize) {
    *have_record = true;
    return Status::OK();
  }
  // Keep the partial record (if any) and read on after it; the file may have
  // grown since the last end we saw.
  size_t partial = end_ - pos_;
  const bool last_read_filled_buffer = end_ == capacity_;
  if (last_read_filled_buffer && capacity_ < kMaxReadBufferBytes) {
    capacity_ = std::min(4 * capacity_, kMaxReadBufferBytes);
    std::unique_ptr<uint8_t[]> bigger(new uint8_t[capacity_]);
    std::memcpy(bigger.get(), buffer_.get() + pos_, partial);
    buffer_ = std::move(bigger);
    crcs_.reset(new uint32_t[capacity_ / kRecordSize]);
  } else {
    std::memmove(buffer_.get(), buffer_.get() + pos_, partial);
  }
  pos_ = 0;
  end_ = partial;
  checksummed_ = 0;  // ChecksumUpTo computes them as the scan reaches them
  const uint64_t offset = RecordOffset(next_index_) + end_;
  if (read_ahead_ != nullptr && read_ahead_->issued() > 0) {
    // The oldest read ahead is the one this Fill makes (issued after reads
    // that filled the buffer at its full size, whose records have all been
    // consumed since: Fill runs only at the end of the buffer), or, sharing
    // the reads, it may be the next after this one.
    const bool whole_piece = partial == 0 && capacity_ == read_ahead_->front_length();
    if (whole_piece && offset == read_ahead_->front_offset()) {
      DGRR_ASSIGN_OR_RETURN(size_t got, read_ahead_->Take(&buffer_, &crcs_));
      ++pieces_read_ahead_;
      end_ = got;
      if (share_reads_) checksummed_ = end_ / kRecordSize;  // the thread computed them (MaybeReadAhead)
      *have_record = end_ >= kRecordSize;
      MaybeReadAhead();
      return Status::OK();
    }
    // Sharing the reads, a piece before the thread's is the reader's own
    // (or one the thread failed to read), read here while the thread reads
    // on. Otherwise a piece read ahead came back short (the file was cut
    // under the reader) or failed: the reads queued after it are not the
    // ones this reader makes now. Dropped (after they end), and read here.
    if (!(share_reads_ && whole_piece && offset < read_ahead_->front_offset())) read_ahead_.reset();
  }
  DGRR_ASSIGN_OR_RETURN(size_t got, PreadFully(*file_, buffer_.get() + end_, capacity_ - end_, offset));
  // A read of the reader's own that ends early has found the end of the
  // file (cut since, by a rollback) before any piece the thread read beyond
  // it (sharing the reads): they are dropped, so that what is written there
  // later is read as it then is, as by a reader without the thread.
  if (read_ahead_ != nullptr && got < capacity_ - end_) read_ahead_.reset();
  end_ += got;
  *have_record = end_ >= kRecordSize;
  MaybeReadAhead();
  return Status::OK();
}

void TraceReader::MaybeReadAhead() {
  // Only right after a read that filled the buffer at its full size: the
  // next Fill then reads capacity_ bytes at the end of this piece, and the
  // reads stay the reader's, in its order.
  if (capacity_ != kMaxReadBufferBytes || end_ != capacity_ || pos_ != 0) return;
  if (options_.read_ahead == ReaderOptions::ReadAhead::kNever) return;
  const uint64_t size_at_open = file_->size_at_open();
  if (options_.read_ahead == ReaderOptions::ReadAhead::kAuto && size_at_open < kReadAheadMinBytes) return;
  // Only pieces the file held whole at open: the last, short piece (and
  // anything appended since) is read when the reader gets there, so a
  // trace still being written is read as it then is. The pieces issued
  // follow this one, each a whole buffer: back to back, or, sharing the
  // reads, every other one, the first right after this one.
  const uint64_t this_end = RecordOffset(next_index_) + end_;
  const size_t issued = read_ahead_ == nullptr ? 0 : read_ahead_->issued();
  if (read_ahead_ == nullptr || read_ahead_next_ < this_end) read_ahead_next_ = this_end;
  if (read_ahead_next_ + capacity_ > size_at_open) {
    if (issued == 0) read_ahead_.reset();  // nothing more to read ahead: the thread goes
    return;
  }
  if (read_ahead_ == nullptr) {
    read_ahead_ = PieceReadAhead::Start(file_.get(), capacity_,
                                        share_reads_ ? kSharedReadAheadPieces : kReadAheadPieces, share_reads_);
    // None free: tried again at the next piece (another reader may end).
    if (read_ahead_ == nullptr) return;
  }
  const uint64_t stride = share_reads_ ? 2 * capacity_ : capacity_;
  for (; read_ahead_->can_issue() && read_ahead_next_ + capacity_ <= size_at_open; read_ahead_next_ += stride) {
    read_ahead_->Issue(read_ahead_next_, capacity_);
  }
}

void TraceReader::SettleReadAhead() {
  if (read_ahead_ != nullptr) read_ahead_->Wait();
}

// From a whole zero record at `from_offset` on: a torn tail when no whole
// record after it holds a nonzero byte (nonzero bytes in a final short
// record are part of the same torn write: docs/trace-format.md §4). Else
// the offset of the first nonzero byte: data after a hole, corruption.
StatusOr<bool> TraceReader::RestOfFileIsZero(uint64_t from_offset) {
  SettleReadAhead();
  std::vector<uint8_t> chunk(1 << 16);
  uint64_t offset = from_offset;
  for (;;) {
    DGRR_ASSIGN_OR_RETURN(size_t got, PreadFully(*file_, chunk.data(), chunk.size(), offset));
    if (got == 0) break;
    const auto nonzero = std::find_if(chunk.data(), chunk.data() + got, [](uint8_t b) { return b != 0; });
    if (nonzero != chunk.data() + got) {
      first_data_after_zeros_ = offset + static_cast<uint64_t>(nonzero - chunk.data());
      // Is that byte inside a whole record? Only the end of the file can say.
      DGRR_ASSIGN_OR_RETURN(const uint64_t end, file_->Size());
      const uint64_t whole_end = kHeaderSize + (end - kHeaderSize) / kRecordSize * kRecordSize;
      if (first_data_after_zeros_ < whole_end) return false;
      torn_tail_bytes_ = end - from_offset;
      return true;
    }
    offset += got;
  }
  torn_tail_bytes_ = offset - from_offset;
  return true;
}

Status TraceReader::CheckSequence(const RecordBody& body) {
  if (const auto* chunk = std::get_if<NameChunk>(&body)) {
    if (pending_) {
      if (chunk->name_id != pending_->id || chunk->total_length != pending_->total_length ||
          chunk->chunk_offset != pending_->bytes.size()) {
        return Status::Corruption("NAME record (id " + std::to_string(chunk->name_id) +
                                  ", chunk offset " + std::to_string(chunk->chunk_offset) +
                                  ") does not continue name id " + std::to_string(pending_->id) +
                                  " at byte " + std::to_string(pending_->bytes.size()));
      }
      pending_->bytes += chunk->bytes;
    } else {
      if (chunk->name_id != names_.size()) {
        return Status::Corruption("name id " + std::to_string(chunk->name_id) +
                                  " defined out of order (next id is " +
                                  std::to_string(names_.size()) + ")");
      }
      if (chunk->chunk_offset != 0) {
        return Status::Corruption("name id " + std::to_string(chunk->name_id) +
                                  " begins at chunk offset " + std::to_string(chunk->chunk_offset));
      }
      pending_ = PendingName{chunk->name_id, chunk->total_length, chunk->bytes};
    }
    if (pending_->bytes.size() == pending_->total_length) {
      auto [it, fresh] = ids_by_name_.emplace(pending_->bytes, pending_->id);
      if (!fresh) {
        return Status::Corruption("name id " + std::to_string(pending_->id) + " repeats the name of id " +
                                  std::to_string(it->second) + " (a name is defined once)");
      }
      names_.push_back(std::move(pending_->bytes));
      pending_.reset();
    }
    return Status::OK();
  }
  if (pending_) {
    return Status::Corruption("name id " + std::to_string(pending_->id) +
                              " is incomplete: a non-NAME record interrupts its NAME records");
  }
  if (const auto* boundary = std::get_if<BoundaryRecord>(&body)) {
    if (boundary->name_id >= names_.size()) {
      return Status::Corruption("undefined name id " + std::to_string(boundary->name_id) + " (" +
                                std::to_string(names_.size()) + " names defined)");
    }
    if (boundary->rank >= header_.world_size) {
      return Status::Corruption("rank " + std::to_string(boundary->rank) + " is not below the world size " +
                                std::to_string(header_.world_size));
    }
    if (has_seq_ && boundary->seq <= last_seq_) {
      return Status::Corruption("sequence number " + std::to_string(boundary->seq) +
                                " does not follow " + std::to_string(last_seq_));
    }
    has_seq_ = true;
    last_seq_ = boundary->seq;
  }
  return Status::OK();
}

void TraceReader::ChecksumUpTo(size_t records) {
  if (records <= checksummed_) return;
  crc32c::ValueOfBlocks(buffer_.get() + checksummed_ * kRecordSize, kRecordSize, kRecordCrcOffset,
                        records - checksummed_, crcs_.get() + checksummed_);
  checksummed_ = records;
}

size_t TraceReader::TakeCleanBoundaries(size_t max) {
  if (pending_) return 0;
  const size_t limit = std::min(max, (end_ - pos_) / kRecordSize);
  // Checksummed right before the scan, a run at a time: the records are then
  // read from L1 by the checks (and by the caller's pass over the run) rather
  // than from L2 after a pass over the whole buffer.
  ChecksumUpTo(pos_ / kRecordSize + limit);
  ScanState state{static_cast<uint32_t>(std::min<size_t>(names_.size(), UINT32_MAX)), header_.world_size,
                  has_seq_, last_seq_};
  // Fill checksummed the buffer; a record that breaks any rule ends the run,
  // and Next() then names the reason.
  const size_t n = CleanBoundaryRun(buffer_.get() + pos_, crcs_.get() + pos_ / kRecordSize, limit, &state);
  if (n == 0) return 0;
  has_seq_ = state.has_seq;
  last_seq_ = state.last_seq;
  torn_tail_bytes_ = 0;
  torn_by_zeros_ = false;
  next_index_ += n;
  pos_ += n * kRecordSize;
  clean_prefix_records_ = next_index_;
  return n;
}

bool TraceReader::TakeCleanBoundary(BoundaryRecord* out) {
  if (TakeCleanBoundaries(1) == 0) return false;
  DecodeBoundaryIfValid(buffer_.get() + pos_ - kRecordSize, out);  // checked: cannot fail
  return true;
}

Status TraceReader::NextRecords(size_t max, BoundaryRun* run, Record* record, bool* done) {
  *done = false;
  *run = BoundaryRun{};
  if (!failure_.ok()) return failure_;
  if (const size_t n = TakeCleanBoundaries(std::max<size_t>(1, max)); n > 0) {
    *run = BoundaryRun{buffer_.get() + pos_ - n * kRecordSize, n, next_index_ - n};
    return Status::OK();
  }
  DGRR_RETURN_IF_ERROR(Next(record, done));
  if (!*done && std::holds_alternative<BoundaryRecord>(record->body)) {
    // Decoded by the general path (after a refill of the buffer): its bytes
    // are still the last record consumed.
    *run = BoundaryRun{buffer_.get() + pos_ - kRecordSize, 1, record->index};
  }
  return Status::OK();
}

Status TraceReader::NextBoundaryRun(size_t max, BoundaryRun* run, bool* done) {
  do {
    DGRR_RETURN_IF_ERROR(NextRecords(max, run, &scratch_, done));
  } while (!*done && run->count == 0);
  return Status::OK();
}

Status TraceReader::NextBoundary(BoundaryRecord* record, uint64_t* index, bool* done) {
  *done = false;
  for (;;) {
    if (failure_.ok() && TakeCleanBoundary(record)) {
      *index = next_index_ - 1;
      return Status::OK();
    }
    // Anything else, one record through the general path: NAME, STEP and
    // EVENT records, the end of the buffer or file, and every error.
    DGRR_RETURN_IF_ERROR(Next(&scratch_, done));
    if (*done) return Status::OK();
    if (const auto* b = std::get_if<BoundaryRecord>(&scratch_.body)) {
      *record = *b;
      *index = scratch_.index;
      return Status::OK();
    }
  }
}

Status TraceReader::Next(Record* record, bool* done) {
  *done = false;
  if (!failure_.ok()) return failure_;
  if (end_ - pos_ >= kRecordSize &&
      buffer_[pos_] == static_cast<uint8_t>(RecordType::kBoundary)) {
    auto* boundary = std::get_if<BoundaryRecord>(&record->body);
    if (boundary == nullptr) boundary = &record->body.emplace<BoundaryRecord>();
    if (TakeCleanBoundary(boundary)) {
      record->index = next_index_ - 1;
      return Status::OK();
    }
  }
  bool have_record = false;
  DGRR_RETURN_IF_ERROR(Fill(&have_record));
  torn_tail_bytes_ = 0;
  torn_by_zeros_ = false;
  if (!have_record) {
    torn_tail_bytes_ = end_ - pos_;
    *done = true;
    return Status::OK();
  }
  const uint8_t* src = buffer_.get() + pos_;
  if (src[0] == 0 && AllZero(src, kRecordSize)) {
    DGRR_ASSIGN_OR_RETURN(bool zero_tail, RestOfFileIsZero(RecordOffset(next_index_)));
    if (zero_tail) {
      torn_by_zeros_ = true;
      *done = true;
      return Status::OK();
    }
    const uint64_t data_record = (first_data_after_zeros_ - kHeaderSize) / kRecordSize;
    return Fail(next_index_, "all zeros, but record " + std::to_string(data_record) + " at offset " +
                                 std::to_string(RecordOffset(data_record)) +
                                 " after it holds data (a hole inside the trace, not a torn tail)");
  }
  ChecksumUpTo(pos_ / kRecordSize + 1);
  if (StoredRecordCrc(src) != crcs_[pos_ / kRecordSize]) return Fail(next_index_, "CRC mismatch");
  Status s = DecodeRecordFields(src, &record->body);
  if (s.ok()) s = CheckSequence(record->body);
  if (!s.ok()) return Fail(next_index_, s.message());
  record->index = next_index_++;
  pos_ += kRecordSize;
  if (!pending_) clean_prefix_records_ = next_index_;
  return Status::OK();
}

Status TraceReader::ReadRecordAt(uint64_t index, Record* record) {
  SettleReadAhead();
  uint8_t bytes[kRecordSize];
  DGRR_ASSIGN_OR_RETURN(size_t got, PreadFully(*file_, bytes, kRecordSize, RecordOffset(index)));
  if (got < kRecordSize) {
    return Status::NotFound(path_ + ": no whole record " + std::to_string(index) + " in the file");
  }
  Status s = DecodeRecord(bytes, &record->body);
  if (!s.ok()) {
    return Status::Corruption(path_ + ": record " + std::to_string(index) + " at offset " +
                              std::to_string(RecordOffset(index)) + ": " + s.message());
  }
  record->index = index;
  return Status::OK();
}

StatusOr<uint64_t> TraceReader::CountRecordsInFile() {
  SettleReadAhead();
  DGRR_ASSIGN_OR_RETURN(uint64_t size, file_->Size());
  return size < kHeaderSize ? 0 : (size - kHeaderSize) / kRecordSize;
}

std::string TraceReader::torn_tail_warning() const {
  if (torn_tail_bytes_ == 0) return "";
  return path_ + ": torn tail at offset " + std::to_string(torn_tail_offset()) + ": " +
         std::to_string(torn_tail_bytes_) + " bytes ignored (" +
         (torn_by_zeros_ ? "zero-filled records at end of file" : "partial record at end of file") +
         ")";
}

StatusOr<Trace> ReadWholeTrace(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(auto reader, TraceReader::Open(path));
  Trace trace;
  trace.path = path;
  trace.header = reader->header();
  for (;;) {
    Record record;
    bool done = false;
    DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
    if (done) break;
    trace.records.push_back(std::move(record));
  }
  trace.names = reader->names();
  trace.torn_tail_bytes = reader->torn_tail_bytes();
  trace.warning = JoinWarnings(reader->torn_tail_warning(), PendingNameWarning(path, *reader));
  return trace;
}

Status TruncateTraceAt(const std::string& path, uint64_t keep_records) {
  DGRR_ASSIGN_OR_RETURN(auto reader, TraceReader::Open(path));
  DGRR_ASSIGN_OR_RETURN(uint64_t in_file, reader->CountRecordsInFile());
  if (keep_records > in_file) {
    return Status::InvalidArgument(path + ": cannot keep " + std::to_string(keep_records) +
                                   " records: the file has " + std::to_string(in_file));
  }
  return TruncateFile(path, RecordOffset(keep_records));
}

Status VerifyTrace(const std::string& path, VerifySummary* summary) {
  return VerifyTrace(path, summary, ReaderOptions{});
}

Status VerifyTrace(const std::string& path, VerifySummary* summary, const ReaderOptions& options) {
  *summary = VerifySummary{};
  summary->path = path;
  auto opened = TraceReader::Open(path, &summary->error, options);
  if (!opened.ok()) return opened.status();
  TraceReader& reader = **opened;
  summary->header = reader.header();
  Record record;
  // 16 KiB runs: checksummed, checked and summarised while in L1.
  constexpr size_t kRunRecords = 128;
  for (;;) {
    bool done = false;
    BoundaryRun run;
    Status s = reader.NextRecords(kRunRecords, &run, &record, &done);
    if (!s.ok()) {
      summary->error = reader.last_error();
      return s;
    }
    if (done) break;
    if (run.count > 0) {
      uint64_t run_last_step = BoundaryView(run.bytes).step();
      for (size_t i = 1; i < run.count; ++i) {
        run_last_step = std::max(run_last_step, BoundaryView(run.bytes + i * kRecordSize).step());
      }
      summary->boundaries += run.count;
      summary->last_step =
          summary->has_step ? std::max(summary->last_step, run_last_step) : run_last_step;
      summary->has_step = true;
      continue;
    }
    const RecordBody& body = record.body;
    summary->boundaries += std::holds_alternative<BoundaryRecord>(body);
    summary->steps += std::holds_alternative<StepRecord>(body);
    summary->events += std::holds_alternative<EventRecord>(body);
    if (!std::holds_alternative<NameChunk>(body)) {
      uint64_t step = StepOf(body);
      summary->last_step = summary->has_step ? std::max(summary->last_step, step) : step;
      summary->has_step = true;
    }
  }
  summary->records = reader.records_read();
  summary->names = reader.names().size();
  summary->torn_tail_bytes = reader.torn_tail_bytes();
  summary->torn_tail_offset = reader.torn_tail_offset();
  summary->warning = JoinWarnings(reader.torn_tail_warning(), PendingNameWarning(path, reader));
  return Status::OK();
}

}  // namespace dgrr::trace
