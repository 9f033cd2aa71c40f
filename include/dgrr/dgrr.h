// The one header a program using dgrr includes: #include <dgrr/dgrr.h>.
// Installed as <prefix>/include/dgrr/dgrr.h beside the component headers
// (<prefix>/include/dgrr/runtime/..., docs/install.md), which keep their
// rooted names, so the build needs -I<prefix>/include and
// -I<prefix>/include/dgrr (pkg-config and the CMake package pass both).
#pragma once

#include "runtime/dgrr.h"
