#include "cli/deleted_paths.h"

namespace dgrr::cli {

namespace {
// Whether `text` at `at` continues `dir` as the directory itself or a path
// under it, not as a longer name ("DIR/good" must not match "DIR/goodies").
bool EndsAPathComponent(const std::string& text, size_t at) {
  return at >= text.size() || text[at] == '/' || text[at] == ' ' || text[at] == '\n' || text[at] == ')' ||
         text[at] == ',' || text[at] == '"' || text[at] == ':';
}
}  // namespace

std::string RelabelDirectory(const std::string& text, const std::string& dir, const std::string& label) {
  if (dir.empty()) return text;
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(dir); at != std::string::npos; at = text.find(dir, at + 1)) {
    if (!EndsAPathComponent(text, at + dir.size())) continue;
    out.append(text, from, at - from).append(label);
    from = at + dir.size();
    at = from - 1;
  }
  return out.append(text, from, std::string::npos);
}

size_t RelabelDirectory(nlohmann::ordered_json& j, const std::string& dir, const std::string& label) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (dir.empty() || s.compare(0, dir.size(), dir) != 0 || (s.size() > dir.size() && s[dir.size()] != '/')) {
      return 0;
    }
    j = label + s.substr(dir.size());
    return 1;
  }
  size_t changed = 0;
  if (j.is_structured()) {
    for (auto& element : j) changed += RelabelDirectory(element, dir, label);
  }
  return changed;
}

}  // namespace dgrr::cli
