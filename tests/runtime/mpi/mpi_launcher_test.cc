// Opening the MPI communicator outside a proper launch: no launcher, or a
// launcher environment with pieces missing, is one FailedPrecondition line,
// decided from the environment before MPI is touched (so it cannot hang).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "runtime/mpi_communicator.h"

namespace dgrr {
namespace {

Status CheckWith(const std::map<std::string, std::string>& env) {
  return CheckMpiLauncherEnvironment([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

void ExpectOneLine(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(MpiLauncher, NoLauncherIsRefused) { ExpectOneLine(CheckWith({}), "not started by an MPI launcher"); }

TEST(MpiLauncher, CompleteLaunchesAreAccepted) {
  EXPECT_TRUE(CheckWith({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"PMIX_RANK", "2"},
                         {"PMIX_NAMESPACE", "prterun-x-1@1"}})
                  .ok());
  EXPECT_TRUE(CheckWith({{"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "slurm.pmix.1.0"}}).ok());
  EXPECT_TRUE(CheckWith({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}}).ok());
}

TEST(MpiLauncher, IncompleteOrInconsistentLaunchesAreOneLine) {
  ExpectOneLine(CheckWith({{"OMPI_COMM_WORLD_SIZE", "2"}}), "OMPI_COMM_WORLD_RANK=(unset)");
  ExpectOneLine(CheckWith({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}}), "PMIX_RANK=(unset)");
  ExpectOneLine(CheckWith({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}}), "OMPI_COMM_WORLD_RANK=2");
  ExpectOneLine(CheckWith({{"OMPI_COMM_WORLD_SIZE", "x"}, {"OMPI_COMM_WORLD_RANK", "0"}}), "OMPI_COMM_WORLD_SIZE=x");
  ExpectOneLine(CheckWith({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"PMIX_RANK", "0"},
                           {"PMIX_NAMESPACE", "n"}}),
                "inconsistent");
  ExpectOneLine(CheckWith({{"PMIX_RANK", "0"}}), "PMIX_NAMESPACE unset");
  ExpectOneLine(CheckWith({{"PMI_SIZE", "2"}}), "PMI_RANK=(unset)");
}

// The real factory in this process (CTest starts it without mpirun): a
// missing launcher, then a half-set one, are refused before MPI_Init.
TEST(MpiLauncher, TheFactoryRefusesWithoutTouchingMpi) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMIX_NAMESPACE",
                           "PMI_SIZE", "PMI_RANK"}) {
    unsetenv(name);
  }
  auto none = OpenMpiCommunicator();
  ASSERT_FALSE(none.ok());
  ExpectOneLine(none.status(), "not started by an MPI launcher");
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  auto half = OpenMpiCommunicator();
  unsetenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_FALSE(half.ok());
  ExpectOneLine(half.status(), "incomplete Open MPI launch environment");
}

}  // namespace
}  // namespace dgrr
