#include "trace_format/writer.h"

#include <algorithm>
#include <cstring>

#include "trace_format/reader.h"

namespace dgrr::trace {
namespace {

StatusOr<std::unique_ptr<WritableFile>> OpenTraceFile(const TraceWriterOptions& options,
                                                      const std::string& path) {
  if (options.open_file) return options.open_file(path);
  return OpenWritableFile(path, /*truncate=*/false);
}

size_t BufferCapacity(size_t requested_bytes) {
  return std::max<size_t>(1, requested_bytes / kRecordSize) * kRecordSize;
}

}  // namespace

StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Create(const std::string& path,
                                                           const TraceHeader& header,
                                                           TraceWriterOptions options) {
  if (header.world_size == 0 || header.rank >= header.world_size) {
    return Status::InvalidArgument(path + ": rank " + std::to_string(header.rank) +
                                   " not below world size " + std::to_string(header.world_size));
  }
  if (!options.overwrite && PathExists(path)) {
    return Status::FailedPrecondition(path + ": trace exists (refusing to overwrite)");
  }
  uint8_t bytes[kHeaderSize];
  EncodeHeader(header, bytes);
  DGRR_RETURN_IF_ERROR(WriteFileAtomically(
      path, std::string_view(reinterpret_cast<const char*>(bytes), kHeaderSize)));
  DGRR_ASSIGN_OR_RETURN(auto file, OpenTraceFile(options, path));
  TraceHeader stored = header;
  stored.format_version = kFormatVersion;
  return std::unique_ptr<TraceWriter>(
      new TraceWriter(path, stored, std::move(file), BufferCapacity(options.buffer_bytes), 0));
}

StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::OpenForAppend(const std::string& path,
                                                                  TraceWriterOptions options) {
  DGRR_ASSIGN_OR_RETURN(auto reader, TraceReader::Open(path));
  Record record;
  for (bool done = false; !done;) DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
  // Cut what a crashed writer left half-done (a partial record, zero-filled
  // records, a name whose NAME records stop early), so that what we append
  // follows a clean record boundary.
  const uint64_t keep = reader->clean_prefix_records();
  DGRR_ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
  if (size != RecordOffset(keep)) DGRR_RETURN_IF_ERROR(TruncateFile(path, RecordOffset(keep)));

  DGRR_ASSIGN_OR_RETURN(auto file, OpenTraceFile(options, path));
  std::unique_ptr<TraceWriter> writer(new TraceWriter(
      path, reader->header(), std::move(file), BufferCapacity(options.buffer_bytes), keep));
  for (const std::string& name : reader->names()) {
    auto [it, inserted] = writer->name_ids_.emplace(name, writer->names_.size());
    writer->names_.push_back(it->first);
  }
  writer->has_seq_ = reader->has_boundary();
  writer->last_seq_ = reader->last_seq();
  return writer;
}

TraceWriter::TraceWriter(std::string path, const TraceHeader& header,
                         std::unique_ptr<WritableFile> file, size_t buffer_bytes,
                         uint64_t existing_records)
    : path_(std::move(path)),
      header_(header),
      file_(std::move(file)),
      capacity_(buffer_bytes),
      records_written_(existing_records) {
  for (Buffer& buffer : buffers_) buffer.bytes = std::make_unique<uint8_t[]>(capacity_);
  filling_ = &buffers_[0];
  io_thread_ = std::thread([this] { IoLoop(); });
}

TraceWriter::~TraceWriter() { (void)Close(); }

Status TraceWriter::StickyError() {
  std::lock_guard<std::mutex> lock(mutex_);
  return io_status_;
}

Status TraceWriter::CheckUsable() const {
  if (closed_) return Status::FailedPrecondition(path_ + ": trace writer is closed");
  return Status::OK();
}

StatusOr<uint32_t> TraceWriter::InternName(std::string_view name) {
  if (auto it = name_ids_.find(std::string(name)); it != name_ids_.end()) return it->second;
  DGRR_RETURN_IF_ERROR(CheckUsable());
  if (io_failed_.load(std::memory_order_acquire)) return StickyError();
  if (name.empty() || name.size() > kMaxNameLength) {
    return Status::InvalidArgument("boundary name of " + std::to_string(name.size()) +
                                   " bytes (1.." + std::to_string(kMaxNameLength) + " allowed)");
  }
  if (name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("boundary name contains a NUL byte");
  }
  const auto id = static_cast<uint32_t>(names_.size());
  NameChunk chunk;
  chunk.name_id = id;
  chunk.total_length = static_cast<uint16_t>(name.size());
  for (size_t offset = 0; offset < name.size(); offset += kNameChunkCapacity) {
    chunk.chunk_offset = static_cast<uint16_t>(offset);
    chunk.bytes.assign(name.substr(offset, kNameChunkCapacity));
    uint8_t* slot = nullptr;
    DGRR_RETURN_IF_ERROR(Reserve(&slot));
    EncodeNameChunk(chunk, slot);
  }
  auto [it, inserted] = name_ids_.emplace(std::string(name), id);
  names_.push_back(it->first);
  return id;
}

Status TraceWriter::AppendBoundary(const BoundaryRecord& record) {
  if (closed_ || io_failed_.load(std::memory_order_acquire)) {
    DGRR_RETURN_IF_ERROR(CheckUsable());
    return StickyError();
  }
  if (record.name_id >= names_.size()) {
    return Status::InvalidArgument("boundary with name id " + std::to_string(record.name_id) +
                                   " that was never interned");
  }
  if (record.rank >= header_.world_size) {
    return Status::InvalidArgument("boundary of rank " + std::to_string(record.rank) +
                                   " in a trace of world size " + std::to_string(header_.world_size));
  }
  if (has_seq_ && record.seq <= last_seq_) {
    return Status::InvalidArgument("boundary sequence number " + std::to_string(record.seq) +
                                   " does not follow " + std::to_string(last_seq_));
  }
  if (static_cast<uint8_t>(record.phase) > kMaxPhase ||
      static_cast<uint8_t>(record.direction) > 1 ||
      !IsValidDType(static_cast<uint8_t>(record.dtype))) {
    return Status::InvalidArgument("boundary with an invalid phase, direction or dtype");
  }
  if (record.ndim < kInlineDims &&
      std::any_of(record.dims.begin() + record.ndim, record.dims.end(),
                  [](uint64_t d) { return d != 0; })) {
    return Status::InvalidArgument("boundary shape has non-zero dims beyond ndim (use SetShape)");
  }
  uint8_t* slot = nullptr;
  DGRR_RETURN_IF_ERROR(Reserve(&slot));
  EncodeBoundary(record, slot);
  has_seq_ = true;
  last_seq_ = record.seq;
  return Status::OK();
}

Status TraceWriter::AppendStep(const StepRecord& record) {
  DGRR_RETURN_IF_ERROR(CheckUsable());
  if (io_failed_.load(std::memory_order_acquire)) return StickyError();
  if (static_cast<uint8_t>(record.kind) > 1 ||
      !IsValidDType(static_cast<uint8_t>(record.loss_dtype))) {
    return Status::InvalidArgument("step record with an invalid kind or loss dtype");
  }
  if (std::string problem = StepFieldsProblem(record); !problem.empty()) {
    return Status::InvalidArgument("step record: " + problem);
  }
  uint8_t* slot = nullptr;
  DGRR_RETURN_IF_ERROR(Reserve(&slot));
  EncodeStep(record, slot);
  return Status::OK();
}

Status TraceWriter::AppendEvent(const EventRecord& record) {
  DGRR_RETURN_IF_ERROR(CheckUsable());
  if (io_failed_.load(std::memory_order_acquire)) return StickyError();
  auto kind = static_cast<uint8_t>(record.kind);
  if (kind == 0 || kind > kMaxEventKind) return Status::InvalidArgument("invalid event kind");
  if (record.payload.size() > kMaxEventPayload) {
    return Status::InvalidArgument("event payload of " + std::to_string(record.payload.size()) +
                                   " bytes (at most " + std::to_string(kMaxEventPayload) + ")");
  }
  uint8_t* slot = nullptr;
  DGRR_RETURN_IF_ERROR(Reserve(&slot));
  EncodeEvent(record, slot);
  return Status::OK();
}

void TraceWriter::WaitIdle(std::unique_lock<std::mutex>& lock) {
  work_done_.wait(lock, [this] { return handed_over_ == nullptr; });
}

Status TraceWriter::HandOver() {
  std::unique_lock<std::mutex> lock(mutex_);
  WaitIdle(lock);
  if (!io_status_.ok()) return io_status_;
  handed_over_ = filling_;
  filling_ = filling_ == &buffers_[0] ? &buffers_[1] : &buffers_[0];
  work_ready_.notify_one();
  return Status::OK();
}

Status TraceWriter::SealAndWrite(Buffer* buffer) {
  SealRecords(buffer->bytes.get(), buffer->used / kRecordSize);
  return file_->Append(buffer->bytes.get(), buffer->used);
}

void TraceWriter::IoLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return handed_over_ != nullptr || stopping_; });
    if (handed_over_ == nullptr) return;  // stopping with nothing left
    Buffer* buffer = handed_over_;
    const bool failed_before = !io_status_.ok();
    lock.unlock();
    // After an error nothing more is written: a record after a gap would
    // turn a torn tail into corruption in the middle of the file.
    Status s = failed_before ? Status::OK() : SealAndWrite(buffer);
    lock.lock();
    if (!s.ok()) {
      io_status_ = s;
      io_failed_.store(true, std::memory_order_release);
    }
    buffer->used = 0;
    handed_over_ = nullptr;
    work_done_.notify_all();
  }
}

