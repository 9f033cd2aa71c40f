# Installing libdgrr: the component libraries, their headers (same layout as
# the source tree, so `#include "runtime/dgrr.h"` works), a CMake package
# (`find_package(dgrr)` giving dgrr::dgrr) and a pkg-config file (dgrr.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DGRR_INSTALLED_COMPONENTS)
foreach(component IN ITEMS base rng fingerprint trace_format runtime checkpoint)
  if(TARGET dgrr_${component})
    list(APPEND DGRR_INSTALLED_COMPONENTS ${component})
  endif()
endforeach()

# dgrr::dgrr: everything a training program links.
add_library(dgrr_all INTERFACE)
set_target_properties(dgrr_all PROPERTIES EXPORT_NAME dgrr)
foreach(component IN LISTS DGRR_INSTALLED_COMPONENTS)
  target_link_libraries(dgrr_all INTERFACE dgrr_${component})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${component}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${component}
          FILES_MATCHING PATTERN "*.h")
  list(APPEND DGRR_INSTALLED_TARGETS dgrr_${component})
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/base/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/base)
install(TARGETS ${DGRR_INSTALLED_TARGETS} dgrr_all EXPORT dgrrTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT dgrrTargets NAMESPACE dgrr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dgrr)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dgrrConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dgrrConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dgrr)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dgrrConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dgrrConfig.cmake ${PROJECT_BINARY_DIR}/dgrrConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/dgrr)

# pkg-config: static libraries, most dependent first.
set(DGRR_PC_LIBS "")
set(_reversed ${DGRR_INSTALLED_COMPONENTS})
list(REVERSE _reversed)
foreach(component IN LISTS _reversed)
  string(APPEND DGRR_PC_LIBS " -ldgrr_${component}")
endforeach()
set(DGRR_PC_EXTRA_LIBS "-lpthread")
if(DGRR_HAVE_CUDA)
  string(APPEND DGRR_PC_EXTRA_LIBS
         " -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas")
  if(DGRR_NCCL_LIBRARY)
    get_filename_component(_nccl_dir ${DGRR_NCCL_LIBRARY} DIRECTORY)
    string(APPEND DGRR_PC_EXTRA_LIBS " -L${_nccl_dir} -Wl,-rpath,${_nccl_dir} -lnccl")
  endif()
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/dgrr.pc.in ${PROJECT_BINARY_DIR}/dgrr.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dgrr.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
