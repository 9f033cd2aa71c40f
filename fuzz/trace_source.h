// The one place where fuzz targets hand bytes to the trace reader.
//
// Today TraceReader opens a path, so the bytes go through a scratch file;
// when the file layer gains an in-memory source, only trace_source.cc changes.
#pragma once

#include <string_view>

#include "base/status.h"

namespace dgrr::fuzz {

// Runs `bytes` through every read path of the trace reader: Open, Next until
// done or an error (twice past the end, as a reader of a live trace does),
// CountRecordsInFile, ReadRecordAt on records before, at and after the end,
// and ReadWholeTrace / VerifyTrace. Returns the first error of the scan (OK
// for a valid trace); the point is that none of it crashes, hangs or leaks.
Status ExerciseTraceReader(std::string_view bytes);

}  // namespace dgrr::fuzz
