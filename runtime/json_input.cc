#include "runtime/json_input.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "base/file.h"

namespace dgrr {
namespace {

using nlohmann::json;

// A SAX pass that builds nothing: it refuses nesting beyond the cap and keeps
// the parser's own error with its byte offset. Both stop the parse at once.
class DepthCheck : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Leave(); }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override { return Leave(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error_ = WithoutExceptionTag(e.what());
    error_position_ = position;
    return false;
  }

  // Empty when the text is valid and shallow enough.
  std::string Problem() const {
    if (too_deep_at_) {
      return "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    }
    if (!error_.empty()) return error_ + " (byte " + std::to_string(error_position_) + ")";
    return "";
  }

 private:
  bool Enter() {
    if (++depth_ > kMaxJsonDepth) {
      too_deep_at_ = true;
      return false;
    }
    return true;
  }
  bool Leave() {
    --depth_;
    return true;
  }
  // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ...".
  static std::string WithoutExceptionTag(const std::string& what) {
    if (what.rfind("[json.exception.", 0) == 0) {
      const size_t end = what.find("] ");
      if (end != std::string::npos) return what.substr(end + 2);
    }
    return what;
  }

  int depth_ = 0;
  bool too_deep_at_ = false;
  std::string error_;
  size_t error_position_ = 0;
};

std::string Shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

const char* TypeName(const json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number_float()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_null()) return "null";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "a value";
}

}  // namespace

StatusOr<json> ParseJson(std::string_view text, std::string_view source) {
  DepthCheck check;
  const bool ok = json::sax_parse(text, &check, json::input_format_t::json, /*strict=*/true);
  if (const std::string problem = check.Problem(); !ok || !problem.empty()) {
    return Status::Corruption(std::string(source) + ": not valid JSON: " +
                              (problem.empty() ? "parse failed" : problem));
  }
  // The text is known valid and shallow: this parse cannot fail.
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Status::Corruption(std::string(source) + ": not valid JSON");
  return parsed;
}

StatusOr<json> ReadJsonFile(const std::string& path) {
  DGRR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxJsonFileBytes));
  return ParseJson(text, path);
}

JsonObjectReader::JsonObjectReader(const json& object, std::string source, std::string prefix)
    : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

std::string JsonObjectReader::KeyPath(std::string_view key) const {
  if (prefix_.empty()) return std::string(key);
  if (key.empty()) return prefix_;
  return prefix_ + "." + std::string(key);
}

Status JsonObjectReader::Error(std::string_view key, std::string_view what) const {
  const std::string path = KeyPath(key);
  return Status::Corruption(source_ + ": " + (path.empty() ? std::string("top level") : "key '" + path + "'") +
                            ": " + std::string(what));
}

StatusOr<const json*> JsonObjectReader::Field(std::string_view key) const {
  if (!object_.is_object()) {
    return Error("", std::string("expected an object, got ") + TypeName(object_));
  }
  const auto it = object_.find(key);
  if (it == object_.end()) return Error(key, "missing");
  return &*it;
}

StatusOr<int64_t> JsonObjectReader::Int(std::string_view key, int64_t min, int64_t max) const {
  DGRR_ASSIGN_OR_RETURN(const json* v, Field(key));
  const std::string expected =
      "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got ";
  if (!v->is_number_integer()) return Error(key, expected + Shown(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max)) {
    return Error(key, expected + Shown(*v));
  }
  const int64_t x = v->get<int64_t>();
  if (x < min || x > max) return Error(key, expected + Shown(*v));
  return x;
}

StatusOr<uint64_t> JsonObjectReader::Uint64(std::string_view key, uint64_t min, uint64_t max) const {
  DGRR_ASSIGN_OR_RETURN(const json* v, Field(key));
  const std::string expected =
      "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got ";
  if (!v->is_number_unsigned()) return Error(key, expected + Shown(*v));
  const uint64_t x = v->get<uint64_t>();
  if (x < min || x > max) return Error(key, expected + Shown(*v));
  return x;
}

StatusOr<double> JsonObjectReader::Double(std::string_view key, double min, double max) const {
  DGRR_ASSIGN_OR_RETURN(const json* v, Field(key));
  // nlohmann writes NaN and infinity as null; a number is finite by grammar.
  const double x = v->is_number() ? v->get<double>() : std::nan("");
  if (!v->is_number() || !std::isfinite(x) || x < min || x > max) {
    std::ostringstream range;
    range << "expected a finite number in [" << min << ", " << max << "], got ";
    return Error(key, range.str() + Shown(*v));
  }
  return x;
}

StatusOr<std::string> JsonObjectReader::String(std::string_view key) const {
  DGRR_ASSIGN_OR_RETURN(const json* v, Field(key));
  if (!v->is_string()) return Error(key, std::string("expected a string, got ") + Shown(*v));
  return v->get<std::string>();
}

StatusOr<JsonObjectReader> JsonObjectReader::Object(std::string_view key) const {
  DGRR_ASSIGN_OR_RETURN(const json* v, Field(key));
  if (!v->is_object()) return Error(key, std::string("expected an object, got ") + TypeName(*v));
  return JsonObjectReader(*v, source_, KeyPath(key));
}

StatusOr<const json*> JsonObjectReader::Array(std::string_view key) const {
  DGRR_ASSIGN_OR_RETURN(const json* v, Field(key));
  if (!v->is_array()) return Error(key, std::string("expected an array, got ") + TypeName(*v));
  return v;
}

StatusOr<uint64_t> JsonObjectReader::Hex64(std::string_view key) const {
  DGRR_ASSIGN_OR_RETURN(std::string text, String(key));
  if (text.size() != 18 || text[0] != '0' || text[1] != 'x') {
    return Error(key, "expected 0x and 16 hex digits, got '" + text.substr(0, 40) + "'");
  }
  uint64_t v = 0;
  for (size_t i = 2; i < text.size(); ++i) {
    const char c = text[i];
    const int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return Error(key, "expected 0x and 16 hex digits, got '" + text + "'");
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace dgrr
