// dgrr diff-tensor: compare two tensor dumps (dgrr replay --dump) or two
// checkpoints tensor by tensor, element by element: how many elements differ,
// by how much, and where first.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "base/file.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/tensor_file.h"
#include "cli/command.h"
#include "replay/tensor_diff.h"

namespace dgrr::cli {
namespace {

using Json = nlohmann::ordered_json;

// What one argument names: a tensor dump, a whole checkpoint (v1 file or v2
// manifest with its shards) or one v2 shard. Exactly one member is set.
struct TensorSource {
  std::optional<checkpoint::TensorDump> dump;
  std::optional<checkpoint::Checkpoint> checkpoint;
  std::optional<checkpoint::SavedShard> shard;

  const char* kind() const { return dump ? "dump" : checkpoint ? "checkpoint" : "shard"; }
  const std::string& path() const { return dump ? dump->path : checkpoint ? checkpoint->path : shard->path; }
  uint64_t step() const { return dump ? dump->step : checkpoint ? checkpoint->meta.step : shard->meta.step; }
  std::vector<replay::TensorView> Tensors() const {
    if (checkpoint) return replay::CheckpointTensors(*checkpoint);
    if (shard) return replay::CheckpointTensors(*shard);
    std::vector<replay::TensorView> out;
    for (const auto& t : dump->tensors) out.push_back({t.name, t.dtype, t.shape, &t.data});
    return out;
  }
};

// The file's first bytes say which dgrr format it is; a v2 checkpoint file is
// a shard when it has a shard's name (docs/checkpoint-format.md section 8
// fixes it: step-S.rank-R.h5).
StatusOr<TensorSource> OpenFile(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenRandomAccessFile(path));
  char magic[8] = {};
  DGRR_ASSIGN_OR_RETURN(size_t got, file->Read(0, sizeof magic, magic));
  TensorSource source;
  if (got == sizeof magic && std::memcmp(magic, "DGRRCKPT", 8) == 0) {
    static const std::regex kShardName(R"(step-[0-9]+\.rank-[0-9]+\.h5)");
    const std::string name = path.substr(path.find_last_of('/') + 1);
    if (std::regex_match(name, kShardName)) {
      DGRR_ASSIGN_OR_RETURN(source.shard, checkpoint::ReadCheckpointShard(path));
    } else {
      DGRR_ASSIGN_OR_RETURN(source.checkpoint, checkpoint::ReadCheckpoint(path));
    }
  } else {
    DGRR_ASSIGN_OR_RETURN(source.dump, checkpoint::ReadTensorDump(path));  // names the bad magic
  }
  return source;
}

// A run directory stands for its checkpoint of `step`, or its newest one.
StatusOr<TensorSource> OpenSource(const std::string& arg, std::optional<uint64_t> step) {
  if (!IsDirectory(arg)) return OpenFile(arg);
  if (!step) {
    DGRR_ASSIGN_OR_RETURN(std::vector<uint64_t> steps, checkpoint::ListCheckpointSteps(arg));
    if (steps.empty()) return Status::NotFound(arg + ": the run has no checkpoint (ckpt/step-*.h5)");
    step = steps.back();
  }
  const std::string path = checkpoint::CheckpointPath(arg, *step);
  if (!PathExists(path)) return Status::NotFound(path + ": no checkpoint of step " + std::to_string(*step));
  return OpenFile(path);
}

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

Json SourceJson(const TensorSource& s) {
  const Json null(nullptr);
  Json rank = s.dump ? Json(s.dump->rank) : s.shard ? Json(s.shard->rank) : null;
  Json world_size = s.checkpoint ? Json(s.checkpoint->meta.world_size) : s.shard ? Json(s.shard->meta.world_size) : null;
  return {{"kind", s.kind()},
          {"path", s.path()},
          {"run_dir", s.dump ? Json(s.dump->run_dir) : null},
          {"boundary", s.dump ? Json(s.dump->boundary) : null},
          {"step", s.step()},
          {"rank", rank},
          {"world_size", world_size},
          {"datasets", s.Tensors().size()}};
}

Json ReportJson(const TensorSource& a, const TensorSource& b, const replay::TensorDumpDiff& diff) {
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
  return {{"schema", "dgrr.diff-tensor/2"},
          {"a", SourceJson(a)},
          {"b", SourceJson(b)},
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

std::string SourceText(const TensorSource& s) {
  const std::string datasets = std::to_string(s.Tensors().size()) + " datasets";
  if (s.dump) {
    return s.dump->boundary + " at step " + std::to_string(s.dump->step) + ", rank " + std::to_string(s.dump->rank) +
           ", " + datasets;
  }
  if (s.shard) {
    return "checkpoint shard of rank " + std::to_string(s.shard->rank) + " of " +
           std::to_string(s.shard->meta.world_size) + ", step " + std::to_string(s.step()) + ", " + datasets;
  }
  const int ranks = s.checkpoint->meta.world_size;
  return "checkpoint of step " + std::to_string(s.step()) + ", " + std::to_string(ranks) +
         (ranks == 1 ? " rank, " : " ranks, ") + datasets;
}

void PrintReport(const TensorSource& a, const TensorSource& b, const replay::TensorDumpDiff& diff) {
  std::cout << "A: " << a.path() << " (" << SourceText(a) << ")\n"
            << "B: " << b.path() << " (" << SourceText(b) << ")\n";
  if (a.step() != b.step() || (a.dump && a.dump->boundary != b.dump->boundary)) {
    ReportWarning("diff-tensor", std::string("the ") + (a.dump ? "dumps are of different boundaries or steps"
                                                                 : "checkpoints are of different steps"));
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
  options.add_options()("a", po::value(&path_a)->required(), "first dump or checkpoint (positional)")(
      "b", po::value(&path_b)->required(), "second dump or checkpoint (positional)")(
      "step", po::value<uint64_t>(), "for a run directory argument: its checkpoint of step S (default: the newest)")(
      "first", po::value(&first_n)->default_value(10), "show the first N differing elements of each dataset")(
      "json", "print the result as JSON (schema dgrr.diff-tensor/2)")(
      "quiet,q", "print nothing: the exit code says whether A and B differ, as cmp -s (errors still go to "
                 "stderr)");
  po::positional_options_description positional;
  positional.add("a", 1).add("b", 1);
  po::variables_map vm;
  const int rc = ParseCommandLine(
      "diff-tensor", "dgrr diff-tensor A B [--step S] [--first N] [--json | -q]",
      "Compares two tensor dumps written by 'dgrr replay --dump' (docs/tensor-dump.md), or two\n"
      "checkpoints (docs/checkpoint-format.md), tensor by tensor. A and B are both dumps, or both\n"
      "checkpoints: a checkpoint file ckpt/step-S.h5 (every rank's state, shards included), one\n"
      "shard ckpt/step-S.rank-R.h5, or a run directory (its checkpoint of --step S, default the\n"
      "newest). Dump datasets pair by name (the example range), checkpoint entries by their path\n"
      "in the file (replicated/NAME, ranks/R/NAME). For each pair and in total: the element count,\n"
      "how many elements differ bitwise, the largest absolute difference and, for float dtypes, the\n"
      "largest distance in ULPs (NaN pairs are counted apart), and the first N differing elements\n"
      "with their multi-dimensional indices and both values. Datasets present in one only, or\n"
      "with another dtype or shape, are listed, not compared. Exit 0: identical; 4: different.",
      options, positional, args, vm);
  if (rc >= 0) return rc;
  if (first_n < 0) return ReportError("diff-tensor", Status::InvalidArgument("--first must not be negative"));
  std::optional<uint64_t> step;
  if (vm.count("step")) {
    if (!IsDirectory(path_a) && !IsDirectory(path_b)) {
      return ReportError("diff-tensor", Status::InvalidArgument("--step applies to run directories only"));
    }
    step = vm["step"].as<uint64_t>();
  }

  auto a = OpenSource(path_a, step);
  if (!a.ok()) return ReportError("diff-tensor", a.status());
  auto b = OpenSource(path_b, step);
  if (!b.ok()) return ReportError("diff-tensor", b.status());
  if (a->dump.has_value() != b->dump.has_value()) {
    return ReportError("diff-tensor", Status::InvalidArgument(std::string("A is a ") + a->kind() + " and B a " +
                                                              b->kind() + ": compare dumps with dumps, "
                                                              "checkpoints with checkpoints"));
  }
  const replay::TensorDumpDiff diff =
      replay::DiffTensorSets(a->Tensors(), b->Tensors(), static_cast<size_t>(first_n));
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
    {"diff-tensor", "compare two tensor dumps or two checkpoints tensor by tensor (bitwise, abs, ULP)",
     RunDiffTensor,
     {kExitOk, kExitUsage, kExitIO, kExitInvalidData, kExitDivergence}});

}  // namespace dgrr::cli
