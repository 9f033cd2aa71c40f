// The reader's hot loop (TraceReader::NextRecords and everything built on
// it): how many records in a row, from a point in the reader's buffer, are
// BOUNDARY records that keep every rule, the CRC and the rules that look at
// what came before included. One branch per record; the first record that
// breaks any rule ends the run, and the reader's general path then names the
// reason. Several implementations, chosen once by what the CPU has; all say
// exactly what the portable one says (tests/trace_format/record_test.cc
// checks every one this CPU can run against it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dgrr::trace {

// What a run of boundaries is checked against, and where it leaves off.
struct ScanState {
  uint32_t defined_names = 0;  // a boundary's name id must be below this
  uint32_t world_size = 1;     // and its rank below this
  bool has_seq = false;        // a boundary came before (then seq must exceed last_seq)
  uint64_t last_seq = 0;
};

enum class ScanKernel {
  kPortable,  // rule by rule (BoundaryFieldsValidPortable)
  kSse2,      // BoundaryFieldsValid's 16-byte compares (every x86-64 CPU)
  kAvx2,      // the byte, name-id and rank rules in one 32-byte compare
};
bool ScanKernelAvailable(ScanKernel kernel);
ScanKernel SelectedScanKernel();
const char* ScanKernelName(ScanKernel kernel);  // "portable", "sse2", "avx2"

// Of the `count` records at `records` (kRecordSize apart), whose computed
// CRCs are crcs[0, count), the length of the leading run of clean
// boundaries; state->has_seq/last_seq advance past them (untouched when the
// run is empty).
size_t CleanBoundaryRun(const uint8_t* records, const uint32_t* crcs, size_t count, ScanState* state);
// The same through `kernel` (the selected one when the CPU lacks it).
size_t CleanBoundaryRunWith(ScanKernel kernel, const uint8_t* records, const uint32_t* crcs, size_t count,
                            ScanState* state);

}  // namespace dgrr::trace
