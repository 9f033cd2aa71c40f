#include "checkpoint/zstd_filter.h"

#include <zstd.h>

#include <algorithm>

namespace dgrr::checkpoint {
namespace {

// H5Z_func_t: HDF5 passes the chunk in *buf (allocated with its allocator) and
// expects it replaced by the result. Returning 0 reports failure.
size_t ZstdFilterFunction(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                          size_t nbytes, size_t* buf_size, void** buf) {
  void* out = nullptr;
  size_t out_size = 0;
  if (flags & H5Z_FLAG_REVERSE) {
    const uint64_t decoded = ZstdFrameDecodedSize(*buf, nbytes);
    if (decoded == 0) return 0;
    out = H5allocate_memory(static_cast<size_t>(decoded), false);
    if (out == nullptr) return 0;
    if (!ZstdDecompressChunk(*buf, nbytes, out, decoded)) {
      H5free_memory(out);
      return 0;
    }
    out_size = static_cast<size_t>(decoded);
  } else {
    // The cast makes a stored 0xFFFFFFFB read as level -5, as the HDF Group filter does.
    const int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : kZstdDefaultLevel;
    const size_t cap = ZstdChunkBound(nbytes);
    out = H5allocate_memory(cap, false);
    if (out == nullptr) return 0;
    out_size = ZstdCompressChunk(level, *buf, nbytes, out, cap);
    if (out_size == 0) {
      H5free_memory(out);
      return 0;
    }
  }
  H5free_memory(*buf);
  *buf = out;
  *buf_size = out_size;
  return out_size;
}

}  // namespace

const H5Z_class2_t kZstdFilterClass = {
    H5Z_CLASS_T_VERS,
    kZstdFilterId,
    1,  // encoder present
    1,  // decoder present
    "Zstandard (dgrr; HDF5 registered filter 32015)",
    nullptr,  // can_apply
    nullptr,  // set_local
    ZstdFilterFunction,
};

int ClampZstdLevel(int level) {
  if (level == 0) return 0;
  return std::clamp(level, ZSTD_minCLevel(), ZSTD_maxCLevel());
}

size_t ZstdChunkBound(size_t n) { return ZSTD_compressBound(n); }

size_t ZstdCompressChunk(int level, const void* src, size_t n, void* dst, size_t cap) {
  const size_t r = ZSTD_compress(dst, cap, src, n, ClampZstdLevel(level));
  return ZSTD_isError(r) ? 0 : r;
}

uint64_t ZstdFrameDecodedSize(const void* frame, size_t n) {
  const unsigned long long size = ZSTD_getFrameContentSize(frame, n);
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) return 0;
  if (size == 0 || size > kZstdMaxChunkBytes) return 0;
  return size;
}

bool ZstdDecompressChunk(const void* frame, size_t n, void* dst, uint64_t decoded_size) {
  const size_t r = ZSTD_decompress(dst, static_cast<size_t>(decoded_size), frame, n);
  return !ZSTD_isError(r) && r == decoded_size;
}

}  // namespace dgrr::checkpoint
