# Installing libdgrr (docs/install.md): the component libraries; the public
# headers (the umbrella include/dgrr/dgrr.h, the few others a program outside
# the tree includes, and the dgrr headers those include: DGRR_PUBLIC_HEADERS
# below) under include/dgrr/ with their rooted names kept, so
# "runtime/session.h" resolves through -I<prefix>/include/dgrr; a CMake package (`find_package(dgrr)` giving dgrr::dgrr,
# CUDA as the optional component `cuda`); a pkg-config file (dgrr.pc) whose
# plain `--libs` links; and the zstd filter as an HDF5 plugin.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DGRR_INSTALL_HEADER_ROOT ${CMAKE_INSTALL_INCLUDEDIR}/dgrr)
set(DGRR_INSTALL_PLUGIN_DIR ${CMAKE_INSTALL_LIBDIR}/dgrr/hdf5-plugins)

# replay is the trace checker and compare/bisect machinery: it depends on
# base, trace_format, runtime and checkpoint only (never model/ or cli/).
set(DGRR_INSTALLED_COMPONENTS)
foreach(component IN ITEMS base rng fingerprint trace_format runtime checkpoint replay)
  if(TARGET dgrr_${component})
    list(APPEND DGRR_INSTALLED_COMPONENTS ${component})
  endif()
endforeach()

# dgrr::dgrr: everything a training program links, and the numerics flag its
# own code needs so that dgrr's results and the program's agree bitwise.
add_library(dgrr_all INTERFACE)
set_target_properties(dgrr_all PROPERTIES EXPORT_NAME dgrr)
target_compile_options(dgrr_all INTERFACE
  $<INSTALL_INTERFACE:$<$<COMPILE_LANGUAGE:C,CXX>:-ffp-contract=off>>)
set(DGRR_INSTALLED_TARGETS)
foreach(component IN LISTS DGRR_INSTALLED_COMPONENTS)
  target_link_libraries(dgrr_all INTERFACE dgrr_${component})
  # Every exported target carries the flag, for consumers that link one
  # component alone. Install side only: the tree has it globally already.
  target_compile_options(dgrr_${component} INTERFACE
    $<INSTALL_INTERFACE:$<$<COMPILE_LANGUAGE:C,CXX>:-ffp-contract=off>>)
  list(APPEND DGRR_INSTALLED_TARGETS dgrr_${component})
endforeach()

# ---------------------------------------------------------------------------
# Headers. Only what a program outside the tree includes is installed
# (docs/api.md, "What is stable"): the entry points below and every dgrr
# header they include, found by following their #include "..." lines at
# configure time. A header one of them starts to include is installed with
# it; the rest (the trace writer and reader, the HDF5 helpers, the mapper,
# the re-executor, the session's seams, the CLI's) stay in the tree. The
# install test checks that a program builds from the installed headers alone.
#   include/dgrr/dgrr.h           the API (docs/api.md)
#   checkpoint/checkpoint_file.h  for a program that writes checkpoints itself
#   replay/run_comparison.h       for a program that compares runs (what `dgrr compare` finds)
#   base/kill_point.h             not API: the test hook the examples call
# ---------------------------------------------------------------------------
set(DGRR_PUBLIC_HEADERS include/dgrr/dgrr.h)
if(TARGET dgrr_checkpoint)
  list(APPEND DGRR_PUBLIC_HEADERS checkpoint/checkpoint_file.h)
endif()
if(TARGET dgrr_replay)
  list(APPEND DGRR_PUBLIC_HEADERS replay/run_comparison.h)
endif()
list(APPEND DGRR_PUBLIC_HEADERS base/kill_point.h)

# dgrr_header_closure(<out> headers...): the headers and every header of
# this tree they include ("x/y.h" rooted at the source tree), transitively.
# An include of a generated header (base/version.h) is left to its own rule.
function(dgrr_header_closure out)
  set(closure)
  set(pending ${ARGN})
  while(pending)
    list(POP_FRONT pending header)
    if(header IN_LIST closure)
      continue()
    endif()
    list(APPEND closure ${header})
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                 ${PROJECT_SOURCE_DIR}/${header})
    file(STRINGS ${PROJECT_SOURCE_DIR}/${header} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS lines)
      if(line MATCHES "#[ \t]*include[ \t]+\"([^\"]+)\"")
        set(included ${CMAKE_MATCH_1})
        if(EXISTS ${PROJECT_SOURCE_DIR}/${included})
          list(APPEND pending ${included})
        elseif(NOT EXISTS ${PROJECT_BINARY_DIR}/generated/${included})
          message(FATAL_ERROR "dgrr install: ${header} includes \"${included}\", "
                              "which is neither in the tree nor generated")
        endif()
      endif()
    endforeach()
  endwhile()
  set(${out} ${closure} PARENT_SCOPE)
