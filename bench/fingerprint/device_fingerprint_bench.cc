// The device fingerprint against a device-to-device copy of the same buffer,
// timed in the same run with CUDA events, rounds interleaved and the order
// alternated each round. The goal (docs/fingerprint.md, the GPU issue): the
// fingerprint reads at >= 0.9x the rate at which a copy reads (a copy reads n
// bytes and writes n; the fingerprint reads n and writes 16).
//
//   device_fingerprint_bench [ROUNDS] [MiB...]     default: 15 rounds, 1 16 256 4096 MiB
//
// Prints three lines per size: medians over the rounds, min-max in brackets.
// The first: the fingerprint on one stream against the copy. The second: the
// same bytes as 997 buffers of uneven lengths fingerprinted as one stream
// (the parameters' fingerprint). The third: the fingerprint split as the
// session's fingerprinter runs it (FingerprintStreams: the passes that read
// the buffer on its stream, XXH3's serial chain on a stream of its own, the
// scratch from a pool of its own): how long the buffer's stream is busy,
// against the copy (the cost to the training loop, and the goal's figure),
// and when the result is ready.
// Without CUDA or without a device it says so and exits 0.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#if DGRR_FINGERPRINT_HAVE_CUDA
#include <cuda_runtime.h>

#include "fingerprint/fingerprint_cuda.h"

