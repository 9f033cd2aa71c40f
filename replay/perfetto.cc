#include "replay/perfetto.h"

#include <algorithm>
#include <set>

#include "base/coding.h"
#include "base/file.h"
#include "trace_format/record.h"

namespace dgrr::replay {
namespace {

using nlohmann::ordered_json;

constexpr int kPidA = 1;
constexpr int kPidB = 2;

std::string NameOf(const NameTable& names, const BoundaryItem& item) {
  auto it = names.find(item.key.name_hash);
  return it == names.end() ? "?" : it->second;
}

ordered_json Metadata(const char* what, int pid, std::optional<uint32_t> tid,
                      const std::string& name) {
  ordered_json e = {{"ph", "M"}, {"name", what}, {"pid", pid}};
  if (tid) e["tid"] = *tid;
  e["args"] = {{"name", name}};
  return e;
}

// How a slice's pair compared: its category, the prefix of its name and its
// colour for viewers that honour "cname" (chrome://tracing; Perfetto colours
// by name, hence the prefix).
struct SliceLook {
  const char* category;
  const char* name_prefix;
  const char* cname;
};
SliceLook LookOf(std::string_view status) {
  if (status == "equal") return {"boundary.equal", "", "good"};
  if (status == "differs") return {"boundary.differs", "DIFF ", "terrible"};
  return {"boundary.unpaired", "UNPAIRED ", "grey"};
}

ordered_json Slice(int pid, uint64_t position, const BoundaryItem& item, const std::string& name,
                   const char* status) {
  const SliceLook look = LookOf(status);
  return {{"ph", "X"},
          {"cat", look.category},
          {"name", look.name_prefix + name},
          {"cname", look.cname},
          {"pid", pid},
          {"tid", item.key.rank},
          {"ts", position},
          {"dur", 1},
          {"args",
           {{"boundary", name},
            {"position", position},  // = ts: logical order, not time
            {"step", item.step},
            {"rank", item.key.rank},
            {"phase", std::string(trace::PhaseName(static_cast<trace::Phase>(item.key.phase)))},
            {"first_example", item.key.first_example},
            {"example_count", item.key.example_count},
            {"record_index", item.record_index},
            {"xor64", Hex64(item.xor64)},
            {"xxh3", Hex64(item.xxh3)},
            {"status", status}}}};
}

ordered_json DivergenceArgs(const CompareResult& r) {
  const ReportedPair& d = *r.first_divergence;
  return {{"step", d.a.record.step},
          {"rank_a", d.a.record.rank},
          {"rank_b", d.b.record.rank},
          {"phase", std::string(trace::PhaseName(d.a.record.phase))},
          {"boundary", d.a.name},
          {"ordinal", d.ordinal},
          {"record_index_a", d.a.record_index},
          {"record_index_b", d.b.record_index},
          {"xor64_a", Hex64(d.a.record.xor64)},
          {"xxh3_a", Hex64(d.a.record.xxh3)},
          {"xor64_b", Hex64(d.b.record.xor64)},
          {"xxh3_b", Hex64(d.b.record.xxh3)},
          {"kind", DivergenceKindName(r.certify.kind)},
          {"difference", DifferenceName(d.difference)},
          {"earlier_uncompared", r.earlier_uncompared}};
}

}  // namespace

PerfettoWindow PerfettoWindowOf(const CompareResult& r, const PerfettoOptions& options) {
  // The window of pairs shown: max_pairs of them, centred on the divergence.
  const uint64_t total = r.alignment.pairs.size();
  const uint64_t cap = options.max_pairs == 0 ? std::max<uint64_t>(1, total) : options.max_pairs;
  const uint64_t centre = r.certify.first_divergence ? r.certify.first_divergence->ordinal : 0;
  uint64_t first = centre > cap / 2 ? centre - cap / 2 : 0;
  const uint64_t last = std::min<uint64_t>(total, first + cap);
  if (last - first < cap) first = last > cap ? last - cap : 0;
  return {first, last, total};
}

StatusOr<ordered_json> PerfettoJson(const CompareResult& r, const PerfettoOptions& options) {
  const std::vector<AlignedPair>& pairs = r.alignment.pairs;
  if (!r.has_sequences) {
    return Status::InvalidArgument("the Perfetto view needs the sequences (keep_sequences)");
  }
  const PerfettoWindow window = PerfettoWindowOf(r, options);
  const uint64_t first = window.first, last = window.last;
  // With nothing paired, the start of each side is shown under the same cap.
  const uint64_t cap = options.max_pairs == 0 ? UINT64_MAX : options.max_pairs;

  // Boundaries shown on each side: the window's pairs plus the unpaired
  // boundaries lying between them.
  uint64_t lo_a = UINT64_MAX, hi_a = 0, lo_b = UINT64_MAX, hi_b = 0;
  for (uint64_t k = first; k < last; ++k) {
    lo_a = std::min(lo_a, pairs[k].index_a);
    hi_a = std::max(hi_a, pairs[k].index_a + 1);
    lo_b = std::min(lo_b, pairs[k].index_b);
    hi_b = std::max(hi_b, pairs[k].index_b + 1);
  }
  if (first == last) {  // nothing paired: show the start of both sides
    lo_a = lo_b = 0;
    hi_a = std::min<uint64_t>(r.items_a.size(), cap);
    hi_b = std::min<uint64_t>(r.items_b.size(), cap);
  }
  std::vector<const char*> status_a(hi_a - lo_a, "only in A"), status_b(hi_b - lo_b, "only in B");
  std::optional<uint64_t> divergent_a, divergent_b;
  if (r.certify.first_divergence) {
    divergent_a = r.certify.first_divergence->index_a;
    divergent_b = r.certify.first_divergence->index_b;
  }
  for (uint64_t k = first; k < last; ++k) {
    const BoundaryItem& a = r.items_a[pairs[k].index_a];
    const BoundaryItem& b = r.items_b[pairs[k].index_b];
    const char* s = SameContent(a, b) ? "equal" : "differs";
    status_a[pairs[k].index_a - lo_a] = s;
    status_b[pairs[k].index_b - lo_b] = s;
  }

  ordered_json events = ordered_json::array();
  // The viewer labels its axis in time units; the process names say what it is.
  constexpr const char* kAxisNote = " (time axis = boundary order, not time)";
  events.push_back(Metadata("process_name", kPidA, std::nullopt, "A: " + r.a.path + kAxisNote));
  events.push_back(Metadata("process_name", kPidB, std::nullopt, "B: " + r.b.path + kAxisNote));
  std::set<uint32_t> ranks_a, ranks_b;
  for (uint64_t i = lo_a; i < hi_a; ++i) ranks_a.insert(r.items_a[i].key.rank);
  for (uint64_t j = lo_b; j < hi_b; ++j) ranks_b.insert(r.items_b[j].key.rank);
  for (uint32_t rank : ranks_a) {
    events.push_back(Metadata("thread_name", kPidA, rank, "rank " + std::to_string(rank)));
  }
  for (uint32_t rank : ranks_b) {
    events.push_back(Metadata("thread_name", kPidB, rank, "rank " + std::to_string(rank)));
  }
  for (uint64_t i = lo_a; i < hi_a; ++i) {
    events.push_back(
        Slice(kPidA, i, r.items_a[i], NameOf(r.names_a, r.items_a[i]), status_a[i - lo_a]));
  }
  for (uint64_t j = lo_b; j < hi_b; ++j) {
    events.push_back(
        Slice(kPidB, j, r.items_b[j], NameOf(r.names_b, r.items_b[j]), status_b[j - lo_b]));
  }
  // Flow arrows from each A boundary to its partner in B. A flow binds to the
  // slice enclosing its timestamp, so both ends sit inside the unit slices.
  for (uint64_t k = first; k < last; ++k) {
    const AlignedPair& p = pairs[k];
    const BoundaryItem& a = r.items_a[p.index_a];
    const BoundaryItem& b = r.items_b[p.index_b];
    events.push_back({{"ph", "s"}, {"cat", "pair"}, {"name", "pair"}, {"id", k},
                      {"pid", kPidA}, {"tid", a.key.rank}, {"ts", p.index_a + 0.5}});
    events.push_back({{"ph", "f"}, {"bp", "e"}, {"cat", "pair"}, {"name", "pair"}, {"id", k},
                      {"pid", kPidB}, {"tid", b.key.rank}, {"ts", p.index_b + 0.5}});
  }
  if (r.first_divergence) {
    const ordered_json args = DivergenceArgs(r);
    const std::string name = "first divergence: " + r.first_divergence->a.name;
    events.push_back({{"ph", "i"}, {"s", "t"}, {"cat", "divergence"}, {"name", name},
                      {"pid", kPidA}, {"tid", r.first_divergence->a.record.rank},
                      {"ts", *divergent_a}, {"args", args}});
    events.push_back({{"ph", "i"}, {"s", "t"}, {"cat", "divergence"}, {"name", name},
                      {"pid", kPidB}, {"tid", r.first_divergence->b.record.rank},
                      {"ts", *divergent_b}, {"args", args}});
  }
  ordered_json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ns";
  doc["otherData"] = {{"schema", "dgrr.compare.perfetto/2"},
                      {"a", r.a.path},
                      {"b", r.b.path},
                      {"verdict", r.diverged() ? "divergence" : "no_divergence"},
                      {"time_axis",
                       "logical order: ts is the boundary's position in the compared sequence, one "
                       "unit per boundary (dur 1); it is not microseconds and says nothing of time"},
                      {"pairs_total", pairs.size()},
                      {"pairs_shown", last - first},
                      {"first_pair_shown", first},
                      {"max_pairs", options.max_pairs},
                      {"truncated", window.cut() || hi_a - lo_a < r.items_a.size() ||
                                        hi_b - lo_b < r.items_b.size()},
                      {"first_divergence",
                       r.first_divergence ? DivergenceArgs(r) : ordered_json(nullptr)}};
  return doc;
}

Status WritePerfetto(const std::string& path, const CompareResult& result,
                     const PerfettoOptions& options) {
  DGRR_ASSIGN_OR_RETURN(ordered_json doc, PerfettoJson(result, options));
  const std::string text =
      doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  return WriteFileAtomically(path, text);
}

}  // namespace dgrr::replay