endfunction()

dgrr_header_closure(DGRR_INSTALLED_HEADERS ${DGRR_PUBLIC_HEADERS})
# A partial build (DGRR_ONLY) lacks components the headers need: it installs
# its libraries but no headers, rather than headers that cannot compile.
set(_dgrr_headers_complete TRUE)
foreach(header IN LISTS DGRR_INSTALLED_HEADERS)
  string(REGEX MATCH "^[^/]+" component ${header})
  if(NOT component STREQUAL "include" AND NOT component IN_LIST DGRR_INSTALLED_COMPONENTS)
    message(STATUS "dgrr install: no headers installed (${header} needs ${component}, not in this build)")
    set(_dgrr_headers_complete FALSE)
    break()
  endif()
endforeach()
foreach(header IN LISTS DGRR_INSTALLED_HEADERS)
  if(NOT _dgrr_headers_complete)
    break()
  endif()
  get_filename_component(dir ${header} DIRECTORY)
  if(header STREQUAL "include/dgrr/dgrr.h")
    set(dir "")
  endif()
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${DGRR_INSTALL_HEADER_ROOT}/${dir})
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/base/version.h
        DESTINATION ${DGRR_INSTALL_HEADER_ROOT}/base)

# ---------------------------------------------------------------------------
# CUDA in the export. The components link CUDA::cudart/cublas (and NCCL by
# path); exported as is, those names would make every consumer find the CUDA
# Toolkit. The libraries are static, so a consumer needs the CUDA shared
# libraries only at link time: the install interface names them by the
# absolute paths this build found (link-only), and the Toolkit's CMake
# package is needed only for find_package(dgrr COMPONENTS cuda).
# ---------------------------------------------------------------------------
# dgrr_cuda_library_file(<CUDA::x> <out>): the file an imported CUDA target names.
function(dgrr_cuda_library_file target out)
  set(file "")
  foreach(property IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_NOCONFIG)
    if(NOT file)
      get_target_property(file ${target} ${property})
    endif()
  endforeach()
  if(NOT file)
    message(FATAL_ERROR "dgrr install: no library file for ${target}")
  endif()
  set(${out} ${file} PARENT_SCOPE)
endfunction()

if(DGRR_HAVE_CUDA)
  foreach(target IN LISTS DGRR_INSTALLED_TARGETS)
    get_target_property(links ${target} INTERFACE_LINK_LIBRARIES)
    if(NOT links)
      continue()
    endif()
    set(rewritten)
    foreach(item IN LISTS links)
      if(item MATCHES "^(\\$<LINK_ONLY:)?(CUDA::[A-Za-z0-9_]+)>?$")
        dgrr_cuda_library_file(${CMAKE_MATCH_2} file)
        list(APPEND rewritten
             "$<BUILD_INTERFACE:${item}>" "$<INSTALL_INTERFACE:$<LINK_ONLY:${file}>>")
      else()
        list(APPEND rewritten "${item}")
      endif()
    endforeach()
    set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${rewritten}")
  endforeach()

  # dgrr::cuda (component `cuda`): dgrr::dgrr plus the CUDA Toolkit targets
  # and nvcc's numerics flag, for a consumer that compiles CUDA itself.
  add_library(dgrr_cuda INTERFACE)
  set_target_properties(dgrr_cuda PROPERTIES EXPORT_NAME cuda)
  target_link_libraries(dgrr_cuda INTERFACE dgrr_all CUDA::cudart CUDA::cublas)
  target_compile_options(dgrr_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
  install(TARGETS dgrr_cuda EXPORT dgrrCudaTargets)
  install(EXPORT dgrrCudaTargets NAMESPACE dgrr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dgrr)
endif()

install(TARGETS ${DGRR_INSTALLED_TARGETS} dgrr_all EXPORT dgrrTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT dgrrTargets NAMESPACE dgrr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dgrr)
# The zstd filter (HDF5 filter 32015) as an HDF5 plugin, for h5dump and h5py:
# HDF5_PLUGIN_PATH=<prefix>/lib/dgrr/hdf5-plugins (dgrr env prints it).
if(TARGET dgrr_h5zstd_plugin)
  install(TARGETS dgrr_h5zstd_plugin LIBRARY DESTINATION ${DGRR_INSTALL_PLUGIN_DIR})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dgrrConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dgrrConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dgrr
  PATH_VARS DGRR_INSTALL_PLUGIN_DIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dgrrConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dgrrConfig.cmake ${PROJECT_BINARY_DIR}/dgrrConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dgrr)

