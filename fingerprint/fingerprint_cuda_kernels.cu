// Device fingerprints (docs/fingerprint.md, "CUDA path").
//
// <= 240 bytes: one thread computes xor64 and XXH3's short hash.
//
// Longer inputs, in two parts. On the input's stream, one pass: one thread
// per (1024-byte block, lane) computes that lane's block delta (a sum,
// order-free) and XORs the words it read (every word of the full blocks,
// once; a thread takes a pair of lanes); a one-warp kernel adds the bytes after the full blocks: the tail's
// deltas and the rest of xor64 (warp shuffles, no atomics). Then, after an
// event, possibly on another stream since it reads only scratch memory, one
// warp chains the blocks lane by lane (add, scramble: the scramble is
// nonlinear, so this part is serial), adds the tail and merges. All
// arithmetic is the code of fingerprint/xxh3_core.h, which the CPU tests
// check against libxxhash.
//
// Segmented streams (several buffers, one fingerprint): the same split over a
// segment table (fingerprint/segmented_core.h, checked on the CPU against
// FingerprintBytes of the concatenation).
#include <cuda_pipeline.h>
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

__global__ void Xxh3ShortKernel(const uint8_t* in, size_t n, SecretParam param,
                                Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  StageSecret(param, secret);
  if (threadIdx.x == 0) {
    result->xor64 = xxh3::XorOfBytesAt(in, n, 0);
    result->xxh3 = xxh3::HashShort(in, n, secret);
  }
}

// One pass over the full blocks: deltas[b * 8 + lane] = what block b adds to
// `lane` before its scramble, and one XOR partial per thread block of the
// words read (every word of the full blocks, once; they sit at multiples of 8
// from the input's start, so they are xor64's words as read). One thread per
// (block, pair of lanes 2p and 2p + 1): each stripe's 16 bytes for the pair in
// one load where the input is 16-byte aligned, and each lane's neighbour
// (lane ^ 1) is the other word of the pair. kAlign: the input's alignment
// (16, 8, or 1 for any).
constexpr size_t kPairs = xxh3::kLanes / 2;

template <int kAlign>
__global__ void Xxh3BlocksKernel(const uint8_t* in, size_t blocks, SecretParam param, uint64_t* deltas,
                                 uint64_t* partials) {
  __shared__ __align__(16) uint8_t secret[xxh3::kSecretSize];
  StageSecret(param, secret);
  const size_t total = blocks * kPairs;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  uint64_t x = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t block = i / kPairs;
    const size_t lane = 2 * (i % kPairs);
    const uint8_t* at = in + block * xxh3::kBlockLen + 8 * lane;
    uint64_t delta0 = 0, delta1 = 0;
#pragma unroll
    for (size_t s = 0; s < xxh3::kStripesPerBlock; ++s, at += xxh3::kStripeLen) {
      uint64_t w0, w1;
      if constexpr (kAlign == 16) {
        const ulonglong2 w = *reinterpret_cast<const ulonglong2*>(at);
        w0 = w.x;
        w1 = w.y;
      } else if constexpr (kAlign == 8) {
        w0 = AlignedReader::Read64(at);
        w1 = AlignedReader::Read64(at + 8);
      } else {
        w0 = xxh3::ReadLE64(at);
        w1 = xxh3::ReadLE64(at + 8);
      }
      delta0 += xxh3::StripeLaneTerm(w0, w1, AlignedReader::Read64(secret + 8 * s + 8 * lane));
      delta1 += xxh3::StripeLaneTerm(w1, w0, AlignedReader::Read64(secret + 8 * s + 8 * lane + 8));
      x ^= w0 ^ w1;
    }
    *reinterpret_cast<ulonglong2*>(deltas + block * xxh3::kLanes + lane) = make_ulonglong2(delta0, delta1);
  }
  x = BlockXor(x);
  if (threadIdx.x == 0) partials[blockIdx.x] = x;
}

