#include "replay/report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "base/coding.h"
#include "base/dtype.h"
#include "base/file.h"
#include "base/version.h"
#include "replay/report_assets.h"
#include "trace_format/reader.h"
#include "trace_format/record.h"
#include "trace_format/shape_text.h"

namespace dgrr::replay {
namespace {

using nlohmann::ordered_json;

// ---------------------------------------------------------------- text

// Names, paths and config values are arbitrary bytes: each byte sequence that
// is not valid UTF-8 becomes U+FFFD, so the page is always valid UTF-8.
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && len > 1) {
      // Overlong forms, surrogates and values past U+10FFFF are not UTF-8 either.
      uint32_t cp = c & (0x7f >> len);
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
      const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min_cp[len] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  return out;
}

std::string Html(std::string_view raw) {
  const std::string s = ValidUtf8(raw);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

using trace::ShapeText;

std::string NameOf(const NameTable& names, uint64_t name_hash) {
  auto it = names.find(name_hash);
  return it == names.end() ? "?" : it->second;
}

// ---------------------------------------------------------------- losses

std::optional<double> LossValue(const trace::StepRecord& s) {
  if (s.loss_dtype == DType::kF32) {
    float f;
    const auto bits = static_cast<uint32_t>(s.loss_bits);
    std::memcpy(&f, &bits, 4);
    return f;
  }
  if (s.loss_dtype == DType::kF64) {
    double d;
    std::memcpy(&d, &s.loss_bits, 8);
    return d;
  }
  return std::nullopt;
}

// At most `max_points` of `steps`, evenly spaced, the last always kept.
ordered_json CurvePoints(const std::vector<StepLoss>& steps, uint32_t max_points, uint64_t* stride) {
  *stride = std::max<uint64_t>(1, (steps.size() + std::max<uint32_t>(1, max_points) - 1) /
                                      std::max<uint32_t>(1, max_points));
  ordered_json points = ordered_json::array();
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i % *stride != 0 && i + 1 != steps.size()) continue;
    const auto& loss = steps[i].loss;
    // NaN and infinities have no JSON form: a gap in the curve.
    const bool finite = loss && std::isfinite(*loss);
    points.push_back({steps[i].step, finite ? ordered_json(*loss) : ordered_json(nullptr)});
  }
  return points;
}

ordered_json LossData(const CompareResult& r, const ReportOptions& options,
                      const std::vector<StepLoss>& a, const std::vector<StepLoss>& b) {
  uint64_t stride_a = 1, stride_b = 1;
  ordered_json loss;
  loss["trace_a"] = ValidUtf8(r.a.trace_paths.empty() ? "" : r.a.trace_paths.front());
  loss["trace_b"] = ValidUtf8(r.b.trace_paths.empty() ? "" : r.b.trace_paths.front());
  loss["a"] = CurvePoints(a, options.max_curve_points, &stride_a);
  loss["b"] = CurvePoints(b, options.max_curve_points, &stride_b);
  loss["steps_a"] = a.size();
  loss["steps_b"] = b.size();
  loss["stride_a"] = stride_a;
  loss["stride_b"] = stride_b;
  // The first step whose loss bits (parameter fingerprint) differ, over every
  // step both runs recorded, before any thinning.
  std::map<uint64_t, const StepLoss*> by_step;
  for (const StepLoss& s : b) by_step[s.step] = &s;
  std::optional<uint64_t> first_loss, first_params;
  for (const StepLoss& s : a) {
    auto it = by_step.find(s.step);
    if (it == by_step.end()) continue;
    if (!first_loss && s.loss_bits != it->second->loss_bits) first_loss = s.step;
    if (!first_params && (s.params_xor64 != it->second->params_xor64 ||
                          s.params_xxh3 != it->second->params_xxh3)) {
      first_params = s.step;
    }
  }
  loss["first_loss_difference_step"] = first_loss ? ordered_json(*first_loss) : ordered_json(nullptr);
  loss["first_params_difference_step"] =
      first_params ? ordered_json(*first_params) : ordered_json(nullptr);
  return loss;
}

// ---------------------------------------------------------------- the map

struct Cell {
  uint32_t compared = 0;    // aligned pairs
  uint32_t differing = 0;   // of them, pairs whose fingerprints differ
  uint32_t uncompared = 0;  // boundaries of either side never compared
};

