// The launch record as its JSON document (docs/launch-record.md): apart from
// runtime/launch_record.h because that header is installed (through
// runtime/session.h) and no installed header may reach nlohmann/json.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/launch_record.h"

namespace dgrr {

// The dgrr.launch/1 document WriteLaunchRecord writes for `record`.
nlohmann::ordered_json LaunchRecordJson(const LaunchRecord& record);

}  // namespace dgrr