// xxh3::ChainLane for the device, the serial part of a long fingerprint,
// run by one whole warp. Each block's step is add, shift-XOR, key XOR,
// multiply: about four dependent integer operations a KiB per lane. A plain
// loop also waits for each delta's load (hundreds of cycles: on an H200 that
// took 105 ns a 1024-byte block, 9 GiB/s); loads issued a batch ahead from
// the same threads still stalled (the compiler put them mid-batch: 29 ns).
// So the deltas travel in chunks of kChunkBlocks blocks (2 KiB) through a
// ring of kStages chunks in shared memory by asynchronous copies (cp.async),
// the whole warp issuing them kStages - 1 chunks ahead of the chunk that
// lanes 0..7 chain from shared memory. `deltas` is 16-byte aligned. The
// result is valid in threads 0..7 (thread `lane` holds its lane).
constexpr size_t kChunkBlocks = 32;
constexpr int kStages = 4;

__device__ uint64_t ChainLanesInWarp(const uint64_t* deltas, size_t blocks, const uint8_t* secret) {
  __shared__ __align__(16) uint64_t ring[kStages][kChunkBlocks * xxh3::kLanes];
  const unsigned t = threadIdx.x % 32;
  const size_t lane = t % xxh3::kLanes;
  const uint64_t key = xxh3::ReadLE64(secret + xxh3::kSecretSize - xxh3::kStripeLen + 8 * lane);
  const auto scramble = [key](uint64_t acc) {
    acc ^= acc >> 47;
    acc ^= key;
    return acc * xxh3::kPrime32_1;
  };
  constexpr unsigned kPieces = kChunkBlocks * xxh3::kLanes * 8 / 16;  // 16-byte copies a chunk
  const size_t chunks = blocks / kChunkBlocks;
  const auto issue = [&](size_t chunk) {
    const auto* from = reinterpret_cast<const char*>(deltas + chunk * kChunkBlocks * xxh3::kLanes);
    auto* to = reinterpret_cast<char*>(ring[chunk % kStages]);
    for (unsigned i = t; i < kPieces; i += 32) __pipeline_memcpy_async(to + 16 * i, from + 16 * i, 16);
  };
  for (size_t c = 0; c + 1 < kStages; ++c) {
    if (c < chunks) issue(c);
    __pipeline_commit();
  }
  uint64_t acc = xxh3::InitialLane(lane);
  for (size_t c = 0; c < chunks; ++c) {
    if (c + kStages - 1 < chunks) issue(c + kStages - 1);  // into the slot chained one chunk ago
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);  // chunk c has landed
    __syncwarp();
    if (t < xxh3::kLanes) {
      const uint64_t* chunk = ring[c % kStages];
      uint64_t d[kChunkBlocks];
#pragma unroll
      for (size_t i = 0; i < kChunkBlocks; ++i) d[i] = chunk[i * xxh3::kLanes + lane];
#pragma unroll
      for (size_t i = 0; i < kChunkBlocks; ++i) acc = scramble(acc + d[i]);
    }
    __syncwarp();  // chained before the slot is written again
  }
  for (size_t b = chunks * kChunkBlocks; b < blocks; ++b) acc = scramble(acc + deltas[b * xxh3::kLanes + lane]);
  return acc;
}

// Launched with one warp: the lanes' chains through the blocks, plus the
// tail's deltas (`tail`, computed where the input was read), then the merge.
// Reads only scratch memory, never the input: it may run on another stream
// after the input's stream has moved on.
__global__ void Xxh3ChainKernel(size_t n, size_t blocks, const uint64_t* deltas, const uint64_t* tail,
                                SecretParam param, Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  __shared__ uint64_t acc[xxh3::kLanes];
  StageSecret(param, secret);
  const uint64_t chained = ChainLanesInWarp(deltas, blocks, secret);
  if (threadIdx.x < xxh3::kLanes) acc[threadIdx.x] = chained + tail[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) result->xxh3 = xxh3::MergeLanes(acc, n, secret);
}

