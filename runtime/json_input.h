// Reading the JSON files dgrr and its runs write (config.json, rank
// env.json, checkpoint plans), bounded and checked.
//
// Every JSON text dgrr reads goes through ParseJson: a nesting-depth cap is
// enforced by a SAX pass before any tree is built, so no later walk over a
// parsed document (dump, compare, copy, destruction) can recurse deeper than
// kMaxJsonDepth whatever the file holds. Errors are Corruption ("invalid run
// file", exit 3) naming the file, the offset and the reason, never nlohmann's
// raw "[json.exception...]" text.
//
// JsonObjectReader reads typed fields of one object with the key path in
// every message ("config.json: key 'model.layers': expected an integer in
// [1, 64], got 1e+300"): a value of the wrong type, a fraction where an
// integer belongs, a non-finite or out-of-range number is refused instead of
// being converted (a float outside an integer's range is undefined behaviour).
//
// It lives in runtime/ because base/ depends on nothing but the standard
// library, while nlohmann_json is already runtime's dependency (sessions
// write env.json) and every component that reads JSON sits above runtime.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dgrr {

// Deeper than anything dgrr writes (config.json nests 3 levels, plans 4).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; `source` names it in errors (usually the file's path).
StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source);

// ReadFileToString(path) then ParseJson.
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

// Typed access to the fields of one JSON object of a file. Holds a reference
// to `object`, which must outlive it. `prefix` is the key path of `object`
// inside the file ("" for the root, "model" for the model section).
class JsonObjectReader {
 public:
  JsonObjectReader(const nlohmann::json& object, std::string source, std::string prefix = "");

  // An integer literal in [min, max] (1e3 and 3.0 are not integers here).
  StatusOr<int64_t> Int(std::string_view key, int64_t min, int64_t max) const;
  StatusOr<uint64_t> Uint64(std::string_view key, uint64_t min = 0,
                            uint64_t max = std::numeric_limits<uint64_t>::max()) const;
  // A finite number in [min, max].
  StatusOr<double> Double(std::string_view key, double min, double max) const;
  StatusOr<std::string> String(std::string_view key) const;
  // A string "0x" followed by 16 hex digits (as base/coding.h's Hex64 writes).
  StatusOr<uint64_t> Hex64(std::string_view key) const;
  StatusOr<JsonObjectReader> Object(std::string_view key) const;
  // The array itself (its elements are the caller's to check).
  StatusOr<const nlohmann::json*> Array(std::string_view key) const;

  // Corruption "SOURCE: key 'PREFIX.KEY': WHAT".
  Status Error(std::string_view key, std::string_view what) const;

 private:
  StatusOr<const nlohmann::json*> Field(std::string_view key) const;
  std::string KeyPath(std::string_view key) const;

  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
};

}  // namespace dgrr
