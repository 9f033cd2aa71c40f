// dgrr inspect TRACE: the header and records of a trace, as text or as JSON
// (schema dgrr.inspect/1, docs/json/inspect.md).
#include <fnmatch.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/coding.h"
#include "base/file.h"
#include "cli/command.h"
#include "trace_format/reader.h"
#include "trace_format/shape_text.h"

namespace dgrr::cli {
namespace {

constexpr const char* kName = "inspect";
using nlohmann::ordered_json;
using namespace dgrr::trace;

struct Filter {
  std::optional<uint64_t> step;
  std::optional<uint64_t> from, to;     // step range, inclusive
  std::optional<std::string> type;      // boundary, step, event or name
  std::optional<std::string> name_glob;
};

const char* TypeOf(const RecordBody& body) {
  if (std::holds_alternative<BoundaryRecord>(body)) return "boundary";
  if (std::holds_alternative<StepRecord>(body)) return "step";
  if (std::holds_alternative<EventRecord>(body)) return "event";
  return "name";
}

std::string HexBytes(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

bool Printable(std::string_view bytes) {
  for (unsigned char c : bytes) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

std::optional<uint64_t> StepOf(const RecordBody& body) {
  if (auto* b = std::get_if<BoundaryRecord>(&body)) return b->step;
  if (auto* s = std::get_if<StepRecord>(&body)) return s->step;
  if (auto* e = std::get_if<EventRecord>(&body)) return e->step;
  return std::nullopt;
}

// --name shows only boundaries whose name matches; --step only records of
// that step. NAME records have neither, so either filter hides them.
bool Selected(const Record& record, const TraceReader& reader, const Filter& filter) {
  if (filter.type && *filter.type != TypeOf(record.body)) return false;
  if (filter.step && StepOf(record.body) != filter.step) return false;
  if (filter.from || filter.to) {
    const std::optional<uint64_t> step = StepOf(record.body);
    if (!step || (filter.from && *step < *filter.from) || (filter.to && *step > *filter.to)) return false;
  }
  if (filter.name_glob) {
    auto* b = std::get_if<BoundaryRecord>(&record.body);
    if (b == nullptr) return false;
    const std::string* name = reader.name(b->name_id);
    if (name == nullptr || ::fnmatch(filter.name_glob->c_str(), name->c_str(), 0) != 0) return false;
  }
  return true;
}


std::optional<double> LossValue(const StepRecord& s) {
  double v;
  if (s.loss_dtype == DType::kF32) {
    v = BitsToFloat(static_cast<uint32_t>(s.loss_bits));
  } else if (s.loss_dtype == DType::kF64) {
    std::memcpy(&v, &s.loss_bits, 8);
  } else {
    return std::nullopt;
  }
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::string RunIdHex(const TraceHeader& h) {
  return HexBytes(std::string_view(reinterpret_cast<const char*>(h.run_id.data()), h.run_id.size()));
}

// ---- text -----------------------------------------------------------------

void PrintHeaderText(const std::string& path, const TraceHeader& h) {
  std::cout << "trace " << path << "\n"
            << "  format_version   " << h.format_version << " (header " << kHeaderSize
            << " bytes, records " << kRecordSize << " bytes)\n"
            << "  run_id           " << RunIdHex(h) << "\n"
            << "  seed             " << h.seed << "\n"
            << "  rank             " << h.rank << " of " << h.world_size << "\n"
            << "  config_digest    " << Hex64(h.config_digest) << "\n"
            << "  env_digest       " << Hex64(h.env_digest) << "\n"
            << "  created_unix_ns  " << h.created_unix_ns << "\n";
}

std::string RecordText(const Record& record, const TraceReader& reader) {
  std::ostringstream out;
  out << "#" << record.index << " @" << RecordOffset(record.index) << " ";
  if (auto* c = std::get_if<NameChunk>(&record.body)) {
    out << "name     id=" << c->name_id << " bytes " << c->chunk_offset << ".."
        << c->chunk_offset + c->bytes.size() << " of " << c->total_length << " \""
        << (Printable(c->bytes) ? c->bytes : "<hex " + HexBytes(c->bytes) + ">") << "\"";
  } else if (auto* b = std::get_if<BoundaryRecord>(&record.body)) {
    const std::string* name = reader.name(b->name_id);
    out << "boundary step=" << b->step << " seq=" << b->seq << " " << PhaseName(b->phase) << " "
        << DirectionName(b->direction) << " " << (name ? *name : "?") << " "
        << DTypeName(b->dtype) << ShapeText(*b, LongShape::kDigest) << " bytes=" << b->byte_count
        << " examples=" << b->first_example << "+" << b->example_count
        << " xor64=" << Hex64(b->xor64) << " xxh3=" << Hex64(b->xxh3) << " rank=" << b->rank
        << " t=" << b->host_time_ns;
  } else if (auto* s = std::get_if<StepRecord>(&record.body)) {
    out << "step     step=" << s->step << " " << StepKindName(s->kind) << " t=" << s->host_time_ns;
    if (s->kind == StepKind::kEnd) {
      out << " loss=";
      if (auto v = LossValue(*s)) out << *v; else out << "-";
      out << " (" << DTypeName(s->loss_dtype) << " bits " << Hex64(s->loss_bits) << ")"
          << " params_xor64=" << Hex64(s->params_xor64) << " params_xxh3=" << Hex64(s->params_xxh3);
    }
  } else if (auto* e = std::get_if<EventRecord>(&record.body)) {
    out << "event    step=" << e->step << " " << EventKindName(e->kind) << " t=" << e->host_time_ns
        << " payload=\"" << (Printable(e->payload) ? e->payload : "<hex " + HexBytes(e->payload) + ">")
        << "\"";
  }
  return out.str();
}

// ---- JSON -----------------------------------------------------------------

ordered_json HeaderJson(const TraceHeader& h) {
  return {{"format_version", h.format_version},
          {"header_size", kHeaderSize},
          {"record_size", kRecordSize},
          {"run_id", RunIdHex(h)},
          {"seed", Hex64(h.seed)},
          {"rank", h.rank},
          {"world_size", h.world_size},
          {"config_digest", Hex64(h.config_digest)},
          {"env_digest", Hex64(h.env_digest)},
          {"created_unix_ns", h.created_unix_ns}};
}

ordered_json RecordJson(const Record& record, const TraceReader& reader) {
  ordered_json j = {{"index", record.index}, {"offset", RecordOffset(record.index)}};
  if (auto* c = std::get_if<NameChunk>(&record.body)) {
    j["type"] = "name";
    j["name_id"] = c->name_id;
    j["total_length"] = c->total_length;
    j["chunk_offset"] = c->chunk_offset;
    j["chunk"] = c->bytes;
  } else if (auto* b = std::get_if<BoundaryRecord>(&record.body)) {
    const std::string* name = reader.name(b->name_id);
    j["type"] = "boundary";
    j["step"] = b->step;
    j["seq"] = b->seq;
    j["name_id"] = b->name_id;
    j["name"] = name ? *name : "";
    j["phase"] = PhaseName(b->phase);
    j["direction"] = DirectionName(b->direction);
    j["dtype"] = DTypeName(b->dtype);
    j["rank"] = b->rank;
    j["ndim"] = b->ndim;
    j["dims"] = StoredDims(*b);
    j["shape_digest"] = b->ndim > kInlineDims ? ordered_json(Hex64(b->dims[kInlineDims - 1])) : ordered_json(nullptr);
    j["byte_count"] = b->byte_count;
    j["first_example"] = b->first_example;
    j["example_count"] = b->example_count;
    j["xor64"] = Hex64(b->xor64);
    j["xxh3"] = Hex64(b->xxh3);
    j["host_time_ns"] = b->host_time_ns;
  } else if (auto* s = std::get_if<StepRecord>(&record.body)) {
    j["type"] = "step";
    j["step"] = s->step;
    j["kind"] = StepKindName(s->kind);
    j["host_time_ns"] = s->host_time_ns;
    j["loss_dtype"] = DTypeName(s->loss_dtype);
    j["loss_bits"] = Hex64(s->loss_bits);
    auto loss = LossValue(*s);
    j["loss"] = loss ? ordered_json(*loss) : ordered_json(nullptr);
    j["params_xor64"] = Hex64(s->params_xor64);
    j["params_xxh3"] = Hex64(s->params_xxh3);
  } else if (auto* e = std::get_if<EventRecord>(&record.body)) {
    j["type"] = "event";
    j["step"] = e->step;
    j["kind"] = EventKindName(e->kind);
    j["host_time_ns"] = e->host_time_ns;
    j["payload_hex"] = HexBytes(e->payload);
    j["payload_text"] = Printable(e->payload) ? ordered_json(e->payload) : ordered_json(nullptr);
  }
  return j;
}

int RunInspect(const std::vector<std::string>& args) {
  po::options_description options("Options");
  options.add_options()("trace", po::value<std::string>()->required(), "the trace file or run directory")(
      "rank", po::value<uint32_t>()->default_value(0), "with a run directory: the rank whose trace to show")(
      "step", po::value<uint64_t>(), "show only records of step S")(
      "name", po::value<std::string>(), "show only boundaries whose name matches GLOB (fnmatch)")(
      "type", po::value<std::string>(), "show only records of this type: boundary, step, event or name")(
      "from", po::value<uint64_t>(), "show only records of steps >= S")(
      "to", po::value<uint64_t>(), "show only records of steps <= S")(
      "json", po::bool_switch(), "emit JSON (schema dgrr.inspect/1, docs/json/inspect.md)");
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  int parsed = ParseCommandLine(
      kName, "dgrr inspect TRACE|RUN_DIR [--rank R] [--step S] [--name GLOB] [--json]\n"
      "                    [--type boundary|step|event|name] [--from S] [--to S]",
      "Lists a trace's header and records, validating as it reads (as 'dgrr verify').\n"
      "Given a run directory, it lists rank R's trace (--rank, default 0).\n"
      "--type keeps one record type; --from/--to keep the records of a step range (NAME\n"
      "records have no step, so a range hides them); --step keeps the records of one step;\n"
      "--name keeps the boundaries whose name\n"
      "matches a shell glob. Either filter hides NAME records. Text output streams\n"
      "records as they are read, so a corrupt trace shows what precedes the damage\n"
      "before the error line; --json prints nothing to stdout unless the whole trace\n"
      "is valid.",
      options, positional, args, vm);
  if (parsed >= 0) return parsed;

  const std::string given = vm["trace"].as<std::string>();
  auto traces = TracesOf(given);
  if (!traces.ok()) return ReportError(kName, traces.status());
  const uint32_t rank = vm["rank"].as<uint32_t>();
  if (IsDirectory(given) && rank >= traces->size()) {
    return ReportError(kName, Status::InvalidArgument("--rank " + std::to_string(rank) + ": " + given + " has " +
                                                      std::to_string(traces->size()) + " rank traces"));
  }
  const std::string path = IsDirectory(given) ? (*traces)[rank] : given;
  Filter filter;
  if (vm.count("step")) filter.step = vm["step"].as<uint64_t>();
  if (vm.count("name")) filter.name_glob = vm["name"].as<std::string>();
  if (vm.count("from")) filter.from = vm["from"].as<uint64_t>();
  if (vm.count("to")) filter.to = vm["to"].as<uint64_t>();
  if (vm.count("type")) {
    filter.type = vm["type"].as<std::string>();
    if (*filter.type != "boundary" && *filter.type != "step" && *filter.type != "event" && *filter.type != "name") {
      return ReportError(kName, Status::InvalidArgument("--type: unknown record type '" + *filter.type +
                                                        "' (boundary, step, event, name)"));
    }
  }
  if (filter.step && (filter.from || filter.to)) {
    return ReportError(kName, Status::InvalidArgument("--step S is one step; --from/--to a range: pass one"));
  }
  if (filter.from && filter.to && *filter.from > *filter.to) {
    return ReportError(kName, Status::InvalidArgument("--from " + std::to_string(*filter.from) +
                                                      " is after --to " + std::to_string(*filter.to)));
  }
  const bool json = vm["json"].as<bool>();

  auto opened = TraceReader::Open(path);
  if (!opened.ok()) return ReportError(kName, opened.status());
  TraceReader& reader = **opened;
  if (!json) PrintHeaderText(path, reader.header());

  ordered_json records = ordered_json::array();
  uint64_t counts[4] = {0, 0, 0, 0};  // by RecordBody alternative
  Record record;
  for (;;) {
    bool done = false;
    Status s = reader.Next(&record, &done);
    if (!s.ok()) {
      std::cout.flush();
      return ReportError(kName, s);
    }
    if (done) break;
    ++counts[record.body.index()];
    if (!Selected(record, reader, filter)) continue;
    if (json) {
      records.push_back(RecordJson(record, reader));
    } else {
      std::cout << RecordText(record, reader) << "\n";
    }
  }
  std::string warning = reader.torn_tail_warning();
  if (reader.name_pending()) warning += std::string(warning.empty() ? "" : "; ") + path + ": the trace ends inside a NAME sequence";
  if (!warning.empty()) ReportWarning(kName, warning);

  if (json) {
    ordered_json out = {
        {"schema", "dgrr.inspect/1"},
        {"path", path},
        {"header", HeaderJson(reader.header())},
        {"names", reader.names()},
        {"summary",
         {{"records", reader.records_read()},
          {"names", reader.names().size()},
          {"boundaries", counts[1]},
          {"steps", counts[2]},
          {"events", counts[3]},
          {"torn_tail_bytes", reader.torn_tail_bytes()},
          {"warning", warning.empty() ? ordered_json(nullptr) : ordered_json(warning)}}},
        {"filter",
         {{"step", filter.step ? ordered_json(*filter.step) : ordered_json(nullptr)},
          {"type", filter.type ? ordered_json(*filter.type) : ordered_json(nullptr)},
          {"from", filter.from ? ordered_json(*filter.from) : ordered_json(nullptr)},
          {"to", filter.to ? ordered_json(*filter.to) : ordered_json(nullptr)},
          {"name", filter.name_glob ? ordered_json(*filter.name_glob) : ordered_json(nullptr)}}},
        {"records", std::move(records)}};
    std::cout << out.dump(2, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "records " << reader.records_read() << " (names " << reader.names().size()
              << ", boundaries " << counts[1] << ", steps " << counts[2] << ", events "
              << counts[3] << ")\n";
  }
  std::cout.flush();
  return kExitOk;
}

}  // namespace
}  // namespace dgrr::cli

DGRR_COMMAND(inspect, "list a trace's header and records (text or JSON)", dgrr::cli::RunInspect, kExitOk,
             kExitUsage, kExitIO, kExitInvalidData);
