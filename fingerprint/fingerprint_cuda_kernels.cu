// Device fingerprints (docs/fingerprint.md, "CUDA path").
//
// xor64: each thread XORs a grid-stride share of the aligned 64-bit words,
// blocks reduce through warp shuffles and write one partial each, a one-block
// kernel XORs the partials. XOR is exact in any order; no atomics.
//
// xxh3 (> 240 bytes): one thread per (1024-byte block, lane) computes that
// lane's block delta (a sum, order-free), then 8 threads, one per lane, chain
// the blocks sequentially (add, scramble) because the scramble is nonlinear,
// add the tail and merge. <= 240 bytes: one thread. All arithmetic is the code
// of fingerprint/xxh3_core.h, which the CPU tests check against libxxhash.
//
// Segmented streams (several buffers, one fingerprint): the same split over a
// segment table (fingerprint/segmented_core.h, checked on the CPU against
// FingerprintBytes of the concatenation). One thread per (block, lane) gives
// the lane's delta and the XOR of its own words; one warp chains the lanes,
// adds the gathered tail and reduces the XOR partials. No atomics.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "fingerprint/fingerprint_cuda_kernels.h"
#include "fingerprint/segmented_core.h"
#include "fingerprint/xxh3_core.h"

namespace dgrr::fingerprint_cuda_internal {
namespace {

using Fingerprint = DeviceFingerprint;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr size_t kMaxXorBlocks = 1024;
constexpr size_t kMaxDeltaBlocks = 65535;

// The default secret, passed by value (kernel parameter space), then staged in
// shared memory so lanes can read different words without serialising.
struct SecretParam {
  uint8_t bytes[xxh3::kSecretSize];
};

// A single 8-byte load where the address is known to be 8-byte aligned. GPUs
// are little-endian, so this equals xxh3::ReadLE64.
struct AlignedReader {
  DGRR_HOST_DEVICE static uint64_t Read64(const uint8_t* p) {
    return *reinterpret_cast<const uint64_t*>(p);
  }
};

__device__ void StageSecret(const SecretParam& param, uint8_t* shared_secret) {
  for (int i = threadIdx.x; i < static_cast<int>(xxh3::kSecretSize); i += blockDim.x) {
    shared_secret[i] = param.bytes[i];
  }
  __syncthreads();
}

__device__ uint64_t WarpXor(uint64_t v) {
  for (int offset = 16; offset > 0; offset >>= 1) v ^= __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// XOR over the block; the result is valid in thread 0.
__device__ uint64_t BlockXor(uint64_t v) {
  __shared__ uint64_t per_warp[kWarps];
  v = WarpXor(v);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < kWarps ? per_warp[threadIdx.x] : 0;
  if (threadIdx.x < 32) v = WarpXor(v);
  return v;
}

__device__ uint64_t Rotl(uint64_t x, unsigned r) { return r == 0 ? x : (x << r) | (x >> (64 - r)); }

// Bytes [head, head + 8*words) are read as aligned words; byte `head + 8j + k`
// belongs to lane (head + k) % 8, hence the rotation by head lanes. Thread 0 of
// block 0 adds the unaligned head and the tail byte by byte.
__global__ void XorPartialsKernel(const uint8_t* base, size_t n, size_t head, uint64_t* partials) {
  const size_t words = (n - head) / 8;
  const auto* aligned = reinterpret_cast<const uint64_t*>(base + head);
  uint64_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride) {
    acc ^= aligned[i];
  }
  acc = Rotl(acc, static_cast<unsigned>(8 * head));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (size_t i = 0; i < head; ++i) acc ^= static_cast<uint64_t>(base[i]) << (8 * (i % 8));
    for (size_t i = head + 8 * words; i < n; ++i) {
      acc ^= static_cast<uint64_t>(base[i]) << (8 * (i % 8));
    }
  }
  acc = BlockXor(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void XorFinishKernel(const uint64_t* partials, size_t count, Fingerprint* result) {
  uint64_t acc = 0;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) acc ^= partials[i];
  acc = BlockXor(acc);
  if (threadIdx.x == 0) result->xor64 = acc;
}

__global__ void Xxh3ShortKernel(const uint8_t* in, size_t n, SecretParam param,
                                Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  StageSecret(param, secret);
  if (threadIdx.x == 0) result->xxh3 = xxh3::HashShort(in, n, secret);
}

// deltas[b * 8 + lane] = what block b adds to `lane` before its scramble.
template <bool kAligned>
__global__ void Xxh3BlockDeltasKernel(const uint8_t* in, size_t blocks, SecretParam param,
                                      uint64_t* deltas) {
  __shared__ __align__(8) uint8_t secret[xxh3::kSecretSize];
  StageSecret(param, secret);
  const size_t total = blocks * xxh3::kLanes;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const uint8_t* block = in + (i / xxh3::kLanes) * xxh3::kBlockLen;
    const size_t lane = i % xxh3::kLanes;
    if constexpr (kAligned) {
      deltas[i] = xxh3::BlockLaneDelta<AlignedReader>(block, xxh3::kStripesPerBlock, secret, lane);
    } else {
      deltas[i] = xxh3::BlockLaneDelta(block, xxh3::kStripesPerBlock, secret, lane);
    }
  }
}

// Launched with 8 threads: thread `lane` chains its lane through the blocks.
__global__ void Xxh3ChainKernel(const uint8_t* in, size_t n, size_t blocks, const uint64_t* deltas,
                                SecretParam param, Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  __shared__ uint64_t acc[xxh3::kLanes];
  StageSecret(param, secret);
  const size_t lane = threadIdx.x;
  if (lane < xxh3::kLanes) {
    acc[lane] = xxh3::ChainLane(deltas, xxh3::kLanes, blocks, secret, lane) +
                xxh3::TailLaneDelta(in, n, secret, lane);
  }
  __syncthreads();
  if (threadIdx.x == 0) result->xxh3 = xxh3::MergeLanes(acc, n, secret);
}

// ---- segmented streams ----

// <= 240 bytes in all: one thread gathers them and hashes.
__global__ void SegmentedShortKernel(xxh3::SegmentTable table, SecretParam param, Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  StageSecret(param, secret);
  if (threadIdx.x != 0) return;
  uint8_t bytes[xxh3::kMidSizeMax];
  const size_t n = static_cast<size_t>(table.total());
  xxh3::GatherBytes(table, 0, n, bytes);
  result->xor64 = xxh3::XorOfBytesAt(bytes, n, 0);
  result->xxh3 = xxh3::HashShort(bytes, n, secret);
}

// deltas[b * 8 + lane] as Xxh3BlockDeltasKernel writes them, and one XOR
// partial per thread block.
__global__ void SegmentedBlocksKernel(xxh3::SegmentTable table, size_t blocks, SecretParam param, uint64_t* deltas,
                                      uint64_t* partials) {
  __shared__ __align__(8) uint8_t secret[xxh3::kSecretSize];
  StageSecret(param, secret);
  const size_t total = blocks * xxh3::kLanes;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  uint64_t x = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const xxh3::BlockLaneResult r =
        xxh3::SegmentedBlockLane<AlignedReader>(table, i / xxh3::kLanes, secret, i % xxh3::kLanes);
    deltas[i] = r.delta;
    x ^= r.xor64;
  }
  x = BlockXor(x);
  if (threadIdx.x == 0) partials[blockIdx.x] = x;
}

