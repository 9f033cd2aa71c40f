// Naming files a command has already deleted: bisect compares two replays in
// a scratch directory it removes before printing, so its report must not
// hand the user paths into it (issue 15: a report names only files that
// exist). Each mention of such a directory becomes a label that says so.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dgrr::cli {

// `dir`, or a path under it, in `text` replaced by `label` (the rest of the
// path kept: "LABEL/rank0.trace"). `dir` holds no trailing '/'.
std::string RelabelDirectory(const std::string& text, const std::string& dir, const std::string& label);

// The same for every string in `j` that is `dir` or a path under it; other
// strings, keys and structure are left as they are. Returns how many changed.
size_t RelabelDirectory(nlohmann::ordered_json& j, const std::string& dir, const std::string& label);

}  // namespace dgrr::cli