// Launched with one warp, after Xxh3BlocksKernel: what the input's last bytes
// add to each lane after the chain (the partial block and the final stripe)
// into tail[0..7], and xor64: the partials and the bytes after the full
// blocks.
__global__ void Xxh3TailKernel(const uint8_t* in, size_t n, const uint64_t* partials, size_t partial_count,
                               SecretParam param, uint64_t* tail, Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  StageSecret(param, secret);
  if (threadIdx.x < xxh3::kLanes) tail[threadIdx.x] = xxh3::TailLaneDelta(in, n, secret, threadIdx.x);
  uint64_t x = 0;
  for (size_t at = xxh3::FullBlocks(n) * xxh3::kBlockLen + threadIdx.x; at < n; at += blockDim.x) {
    x ^= static_cast<uint64_t>(in[at]) << (8 * (at % 8));
  }
  for (size_t i = threadIdx.x; i < partial_count; i += blockDim.x) x ^= partials[i];
  x = WarpXor(x);
  if (threadIdx.x == 0) result->xor64 = x;
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
// lanes 0..7 compute the tail's deltas into tail[0..7], every thread XORs a
// share of the partials and tail bytes into result->xor64. The chain follows
// in Xxh3ChainKernel, which reads no segment.
__global__ void SegmentedTailKernel(xxh3::SegmentTable table, const uint64_t* partials, size_t partial_count,
                                    SecretParam param, uint64_t* tail, Fingerprint* result) {
  __shared__ uint8_t secret[xxh3::kSecretSize];
  __shared__ uint8_t window[xxh3::kBlockLen];
  StageSecret(param, secret);
  const uint64_t len = table.total();
  const size_t window_bytes = xxh3::TailWindowBytes(len);
  if (threadIdx.x == 0) xxh3::GatherBytes(table, len - window_bytes, window_bytes, window);
  __syncthreads();
  if (threadIdx.x < xxh3::kLanes) {
    tail[threadIdx.x] = xxh3::TailLaneDeltaFromWindow(window, window_bytes, len, secret, threadIdx.x);
  }
  uint64_t x = xxh3::TailXor(window, len, threadIdx.x, blockDim.x);
  for (size_t i = threadIdx.x; i < partial_count; i += blockDim.x) x ^= partials[i];
  x = WarpXor(x);
  if (threadIdx.x == 0) result->xor64 = x;
}

// Every kernel above, for LoadKernels.
const void* const kKernels[] = {
    reinterpret_cast<const void*>(&Xxh3ShortKernel),
    reinterpret_cast<const void*>(&Xxh3BlocksKernel<16>),
    reinterpret_cast<const void*>(&Xxh3BlocksKernel<8>),
    reinterpret_cast<const void*>(&Xxh3BlocksKernel<1>),
    reinterpret_cast<const void*>(&Xxh3ChainKernel),
    reinterpret_cast<const void*>(&Xxh3TailKernel),
    reinterpret_cast<const void*>(&SegmentedShortKernel),
    reinterpret_cast<const void*>(&SegmentedBlocksKernel),
    reinterpret_cast<const void*>(&SegmentedTailKernel),
};

size_t CeilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// Bytes rounded up to whole 16-byte units, for the scratch layouts: the block
// deltas start 16-byte aligned (ChainLanesInWarp copies them 16 at a time).
size_t Round16(size_t bytes) { return CeilDiv(bytes, 16) * 16; }

cudaError_t Allocate(void** raw, size_t bytes, const Streams& streams) {
  if (streams.pool != nullptr) {
    return cudaMallocFromPoolAsync(raw, bytes, static_cast<cudaMemPool_t>(streams.pool), streams.reads);
  }
  return cudaMallocAsync(raw, bytes, streams.reads);
}

// The chain stream waits for the reads enqueued so far; the reading stream
// does not wait for anything. Returns the stream the rest goes on.
cudaError_t Fork(const Streams& streams, cudaStream_t* rest, const char** failed_step) {
  *rest = streams.reads;
  if (streams.chain == nullptr || streams.chain == streams.reads) return cudaSuccess;
  cudaEvent_t read;
  cudaError_t err = cudaEventCreateWithFlags(&read, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    *failed_step = "cudaEventCreateWithFlags";
    return err;
  }
  err = cudaEventRecord(read, streams.reads);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(streams.chain, read, 0);
  if (err != cudaSuccess) *failed_step = "cudaEventRecord/cudaStreamWaitEvent of the fork";
  cudaEventDestroy(read);  // released once it completes
  if (err == cudaSuccess) *rest = streams.chain;
  return err;
}

// The result's copy to the caller and the scratch's release, on `s`.
int Finish(void* raw, const Fingerprint* result, DeviceFingerprint* out, cudaStream_t s, const char** failed_step) {
  cudaError_t err = cudaGetLastError();
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

// A short input's result, computed on the reading stream: its copy and the
// scratch's release still go on the chain stream, where the caller waits for
// the result (a result copied on `reads` while the caller's event is on
// `chain` could be read before it lands).
int ForkAndFinish(void* raw, const Fingerprint* result, DeviceFingerprint* out, const Streams& streams,
                  const char** failed_step) {
  cudaStream_t s = streams.reads;
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    *failed_step = "kernel launch";
    cudaFreeAsync(raw, s);
    return err;
  }
  cudaStream_t rest = s;
  if (const cudaError_t err = Fork(streams, &rest, failed_step); err != cudaSuccess) {
    cudaFreeAsync(raw, s);
    return err;
  }
  return Finish(raw, result, out, rest, failed_step);
}

}  // namespace