# ---------------------------------------------------------------------------
# pkg-config. The libraries are static, so Libs (not Libs.private) holds
# everything they need: `pkg-config --cflags --libs dgrr` links as it is.
# Dependencies with a .pc of their own go to Requires; the rest (HDF5, CUDA)
# are spelled out from what this configure found, never from guessed paths.
# ---------------------------------------------------------------------------
set(_dgrr_implicit_link_dirs ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES} ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES})
set(_dgrr_implicit_include_dirs ${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES} ${CMAKE_C_IMPLICIT_INCLUDE_DIRECTORIES})

# dgrr_pc_link_flags(<out> items...): -L/-l (and -rpath outside the
# linker's default directories) for library files and names.
function(dgrr_pc_link_flags out)
  set(flags "")
  set(seen_dirs "")
  foreach(item IN LISTS ARGN)
    if(item MATCHES "^-")
      string(APPEND flags " ${item}")
    elseif(IS_ABSOLUTE "${item}")
      get_filename_component(dir "${item}" DIRECTORY)
      get_filename_component(name "${item}" NAME)
      if(NOT name MATCHES "^lib(.+)\\.(so|a)(\\..*)?$")
        message(FATAL_ERROR "dgrr pkg-config: cannot express ${item} as -l")
      endif()
      set(lib ${CMAKE_MATCH_1})
      if(NOT dir IN_LIST _dgrr_implicit_link_dirs AND NOT dir IN_LIST seen_dirs)
        string(APPEND flags " -L${dir} -Wl,-rpath,${dir}")
        list(APPEND seen_dirs ${dir})
      endif()
      string(APPEND flags " -l${lib}")
    elseif(item)
      string(APPEND flags " -l${item}")
    endif()
  endforeach()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

set(DGRR_PC_LIBS "")
set(_reversed ${DGRR_INSTALLED_COMPONENTS})
list(REVERSE _reversed)
foreach(component IN LISTS _reversed)
  string(APPEND DGRR_PC_LIBS " -ldgrr_${component}")
endforeach()

set(DGRR_PC_REQUIRES "libzstd libxxhash")
set(DGRR_PC_CFLAGS "")
set(DGRR_PC_EXTRA_LIBS "")
if(TARGET dgrr_checkpoint)
  # The HDF5 that FindHDF5 found (Debian: .../hdf5/serial), with what it says
  # libhdf5 needs. No installed header includes <hdf5.h> (nor nlohmann/json,
  # below) any more; the -I flags stay so consumers' command lines keep
  # working unchanged, e.g. a program that includes these libraries itself.
  dgrr_pc_link_flags(_hdf5_libs ${HDF5_C_LIBRARIES})
  string(APPEND DGRR_PC_EXTRA_LIBS "${_hdf5_libs}")
  foreach(dir IN LISTS HDF5_C_INCLUDE_DIRS)
    if(NOT dir IN_LIST _dgrr_implicit_include_dirs)
      string(APPEND DGRR_PC_CFLAGS " -I${dir}")
    endif()
  endforeach()
  foreach(definition IN LISTS HDF5_C_DEFINITIONS HDF5_DEFINITIONS)
    string(APPEND DGRR_PC_CFLAGS " ${definition}")
  endforeach()
endif()
get_target_property(_json_includes nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
foreach(dir IN LISTS _json_includes)
  if(dir AND NOT dir IN_LIST _dgrr_implicit_include_dirs)
    string(APPEND DGRR_PC_CFLAGS " -I${dir}")
  endif()
endforeach()
if(DGRR_HAVE_CUDA)
  dgrr_cuda_library_file(CUDA::cudart _cudart)
  dgrr_cuda_library_file(CUDA::cublas _cublas)
  dgrr_pc_link_flags(_cuda_libs ${_cudart} ${_cublas} ${DGRR_NCCL_LIBRARY})
  string(APPEND DGRR_PC_EXTRA_LIBS "${_cuda_libs}")
endif()
# -lpthread even where glibc has threads built in (CMAKE_THREAD_LIBS_INIT empty).
dgrr_pc_link_flags(_system_libs ${CMAKE_DL_LIBS} ${CMAKE_THREAD_LIBS_INIT})
if(NOT CMAKE_THREAD_LIBS_INIT)
  string(APPEND _system_libs " -lpthread")
endif()
string(APPEND DGRR_PC_EXTRA_LIBS "${_system_libs}")
string(STRIP "${DGRR_PC_EXTRA_LIBS}" DGRR_PC_EXTRA_LIBS)
# dgrr.pc sits in <prefix>/<libdir>/pkgconfig; libdir may be lib/<triplet>.
file(RELATIVE_PATH DGRR_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" DGRR_PC_TO_PREFIX "${DGRR_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/dgrr.pc.in ${PROJECT_BINARY_DIR}/dgrr.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dgrr.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
