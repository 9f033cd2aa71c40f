// libFuzzer target: bytes as a tensor dump (docs/tensor-dump.md). Built twice
// like fuzz_checkpoint.cc: as they come, and restamped (DGRR_FUZZ_RESTAMP) so
// the HDF5 contents behind the header are parsed.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/tensor_file.h"
#include "fuzz/restamp.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(dgrr::fuzz::AsView(data, size));
#ifdef DGRR_FUZZ_RESTAMP
  if (!dgrr::fuzz::RestampTensorDump(bytes)) return -1;
#endif
  const std::string path = dgrr::fuzz::WriteScratchFile("dump.rank0.h5", bytes);
  (void)dgrr::checkpoint::ReadTensorDump(path);
  return 0;
}
