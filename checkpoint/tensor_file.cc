#include "checkpoint/tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/coding.h"
#include "base/file.h"
#include "base/version.h"
#include "checkpoint/file_io.h"
#include "checkpoint/hdf5_util.h"
#include "checkpoint/zstd_filter.h"
#include "fingerprint/fingerprint.h"

namespace dgrr::checkpoint {
namespace {

constexpr const char* kTensorsGroup = "/tensors";
constexpr int kMaxDims = 32;  // HDF5's H5S_MAX_RANK
constexpr uint64_t kTargetChunkBytes = 1 << 20;
constexpr uint64_t kMaxRank = 1 << 16;

// The 512-byte HDF5 user block that dgrr fills with a header covering the
// whole file (docs/tensor-dump.md section 2): a damaged dump is refused before
// libhdf5, which is not hardened against malformed metadata, parses it.
constexpr uint64_t kUserBlockBytes = 512;
constexpr char kMagic[8] = {'D', 'G', 'R', 'R', 'D', 'U', 'M', 'P'};
constexpr size_t kOffVersion = 8, kOffFileLength = 16, kOffPayloadHash = 24, kOffHeaderHash = 32,
                 kHeaderBytes = 40;

// Writes the header into the user block of the file libhdf5 has just closed.
Status StampHeader(const std::string& tmp_path) {
  uint64_t length = 0;
  uint64_t payload = 0;
  {
    DGRR_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenRandomAccessFile(tmp_path));
    DGRR_ASSIGN_OR_RETURN(payload, Xxh3OfFile(*file, kUserBlockBytes, &length));
  }
  uint8_t block[kUserBlockBytes] = {};
  std::memcpy(block, kMagic, sizeof kMagic);
  EncodeFixed32(block + kOffVersion, static_cast<uint32_t>(kTensorDumpFormatVersion));
  EncodeFixed32(block + kOffVersion + 4, static_cast<uint32_t>(kHeaderBytes));
  EncodeFixed64(block + kOffFileLength, length);
  EncodeFixed64(block + kOffPayloadHash, payload);
  EncodeFixed64(block + kOffHeaderHash, XXH3_64bits(block, kOffHeaderHash));
  return FileSystem::Default()->WriteAt(tmp_path, 0,
                                        std::string_view(reinterpret_cast<const char*>(block), sizeof block));
}

// Checks the header and the hash of every byte after it.
Status VerifyWholeFile(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(const int fd, OpenRegularFileDescriptor(path));
  auto bad = [&](uint64_t offset, const std::string& why) {
    ::close(fd);
    return Status::Corruption(path + ": offset " + std::to_string(offset) + ": " + why);
  };
  struct stat st;
  uint8_t block[kUserBlockBytes];
  DGRR_ASSIGN_OR_RETURN(const size_t n, StatAndReadStart(fd, path, &st, block, sizeof block));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (n < sizeof block) {
    return bad(n, "file is " + std::to_string(size) + " bytes, shorter than the 512-byte dump header (truncated)");
  }
  if (std::memcmp(block, kMagic, sizeof kMagic) != 0) return bad(0, "bad magic: not a dgrr tensor dump");
  if (DecodeFixed64(block + kOffHeaderHash) != XXH3_64bits(block, kOffHeaderHash)) {
    return bad(kOffHeaderHash, "header hash mismatch");
  }
  const uint32_t version = DecodeFixed32(block + kOffVersion);
  if (version != kTensorDumpFormatVersion) {
    return bad(kOffVersion, "unsupported format version " + std::to_string(version) +
                                " (this dgrr reads version " + std::to_string(kTensorDumpFormatVersion) + ")");
  }
  if (DecodeFixed32(block + kOffVersion + 4) != kHeaderBytes) return bad(kOffVersion + 4, "unexpected header size");
  for (size_t i = kHeaderBytes; i < kUserBlockBytes; ++i) {
    if (block[i] != 0) return bad(i, "nonzero byte in the reserved part of the header");
  }
  const uint64_t length = DecodeFixed64(block + kOffFileLength);
  if (length != size) {
    return bad(std::min(length, size), "file is " + std::to_string(size) + " bytes but its header says " +
                                           std::to_string(length) +
                                           (size < length ? " (truncated)" : " (trailing bytes)"));
  }
  uint64_t end = 0;
  StatusOr<uint64_t> payload = HashFileFrom(fd, path, kUserBlockBytes, &end);
  if (!payload.ok()) {
    ::close(fd);
    return payload.status();
  }
  if (end != length) return bad(end, "file changed length while read");
  if (*payload != DecodeFixed64(block + kOffPayloadHash)) {
    return bad(kUserBlockBytes, "hash of bytes 512.." + std::to_string(end) +
                                    " does not match the header (file damaged)");
  }
  ::close(fd);
  return Status::OK();
}

uint64_t ElementCount(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

Status ValidateTensor(const DumpedTensor& t) {
  const std::string what = "tensor dump: tensor '" + t.name + "'";
  if (t.name.empty() || t.name == "." || t.name.find('/') != std::string::npos) {
    return Status::InvalidArgument(what + ": not a usable dataset name");
  }
  if (t.shape.size() > static_cast<size_t>(kMaxDims)) {
    return Status::InvalidArgument(what + ": more than 32 dimensions");
  }
  for (int64_t d : t.shape) {
    if (d < 0) return Status::InvalidArgument(what + ": negative dimension");
  }
  if (ElementCount(t.shape) * StoredElementSize(t.dtype) != t.data.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(t.data.size()) +
                                   " bytes do not match its dtype and shape");
  }
  return Status::OK();
}

// Chunks of whole trailing rows, about kTargetChunkBytes each, so that
// compression sees contiguous runs and no chunk nears HDF5's 4 GiB limit.
std::vector<hsize_t> ChunkShape(const std::vector<hsize_t>& dims, size_t element_size) {
  std::vector<hsize_t> chunk = dims;
  uint64_t inner = element_size;  // bytes of one index along dimension i
  for (size_t j = 1; j < dims.size(); ++j) inner *= dims[j];
  for (size_t i = 0; i < dims.size(); ++i) {
    if (chunk[i] * inner <= kTargetChunkBytes) break;
    chunk[i] = std::max<uint64_t>(1, kTargetChunkBytes / inner);
    if (chunk[i] > 1 || i + 1 == dims.size()) break;
    inner /= dims[i + 1];  // one index here is still too big: split the next dimension too
  }
  for (hsize_t& c : chunk) c = std::max<hsize_t>(c, 1);
  return chunk;
}

Status WriteTensor(hid_t group, const std::string& file_path, const DumpedTensor& t, int zstd_level) {
  const std::string what = std::string(kTensorsGroup) + "/" + t.name;
  std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
  H5Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (!dims.empty() && !t.data.empty()) {
    const std::vector<hsize_t> chunk = ChunkShape(dims, StoredElementSize(t.dtype));
    const unsigned level = static_cast<unsigned>(zstd_level);
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) < 0 ||
        H5Pset_filter(dcpl.get(), kZstdFilterId, H5Z_FLAG_OPTIONAL, 1, &level) < 0) {
      return Hdf5WriteFailure(file_path, "chunk/filter settings for " + what);
    }
  }
  H5Pset_obj_track_times(dcpl.get(), false);
  H5Handle dset(H5Dcreate2(group, t.name.c_str(), Hdf5TypeFor(t.dtype), space.get(), H5P_DEFAULT,
                           dcpl.get(), H5P_DEFAULT));
  if (!dset.valid()) return Hdf5WriteFailure(file_path, "creating dataset " + what);
  if (!t.data.empty() && H5Dwrite(dset.get(), Hdf5TypeFor(t.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                  t.data.data()) < 0) {
    return Hdf5WriteFailure(file_path, "writing dataset " + what);
  }
  const hid_t d = dset.get();
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(d, "dtype", std::string(DTypeName(t.dtype)), what));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(d, "bytes", t.data.size(), what));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(d, "xxh3", Xxh3(t.data.data(), t.data.size()), what));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(d, "example_first", t.example_first, what));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(d, "example_count", t.example_count, what));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(d, "phase", t.phase, what));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(d, "recorded_xor64", t.recorded.xor64, what));
  return WriteU64Attribute(d, "recorded_xxh3", t.recorded.xxh3, what);
}