// Launched with one warp (32 threads): the tail window is gathered once,
// lanes 0..7 chain and add the tail, every thread XORs a share of the
// partials and tail bytes.
__global__ void SegmentedFinishKernel(xxh3::SegmentTable table, size_t blocks, const uint64_t* deltas,
                                      const uint64_t* partials, size_t partial_count, SecretParam param,
                                      Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  __shared__ uint8_t window[xxh3::kBlockLen];
  __shared__ uint64_t acc[xxh3::kLanes];
  StageSecret(param, secret);
  const uint64_t len = table.total();
  const size_t window_bytes = xxh3::TailWindowBytes(len);
  if (threadIdx.x == 0) xxh3::GatherBytes(table, len - window_bytes, window_bytes, window);
  __syncthreads();
  const size_t lane = threadIdx.x;
  if (lane < xxh3::kLanes) acc[lane] = xxh3::SegmentedLaneAccumulator(deltas, blocks, window, len, secret, lane);
  uint64_t x = xxh3::TailXor(window, len, threadIdx.x, blockDim.x);
  for (size_t i = threadIdx.x; i < partial_count; i += blockDim.x) x ^= partials[i];
  x = WarpXor(x);
  __syncthreads();
  if (threadIdx.x == 0) {
    result->xxh3 = xxh3::MergeLanes(acc, len, secret);
    result->xor64 = x;
  }
}

size_t CeilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// Scratch layout: [Fingerprint result][xor partials][xxh3 block deltas], all
// 8-byte aligned.
struct Scratch {
  Fingerprint* result;
  uint64_t* partials;
  uint64_t* deltas;
};

}  // namespace

