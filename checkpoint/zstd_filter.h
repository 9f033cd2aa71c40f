// The zstd HDF5 filter (registered filter id 32015, "Zstandard").
//
// This file and zstd_filter.cc are compiled twice: into dgrr::checkpoint (the
// in-process filter registered with H5Zregister) and into the HDF5 plugin
// library checkpoint/plugin (loaded by h5dump, h5py, ... through
// HDF5_PLUGIN_PATH). They therefore depend on libhdf5 and libzstd only, never
// on the rest of dgrr.
//
// Chunk payload: one zstd frame produced by one-shot ZSTD_compress over the
// whole chunk (it records the frame content size); no extra header. This is the
// payload the HDF Group and hdf5plugin filters read and write, so files are
// interchangeable with them. cd_values[0] (optional) is the compression level,
// clamped to zstd's range; decompression ignores cd_values.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>

namespace dgrr::checkpoint {

inline constexpr H5Z_filter_t kZstdFilterId = 32015;
inline constexpr int kZstdDefaultLevel = 3;  // used when cd_values is empty
// A decoded chunk larger than this is refused: HDF5 chunks are < 4 GiB, and a
// frame claiming more is damaged.
inline constexpr uint64_t kZstdMaxChunkBytes = 0xFFFFFFFFull;

// The filter class handed to H5Zregister and returned by the plugin.
extern const H5Z_class2_t kZstdFilterClass;

// zstd's level range, with 0 meaning zstd's default (as the HDF Group filter).
int ClampZstdLevel(int level);
// Worst-case compressed size of an n-byte chunk.
size_t ZstdChunkBound(size_t n);
// Compresses `n` bytes into one frame in dst (capacity `cap`); returns the
// frame size, 0 on failure. The same bytes the filter's forward path produces.
size_t ZstdCompressChunk(int level, const void* src, size_t n, void* dst, size_t cap);
// Decoded size of one frame, or 0 when the frame is malformed, lacks its
// content size, or claims more than kZstdMaxChunkBytes.
uint64_t ZstdFrameDecodedSize(const void* frame, size_t n);
// Decodes one frame into exactly `decoded_size` bytes; false on any mismatch.
bool ZstdDecompressChunk(const void* frame, size_t n, void* dst, uint64_t decoded_size);

}  // namespace dgrr::checkpoint
