// CRC-32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected 0x82F63B78),
// as used by every stored checksum in dgrr. The x86 SSE4.2 crc32 instruction
// computes this polynomial; it is used when the CPU has it (checked once at run
// time), and a table-driven version otherwise. Both give identical results.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dgrr::crc32c {

// Returns the CRC32C of concat(A, data[0, n)) where `crc` is the CRC32C of A.
// Extend(0, data, n) is the CRC32C of data alone.
uint32_t Extend(uint32_t crc, const void* data, size_t n);
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// Value() of `count` blocks of `length` bytes each, block i starting at
// base + i * stride, into out[i]. Blocks are independent, so the hardware path
// interleaves four CRC chains to hide the instruction's latency: about four
// times the throughput of calling Value() per record.
// Blocks of 112 to 128 bytes (a record's 124) go through carry-less
// multiplication (VPCLMULQDQ) where the CPU has it: with AVX-512, about 1.7
// times the four chains' rate (bench/README.md, trace_format).
void ValueOfBlocks(const void* base, size_t stride, size_t length, size_t count, uint32_t* out);

// The implementations behind ValueOfBlocks, best last; all give identical
// results. The selected one is the best the CPU has (checked once).
enum class BlockKernel {
  kPortable,     // slicing-by-8 tables
  kCrc32Chains,  // SSE4.2 crc32, four blocks interleaved
  kClmulAvx2,    // VPCLMULQDQ folding on 256-bit vectors (and crc32), else chains
  kClmulAvx512,  // AVX-512 (F, VL, BW): the tail folded too, two crc32 a block
};
bool BlockKernelAvailable(BlockKernel kernel);
BlockKernel SelectedBlockKernel();
// "portable", "crc32-chains", "clmul-avx2", "clmul-avx512".
const char* BlockKernelName(BlockKernel kernel);
// What the CPU must have to run `kernel`, in words ("SSE4.2", ...).
const char* BlockKernelNeeds(BlockKernel kernel);
// ValueOfBlocks through `kernel` (the selected one when the CPU lacks it).
void ValueOfBlocksWith(BlockKernel kernel, const void* base, size_t stride, size_t length, size_t count,
                       uint32_t* out);

// The two implementations behind Extend, exposed so tests can check both.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);
// Requires HardwareAvailable(); falls back to the portable path otherwise.
uint32_t ExtendHardware(uint32_t crc, const void* data, size_t n);
bool HardwareAvailable();

// A CRC stored next to data that may itself be checksummed again (a trace
// copied into another CRC-protected container) is masked, as LevelDB does:
// the CRC of a string that contains its own CRC is otherwise degenerate.
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace dgrr::crc32c
