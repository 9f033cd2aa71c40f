#include "checkpoint/file_io.h"

#include <hdf5.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "checkpoint/hdf5_util.h"

namespace dgrr::checkpoint {
namespace {

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

}  // namespace

Status Hdf5WriteFailure(const std::string& file, const std::string& what) {
  const int saved_errno = errno;
  std::string cause = Hdf5Cause();
  if (cause.empty()) cause = saved_errno != 0 ? std::strerror(saved_errno) : "libhdf5 gave no cause";
  return Status::IOError(file + ": " + what + ": " + cause);
}

Status NamingFile(const Status& status, const std::string& file) {
  if (status.ok() || status.message().rfind(file, 0) == 0) return status;
  return status.WithPrefix(file);
}

}  // namespace dgrr::checkpoint
