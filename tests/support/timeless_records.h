// A trace's records with their host times zeroed: what two runs that compute
// the same things must record identically (the clock never agrees).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "trace_format/reader.h"

namespace dgrr::test_support {

inline std::vector<trace::Record> TimelessRecords(const std::string& trace_path) {
  auto t = trace::ReadWholeTrace(trace_path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  for (auto& r : t->records) {
    if (auto* b = std::get_if<trace::BoundaryRecord>(&r.body)) b->host_time_ns = 0;
    if (auto* s = std::get_if<trace::StepRecord>(&r.body)) s->host_time_ns = 0;
    if (auto* e = std::get_if<trace::EventRecord>(&r.body)) e->host_time_ns = 0;
  }
  return t->records;
}

}  // namespace dgrr::test_support