int EnqueueFingerprint(const void* dev_ptr, size_t n, CUstream_st* stream,
                       const uint8_t* secret_bytes, DeviceFingerprint* out,
                       const char** failed_step) {
  const auto* in = static_cast<const uint8_t*>(dev_ptr);
  cudaStream_t s = stream;
  SecretParam secret;
  std::memcpy(secret.bytes, secret_bytes, xxh3::kSecretSize);

  const size_t head = std::min<size_t>(n, (8 - reinterpret_cast<uintptr_t>(in) % 8) % 8);
  const size_t words = (n - head) / 8;
  const size_t xor_blocks = std::clamp<size_t>(CeilDiv(words, kThreads * 8), 1, kMaxXorBlocks);
  const size_t hash_blocks = n > xxh3::kMidSizeMax ? xxh3::FullBlocks(n) : 0;

  const size_t scratch_bytes =
      sizeof(Fingerprint) + 8 * xor_blocks + 8 * xxh3::kLanes * hash_blocks;
  void* raw = nullptr;
  cudaError_t err = cudaMallocAsync(&raw, scratch_bytes, s);
  if (err != cudaSuccess) {
    *failed_step = "cudaMallocAsync";
    return err;
  }
  Scratch scratch;
  scratch.result = static_cast<Fingerprint*>(raw);
  scratch.partials = reinterpret_cast<uint64_t*>(scratch.result + 1);
  scratch.deltas = scratch.partials + xor_blocks;

  XorPartialsKernel<<<static_cast<unsigned>(xor_blocks), kThreads, 0, s>>>(in, n, head,
                                                                           scratch.partials);
  XorFinishKernel<<<1, kThreads, 0, s>>>(scratch.partials, xor_blocks, scratch.result);
  if (n <= xxh3::kMidSizeMax) {
    Xxh3ShortKernel<<<1, 32, 0, s>>>(in, n, secret, scratch.result);
  } else {
    if (hash_blocks > 0) {
      const auto grid = static_cast<unsigned>(
          std::min(CeilDiv(hash_blocks * xxh3::kLanes, kThreads), kMaxDeltaBlocks));
      if (reinterpret_cast<uintptr_t>(in) % 8 == 0) {
        Xxh3BlockDeltasKernel<true>
            <<<grid, kThreads, 0, s>>>(in, hash_blocks, secret, scratch.deltas);
      } else {
        Xxh3BlockDeltasKernel<false>
            <<<grid, kThreads, 0, s>>>(in, hash_blocks, secret, scratch.deltas);
      }
    }
    Xxh3ChainKernel<<<1, 32, 0, s>>>(in, n, hash_blocks, scratch.deltas, secret, scratch.result);
  }
  err = cudaGetLastError();
  if (err != cudaSuccess) {
    *failed_step = "kernel launch";
    cudaFreeAsync(raw, s);
    return err;
  }
  err = cudaMemcpyAsync(out, scratch.result, sizeof(Fingerprint), cudaMemcpyDeviceToHost, s);
  const cudaError_t release = cudaFreeAsync(raw, s);
  if (err != cudaSuccess) {
    *failed_step = "cudaMemcpyAsync of the result";
    return err;
  }
  if (release != cudaSuccess) *failed_step = "cudaFreeAsync";
  return release;
}

int EnqueueSegmentedFingerprint(const uint64_t* host_table, uint32_t count, CUstream_st* stream,
                                const uint8_t* secret_bytes, DeviceFingerprint* out, const char** failed_step) {
  cudaStream_t s = stream;
  SecretParam secret;
  std::memcpy(secret.bytes, secret_bytes, xxh3::kSecretSize);
  const uint64_t len = host_table[count];
  const size_t blocks = len > xxh3::kMidSizeMax ? xxh3::FullBlocks(len) : 0;
  const size_t grid =
      blocks > 0 ? std::min(CeilDiv(blocks * xxh3::kLanes, kThreads), kMaxDeltaBlocks) : 0;
  const size_t table_words = 2 * static_cast<size_t>(count) + 1;

  // Scratch: [result][table][XOR partials][block deltas], 8-byte words.
  const size_t scratch_bytes = sizeof(Fingerprint) + 8 * (table_words + grid + xxh3::kLanes * blocks);
  void* raw = nullptr;
  cudaError_t err = cudaMallocAsync(&raw, scratch_bytes, s);
  if (err != cudaSuccess) {
    *failed_step = "cudaMallocAsync";
    return err;
  }
  auto* result = static_cast<Fingerprint*>(raw);
  auto* table_words_on_device = reinterpret_cast<uint64_t*>(result + 1);
  uint64_t* partials = table_words_on_device + table_words;
  uint64_t* deltas = partials + grid;
  xxh3::SegmentTable table;
  table.starts = table_words_on_device;
  table.addresses = table_words_on_device + count + 1;
  table.count = count;

  err = cudaMemcpyAsync(table_words_on_device, host_table, 8 * table_words, cudaMemcpyHostToDevice, s);
  if (err != cudaSuccess) {
    *failed_step = "cudaMemcpyAsync of the segment table";
    cudaFreeAsync(raw, s);
    return err;
  }
  if (len <= xxh3::kMidSizeMax) {
    SegmentedShortKernel<<<1, 32, 0, s>>>(table, secret, result);
  } else {
    if (blocks > 0) {
      SegmentedBlocksKernel<<<static_cast<unsigned>(grid), kThreads, 0, s>>>(table, blocks, secret, deltas,
                                                                             partials);
    }
    SegmentedFinishKernel<<<1, 32, 0, s>>>(table, blocks, deltas, partials, grid, secret, result);
  }
  err = cudaGetLastError();
  if (err != cudaSuccess) {
    *failed_step = "kernel launch";
    cudaFreeAsync(raw, s);
    return err;
  }
  err = cudaMemcpyAsync(out, result, sizeof(Fingerprint), cudaMemcpyDeviceToHost, s);
  const cudaError_t release = cudaFreeAsync(raw, s);
  if (err != cudaSuccess) {
    *failed_step = "cudaMemcpyAsync of the result";
    return err;
  }
  if (release != cudaSuccess) *failed_step = "cudaFreeAsync";
  return release;
}

}  // namespace dgrr::fingerprint_cuda_internal