int LoadKernels(const char** failed_step) {
  for (const void* kernel : kKernels) {
    cudaFuncAttributes attributes;
    if (const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel); err != cudaSuccess) {
      *failed_step = "cudaFuncGetAttributes";
      return err;
    }
  }
  return cudaSuccess;
}

// Scratch layout: [result][8 tail deltas][XOR partials], then the block
// deltas from a 16-byte boundary.
int EnqueueFingerprint(const void* dev_ptr, size_t n, const Streams& streams, const uint8_t* secret_bytes,
                       DeviceFingerprint* out, const char** failed_step) {
  const auto* in = static_cast<const uint8_t*>(dev_ptr);
  cudaStream_t s = streams.reads;
  SecretParam secret;
  std::memcpy(secret.bytes, secret_bytes, xxh3::kSecretSize);
  const size_t blocks = n > xxh3::kMidSizeMax ? xxh3::FullBlocks(n) : 0;
  const size_t grid = blocks > 0 ? std::min(CeilDiv(blocks * kPairs, kThreads), kMaxDeltaBlocks) : 0;

  const size_t deltas_at = Round16(sizeof(Fingerprint) + 8 * (xxh3::kLanes + grid));
  const size_t scratch_bytes = deltas_at + 8 * xxh3::kLanes * blocks;
  void* raw = nullptr;
  cudaError_t err = Allocate(&raw, scratch_bytes, streams);
  if (err != cudaSuccess) {
    *failed_step = "cudaMallocAsync";
    return err;
  }
  auto* result = static_cast<Fingerprint*>(raw);
  auto* tail = reinterpret_cast<uint64_t*>(result + 1);
  uint64_t* partials = tail + xxh3::kLanes;
  auto* deltas = reinterpret_cast<uint64_t*>(static_cast<char*>(raw) + deltas_at);

  if (n <= xxh3::kMidSizeMax) {
    Xxh3ShortKernel<<<1, 32, 0, s>>>(in, n, secret, result);
    return ForkAndFinish(raw, result, out, streams, failed_step);
  }
  if (blocks > 0) {
    const auto address = reinterpret_cast<uintptr_t>(in);
    const auto g = static_cast<unsigned>(grid);
    if (address % 16 == 0) {
      Xxh3BlocksKernel<16><<<g, kThreads, 0, s>>>(in, blocks, secret, deltas, partials);
    } else if (address % 8 == 0) {
      Xxh3BlocksKernel<8><<<g, kThreads, 0, s>>>(in, blocks, secret, deltas, partials);
    } else {
      Xxh3BlocksKernel<1><<<g, kThreads, 0, s>>>(in, blocks, secret, deltas, partials);
    }
  }
  Xxh3TailKernel<<<1, 32, 0, s>>>(in, n, partials, grid, secret, tail, result);
  if (err = cudaGetLastError(); err != cudaSuccess) {
    *failed_step = "kernel launch";
    cudaFreeAsync(raw, s);
    return err;
  }
  cudaStream_t rest = s;
  if (err = Fork(streams, &rest, failed_step); err != cudaSuccess) {
    cudaFreeAsync(raw, s);
    return err;
  }
  Xxh3ChainKernel<<<1, 32, 0, rest>>>(n, blocks, deltas, tail, secret, result);
  return Finish(raw, result, out, rest, failed_step);
}