struct RowKey {
  uint64_t name_hash;
  uint32_t rank;
  bool operator==(const RowKey&) const = default;
};
struct RowKeyHash {
  size_t operator()(const RowKey& k) const { return k.name_hash ^ (uint64_t{k.rank} * 0x9e3779b97f4a7c15ull); }
};

struct Row {
  std::string name;
  uint32_t rank = 0;
  uint64_t name_first = 0;  // first position of the name in the sequences (A, then B)
  uint64_t first = 0;       // first position of this row
};

class MapBuilder {
 public:
  MapBuilder(const CompareResult& r, const ReportOptions& o) : r_(r), o_(o) {}

  ordered_json Build() {
    CollectSteps();
    CollectRows();
    FillCells();
    return Emit();
  }

 private:
  void CollectSteps() {
    std::set<uint64_t> steps;
    for (const BoundaryItem& it : r_.items_a) steps.insert(it.step);
    for (const BoundaryItem& it : r_.items_b) steps.insert(it.step);
    steps_.assign(steps.begin(), steps.end());
    const uint64_t cap = std::max<uint32_t>(1, o_.max_map_columns);
    steps_per_column_ = std::max<uint64_t>(1, (steps_.size() + cap - 1) / cap);
    columns_ = steps_.empty() ? 0 : (steps_.size() + steps_per_column_ - 1) / steps_per_column_;
  }
  size_t ColumnOf(uint64_t step) const {
    return (std::lower_bound(steps_.begin(), steps_.end(), step) - steps_.begin()) / steps_per_column_;
  }

  uint32_t RowOf(const BoundaryItem& item, const NameTable& names, uint64_t position) {
    const RowKey key{item.key.name_hash, item.key.rank};
    auto [it, added] = row_ids_.try_emplace(key, static_cast<uint32_t>(rows_.size()));
    if (added) {
      auto [name_it, new_name] = name_first_.try_emplace(item.key.name_hash, position);
      rows_.push_back({NameOf(names, item.key.name_hash), item.key.rank, name_it->second, position});
    }
    return it->second;
  }

  void CollectRows() {
    row_a_.resize(r_.items_a.size());
    row_b_.resize(r_.items_b.size());
    for (size_t i = 0; i < r_.items_a.size(); ++i) row_a_[i] = RowOf(r_.items_a[i], r_.names_a, i);
    const uint64_t offset = r_.items_a.size();
    for (size_t j = 0; j < r_.items_b.size(); ++j) {
      row_b_[j] = RowOf(r_.items_b[j], r_.names_b, offset + j);
    }
    // Layers in program order, the ranks of one layer side by side.
    order_.resize(rows_.size());
    for (size_t k = 0; k < rows_.size(); ++k) order_[k] = static_cast<uint32_t>(k);
    std::sort(order_.begin(), order_.end(), [&](uint32_t x, uint32_t y) {
      const Row& a = rows_[x];
      const Row& b = rows_[y];
      return std::tie(a.name_first, a.rank, a.first) < std::tie(b.name_first, b.rank, b.first);
    });
    const uint64_t cap = std::max<uint32_t>(1, o_.max_map_rows);
    rows_per_group_ = std::max<uint64_t>(1, (rows_.size() + cap - 1) / cap);
    group_of_row_.resize(rows_.size());
    for (size_t k = 0; k < order_.size(); ++k) group_of_row_[order_[k]] = k / rows_per_group_;
    groups_ = rows_.empty() ? 0 : (rows_.size() + rows_per_group_ - 1) / rows_per_group_;
  }

  Cell& At(uint32_t row, uint64_t step) { return cells_[group_of_row_[row] * columns_ + ColumnOf(step)]; }

  void FillCells() {
    cells_.assign(groups_ * columns_, Cell{});
    differing_by_column_.assign(columns_, 0);
    ranks_by_column_.assign(columns_, {});
    for (const AlignedPair& p : r_.alignment.pairs) {
      const BoundaryItem& a = r_.items_a[p.index_a];
      const BoundaryItem& b = r_.items_b[p.index_b];
      Cell& cell = At(row_a_[p.index_a], a.step);
      ++cell.compared;
      if (!SameContent(a, b)) {  // fingerprints, dtype or shape
        ++cell.differing;
        const size_t column = ColumnOf(a.step);
        ++differing_by_column_[column];
        ranks_by_column_[column].insert(a.key.rank);
      }
    }
    for (uint64_t i : r_.alignment.unmatched_a) ++At(row_a_[i], r_.items_a[i].step).uncompared;
    for (uint64_t j : r_.alignment.unmatched_b) ++At(row_b_[j], r_.items_b[j].step).uncompared;
  }

