#include "checkpoint/hdf5_util.h"

#include <unistd.h>

#include <cerrno>

#include "checkpoint/zstd_filter.h"
#include "fingerprint/fingerprint.h"

namespace dgrr::checkpoint {

H5Handle& H5Handle::operator=(H5Handle&& other) noexcept {
  if (this != &other) {
    Reset();
    id_ = other.id_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void H5Handle::Reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

std::unique_lock<std::recursive_mutex> LockHdf5() {
  static std::recursive_mutex mutex;
  std::unique_lock<std::recursive_mutex> lock(mutex);
  thread_local const bool silenced = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  (void)silenced;
  return lock;
}

namespace {

// H5Ewalk2 callback: keeps the first (with H5E_WALK_UPWARD, the innermost)
// error's description.
herr_t KeepInnermost(unsigned n, const H5E_error2_t* error, void* out) {
  if (n == 0 && error != nullptr && error->desc != nullptr) {
    *static_cast<std::string*>(out) = error->desc;
  }
  return 0;
}

}  // namespace

std::string Hdf5Cause() {
  auto lock = LockHdf5();
  std::string desc;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, KeepInnermost, &desc);
  H5Eclear2(H5E_DEFAULT);
  // The sec2 driver's failures embed strerror: "..., errno = 28, error
  // message = 'No space left on device', ...".
  const std::string marker = "error message = '";
  if (const size_t at = desc.find(marker); at != std::string::npos) {
    const size_t begin = at + marker.size();
    const size_t end = desc.find('\'', begin);
    if (end != std::string::npos) return desc.substr(begin, end - begin);
  }
  for (char& c : desc) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (desc.size() > 200) desc = desc.substr(0, 197) + "...";
  return desc;
}

std::string WithHdf5Cause(const std::string& message) {
  const std::string cause = Hdf5Cause();
  return cause.empty() ? message : message + ": " + cause;
}

Status InitHdf5() {
  static const Status status = [] {
    auto lock = LockHdf5();
    if (H5open() < 0) return Status::Internal("HDF5: H5open failed");
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    if (H5Zregister(&kZstdFilterClass) < 0) {
      return Status::Internal("HDF5: registering the zstd filter (id 32015) failed");
    }
    return Status::OK();
  }();
  return status;
}

hid_t Hdf5TypeFor(DType dtype) {
  switch (dtype) {
    case DType::kF32: return H5T_IEEE_F32LE;
    case DType::kF64: return H5T_IEEE_F64LE;
    case DType::kF16:
    case DType::kBF16: return H5T_STD_U16LE;
    case DType::kI8: return H5T_STD_I8LE;
    case DType::kI32: return H5T_STD_I32LE;
    case DType::kU32: return H5T_STD_U32LE;
    case DType::kI64: return H5T_STD_I64LE;
    case DType::kU64: return H5T_STD_U64LE;
    case DType::kU8:
    case DType::kBool:
    case DType::kUnknown: return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}

size_t StoredElementSize(DType dtype) {
  const size_t size = DTypeSize(dtype);
  return size == 0 ? 1 : size;
}

Status WriteU64Attribute(hid_t obj, const char* name, uint64_t value, const std::string& what) {
  H5Handle space(H5Screate(H5S_SCALAR));
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_UINT64, &value) < 0) {
    return Status::IOError(WithHdf5Cause("HDF5: writing attribute '" + std::string(name) + "' of " + what));
  }
  return Status::OK();
}

Status WriteStringAttribute(hid_t obj, const char* name, const std::string& value,
                            const std::string& what) {
  // Fixed-length, NUL-padded ASCII: h5dump prints it as is, h5py reads bytes.
  H5Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), value.empty() ? 1 : value.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Handle space(H5Screate(H5S_SCALAR));
  H5Handle attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  if (!attr.valid() || H5Awrite(attr.get(), type.get(), padded.data()) < 0) {
    return Status::IOError(WithHdf5Cause("HDF5: writing attribute '" + std::string(name) + "' of " + what));
  }
  return Status::OK();
}