// Scratch layout: [result][8 tail deltas][table][XOR partials], then the
// block deltas from a 16-byte boundary.
int EnqueueSegmentedFingerprint(const uint64_t* host_table, uint32_t count, const Streams& streams,
                                const uint8_t* secret_bytes, DeviceFingerprint* out, const char** failed_step) {
  cudaStream_t s = streams.reads;
  SecretParam secret;
  std::memcpy(secret.bytes, secret_bytes, xxh3::kSecretSize);
  const uint64_t len = host_table[count];
  const size_t blocks = len > xxh3::kMidSizeMax ? xxh3::FullBlocks(len) : 0;
  const size_t grid =
      blocks > 0 ? std::min(CeilDiv(blocks * xxh3::kLanes, kThreads), kMaxDeltaBlocks) : 0;
  const size_t table_words = 2 * static_cast<size_t>(count) + 1;

  const size_t deltas_at = Round16(sizeof(Fingerprint) + 8 * (xxh3::kLanes + table_words + grid));
  const size_t scratch_bytes = deltas_at + 8 * xxh3::kLanes * blocks;
  void* raw = nullptr;
  cudaError_t err = Allocate(&raw, scratch_bytes, streams);
  if (err != cudaSuccess) {
    *failed_step = "cudaMallocAsync";
    return err;
  }
  auto* result = static_cast<Fingerprint*>(raw);
  auto* tail = reinterpret_cast<uint64_t*>(result + 1);
  uint64_t* table_words_on_device = tail + xxh3::kLanes;
  uint64_t* partials = table_words_on_device + table_words;
  auto* deltas = reinterpret_cast<uint64_t*>(static_cast<char*>(raw) + deltas_at);
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
    return ForkAndFinish(raw, result, out, streams, failed_step);
  }
  if (blocks > 0) {
    SegmentedBlocksKernel<<<static_cast<unsigned>(grid), kThreads, 0, s>>>(table, blocks, secret, deltas,
                                                                           partials);
  }
  SegmentedTailKernel<<<1, 32, 0, s>>>(table, partials, grid, secret, tail, result);
  if (err = cudaGetLastError(); err != cudaSuccess) {
    *failed_step = "kernel launch";
    cudaFreeAsync(raw, s);
    return err;
  }
  cudaStream_t rest = s;
  if (err = Fork(streams, &rest, failed_step); err != cudaSuccess) {
    cudaFreeAsync(raw, s);
    return err;
  }
  Xxh3ChainKernel<<<1, 32, 0, rest>>>(static_cast<size_t>(len), blocks, deltas, tail, secret, result);
  return Finish(raw, result, out, rest, failed_step);
}

}  // namespace dgrr::fingerprint_cuda_internal