  ordered_json Emit() const {
    ordered_json map;
    map["rows_total"] = rows_.size();
    map["rows_per_group"] = rows_per_group_;
    map["steps_total"] = steps_.size();
    map["steps_per_column"] = steps_per_column_;
    ordered_json columns = ordered_json::array();
    for (size_t c = 0; c < columns_; ++c) {
      const size_t last = std::min(steps_.size(), (c + 1) * steps_per_column_) - 1;
      std::set<uint32_t> ranks = ranks_by_column_[c];
      columns.push_back({{"first_step", steps_[c * steps_per_column_]},
                         {"last_step", steps_[last]},
                         {"differing", differing_by_column_[c]},
                         {"ranks_differing", ordered_json(std::vector<uint32_t>(ranks.begin(), ranks.end()))}});
    }
    map["columns"] = std::move(columns);
    ordered_json rows = ordered_json::array();
    for (size_t g = 0; g < groups_; ++g) {
      const size_t begin = g * rows_per_group_;
      const size_t end = std::min(order_.size(), begin + rows_per_group_);
      const Row& head = rows_[order_[begin]];
      const Row& tail = rows_[order_[end - 1]];
      ordered_json row;
      row["name"] = ValidUtf8(head.name);
      if (end - begin > 1) row["last_name"] = ValidUtf8(tail.name);
      row["rank"] = head.rank;
      if (tail.rank != head.rank) row["last_rank"] = tail.rank;
      row["first"] = head.first;
      ordered_json cells = ordered_json::array();
      for (size_t c = 0; c < columns_; ++c) {
        const Cell& cell = cells_[g * columns_ + c];
        if (cell.compared == 0 && cell.uncompared == 0) continue;
        cells.push_back({c, cell.compared, cell.differing, cell.uncompared});
      }
      row["cells"] = std::move(cells);
      rows.push_back(std::move(row));
    }
    map["rows"] = std::move(rows);
    if (r_.certify.first_divergence) {
      const PairView& d = *r_.certify.first_divergence;
      map["divergent_row"] = group_of_row_[row_a_[d.index_a]];
      map["divergent_column"] = ColumnOf(d.a.step);
    }
    return map;
  }

  const CompareResult& r_;
  const ReportOptions& o_;
  std::vector<uint64_t> steps_;
  uint64_t steps_per_column_ = 1;
  size_t columns_ = 0;
  std::unordered_map<RowKey, uint32_t, RowKeyHash> row_ids_;
  std::unordered_map<uint64_t, uint64_t> name_first_;
  std::vector<Row> rows_;
  std::vector<uint32_t> row_a_, row_b_;
  std::vector<uint32_t> order_;         // rows sorted by layer, then rank
  std::vector<uint64_t> group_of_row_;  // row -> shown row (merged when over the cap)
  uint64_t rows_per_group_ = 1;
  size_t groups_ = 0;
  std::vector<Cell> cells_;             // groups_ x columns_
  std::vector<uint64_t> differing_by_column_;
  std::vector<std::set<uint32_t>> ranks_by_column_;
};

// ---------------------------------------------------------------- the page

// The certified steps are the first `certified_steps` distinct steps of A's
// prefix; the last of them, for shading the loss chart.
std::optional<uint64_t> LastCertifiedStep(const CompareResult& r) {
  if (r.certify.certified_steps == 0) return std::nullopt;
  uint64_t runs = 0;
  std::optional<uint64_t> last;
  for (const AlignedPair& p : r.alignment.pairs) {
    const uint64_t step = r.items_a[p.index_a].step;
    if (!last || *last != step) {
      if (++runs > r.certify.certified_steps) break;
      last = step;
    }
  }
  return last;
}

