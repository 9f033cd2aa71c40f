# Script run by ctest (see CMakeLists.txt beside it).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/runtime/dgrr.h include/base/version.h lib/pkgconfig/dgrr.pc
          lib/cmake/dgrr/dgrrConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install is missing ${f}")
  endif()
endforeach()

# 1. find_package(dgrr), the examples folder configured on its own.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/cmake-build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build)
run(${WORK_DIR}/cmake-build/mlp_regression --out ${WORK_DIR}/run-cmake --steps 3)
if(NOT EXISTS ${WORK_DIR}/run-cmake/rank0.trace)
  message(FATAL_ERROR "the example built against the installed package wrote no trace")
endif()

# 2. pkg-config with a plain compiler command line.
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND pkg-config --cflags --libs --static dgrr
                OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config does not know dgrr")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(c++ -std=c++20 ${SOURCE_DIR}/examples/mlp_regression.cc -o ${WORK_DIR}/mlp_pkgconfig ${flags})
run(${WORK_DIR}/mlp_pkgconfig --out ${WORK_DIR}/run-pc --steps 3)
file(REMOVE_RECURSE ${WORK_DIR})
