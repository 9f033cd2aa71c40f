#include "model/kernel_times.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "base/file.h"

namespace dgrr::model {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::atomic<uint64_t> files_made{0};

}  // namespace

KernelTimes::KernelTimes(std::string dir, std::string device, std::string clock)
    : device_(std::move(device)), clock_(std::move(clock)), created_(SteadySeconds()) {
  path_ = dir + "/kernel-times-" + std::to_string(::getpid()) + "-" + std::to_string(files_made++) + ".json";
}

KernelTimes::~KernelTimes() {
  // A launcher that ran nothing (one made to see whether a device is there)
  // leaves no file.
  if (written_ || rows_.empty()) return;
  const Status s = Write();
  if (!s.ok()) std::fprintf(stderr, "dgrr: %s: %s\n", kKernelTimesVariable, s.ToString().c_str());
}

StatusOr<std::unique_ptr<KernelTimes>> KernelTimes::FromEnvironment(std::string_view device,
                                                                    std::string_view clock) {
  const char* dir = std::getenv(kKernelTimesVariable);
  if (dir == nullptr || *dir == '\0') return std::unique_ptr<KernelTimes>();
  const std::string where(dir);
  if (!IsDirectory(where)) {
    const Status made = CreateDirectories(where);
    if (!made.ok() || !IsDirectory(where)) {
      return Status::IOError(std::string(kKernelTimesVariable) + "=" + where +
                             ": cannot make the folder the kernel times go to" +
                             (made.ok() ? std::string(": not a directory") : ": " + std::string(made.message())));
    }
  }
  return std::make_unique<KernelTimes>(where, std::string(device), std::string(clock));
}

void KernelTimes::Add(std::string_view name, double seconds, uint64_t bytes) {
  auto it = std::find_if(rows_.begin(), rows_.end(), [&](const KernelTimeRow& r) { return r.name == name; });
  if (it == rows_.end()) {
    rows_.push_back(KernelTimeRow{std::string(name)});
    it = rows_.end() - 1;
  }
  ++it->calls;
  it->bytes += bytes;
  it->seconds += seconds;
}

std::vector<KernelTimeRow> KernelTimes::Rows() const {
  std::vector<KernelTimeRow> rows = rows_;
  std::sort(rows.begin(), rows.end(), [](const KernelTimeRow& a, const KernelTimeRow& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.name < b.name;
  });
  return rows;
}

std::string KernelTimes::ToJson() const {
  nlohmann::ordered_json j;
  j["schema"] = kKernelTimesSchema;
  j["device"] = device_;
  j["clock"] = clock_;
  j["pid"] = static_cast<int64_t>(::getpid());
  j["lifetime_s"] = SteadySeconds() - created_;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  double total = 0;
  for (const KernelTimeRow& r : Rows()) {
    nlohmann::ordered_json row;
    row["name"] = r.name;
    row["calls"] = r.calls;
    row["bytes"] = r.bytes;
    row["seconds"] = r.seconds;
    rows.push_back(std::move(row));
    total += r.seconds;
  }
  j["timed_s"] = total;
  j["rows"] = std::move(rows);
  return j.dump();
}

Status KernelTimes::Write() {
  written_ = true;
  return WriteFileAtomically(path_, ToJson() + "\n");
}

}  // namespace dgrr::model
