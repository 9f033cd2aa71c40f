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
endfunction()

# dgrr_test(NAME SOURCES ... DEPS ...)
# One GoogleTest executable; each TEST becomes its own ctest entry. Tests find
# their data through DGRR_TEST_DATA_DIR and may write under DGRR_TEST_TMP_DIR.
function(dgrr_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    DGRR_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    DGRR_BINARY_DIR="${PROJECT_BINARY_DIR}"
    DGRR_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # Every test is labelled with its executable, so a pass can pick whole
  # executables (make tsan: ctest -L).
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${name};${ARG_LABELS}")
endfunction()
