// The report page's script and style sheet (replay/report_assets/report.js,
// report.css), embedded in the library at build time by
// cmake/EmbedText.cmake: the page stays one self-contained file, and the
// JavaScript and CSS stay files of their own that an editor, a linter and a
// JS engine read as such (tests/replay/report_assets_test.cmake).
//
// Each view is the file's bytes exactly; ReportHtml writes them inside
// <style> and <script> after a newline.
#pragma once

#include <string_view>

namespace dgrr::replay {

// Builds the charts from the page's embedded data (the JSON in the script
// element dgrr-report-data, docs/report.md). Plain DOM and SVG, no library:
// the page must render offline.
std::string_view ReportScript();

std::string_view ReportStyle();

}  // namespace dgrr::replay
