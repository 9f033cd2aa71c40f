# Script run by ctest (see CMakeLists.txt beside it): installs libdgrr into a
# scratch prefix and uses it as a project outside this tree would
# (docs/install.md). Each kind of consumer is built once, with the smallest
# program that shows it (CI time, docs/ci.md): the checkpointing consumer
# through find_package (with and without the CUDA Toolkit) and through plain
# pkg-config, and the example that checkpoints and is re-run by the installed
# dgrr through find_package.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
# expect_in(<text> <needle> <what>)
function(expect_in text needle what)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: expected \"${needle}\" in:\n${text}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(consumer ${SOURCE_DIR}/tests/install/consumer)
set(plugin_dir ${prefix}/lib/dgrr/hdf5-plugins)
if(PYTHON_DIR)
  # An older install's dgrr/torch.py, the module the dgrr.torch package
  # replaced: the install removes it.
  file(WRITE ${prefix}/${PYTHON_DIR}/dgrr/torch.py "")
endif()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# Layout: the public headers under include/dgrr/ (docs/api.md, "What is
# stable") and only those: not the trace writer, the HDF5 helpers, the mapper,
# the re-executor, nor the session's seams (runtime/session_seams.h) and what
# only they need (the run directory, the asynchronous fingerprinter). The libraries (replay's too: dgrr::dgrr links it), the
# zstd filter as an HDF5 plugin.
foreach(f include/dgrr/dgrr.h include/dgrr/runtime/dgrr.h include/dgrr/runtime/session.h
          include/dgrr/base/version.h include/dgrr/checkpoint/checkpoint_file.h
          lib/libdgrr_replay.a lib/pkgconfig/dgrr.pc lib/cmake/dgrr/dgrrConfig.cmake
          lib/dgrr/hdf5-plugins/libdgrr_h5zstd.so)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install is missing ${f}")
  endif()
endforeach()
foreach(f trace_format/writer.h trace_format/reader.h checkpoint/hdf5_util.h replay/mapper.h
          replay/reexecute.h runtime/trace_check.h runtime/session_seams.h
          runtime/run_directory.h runtime/outlier_ranks.h fingerprint/async_fingerprint.h)
  if(EXISTS ${prefix}/include/dgrr/${f})
    message(FATAL_ERROR "install put the internal header ${f} under include/dgrr/")
  endif()
