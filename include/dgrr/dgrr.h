// dgrr/dgrr.h: the one header a training program includes (docs/api.md).
//
//   auto session = dgrr::Open(options);   // a Session with checkpoints on HDF5
//
// Installed as <prefix>/include/dgrr/dgrr.h beside the component headers it
// includes, in <prefix>/include/dgrr/<component>/ (docs/install.md).
#pragma once

#include <memory>

#include "checkpoint/session_store.h"
#include "runtime/dgrr.h"

namespace dgrr {

// Session::Open with dgrr's HDF5 checkpoint store (unless the options name
// another): what a training program calls. The store lives one layer above
// the session (checkpoint/), so the wiring is here, in the umbrella header.
inline StatusOr<std::unique_ptr<Session>> Open(SessionOptions options) {
  if (options.checkpoints == nullptr) options.checkpoints = checkpoint::DefaultCheckpointStore();
  return Session::Open(options);
}

}  // namespace dgrr
