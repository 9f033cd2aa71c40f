#include "runtime/communicator.h"

#include <string>

namespace dgrr {

Status CheckRankArrays(const Communicator& comm, std::span<const size_t> counts,
                       std::span<const size_t> offsets, const char* what) {
  const size_t n = static_cast<size_t>(comm.size());
  if (counts.size() != n || (offsets.data() != nullptr && offsets.size() != n)) {
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(counts.size()) + " counts and " +
                                   std::to_string(offsets.size()) + " offsets for " + std::to_string(n) +
                                   " ranks");
  }
  return Status::OK();
}

}  // namespace dgrr
