// The checkpoint code's own I/O around the files libhdf5 writes: hashing a
// file's body through the file layer (base/file_system.h), and turning a
// libhdf5 write failure into one line that names the file and the cause.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "base/file_system.h"
#include "base/status.h"
#include "checkpoint/hdf5_util.h"

namespace dgrr::checkpoint {

// Call at once after a libhdf5 call on `file` failed, before any other HDF5
// call (the next one clears the error stack). An IOError
// "FILE: WHAT: CAUSE", where CAUSE is the errno text the innermost failure
// recorded (e.g. "No space left on device"), or else libhdf5's innermost
// description of the failure. One line, never the whole stack.
// (Linking this file also stops libhdf5 from installing its exit handler,
// which crashes after a failed close; see file_io.cc.)
Status Hdf5WriteFailure(const std::string& file, const std::string& what);

// Creates (truncating) the HDF5 file every dgrr writer writes: a user block of
// `userblock_bytes` for dgrr's own header, no object times (the same state
// gives the same bytes), the sec2 driver, and version-1.10 objects, which
// carry checksums on their metadata so that damage there is refused by
// libhdf5 rather than misread. Call with the HDF5 lock held.
StatusOr<H5Handle> CreateHdf5File(const std::string& path, uint64_t userblock_bytes);

// The start of a file dgrr wrote, for checking its header: fstat of the
// open `fd` into `*st` and up to `n` bytes from offset 0 into `block` (an
// interrupted read retried); returns how many bytes were read. On failure
// `fd` is closed and the IOError names the call and `path`.
StatusOr<size_t> StatAndReadStart(int fd, const std::string& path, struct stat* st, uint8_t* block, size_t n);

// `status` with `file` named once: prefixed with it unless its message
// already starts with it (Hdf5WriteFailure's do).
Status NamingFile(const Status& status, const std::string& file);

}  // namespace dgrr::checkpoint