std::string VerdictHtml(const CompareResult& r) {
  std::ostringstream o;
  const CertifyReport& c = r.certify;
  if (r.first_divergence) {
    const ReportedPair& d = *r.first_divergence;
    o << "<p class=\"verdict diverged\" id=\"verdict\">The runs diverge at step "
      << d.a.record.step << ": boundary <code>" << Html(d.a.name) << "</code> on rank "
      << d.a.record.rank << " (pair #" << d.ordinal << ") is the first "
      << (r.earlier_uncompared > 0 ? "compared pair " : "")
      << (d.difference == Difference::kValues ? std::string("whose fingerprints differ")
                                              : "that differs, in its tensor type (" +
                                                    Html(DifferenceText(d)) + ")")
      << "; " << Plural(c.differing, "pair differs", "pairs differ") << " in all.";
    if (r.earlier_uncompared > 0) {
      o << " <span id=\"earlier-uncompared\">Caution: "
        << Plural(r.earlier_uncompared, "boundary", "boundaries")
        << " before it could not be compared; the true first divergence may be among them.</span>";
    }
    o << "</p>\n";
  } else if (r.coverage.uncompared() > 0) {
    o << "<p class=\"verdict uncovered\" id=\"verdict\">No compared pair differs, but "
      << Plural(r.coverage.uncompared(), "boundary was", "boundaries were")
      << " never compared: the runs are not shown identical past the certified prefix.</p>\n";
  } else {
    o << "<p class=\"verdict identical\" id=\"verdict\">The runs are identical: all "
      << Plural(c.pairs, "pair", "pairs") << " of boundaries agree bit for bit ("
      << Plural(c.certified_steps, "step", "steps") << " certified).</p>\n";
  }
  return o.str();
}

