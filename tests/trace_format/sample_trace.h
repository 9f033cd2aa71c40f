// A small trace with every record type, shared by the trace_format and CLI
// tests: 12 records, one of the two names long enough to span two NAME records.
#pragma once

#include <gtest/gtest.h>

#include "tests/support/temp_dir_test.h"
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "trace_format/writer.h"

namespace dgrr::trace::testing {

inline constexpr uint64_t kSampleRecords = 12;
inline const std::string kShortName = "block0.attn.qkv.out";
inline const std::string kLongName =
    "model.encoder.layers.11.self_attention.multi_head.query_key_value.projection."
    "weight_times_input.plus_bias.output_before_dropout";  // > 108 bytes: two NAME records

inline TraceHeader SampleHeader() {
  TraceHeader header;
  for (size_t i = 0; i < header.run_id.size(); ++i) header.run_id[i] = static_cast<uint8_t>(0xa0 + i);
  header.seed = 1234;
  header.rank = 1;
  header.world_size = 2;
  header.config_digest = 0x1122334455667788ull;
  header.env_digest = 0x99aabbccddeeff00ull;
  header.created_unix_ns = 1700000000000000000ull;
  return header;
}

inline BoundaryRecord SampleBoundary(uint32_t name_id, uint64_t step, uint64_t seq) {
  BoundaryRecord b;
  b.step = step;
  b.seq = seq;
  b.name_id = name_id;
  b.phase = seq % 2 ? Phase::kBackward : Phase::kForward;
  b.direction = Direction::kOutput;
  b.dtype = DType::kF32;
  b.rank = 1;
  const uint64_t dims[] = {2, 3};
  EXPECT_TRUE(SetShape(&b, dims, 2).ok());
  b.byte_count = 24;
  b.first_example = 2 * step;
  b.example_count = 2;
  b.xor64 = 0x0123456789abcdefull ^ seq;
  b.xxh3 = 0xfedcba9876543210ull + seq;
  b.host_time_ns = 1700000000000001000ull + seq;
  return b;
}

// Writes the sample trace; records in order:
//  0 NAME(short) 1-2 NAME(long) 3 STEP begin 0, 4-6 BOUNDARY, 7 STEP end 0,
//  8 EVENT checkpoint, 9 STEP begin 1, 10 BOUNDARY, 11 STEP end 1.
inline void WriteSampleTrace(const std::string& path) {
  auto writer = TraceWriter::Create(path, SampleHeader(), {.overwrite = true});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  TraceWriter& w = **writer;
  auto short_id = w.InternName(kShortName);
  auto long_id = w.InternName(kLongName);
  ASSERT_TRUE(short_id.ok() && long_id.ok());
  ASSERT_TRUE(w.AppendStep({.step = 0, .kind = StepKind::kBegin, .host_time_ns = 5}).ok());
  ASSERT_TRUE(w.AppendBoundary(SampleBoundary(*short_id, 0, 0)).ok());
  ASSERT_TRUE(w.AppendBoundary(SampleBoundary(*long_id, 0, 1)).ok());
  ASSERT_TRUE(w.AppendBoundary(SampleBoundary(*short_id, 0, 2)).ok());
  ASSERT_TRUE(w.AppendStep({.step = 0, .kind = StepKind::kEnd, .host_time_ns = 6,
                            .loss_dtype = DType::kF32, .loss_bits = 0x40200000,
                            .params_xor64 = 0xabc, .params_xxh3 = 0xdef})
                  .ok());
  ASSERT_TRUE(w.AppendEvent({.step = 0, .kind = EventKind::kCheckpoint, .host_time_ns = 7,
                             .payload = "ckpt/step-0"})
                  .ok());
  ASSERT_TRUE(w.AppendStep({.step = 1, .kind = StepKind::kBegin, .host_time_ns = 8}).ok());
  ASSERT_TRUE(w.AppendBoundary(SampleBoundary(*short_id, 1, 3)).ok());
  ASSERT_TRUE(w.AppendStep({.step = 1, .kind = StepKind::kEnd, .host_time_ns = 9,
                            .loss_dtype = DType::kF32, .loss_bits = 0x40100000,
                            .params_xor64 = 0x123, .params_xxh3 = 0x456})
                  .ok());
  ASSERT_EQ(w.records_written(), kSampleRecords);
  ASSERT_TRUE(w.Close().ok());
}

// A fresh directory per test (tests/support/temp_dir_test.h).
using TempDirTest = ::dgrr::test_support::TempDirTest;

}  // namespace dgrr::trace::testing