Status WriteHdf5(const std::string& tmp_path, const TensorDump& dump, int zstd_level) {
  DGRR_RETURN_IF_ERROR(InitHdf5());
  auto lock = LockHdf5();
  DGRR_ASSIGN_OR_RETURN(H5Handle file, CreateHdf5File(tmp_path, kUserBlockBytes));
  const hid_t f = file.get();
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(f, "format", kTensorDumpFormatName, "/"));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "format_version", kTensorDumpFormatVersion, "/"));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(f, "dgrr_version", DGRR_VERSION_STRING, "/"));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(f, "run_dir", dump.run_dir, "/"));
  DGRR_RETURN_IF_ERROR(WriteStringAttribute(f, "boundary", dump.boundary, "/"));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "step", dump.step, "/"));
  DGRR_RETURN_IF_ERROR(WriteU64Attribute(f, "rank", static_cast<uint64_t>(dump.rank), "/"));
  H5Handle gcpl(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_obj_track_times(gcpl.get(), false);
  H5Handle group(H5Gcreate2(f, kTensorsGroup, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
  if (!group.valid()) return Hdf5WriteFailure(tmp_path, "creating group /tensors");
  for (const DumpedTensor& t : dump.tensors) DGRR_RETURN_IF_ERROR(WriteTensor(group.get(), tmp_path, t, zstd_level));
  group.Reset();
  if (H5Fclose(file.Release()) < 0) return Hdf5WriteFailure(tmp_path, "write (on close)");
  return Status::OK();
}

StatusOr<DumpedTensor> ReadTensor(hid_t group, const std::string& path, const std::string& name) {
  const std::string what = path + ": dataset " + kTensorsGroup + "/" + name;
  auto bad = [&](const std::string& why) { return Status::Corruption(what + ": " + why); };
  H5Handle dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT));
  if (!dset.valid()) return bad("not a readable dataset");
  const hid_t d = dset.get();
  DumpedTensor t;
  t.name = name;
  DGRR_ASSIGN_OR_RETURN(std::string dtype_name, ReadStringAttribute(d, "dtype", what));
  DGRR_ASSIGN_OR_RETURN(uint64_t bytes, ReadU64Attribute(d, "bytes", what));
  DGRR_ASSIGN_OR_RETURN(uint64_t content_xxh3, ReadU64Attribute(d, "xxh3", what));
  DGRR_ASSIGN_OR_RETURN(t.example_first, ReadU64Attribute(d, "example_first", what));
  DGRR_ASSIGN_OR_RETURN(uint64_t example_count, ReadU64Attribute(d, "example_count", what));
  DGRR_ASSIGN_OR_RETURN(t.phase, ReadStringAttribute(d, "phase", what));
  DGRR_ASSIGN_OR_RETURN(t.recorded.xor64, ReadU64Attribute(d, "recorded_xor64", what));
  DGRR_ASSIGN_OR_RETURN(t.recorded.xxh3, ReadU64Attribute(d, "recorded_xxh3", what));
  const std::optional<DType> dtype = ParseDType(dtype_name);
  if (!dtype) return bad("unknown dtype '" + dtype_name + "'");
  t.dtype = *dtype;
  if (example_count > UINT32_MAX) return bad("example_count out of range");
  t.example_count = static_cast<uint32_t>(example_count);
  H5Handle type(H5Dget_type(d));
  if (H5Tequal(type.get(), Hdf5TypeFor(t.dtype)) <= 0) return bad("stored type does not match dtype " + dtype_name);
  H5Handle space(H5Dget_space(d));
  const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  if (space_class == H5S_SIMPLE) {
    const int ndims = H5Sget_simple_extent_ndims(space.get());
    if (ndims < 1 || ndims > kMaxDims) return bad("unexpected dataspace rank");
    std::vector<hsize_t> dims(static_cast<size_t>(ndims));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    t.shape.assign(dims.begin(), dims.end());
  } else if (space_class != H5S_SCALAR) {
    return bad("dataspace is neither simple nor scalar");
  }
  uint64_t stored = StoredElementSize(t.dtype);
  for (int64_t dim : t.shape) {
    if (dim < 0 || __builtin_mul_overflow(stored, static_cast<uint64_t>(dim), &stored)) {
      return bad("dataspace does not match 'bytes'");
    }
  }
  if (stored != bytes) return bad("dataspace does not match 'bytes'");
  t.data.resize(bytes);
  if (bytes > 0 &&
      H5Dread(d, Hdf5TypeFor(t.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data.data()) < 0) {
    return bad("data cannot be read or decompressed");
  }
  const Fingerprint actual = FingerprintBytes(t.data.data(), t.data.size());
  if (actual.xxh3 != content_xxh3) {
    return bad("content hash mismatch (stored " + Hex64(content_xxh3) + ", computed " +
               Hex64(actual.xxh3) + ")");
  }
  if (!(actual == t.recorded)) {
    return bad("the bytes are not those whose fingerprint was recorded (recorded xor64 " +
               Hex64(t.recorded.xor64) + ", bytes give " + Hex64(actual.xor64) + ")");
  }
  return t;
}

Status ReadRoot(hid_t f, const std::string& path, TensorDump& out) {
  const std::string what = path + ": /";
  DGRR_ASSIGN_OR_RETURN(std::string format, ReadStringAttribute(f, "format", what));
  if (format != kTensorDumpFormatName) {
    return Status::Corruption(what + ": format is '" + format + "', not '" + kTensorDumpFormatName + "'");
  }
  DGRR_ASSIGN_OR_RETURN(uint64_t version, ReadU64Attribute(f, "format_version", what));
  if (version != kTensorDumpFormatVersion) {
    return Status::Corruption(what + ": unsupported format_version " + std::to_string(version) +
                              " (this dgrr reads version " + std::to_string(kTensorDumpFormatVersion) + ")");
  }
  DGRR_ASSIGN_OR_RETURN(out.dgrr_version, ReadStringAttribute(f, "dgrr_version", what));
  DGRR_ASSIGN_OR_RETURN(out.run_dir, ReadStringAttribute(f, "run_dir", what));
  DGRR_ASSIGN_OR_RETURN(out.boundary, ReadStringAttribute(f, "boundary", what));
  DGRR_ASSIGN_OR_RETURN(out.step, ReadU64Attribute(f, "step", what));
  DGRR_ASSIGN_OR_RETURN(uint64_t rank, ReadU64Attribute(f, "rank", what));
  if (rank >= kMaxRank) return Status::Corruption(what + ": implausible rank " + std::to_string(rank));
  out.rank = static_cast<int>(rank);
  return Status::OK();
}

}  // namespace

