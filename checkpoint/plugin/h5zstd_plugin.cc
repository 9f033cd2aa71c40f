// The zstd filter as an HDF5 plugin library, so standard tools (h5dump, h5py
// with HDF5_PLUGIN_PATH) read dgrr checkpoints. The filter itself is
// checkpoint/zstd_filter.cc, compiled into this library as well.
#include <H5PLextern.h>

#include "checkpoint/zstd_filter.h"

extern "C" {

__attribute__((visibility("default"))) H5PL_type_t H5PLget_plugin_type(void) {
  return H5PL_TYPE_FILTER;
}

__attribute__((visibility("default"))) const void* H5PLget_plugin_info(void) {
  return &dgrr::checkpoint::kZstdFilterClass;
}

}  // extern "C"
