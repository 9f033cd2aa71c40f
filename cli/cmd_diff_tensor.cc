// dgrr diff-tensor: compare two tensor dumps (dgrr replay --dump) element by
// element: how many elements differ, by how much, and where first.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "checkpoint/tensor_file.h"
#include "cli/command.h"
#include "replay/tensor_diff.h"

namespace dgrr::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string BitsHex(uint64_t bits, DType dtype) {
  const int digits = static_cast<int>(2 * std::max<size_t>(DTypeSize(dtype), 1));
  char text[24];
  std::snprintf(text, sizeof text, "0x%0*" PRIx64, digits, bits);
  return text;
}

// Floats: a number, or "nan", "inf", "-inf" (JSON has no such numbers).
// Integers: the exact integer.
Json ValueJson(DType dtype, uint64_t bits) {
  if (!replay::IsFloatDType(dtype)) {
    if (!replay::IsSignedIntegerDType(dtype)) return bits;
    return replay::SignExtend(bits, DTypeSize(dtype));  // exact
  }
  const double v = replay::ElementValue(dtype, bits);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string ValueText(DType dtype, uint64_t bits) {
  if (!replay::IsFloatDType(dtype)) return ValueJson(dtype, bits).dump();
  char text[40];
  std::snprintf(text, sizeof text, dtype == DType::kF64 ? "%.17g" : "%.9g", replay::ElementValue(dtype, bits));
  return std::string(text) + " (" + BitsHex(bits, dtype) + ")";
}

Json AbsJson(double max_abs) { return std::isinf(max_abs) ? Json("inf") : Json(max_abs); }

// Adds the figures of `s` to the object `out`.
void AddStats(const replay::DiffStats& s, Json& out) {
  out["elements"] = s.elements;
  out["differing"] = s.differing;
  out["nan_pairs"] = s.nan_pairs;
  out["max_abs_diff"] = AbsJson(s.max_abs);
  out["max_ulp_diff"] = s.has_ulp ? Json(s.max_ulp) : Json(nullptr);
}

Json DumpJson(const checkpoint::TensorDump& d) {
  return {{"path", d.path},     {"run_dir", d.run_dir}, {"boundary", d.boundary},
          {"step", d.step},     {"rank", d.rank},       {"datasets", d.tensors.size()}};
}

Json ReportJson(const checkpoint::TensorDump& a, const checkpoint::TensorDump& b,
                const replay::TensorDumpDiff& diff) {
  Json datasets = Json::array();
  for (const replay::TensorPairDiff& p : diff.pairs) {
    Json first = Json::array();
    for (const replay::DifferingElement& e : p.first) {
      first.push_back({{"index", e.index},
                       {"flat_index", e.flat_index},
                       {"a", ValueJson(p.dtype, e.a_bits)},
                       {"b", ValueJson(p.dtype, e.b_bits)},
                       {"a_bits", BitsHex(e.a_bits, p.dtype)},
                       {"b_bits", BitsHex(e.b_bits, p.dtype)}});
    }
    Json entry = {{"name", p.name}, {"dtype", std::string(DTypeName(p.dtype))}, {"shape", p.shape}};
    AddStats(p.stats, entry);
    entry["first_differences"] = first;
    datasets.push_back(entry);
  }
  Json mismatched = Json::array();
  for (const replay::Mismatch& m : diff.mismatched) mismatched.push_back({{"name", m.name}, {"reason", m.reason}});
  Json total = {{"datasets_compared", diff.pairs.size()}};
  AddStats(diff.total, total);
  return {{"schema", "dgrr.diff-tensor/1"},
          {"a", DumpJson(a)},
          {"b", DumpJson(b)},
          {"result", diff.identical() ? "identical" : "different"},
          {"total", total},
          {"datasets", datasets},
          {"only_in_a", diff.only_in_a},
          {"only_in_b", diff.only_in_b},
          {"mismatched", mismatched}};
}

std::string Figures(const replay::DiffStats& s) {
  char text[96];
  std::snprintf(text, sizeof text, "max abs %.9g", s.max_abs);
  std::string out = text;
  if (s.has_ulp) out += ", max ulp " + std::to_string(s.max_ulp);
  if (s.nan_pairs) out += ", " + std::to_string(s.nan_pairs) + " with NaN";
  return out;
}

void PrintReport(const checkpoint::TensorDump& a, const checkpoint::TensorDump& b,
                 const replay::TensorDumpDiff& diff) {
  for (const auto* d : {&a, &b}) {
    std::cout << (d == &a ? "A: " : "B: ") << d->path << " (" << d->boundary << " at step " << d->step
              << ", rank " << d->rank << ", " << d->tensors.size() << " datasets)\n";
  }
  if (a.boundary != b.boundary || a.step != b.step) {
    ReportWarning("diff-tensor", "the dumps are of different boundaries or steps");
  }
  size_t differing_pairs = 0;
  for (const replay::TensorPairDiff& p : diff.pairs) {
    if (p.stats.differing == 0) continue;
    ++differing_pairs;
    std::cout << p.name << " (" << DTypeName(p.dtype) << " " << replay::ShapeString(p.shape) << "): "
              << p.stats.differing << " of " << p.stats.elements << " elements differ; " << Figures(p.stats)
              << "\n";
    for (const replay::DifferingElement& e : p.first) {
      std::cout << "  " << replay::ShapeString(e.index) << ": " << ValueText(p.dtype, e.a_bits) << " vs "
                << ValueText(p.dtype, e.b_bits) << "\n";
    }
  }
  for (const std::string& n : diff.only_in_a) std::cout << n << ": only in A\n";
  for (const std::string& n : diff.only_in_b) std::cout << n << ": only in B\n";
  for (const replay::Mismatch& m : diff.mismatched) std::cout << m.name << ": not compared, " << m.reason << "\n";
  if (diff.identical()) {
    std::cout << "identical: " << diff.pairs.size() << " datasets, " << diff.total.elements
              << " elements, bitwise equal\n";
  } else {
    std::cout << "total: " << diff.total.differing << " of " << diff.total.elements << " elements differ in "
              << differing_pairs << " of " << diff.pairs.size() << " datasets compared; " << Figures(diff.total)
              << "\n";
  }
}

int RunDiffTensor(const std::vector<std::string>& args) {
  std::string path_a, path_b;
  int64_t first_n = 10;
  po::options_description options("Options");
  options.add_options()("a", po::value(&path_a)->required(), "first dump (positional)")(
      "b", po::value(&path_b)->required(), "second dump (positional)")(
      "first", po::value(&first_n)->default_value(10), "show the first N differing elements of each dataset")(
      "json", "print the result as JSON (schema dgrr.diff-tensor/1)")(
      "quiet,q", "print nothing: the exit code says whether the dumps differ, as cmp -s (errors still go to "
                 "stderr)");
  po::positional_options_description positional;
  positional.add("a", 1).add("b", 1);
  po::variables_map vm;
  const int rc = ParseCommandLine(
      "diff-tensor", "dgrr diff-tensor A.h5 B.h5 [--first N] [--json | -q]",
      "Compares two tensor dumps written by 'dgrr replay --dump' (docs/tensor-dump.md), pairing\n"
      "their datasets by name (the example range). For each pair and in total: the element count,\n"
      "how many elements differ bitwise, the largest absolute difference and, for float dtypes, the\n"
      "largest distance in ULPs (NaN pairs are counted apart), and the first N differing elements\n"
      "with their multi-dimensional indices and both values. Datasets present in one file only, or\n"
      "with another dtype or shape, are listed, not compared. Exit 0: identical; 4: different.",
      options, positional, args, vm);
  if (rc >= 0) return rc;
  if (first_n < 0) return ReportError("diff-tensor", Status::InvalidArgument("--first must not be negative"));

  auto a = checkpoint::ReadTensorDump(path_a);
  if (!a.ok()) return ReportError("diff-tensor", a.status());
  auto b = checkpoint::ReadTensorDump(path_b);
  if (!b.ok()) return ReportError("diff-tensor", b.status());
  const replay::TensorDumpDiff diff = replay::DiffTensorDumps(*a, *b, static_cast<size_t>(first_n));
  if (vm.count("json")) {
    std::cout << ReportJson(*a, *b, diff).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (vm.count("quiet") == 0) {
    PrintReport(*a, *b, diff);
  }
  return diff.identical() ? kExitOk : kExitDivergence;
}

}  // namespace

// Registered by hand: DGRR_COMMAND makes the name from an identifier, which
// cannot hold the '-'.
static const bool dgrr_registered_diff_tensor = ::dgrr::cli::RegisterCommand(
    {"diff-tensor", "compare two tensor dumps element by element (bitwise, abs, ULP)", RunDiffTensor,
     {kExitOk, kExitUsage, kExitIO, kExitInvalidData, kExitDivergence}});

}  // namespace dgrr::cli
