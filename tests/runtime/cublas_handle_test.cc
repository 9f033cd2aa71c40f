#include "runtime/cublas_handle.h"

#include <gtest/gtest.h>

namespace dgrr {
namespace {

TEST(CublasHandle, HandedOutWithoutTf32AndWithoutAtomics) {
  auto handle = CublasHandle::Create();
  if (!handle.ok()) {
    GTEST_SKIP() << "cannot create a cuBLAS handle here: " << handle.status().message();
  }
  auto settings = handle->QuerySettings();
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_TRUE(settings->pedantic_math);
  EXPECT_FALSE(settings->atomics_allowed);
}

TEST(CublasHandle, UnavailableIsAClearFailedPrecondition) {
  auto handle = CublasHandle::Create();
  if (handle.ok()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(handle.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(handle.status().message().find("no CUDA device"), std::string::npos);
}

}  // namespace
}  // namespace dgrr
