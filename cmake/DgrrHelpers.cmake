# Helpers shared by every component's CMakeLists.txt.

# dgrr_component(NAME SOURCES ... DEPS ...)
# Declares the library dgrr_<NAME> with includes rooted at the repository root.
function(dgrr_component name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(dgrr_${name} STATIC ${ARG_SOURCES})
  add_library(dgrr::${name} ALIAS dgrr_${name})
  set_target_properties(dgrr_${name} PROPERTIES EXPORT_NAME ${name})
  # Installed, the component headers live under include/dgrr/ and keep their
  # rooted names ("runtime/session.h"), so consumers get both include and
  # include/dgrr; in the tree include/ holds the umbrella <dgrr/dgrr.h>.
  target_include_directories(dgrr_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
    $<INSTALL_INTERFACE:include>
    $<INSTALL_INTERFACE:include/dgrr>)
  target_link_libraries(dgrr_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(DGRR_FUZZ_COVERAGE)
    target_compile_options(dgrr_${name} PRIVATE ${DGRR_FUZZ_COVERAGE})
  endif()
endfunction()

# Compile time of the test executables (docs/ci.md). Nearly all of CI's time is
# compiling, and the test sources are most of it: each one parses GoogleTest,
# nlohmann/json and the standard library, then optimises its TEST bodies.
#
# Optimisation of the test sources only: the libraries under test, and so
# every value a test records or compares, keep the build type's flags. Test
# code only calls into the libraries, and with -ffp-contract=off and no
# fast-math flags its own arithmetic rounds the same at every -O level. -Og costs
# about half of -O3 to compile (and a third less than -O1 under ASan) and keeps
# -Wmaybe-uninitialized; -O1 would also raise a GCC 12 -Warray-bounds false
# positive in std::string. Plain Debug builds keep their -O0 for debugging;
# the Makefile's sanitizer passes ask for -Og.
if(CMAKE_BUILD_TYPE MATCHES "^(Release|MinSizeRel|RelWithDebInfo)$")
  set(_dgrr_test_optimize_default "-Og")
else()
  set(_dgrr_test_optimize_default "")
endif()
set(DGRR_TEST_OPTIMIZE "${_dgrr_test_optimize_default}" CACHE STRING
    "Optimisation flag for the test sources only, e.g. -Og (empty: the build type's)")

# One precompiled header for every test executable: third-party and standard
# headers only (dgrr's own headers change too often to be worth it). It is
# built once, by dgrr_test_pch, and reused by each dgrr_test() target, which
# compiles with the same flags (GCC then accepts the .gch; CMake's -Winvalid-pch
# says so when it does not, and the build still works, just slower).
set(DGRR_TEST_PCH ON CACHE BOOL "Precompile the common test headers")
# Test sources compiled in batches (CMake's unity build), each batch one
# translation unit: the test headers and gtest's macros are parsed once a
# batch instead of once a file (docs/ci.md has what it saves). Test files
# keep their helpers in anonymous namespaces, so names may not clash within
# an executable; a file that cannot share is listed in its CMakeLists with
# SKIP_UNITY_BUILD_INCLUSION.
set(DGRR_TEST_UNITY ON CACHE BOOL "Compile each test executable's sources in batches")
set(DGRR_TEST_UNITY_BATCH 8 CACHE STRING "Test sources per unity batch")
set(DGRR_TEST_PCH_HEADERS
  <gtest/gtest.h> <nlohmann/json.hpp>
  <algorithm> <cmath> <cstdint> <cstring> <filesystem> <fstream> <functional>
  <map> <memory> <optional> <random> <sstream> <string> <string_view> <thread>
  <utility> <vector>)

# Flags shared by every test executable and by the PCH donor, so the PCH stays valid.
function(_dgrr_test_common_flags target)
  target_link_libraries(${target} PRIVATE GTest::gtest)
  if(DGRR_TEST_OPTIMIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DGRR_TEST_OPTIMIZE}>)
  endif()
endfunction()

# dgrr_test_pch(): the target that compiles the tests' precompiled header; call
# once before the first dgrr_test().
function(dgrr_test_pch)
  if(NOT DGRR_TEST_PCH OR TARGET dgrr_test_pch)
    return()
  endif()
  set(source ${PROJECT_BINARY_DIR}/dgrr_test_pch.cc)
  file(CONFIGURE OUTPUT ${source} CONTENT "// Only carries the tests' precompiled header.\nint main() { return 0; }\n")
  # An executable, like the tests: GCC rejects a .gch built with -fPIC in a -fPIE compile.
  add_executable(dgrr_test_pch ${source})
  _dgrr_test_common_flags(dgrr_test_pch)
  target_precompile_headers(dgrr_test_pch PRIVATE ${DGRR_TEST_PCH_HEADERS})
endfunction()

# dgrr_test(NAME SOURCES ... DEPS ... [TIMEOUT s] [RESOURCE_LOCK name])
# One GoogleTest executable; each TEST becomes its own ctest entry. Tests find
# their data through DGRR_TEST_DATA_DIR and may write under DGRR_TEST_TMP_DIR.
# RESOURCE_LOCK keeps its tests from running beside others holding the same
# lock (`mpirun`: one MPI job at a time, so a loaded 2-core machine never has
# two oversubscribed jobs racing each other's timeouts).
function(dgrr_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;RESOURCE_LOCK" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  # Runs of dgrr train made in-process name the built dgrr as their program
  # (model/launch.h); replays launch it.
  if(TARGET dgrr)
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support/dgrr_executable.cc)
    target_compile_definitions(${name} PRIVATE DGRR_EXECUTABLE_FOR_TESTS="$<TARGET_FILE:dgrr>")
    add_dependencies(${name} dgrr)
  endif()
  _dgrr_test_common_flags(${name})
  if(TARGET dgrr_test_pch)
    target_precompile_headers(${name} REUSE_FROM dgrr_test_pch)
  endif()
  if(DGRR_TEST_UNITY)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${DGRR_TEST_UNITY_BATCH})
  endif()
  target_compile_definitions(${name} PRIVATE
    DGRR_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    DGRR_BINARY_DIR="${PROJECT_BINARY_DIR}"
    DGRR_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # Every test is labelled with its executable, so a pass can pick whole
  # executables (make tsan: ctest -L).
  set(lock_property "")
  if(ARG_RESOURCE_LOCK)
    set(lock_property RESOURCE_LOCK ${ARG_RESOURCE_LOCK})
  endif()
  # One label, the executable's: gtest_discover_tests writes property values
  # out unquoted, so a list of labels would split into words that pair up
  # with the next properties (a second label once swallowed RESOURCE_LOCK).
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} ${lock_property} LABELS ${name})
endfunction()