std::string DifferencesTable(const char* id, const char* what, bool available, bool digests_differ,
                             const std::vector<KeyDifference>& diffs) {
  std::ostringstream o;
  o << "<h3>" << what << "</h3>\n";
  if (!available) {
    o << "<p id=\"" << id << "\">not available for both runs (trace header digests "
      << (digests_differ ? "differ" : "agree") << ")</p>\n";
    return o.str();
  }
  if (diffs.empty()) {
    o << "<p id=\"" << id << "\">identical</p>\n";
    return o.str();
  }
  o << "<table id=\"" << id << "\"><tr><th>key</th><th>A</th><th>B</th></tr>\n";
  for (const KeyDifference& d : diffs) {
    o << "<tr><td><code>" << Html(d.key) << "</code></td><td>"
      << (d.a ? "<code>" + Html(*d.a) + "</code>" : "<i>absent</i>") << "</td><td>"
      << (d.b ? "<code>" + Html(*d.b) + "</code>" : "<i>absent</i>") << "</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

std::string PairRow(const ReportedPair& p, bool divergent) {
  const trace::BoundaryRecord& a = p.a.record;
  const trace::BoundaryRecord& b = p.b.record;
  std::ostringstream o;
  const bool differs = p.status == PairStatus::kDiffers;
  o << "<tr class=\"" << (divergent ? "divergent " : "") << (differs ? "differs" : "equal") << "\">"
    << "<td>#" << p.ordinal << "</td><td>" << (differs ? "differs" : "equal") << "</td><td>" << a.step
    << "</td><td>" << a.rank;
  if (b.rank != a.rank) o << "/" << b.rank;  // ranks paired by example when world sizes differ
  o << "</td><td>"
    << trace::PhaseName(a.phase) << " " << trace::DirectionName(a.direction) << "</td><td><code>"
    << Html(p.a.name) << "</code></td><td>" << DTypeName(a.dtype) << ShapeText(a);
  if (p.difference == Difference::kDtype || p.difference == Difference::kShape ||
      p.difference == Difference::kDtypeAndShape) {
    o << " &rarr; " << DTypeName(b.dtype) << ShapeText(b);  // the tensor type changed
  }
  o << "</td><td>"
    << a.first_example << "+" << a.example_count << "</td><td class=\"fp\">" << Hex64(a.xor64) << "<br>"
    << Hex64(a.xxh3) << "</td><td class=\"fp\">" << Hex64(b.xor64) << "<br>" << Hex64(b.xxh3)
    << "</td></tr>\n";
  return o.str();
}

std::string DivergenceHtml(const CompareResult& r) {
  std::ostringstream o;
  o << "<section id=\"divergence\"><h2>First divergent boundary</h2>\n";
  if (!r.first_divergence) {
    o << "<p>None: no aligned pair has differing fingerprints.</p></section>\n";
    return o.str();
  }
  const ReportedPair& d = *r.first_divergence;
  o << "<p>Pair #" << d.ordinal << ", step " << d.a.record.step << ", rank " << d.a.record.rank
    << ": <code id=\"divergent-name\">" << Html(d.a.name) << "</code>. ";
  switch (r.certify.kind) {
    case DivergenceKind::kIsolated: o << "An isolated divergence: the pairs right after it agree again."; break;
    case DivergenceKind::kPropagates:
      o << "The divergence propagates: " << Plural(r.certify.later_differing, "later pair differs", "later pairs differ")
        << ".";
      break;
    default: o << "It is the last pair compared: nothing after it to judge by."; break;
  }
  if (d.difference != Difference::kValues) {
    o << " <span id=\"divergence-difference\">It differs in its tensor type: " << Html(DifferenceText(d))
      << " (A &rarr; B).</span>";
  }
  o << "</p>\n<p class=\"records\">A: record #" << d.a.record_index << " of <code>" << Html(d.a.trace)
    << "</code><br>B: record #" << d.b.record_index << " of <code>" << Html(d.b.trace) << "</code></p>\n";
  if (r.earlier_uncompared > 0) {
    o << "<p class=\"verdict uncovered\" id=\"divergence-earlier\">This is the first <em>compared</em> difference: "
      << Plural(r.earlier_uncompared, "boundary", "boundaries")
      << " before it could not be compared, and the true first divergence may be among them";
    if (r.earlier_uncompared > r.earlier_uncompared_listed.size()) {
      o << " (the first " << r.earlier_uncompared_listed.size() << " listed)";
    }
    o << ":</p>\n<ul class=\"earlier-uncompared\">\n";
    for (const UncomparedBoundary& u : r.earlier_uncompared_listed) {
      const trace::BoundaryRecord& x = u.boundary.record;
      o << "<li>" << u.side << " #" << u.boundary.index << " " << UnpairedName(u.why) << ": step " << x.step
        << ", rank " << x.rank << ", " << trace::PhaseName(x.phase) << " " << trace::DirectionName(x.direction)
        << " <code>" << Html(u.boundary.name) << "</code> " << DTypeName(x.dtype) << ShapeText(x) << ", record #"
        << u.boundary.record_index << "</li>\n";
    }
    o << "</ul>\n";
  }
  o << "<table class=\"context\"><tr><th>pair</th><th>status</th><th>step</th><th>rank</th><th>phase</th>"
       "<th>boundary</th><th>tensor</th><th>examples</th><th>A xor64 / xxh3</th><th>B xor64 / xxh3</th></tr>\n";
  for (const ReportedPair& p : r.before) o << PairRow(p, false);
  o << PairRow(d, true);
  for (const ReportedPair& p : r.after) o << PairRow(p, false);
  o << "</table></section>\n";
  return o.str();
}

std::string PrefixHtml(const CompareResult& r) {
  const CertifyReport& c = r.certify;
  std::ostringstream o;
  o << "<section id=\"prefix\"><h2>Certified prefix</h2>\n<p id=\"certified\">"
    << Plural(c.certified_pairs, "pair", "pairs") << " of " << c.pairs << " aligned, "
    << Plural(c.certified_steps, "whole step", "whole steps")
    << " agree bit for bit";
  if (c.stopped_at_uncompared) o << "; the prefix stops at the first boundary that was never compared";
  o << ". Alignment: " << (r.lockstep ? "lockstep" : "schedule-tolerant mapper") << "; "
    << (r.coverage.uncompared() == 0 ? std::string("every boundary compared")
                                      : Plural(r.coverage.uncompared(), "boundary", "boundaries") +
                                            " never compared (" + std::to_string(r.coverage.no_counterpart) +
                                            " without counterpart, " + std::to_string(r.coverage.outside_reach) +
                                            " out of reach, " + std::to_string(r.coverage.ambiguous) +
                                            " ambiguous)")
    << ".</p></section>\n";
  return o.str();
}

std::string LimitsHtml(const ordered_json& data) {
  const ordered_json& map = data["map"];
  const ordered_json& loss = data["loss"];
  std::ostringstream o;
  o << "<section id=\"limits\"><h2>What this page leaves out</h2><ul>\n";
  bool any = false;
  if (map["steps_per_column"].get<uint64_t>() > 1) {
    o << "<li id=\"limit-steps\">The map aggregates " << map["steps_per_column"].get<uint64_t>()
      << " consecutive steps per column (" << map["steps_total"].get<uint64_t>() << " steps).</li>\n";
    any = true;
  }
  if (map["rows_per_group"].get<uint64_t>() > 1) {
    o << "<li id=\"limit-rows\">The map merges " << map["rows_per_group"].get<uint64_t>()
      << " consecutive rows into one (" << map["rows_total"].get<uint64_t>() << " boundary rows).</li>\n";
    any = true;
  }
  for (const char* side : {"a", "b"}) {
    const uint64_t stride = loss[std::string("stride_") + side].get<uint64_t>();
    if (stride > 1) {
      o << "<li>Loss curve " << (side[0] == 'a' ? 'A' : 'B') << " shows every " << stride << "th of "
        << loss[std::string("steps_") + side].get<uint64_t>() << " steps.</li>\n";
      any = true;
    }
  }
  if (!any) o << "<li id=\"limit-none\">Nothing: every step and every boundary row is shown.</li>\n";
  o << "<li>Per-example boundaries of one name and rank share a row; a cell counts its pairs.</li>\n"
       "<li>The loss curves are each side's first trace (rank 0 of a run directory).</li>\n"
       "</ul></section>\n";
  return o.str();
}

// JSON inside <script>: '<' never occurs outside a string, and inside one
// \u003c means the same, so no "</script>" or "<!--" can end the block early.
std::string ScriptSafeJson(const ordered_json& data) {
  const std::string text = data.dump(-1, ' ', true, ordered_json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

StatusOr<std::vector<StepLoss>> ReadStepLosses(const std::string& trace_path) {
  DGRR_ASSIGN_OR_RETURN(auto reader, trace::TraceReader::Open(trace_path));
  std::map<uint64_t, StepLoss> steps;  // a step recorded twice keeps its last record
  trace::Record record;
  for (bool done = false;;) {
    DGRR_RETURN_IF_ERROR(reader->Next(&record, &done));
    if (done) break;
    const auto* s = std::get_if<trace::StepRecord>(&record.body);
    if (s == nullptr || s->kind != trace::StepKind::kEnd) continue;
    steps[s->step] = {s->step, LossValue(*s), s->loss_bits, s->params_xor64, s->params_xxh3};
  }
  std::vector<StepLoss> out;
  out.reserve(steps.size());
  for (auto& [step, loss] : steps) out.push_back(loss);
  return out;
}

namespace {

// The sides, the verdict, the first divergence and the certified prefix: what
// the page's data and the --json summary share.
void AddVerdict(const CompareResult& r, ordered_json& data) {
  for (const auto& [key, side] : {std::pair{"a", &r.a}, std::pair{"b", &r.b}}) {
    data[key] = {{"path", ValidUtf8(side->path)}, {"ranks", side->world_size}, {"boundaries", side->boundaries}};
  }
  data["verdict"] = r.diverged() ? "divergence" : "no_divergence";
  if (r.first_divergence) {
    const ReportedPair& d = *r.first_divergence;
    data["divergence"] = {{"step", d.a.record.step}, {"rank", d.a.record.rank},
                          {"rank_b", d.b.record.rank}, {"boundary", ValidUtf8(d.a.name)},
                          {"ordinal", d.ordinal}, {"kind", DivergenceKindName(r.certify.kind)},
                          {"difference", DifferenceName(d.difference)},
                          {"earlier_uncompared", r.earlier_uncompared}};
  } else {
    data["divergence"] = nullptr;
  }
  const std::optional<uint64_t> last_certified = LastCertifiedStep(r);
  data["certified"] = {{"pairs", r.certify.certified_pairs},
                       {"pairs_total", r.certify.pairs},
                       {"steps", r.certify.certified_steps},
                       {"last_step", last_certified ? ordered_json(*last_certified) : ordered_json(nullptr)}};
}

}  // namespace

StatusOr<ordered_json> ReportData(const CompareResult& r, const ReportOptions& options) {
  if (!r.has_sequences) {
    return Status::InvalidArgument("the report needs the compared sequences (keep_sequences)");
  }
  std::vector<StepLoss> loss_a, loss_b;
  if (!r.a.trace_paths.empty()) { DGRR_ASSIGN_OR_RETURN(loss_a, ReadStepLosses(r.a.trace_paths.front())); }
  if (!r.b.trace_paths.empty()) { DGRR_ASSIGN_OR_RETURN(loss_b, ReadStepLosses(r.b.trace_paths.front())); }
  ordered_json data;
  data["schema"] = "dgrr.report/1";
  data["dgrr_version"] = DGRR_VERSION_STRING;
  AddVerdict(r, data);
  data["loss"] = LossData(r, options, loss_a, loss_b);
  data["map"] = MapBuilder(r, options).Build();
  return data;
}

ordered_json ReportSummaryJson(const CompareResult& r, const std::string& report_path) {
  ordered_json summary;
  summary["schema"] = "dgrr.report-summary/1";
  summary["report"] = ValidUtf8(report_path);
  AddVerdict(r, summary);
  // null when a side has no config.json / env.json to compare.
  auto count = [](bool available, size_t n) { return available ? ordered_json(n) : ordered_json(nullptr); };
  summary["config_differences"] = count(r.configs_available, r.config_differences.size());
  summary["environment_differences"] = count(r.environments_available, r.environment_differences.size());
  return summary;
}

StatusOr<std::string> ReportHtml(const CompareResult& r, const ReportOptions& options) {
  DGRR_ASSIGN_OR_RETURN(ordered_json data, ReportData(r, options));
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
       "<meta name=\"generator\" content=\"dgrr " DGRR_VERSION_STRING " report (dgrr.report/1)\">\n"
       "<title>dgrr report: "
    << Html(r.a.path) << " vs " << Html(r.b.path) << "</title>\n<style>\n" << ReportStyle() << "</style></head>\n<body>\n";
  o << "<h1>dgrr report</h1>\n<p class=\"runs\">A: <code>" << Html(r.a.path) << "</code> ("
    << Plural(r.a.world_size, "rank", "ranks") << ", " << Plural(r.a.boundaries, "boundary", "boundaries")
    << ")<br>B: <code>" << Html(r.b.path) << "</code> (" << Plural(r.b.world_size, "rank", "ranks") << ", "
    << Plural(r.b.boundaries, "boundary", "boundaries") << ")</p>\n";
  o << VerdictHtml(r);
  o << "<section id=\"differences\"><h2>Config and environment differences</h2>\n"
    << DifferencesTable("config-differences", "config.json", r.configs_available, r.config_digests_differ,
                        r.config_differences)
    << DifferencesTable("environment-differences", "environment fingerprint", r.environments_available,
                        r.env_digests_differ, r.environment_differences)
    << "</section>\n";
  o << "<section id=\"loss\"><h2>Loss</h2>\n<div id=\"loss-legend\" class=\"legend\"></div>\n"
       "<div id=\"loss-chart\"><p class=\"note\">The charts need JavaScript.</p></div>\n"
       "<div id=\"loss-difference\"></div>\n"
       "<p class=\"note\" id=\"loss-notes\"></p></section>\n";
  o << PrefixHtml(r);
  o << DivergenceHtml(r);
  o << "<section id=\"map\"><h2>Boundaries by step</h2>\n"
       "<p class=\"note\">Rows are boundaries (name and rank; per-example boundaries of a name share "
       "its row), columns are steps. "
       "<span class=\"swatch\" style=\"background:#cde6cd\"></span>all pairs equal"
       "<span class=\"swatch\" style=\"background:rgb(215,75,75)\"></span>some pairs differ (darker: more)"
       "<span class=\"swatch\" style=\"background:#f0c040\"></span>never compared"
       "<span class=\"swatch\" style=\"background:#fff;border:2px solid #000\"></span>first divergence. "
       "Rows: <select id=\"map-order\"><option value=\"layer\">by layer, ranks side by side</option>"
       "<option value=\"rank\">by rank, each in program order</option></select></p>\n"
       "<p class=\"note\" id=\"map-summary\"></p>\n<div id=\"boundary-map\"></div></section>\n";
  o << LimitsHtml(data);
  o << "<p class=\"note\">Written by dgrr " DGRR_VERSION_STRING
       ". The data behind this page is the JSON in the script element <code>dgrr-report-data</code> "
       "(schema dgrr.report/1, docs/report.md).</p>\n";
  o << "<script type=\"application/json\" id=\"dgrr-report-data\">" << ScriptSafeJson(data) << "</script>\n";
  o << "<script>\n" << ReportScript() << "</script>\n</body></html>\n";
  return o.str();
}

Status WriteReport(const std::string& path, const CompareResult& result, const ReportOptions& options) {
  DGRR_ASSIGN_OR_RETURN(std::string html, ReportHtml(result, options));
  return WriteFileAtomically(path, html);
}

}  // namespace dgrr::replay
