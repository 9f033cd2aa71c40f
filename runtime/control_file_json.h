// The control file as its JSON document (docs/control-file.md): apart from
// runtime/control_file.h because that header is installed (through
// runtime/session.h) and no installed header may reach nlohmann/json.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/control_file.h"

namespace dgrr {

// The dgrr.control/1 document for `control` (what ReadControlFile reads).
nlohmann::ordered_json ControlFileJson(const ControlFile& control);

}  // namespace dgrr