Status TraceWriter::Flush() {
  DGRR_RETURN_IF_ERROR(CheckUsable());
  std::unique_lock<std::mutex> lock(mutex_);
  WaitIdle(lock);
  if (!io_status_.ok()) return io_status_;
  // The I/O thread is idle until the next hand-over, which only this thread
  // makes, so the file is ours for the moment. The partial buffer is written
  // here rather than handed over: this thread would only wait for it, and
  // waking the I/O thread to wait for it costs two context switches, at every
  // step's end (Session::EndStep flushes there). Same records, same bytes.
  Status s = Status::OK();
  if (filling_->used > 0) {
    lock.unlock();
    s = SealAndWrite(filling_);
    filling_->used = 0;
    lock.lock();
  }
  if (s.ok()) s = file_->Flush();
  if (!s.ok()) {
    io_status_ = s;
    io_failed_.store(true, std::memory_order_release);
  }
  return s;
}

Status TraceWriter::Sync() {
  DGRR_RETURN_IF_ERROR(Flush());
  std::unique_lock<std::mutex> lock(mutex_);
  Status s = file_->Sync();
  if (!s.ok()) {
    io_status_ = s;
    io_failed_.store(true, std::memory_order_release);
  }
  return s;
}

Status TraceWriter::Close() {
  if (closed_) return close_status_;
  Status s = Flush();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    work_ready_.notify_one();
  }
  io_thread_.join();
  Status closed = file_->Close();
  if (s.ok()) s = closed;
  closed_ = true;
  close_status_ = s;
  return s;
}

}  // namespace dgrr::trace
