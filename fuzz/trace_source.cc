#include "fuzz/trace_source.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "base/file_system.h"
#include "fuzz/scratch.h"
#include "trace_format/reader.h"

namespace dgrr::fuzz {
namespace {

// Bytes -> a path, for the readers that take one (ReadWholeTrace, VerifyTrace).
std::string TracePathFor(std::string_view bytes) { return WriteScratchFile("input.trace", bytes); }

// Next() until done or an error; a second pass past the end must stay done
// (or keep returning the same error).
Status Scan(trace::TraceReader& reader) {
  trace::Record record;
  bool done = false;
  while (true) {
    Status s = reader.Next(&record, &done);
    if (!s.ok()) return s;
    if (done) break;
  }
  Status again = reader.Next(&record, &done);
  if (again.ok() && !done) std::abort();  // nothing was appended: must stay at the end
  return Status::OK();
}

}  // namespace

Status ExerciseTraceReader(std::string_view bytes) {
  // The reader itself reads the bytes from memory (base/file_system.h's
  // in-memory file), as it reads a file through the file layer.
  trace::TraceError error;
  auto opened = trace::TraceReader::Open(NewMemoryFile("input.trace", std::string(bytes)), &error);
  if (!opened.ok()) return opened.status();
  trace::TraceReader& reader = **opened;
  const Status scan = Scan(reader);
  (void)reader.torn_tail_warning();

  auto count = reader.CountRecordsInFile();
  if (count.ok()) {
    trace::Record record;
    const uint64_t n = *count;
    for (uint64_t index : {uint64_t{0}, n / 2, n ? n - 1 : 0, n, n + 1, ~uint64_t{0}}) {
      Status s = reader.ReadRecordAt(index, &record);
      if (s.ok() && index >= n) std::abort();  // a record past the end of the file
    }
  }

  const std::string path = TracePathFor(bytes);
  auto whole = trace::ReadWholeTrace(path);
  trace::VerifySummary summary;
  const Status verified = trace::VerifyTrace(path, &summary);
  // The three readers share their validation: they must agree on validity.
  if (whole.ok() != scan.ok() || verified.ok() != scan.ok()) std::abort();
  return scan;
}

}  // namespace dgrr::fuzz
