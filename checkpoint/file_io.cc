#include "checkpoint/file_io.h"

#include <hdf5.h>

#include <unistd.h>

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

StatusOr<size_t> StatAndReadStart(int fd, const std::string& path, struct stat* st, uint8_t* block, size_t n) {
  const char* call = "stat";
  ssize_t got = 0;
  if (::fstat(fd, st) == 0) {
    call = "read";
    do {
      got = ::pread(fd, block, n, 0);
    } while (got < 0 && errno == EINTR);
    if (got >= 0) return static_cast<size_t>(got);
  }
  const int err = errno;
  ::close(fd);
  return Status::FromErrno(call, path, err);  // an I/O problem, not a damaged file
}

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

StatusOr<H5Handle> CreateHdf5File(const std::string& path, uint64_t userblock_bytes) {
  H5Handle fcpl(H5Pcreate(H5P_FILE_CREATE));
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (H5Pset_userblock(fcpl.get(), userblock_bytes) < 0 || H5Pset_obj_track_times(fcpl.get(), false) < 0 ||
      H5Pset_fapl_sec2(fapl.get()) < 0 ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
    return Status::Internal("HDF5: file property lists rejected");
  }
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()));
  if (!file.valid()) return Hdf5WriteFailure(path, "create");
  return file;
}

}  // namespace dgrr::checkpoint
