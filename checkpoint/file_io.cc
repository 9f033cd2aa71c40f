#include "checkpoint/file_io.h"

#include <hdf5.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace dgrr::checkpoint {
namespace {

// libhdf5's POSIX drivers report a failed system call as
// "..., errno = 28, error message = 'No space left on device', ...".
int ErrnoIn(const char* desc) {
  if (desc == nullptr) return 0;
  const char* at = std::strstr(desc, "errno = ");
  if (at == nullptr) return 0;
  return static_cast<int>(std::strtol(at + 8, nullptr, 10));
}

struct Cause {
  int err = 0;
  std::string innermost;
};

// libhdf5 1.10 keeps the ID of a file whose close failed (a flush that hit a
// full disk) after freeing the file, and its exit handler, closing every
// open ID, then dereferences the freed file: a write failure turned into a
// crash at exit (upstream CVE-2020-10812, fixed in 1.14). dgrr closes every
// file it opens itself, so it has nothing for that handler to do; this asks
// libhdf5 not to install it. It must run before the library initialises,
// hence a static initialiser here, in the object every checkpoint and
// tensor-dump write links.
const bool kNoHdf5ExitHandler = [] {
  H5dont_atexit();
  return true;
}();

herr_t Visit(unsigned n, const H5E_error2_t* e, void* data) {
  auto* cause = static_cast<Cause*>(data);
  if (n == 0 && e->desc != nullptr) cause->innermost = e->desc;
  if (cause->err == 0) cause->err = ErrnoIn(e->desc);
  return 0;
}

}  // namespace

StatusOr<uint64_t> HashFileBody(RandomAccessFile& file, uint64_t from, uint64_t* end) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<uint8_t> buffer(1 << 20);
  uint64_t offset = from;
  Status status;
  for (;;) {
    StatusOr<size_t> n = file.Read(offset, buffer.size(), buffer.data());
    if (!n.ok()) {
      status = n.status();
      break;
    }
    if (*n == 0) break;
    XXH3_64bits_update(state, buffer.data(), *n);
    offset += *n;
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (!status.ok()) return status;
  *end = offset;
  return hash;
}

Status Hdf5WriteFailure(const std::string& file, const std::string& what) {
  const int saved_errno = errno;
  Cause cause;
  // H5Ewalk2 does not clear the stack it walks; upward starts innermost.
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, Visit, &cause);
  std::string text;
  if (cause.err > 0) {
    text = std::strerror(cause.err);
  } else if (!cause.innermost.empty()) {
    text = "libhdf5: " + cause.innermost;
  } else if (saved_errno != 0) {
    text = std::strerror(saved_errno);
  } else {
    text = "libhdf5 gave no cause";
  }
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return Status::IOError(file + ": " + what + ": " + text);
}

}  // namespace dgrr::checkpoint