const DumpedTensor* TensorDump::Find(const std::string& name) const {
  for (const DumpedTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string TensorDatasetName(uint64_t example_first, uint32_t example_count) {
  char name[48];
  std::snprintf(name, sizeof name, "ex%08" PRIu64 "_n%" PRIu32, example_first, example_count);
  return name;
}

std::string TensorDumpPath(const std::string& dir, const std::string& boundary, uint64_t step, int rank) {
  std::string file = boundary;
  std::replace(file.begin(), file.end(), '/', '_');
  return dir + "/" + file + "@" + std::to_string(step) + ".rank" + std::to_string(rank) + ".h5";
}

Status WriteTensorDump(const std::string& path, const TensorDump& dump, int zstd_level) {
  std::set<std::string> names;
  for (const DumpedTensor& t : dump.tensors) {
    DGRR_RETURN_IF_ERROR(ValidateTensor(t));
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("tensor dump: two tensors are named '" + t.name + "'");
    }
  }
  if (dump.rank < 0) return Status::InvalidArgument("tensor dump: negative rank");
  DGRR_RETURN_IF_ERROR(CreateDirectories(DirName(path)));
  return CommitFileAtomically(path, [&](const std::string& tmp) -> Status {
    // Every HDF5 failure is named with the file it was writing.
    if (Status s = WriteHdf5(tmp, dump, zstd_level); !s.ok()) return NamingFile(s, tmp);
    return StampHeader(tmp);
  });
}

StatusOr<TensorDump> ReadTensorDump(const std::string& path) {
  if (!PathExists(path)) return Status::NotFound(path + ": no such file");
  if (IsDirectory(path)) return Status::InvalidArgument(path + ": is a directory, not a tensor dump");
  // Only bytes exactly as dgrr wrote them reach libhdf5.
  DGRR_RETURN_IF_ERROR(VerifyWholeFile(path));
  DGRR_RETURN_IF_ERROR(InitHdf5());
  auto lock = LockHdf5();
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  if (H5Pset_fapl_sec2(fapl.get()) < 0) return Status::Internal("HDF5: sec2 driver rejected");
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!file.valid()) {
    return Status::Corruption(path + ": HDF5 cannot open the file (not HDF5, damaged or truncated)");
  }
  TensorDump out;
  out.path = path;
  DGRR_RETURN_IF_ERROR(ReadRoot(file.get(), path, out));
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> top, ListGroup(file.get(), path + ": /"));
  if (top != std::vector<std::string>{"tensors"}) {
    return Status::Corruption(path + ": /: expected exactly the group tensors");
  }
  H5Handle group(H5Gopen2(file.get(), kTensorsGroup, H5P_DEFAULT));
  if (!group.valid()) return Status::Corruption(path + ": group /tensors cannot be opened");
  DGRR_ASSIGN_OR_RETURN(std::vector<std::string> names, ListGroup(group.get(), path + ": /tensors"));
  for (const std::string& name : names) {
    DGRR_ASSIGN_OR_RETURN(DumpedTensor t, ReadTensor(group.get(), path, name));
    out.tensors.push_back(std::move(t));
  }
  return out;
}

}  // namespace dgrr::checkpoint