namespace {

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// Milliseconds of `enqueue` on `stream`, by events around it.
template <typename F>
double TimeOnStream(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, F&& enqueue) {
  CHECK_CUDA(cudaEventRecord(start, stream));
  enqueue();
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

void RunSize(size_t bytes, int rounds, cudaStream_t stream) {
  void* src = nullptr;
  void* dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  CHECK_CUDA(cudaMemsetAsync(src, 0x5a, bytes, stream));
  dgrr::Fingerprint* result = nullptr;
  CHECK_CUDA(cudaMallocHost(&result, sizeof(dgrr::Fingerprint)));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  auto fingerprint = [&] {
    const dgrr::Status s = dgrr::FingerprintDeviceAsync(src, bytes, stream, result);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(2);
    }
  };
  auto copy = [&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); };
  // The same bytes as a parameter list: kSegments buffers of uneven lengths
  // (one fingerprint over their concatenation, the STEP record's), the
  // segment table staged in pinned memory as the session does.
  constexpr size_t kSegments = 997;
  std::vector<dgrr::MemorySegment> segments;
  size_t weights = 0;
  for (size_t i = 0; i < kSegments; ++i) weights += i % 13 + 1;
  for (size_t i = 0, at = 0; i < kSegments; ++i) {
    const size_t n = i + 1 == kSegments ? bytes - at : bytes / weights * (i % 13 + 1);
    segments.push_back({static_cast<const uint8_t*>(src) + at, n});
    at += n;
  }
  uint64_t* table = nullptr;
  CHECK_CUDA(cudaMallocHost(&table, dgrr::SegmentTableWords(kSegments) * sizeof(uint64_t)));
  auto segmented = [&] {
    const dgrr::Status s = dgrr::FingerprintSegmentsDeviceAsync(
        segments, stream, std::span<uint64_t>(table, dgrr::SegmentTableWords(kSegments)), result);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(2);
    }
  };
  // Split: reads on `stream`, the chain on `chain`, scratch from `pool`.
  cudaStream_t chain;
  CHECK_CUDA(cudaStreamCreateWithFlags(&chain, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CHECK_CUDA(cudaMemPoolCreate(&pool, &props));
  int no = 0;
  CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
  dgrr::FingerprintStreams split;
  split.reads = stream;
  split.chain = chain;
  split.pool = pool;
  cudaEvent_t ready;
  CHECK_CUDA(cudaEventCreate(&ready));
  // Milliseconds `stream` is busy with the split fingerprint, and until its
  // result is ready on `chain`.
  auto time_split = [&](double* reads_ms, double* result_ms) {
    CHECK_CUDA(cudaStreamSynchronize(chain));
    CHECK_CUDA(cudaEventRecord(start, stream));
    const dgrr::Status s = dgrr::FingerprintDeviceAsync(src, bytes, split, result);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      std::exit(2);
    }
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventRecord(ready, chain));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventSynchronize(ready));
    float a = 0, b = 0;
    CHECK_CUDA(cudaEventElapsedTime(&a, start, stop));
    CHECK_CUDA(cudaEventElapsedTime(&b, start, ready));
    *reads_ms = a;
    *result_ms = b;
  };
  fingerprint();  // warm-up: the stream-ordered pools, the kernels' first load
  copy();
  segmented();
  double warm_reads = 0, warm_result = 0;
  time_split(&warm_reads, &warm_result);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> fp_ms, copy_ms, seg_ms, ratio, seg_ratio, split_reads_ms, split_result_ms, split_ratio;
  for (int r = 0; r < rounds; ++r) {
    double f = 0, c = 0, g = 0, sr = 0, sd = 0;
    if (r % 2 == 0) {
      f = TimeOnStream(stream, start, stop, fingerprint);
      c = TimeOnStream(stream, start, stop, copy);
      g = TimeOnStream(stream, start, stop, segmented);
      time_split(&sr, &sd);
    } else {
      time_split(&sr, &sd);
      g = TimeOnStream(stream, start, stop, segmented);
      c = TimeOnStream(stream, start, stop, copy);
      f = TimeOnStream(stream, start, stop, fingerprint);
    }
    fp_ms.push_back(f);
    copy_ms.push_back(c);
    seg_ms.push_back(g);
    split_reads_ms.push_back(sr);
    split_result_ms.push_back(sd);
    ratio.push_back(c / f);        // read rate of the fingerprint over the copy's
    seg_ratio.push_back(f / g);    // the segmented fingerprint's rate over one buffer's
    split_ratio.push_back(c / sr); // the buffer's stream: read rate over the copy's
  }
  const Spread f = SpreadOf(fp_ms), c = SpreadOf(copy_ms), q = SpreadOf(ratio);
  const Spread g = SpreadOf(seg_ms), sq = SpreadOf(seg_ratio);
  const double gib = static_cast<double>(bytes) / (1 << 30);
  std::printf("%8zu MiB  fingerprint %9.3f ms [%.3f-%.3f] %7.1f GiB/s read | copy %9.3f ms [%.3f-%.3f] "
              "%7.1f GiB/s read | fingerprint/copy read rate %.3fx [%.3f-%.3f]\n",
              bytes >> 20, f.median, f.min, f.max, gib / (f.median / 1e3), c.median, c.min, c.max,
              gib / (c.median / 1e3), q.median, q.min, q.max);
  std::printf("%8zu MiB  as %zu segments %9.3f ms [%.3f-%.3f] %7.1f GiB/s read | segmented/one buffer read rate "
              "%.3fx [%.3f-%.3f]\n",
              bytes >> 20, kSegments, g.median, g.min, g.max, gib / (g.median / 1e3), sq.median, sq.min, sq.max);
  const Spread sr = SpreadOf(split_reads_ms), sd = SpreadOf(split_result_ms), sq2 = SpreadOf(split_ratio);
  std::printf("%8zu MiB  split: its stream %9.3f ms [%.3f-%.3f] %7.1f GiB/s read, %.3fx the copy's [%.3f-%.3f] | "
              "result after %9.3f ms [%.3f-%.3f]\n",
              bytes >> 20, sr.median, sr.min, sr.max, gib / (sr.median / 1e3), sq2.median, sq2.min, sq2.max,
              sd.median, sd.min, sd.max);
  std::fflush(stdout);
  CHECK_CUDA(cudaEventDestroy(ready));
  CHECK_CUDA(cudaStreamDestroy(chain));
  CHECK_CUDA(cudaMemPoolDestroy(pool));
  CHECK_CUDA(cudaFreeHost(table));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaFreeHost(result));
  CHECK_CUDA(cudaFree(dst));
  CHECK_CUDA(cudaFree(src));
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("device_fingerprint_bench: skipped: no CUDA device\n");
    return 0;
  }
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  std::vector<size_t> mib;
  for (int i = 2; i < argc; ++i) mib.push_back(static_cast<size_t>(std::atoll(argv[i])));
  if (mib.empty()) mib = {1, 16, 256, 4096};
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  size_t free_bytes = 0, total = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
  std::printf("device 0: %s, %zu MiB free; %d rounds per size, medians [min-max]\n", prop.name, free_bytes >> 20,
              rounds);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (size_t m : mib) {
    if (2 * (m << 20) + (64 << 20) > free_bytes) {
      std::printf("%8zu MiB  skipped: two buffers do not fit in free device memory\n", m);
      continue;
    }
    RunSize(m << 20, rounds, stream);
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

#else

int main() {
  std::printf("device_fingerprint_bench: skipped: dgrr was built without CUDA\n");
  return 0;
}

#endif
