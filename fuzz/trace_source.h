// The one place where fuzz targets hand bytes to the trace reader.
//
// TraceReader reads the bytes from an in-memory file (base/file_system.h);
// ReadWholeTrace and VerifyTrace, which take a path, read a scratch copy.
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