endforeach()
# No third-party header is reachable from an installed one: no installed
# header includes nlohmann/json (HDF5, zstd and xxhash stay in the .cc files).
file(GLOB_RECURSE installed_headers ${prefix}/include/*.h)
foreach(header IN LISTS installed_headers)
  file(STRINGS ${header} includes REGEX "^[ \t]*#[ \t]*include[ \t]*<(nlohmann|hdf5|H5|zstd|xxhash)")
  if(includes)
    message(FATAL_ERROR "the installed ${header} includes a third-party header: ${includes}")
  endif()
endforeach()
foreach(generic include/base include/runtime include/checkpoint)
  if(EXISTS ${prefix}/${generic})
    message(FATAL_ERROR "install put headers in the generic ${generic}/ (they belong under include/dgrr/)")
  endif()
endforeach()
# The Python package, when it is built: every Python file of python/dgrr/
# (dgrr.torch is a package of modules), and no stale dgrr/torch.py beside it.
if(PYTHON_DIR)
  file(GLOB_RECURSE python_files RELATIVE ${SOURCE_DIR}/python/dgrr ${SOURCE_DIR}/python/dgrr/*.py)
  foreach(f IN LISTS python_files)
    if(NOT EXISTS ${prefix}/${PYTHON_DIR}/dgrr/${f})
      message(FATAL_ERROR "install is missing the Python file dgrr/${f} (python/CMakeLists.txt, DGRR_PYTHON_SOURCES)")
    endif()
  endforeach()
  if(EXISTS ${prefix}/${PYTHON_DIR}/dgrr/torch.py)
    message(FATAL_ERROR "install left an older dgrr/torch.py beside the dgrr.torch package")
  endif()
endif()

# 1. find_package(dgrr): the examples folder (its checkpointing example only:
#    mlp_regression is the same API, built in the tree) and a checkpointing
#    consumer, configured on their own. The numerics flag must reach their
#    compiles.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/cmake-build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build --target char_classifier)
file(READ ${WORK_DIR}/cmake-build/compile_commands.json commands)
expect_in("${commands}" "-ffp-contract=off" "the example's compile through find_package(dgrr)")

execute_process(COMMAND ${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/consumer -G ${GENERATOR}
                -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer configure failed:\n${out}\n${err}")
endif()
if(DGRR_HAVE_CUDA)
  expect_in("${out}" "CUDA build ON, cuda component found: TRUE" "the cuda component on a CUDA machine")
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/checkpoint_consumer ${WORK_DIR}/cmake.h5)

# 2. A CPU-only consumer: the CUDA Toolkit's package disabled, as on a machine
#    without the toolkit. find_package(dgrr) still configures, builds and runs;
#    the cuda component is reported missing, and refused when required.
run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/consumer-cpu -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
file(READ ${WORK_DIR}/consumer-cpu/compile_commands.json commands)
expect_in("${commands}" "-ffp-contract=off" "the CPU consumer's compile")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-cpu)
run(${WORK_DIR}/consumer-cpu/checkpoint_consumer ${WORK_DIR}/cpu.h5)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/consumer-need-cuda
                -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DDGRR_REQUIRE_CUDA=ON
                -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "find_package(dgrr COMPONENTS cuda) succeeded without the CUDA Toolkit")
endif()
expect_in("${out}${err}" "dgrr component cuda" "the refusal of the required cuda component")

# 3. pkg-config with a plain compiler command line (no --static), which
#    names nothing but the installed prefix: the checkpointing consumer links
#    and runs.
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND pkg-config --cflags --libs dgrr
                OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config does not know dgrr")
endif()
expect_in("${flags}" "-ffp-contract=off" "pkg-config --cflags dgrr")
separate_arguments(flags UNIX_COMMAND "${flags}")
run(c++ -std=c++20 ${consumer}/checkpoint_consumer.cc -o ${WORK_DIR}/ckpt_pkgconfig ${flags})
run(${WORK_DIR}/ckpt_pkgconfig ${WORK_DIR}/pkgconfig.h5)

# 3b. The user program that checkpoints (examples/char_classifier.cc, built
#     through find_package in 1), trained, then driven by the installed dgrr:
#     replay verifies a range, rollback cuts it back, re-running its own
#     command finishes it, plan shows what its checkpoints hold.
set(binary ${WORK_DIR}/cmake-build/char_classifier)
set(run_dir ${WORK_DIR}/run-char)
run(${binary} --out ${run_dir} --steps 6 --ckpt-every 2)
if(NOT EXISTS ${run_dir}/rank0.trace)
  message(FATAL_ERROR "the example built against the installed package wrote no trace")
endif()
if(EXISTS ${prefix}/bin/dgrr)
  run(${prefix}/bin/dgrr replay ${run_dir} --from 2 --to 5)
  run(${prefix}/bin/dgrr rollback ${run_dir} --step 3 --quiet)
  run(${binary} --out ${run_dir} --steps 6 --ckpt-every 2)
  run(${prefix}/bin/dgrr plan ${run_dir})
endif()

# 3c. A program that compares runs through the installed API
#     (replay/run_comparison.h): the example trained again into a second
#     directory agrees with the first, step for step.
set(run_dir2 ${WORK_DIR}/run-char-2)
run(${binary} --out ${run_dir2} --steps 6 --ckpt-every 2)
execute_process(COMMAND ${WORK_DIR}/consumer/compare_consumer ${run_dir} ${run_dir2}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compare_consumer of two runs of the example failed (${rc}):\n${out}\n${err}")
endif()
expect_in("${out}" "compare_consumer: the runs agree; 6 steps certified" "the installed compare API")

# 4. The installed plugin: h5py (Debian's, /usr/bin/python3) reads the
#    checkpoint's compressed datasets through the folder pkg-config names.
execute_process(COMMAND pkg-config --variable=hdf5_plugin_dir dgrr
                OUTPUT_VARIABLE pc_plugin_dir OUTPUT_STRIP_TRAILING_WHITESPACE)
file(REAL_PATH "${pc_plugin_dir}" pc_plugin_dir)
file(REAL_PATH "${plugin_dir}" real_plugin_dir)
if(NOT pc_plugin_dir STREQUAL real_plugin_dir)
  message(FATAL_ERROR "pkg-config's hdf5_plugin_dir is ${pc_plugin_dir}, not ${real_plugin_dir}")
endif()
set(ENV{HDF5_PLUGIN_PATH} ${plugin_dir})
run(/usr/bin/python3 ${SOURCE_DIR}/tests/checkpoint/h5py_read.py ${WORK_DIR}/pkgconfig.h5)

# 5. The installed `dgrr env` names the installed plugin folder, found beside
#    its own prefix (here a scratch prefix, not the configured one).
if(EXISTS ${prefix}/bin/dgrr)
  unset(ENV{HDF5_PLUGIN_PATH})
  execute_process(COMMAND ${prefix}/bin/dgrr env RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "installed dgrr env failed (${rc}):\n${out}\n${err}")
  endif()
  expect_in("${out}" "export HDF5_PLUGIN_PATH=${real_plugin_dir}\n" "installed dgrr env")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