namespace {

// An attribute opened for reading, with its type; both closed with it.
struct OpenAttribute {
  H5Handle attr;
  H5Handle type;
};

Status AttributeError(const std::string& what, const char* name, const char* why) {
  return Status::Corruption(what + ": attribute '" + name + "': " + why);
}

// Opens scalar attribute `name` of `obj` and checks its type with `fits`;
// Corruption naming `what`, the attribute and `expected` otherwise.
template <typename Fits>
StatusOr<OpenAttribute> OpenScalarAttribute(hid_t obj, const char* name, const std::string& what,
                                            Fits fits, const char* expected) {
  if (H5Aexists(obj, name) <= 0) return AttributeError(what, name, "missing");
  OpenAttribute a{H5Handle(H5Aopen(obj, name, H5P_DEFAULT)), H5Handle()};
  if (!a.attr.valid()) return AttributeError(what, name, "cannot be opened");
  a.type = H5Handle(H5Aget_type(a.attr.get()));
  H5Handle space(H5Aget_space(a.attr.get()));
  if (!fits(a.type.get()) || H5Sget_simple_extent_npoints(space.get()) != 1) {
    return AttributeError(what, name, expected);
  }
  return a;
}

}  // namespace

StatusOr<uint64_t> ReadU64Attribute(hid_t obj, const char* name, const std::string& what) {
  DGRR_ASSIGN_OR_RETURN(
      OpenAttribute a,
      OpenScalarAttribute(
          obj, name, what,
          [](hid_t type) { return H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 8; },
          "not a scalar 64-bit integer"));
  uint64_t value = 0;
  if (H5Aread(a.attr.get(), H5T_NATIVE_UINT64, &value) < 0) {
    return AttributeError(what, name, "unreadable");
  }
  return value;
}

StatusOr<std::string> ReadStringAttribute(hid_t obj, const char* name, const std::string& what) {
  DGRR_ASSIGN_OR_RETURN(
      OpenAttribute a,
      OpenScalarAttribute(
          obj, name, what,
          [](hid_t type) { return H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) == 0; },
          "not a fixed-length scalar string"));
  const size_t size = H5Tget_size(a.type.get());
  if (size == 0 || size > (1u << 20)) return AttributeError(what, name, "implausible length");
  std::string value(size, '\0');
  if (H5Aread(a.attr.get(), a.type.get(), value.data()) < 0) {
    return AttributeError(what, name, "unreadable");
  }
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

namespace {
herr_t CollectLinkName(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}
}  // namespace

StatusOr<std::vector<std::string>> ListGroup(hid_t group, const std::string& what) {
  std::vector<std::string> names;
  hsize_t index = 0;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, CollectLinkName, &names) < 0) {
    return Status::Corruption(what + ": group members cannot be listed");
  }
  return names;
}

namespace {

// The open file `fd` as a RandomAccessFile, for the one file hash.
class FdFile final : public RandomAccessFile {
 public:
  FdFile(int fd, const std::string& path) : fd_(fd), path_(path) {}
  StatusOr<size_t> Read(uint64_t offset, size_t n, void* dst) override {
    for (;;) {
      const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(offset));
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return Status::FromErrno("read", path_, errno);
    }
  }
  StatusOr<uint64_t> Size() override {
    const off_t size = ::lseek(fd_, 0, SEEK_END);
    if (size < 0) return Status::FromErrno("seek", path_, errno);
    return static_cast<uint64_t>(size);
  }
  const std::string& path() const override { return path_; }

 private:
  const int fd_;
  const std::string path_;
};

}  // namespace

StatusOr<uint64_t> HashFileFrom(int fd, const std::string& path, uint64_t from, uint64_t* end) {
  FdFile file(fd, path);
  return Xxh3OfFile(file, from, end);
}

}  // namespace dgrr::checkpoint
