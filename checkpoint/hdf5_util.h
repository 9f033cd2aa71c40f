// Small helpers over the HDF5 C API for the checkpoint code: an owning handle,
// one lock for every libhdf5 call (the Debian serial build is not thread-safe),
// the zstd filter registration, and typed attribute I/O that reports failures
// as Status naming the object.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace dgrr::checkpoint {

// Closes an HDF5 identifier with the matching H5?close on destruction.
class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : id_(id) {}
  H5Handle(H5Handle&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  H5Handle& operator=(H5Handle&& other) noexcept;
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { Reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void Reset();
  // Gives up ownership without closing.
  hid_t Release() {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Held around every use of libhdf5 in dgrr. The first time a thread takes
// it, HDF5's automatic error printing is turned off for that thread: in the
// thread-safe build Debian ships, the error stack and its printing setting
// are per thread, so silencing it once at initialisation left a checkpoint
// written from a rank thread printing libhdf5's whole stack (some 25 lines)
// on failure. Errors reach the user as Status, through Hdf5Cause.
std::unique_lock<std::recursive_mutex> LockHdf5();

// The cause of the last HDF5 failure on this thread, as one short phrase,
// and clears the thread's error stack: the operating system's message where
// HDF5 recorded one (a failed write's "No space left on device"), otherwise
// the innermost error's description; "" when HDF5 recorded nothing.
std::string Hdf5Cause();
// `message` followed by ": " and Hdf5Cause() when there is one.
std::string WithHdf5Cause(const std::string& message);

// Once per process: silences HDF5's automatic error printing (errors become
// Status) and registers the zstd filter (id 32015) with H5Zregister.
Status InitHdf5();

// The HDF5 file type a dgrr dtype is stored as (little-endian; f16/bf16 as
// uint16, bool and raw bytes as uint8). Also used as the memory type on read,
// so no conversion ever happens on this little-endian host.
hid_t Hdf5TypeFor(DType dtype);
// Bytes per stored element: DTypeSize, or 1 for raw bytes.
size_t StoredElementSize(DType dtype);

// Attributes. Write failures are IOError, read failures Corruption; both name
// `what` (the object's path in the file).
Status WriteU64Attribute(hid_t obj, const char* name, uint64_t value, const std::string& what);
Status WriteStringAttribute(hid_t obj, const char* name, const std::string& value,
                            const std::string& what);
StatusOr<uint64_t> ReadU64Attribute(hid_t obj, const char* name, const std::string& what);
StatusOr<std::string> ReadStringAttribute(hid_t obj, const char* name, const std::string& what);

// Names of the links in a group, in name order.
StatusOr<std::vector<std::string>> ListGroup(hid_t group, const std::string& what);

// XXH3-64 (seed 0) of bytes [from, end of file) of the open file `fd`
// (fingerprint/fingerprint.h's Xxh3OfFile over it); *end receives the offset
// the read stopped at, the file's length. Checkpoints and tensor
// dumps both cover everything after their 512-byte user block with it.
StatusOr<uint64_t> HashFileFrom(int fd, const std::string& path, uint64_t from, uint64_t* end);

}  // namespace dgrr::checkpoint
