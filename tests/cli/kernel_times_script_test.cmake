# Script run by ctest (tests/cli/CMakeLists.txt): scripts/kernel-times.py, the
# reader of DGRR_KERNEL_TIMES's files that scripts/gpu-checks.sh prints with,
# on a real cuda-sim run's files: the table names the kernels and their
# launches per step; a file of another schema is refused with exit 3 naming
# it; no path is a usage error (exit 1); a missing path exit 2.
function(expect want_rc want_text)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "exit ${rc}, expected ${want_rc}: ${ARGN}\n${out}\n${err}")
  endif()
  if(NOT "${out}${err}" MATCHES "${want_text}")
    message(FATAL_ERROR "no '${want_text}' in the output of ${ARGN}:\n${out}\n${err}")
  endif()
endfunction()

set(script ${SOURCE_DIR}/scripts/kernel-times.py)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(ENV{DGRR_KERNEL_TIMES} ${WORK_DIR}/times)
expect(0 "trained" ${DGRR} train --out ${WORK_DIR}/run --model tiny --steps 2 --device cuda-sim --quiet)
unset(ENV{DGRR_KERNEL_TIMES})
# One SumOfSquaresKernel launch a step: 2 calls, 1.0 a step.
expect(0 "SumOfSquaresKernel +2 +[0-9.]+ +[0-9.]+% +[0-9.]+ +1\\.0 " ${PYTHON} ${script} --steps 2 ${WORK_DIR}/times)
expect(0 "# 2 launcher file\\(s\\), cuda-sim \\(host steady clock\\)" ${PYTHON} ${script} ${WORK_DIR}/times)
expect(0 "GemmKernel" ${PYTHON} ${script} --top 1 ${WORK_DIR}/times)
file(WRITE ${WORK_DIR}/times/kernel-times-0-0.json "{\"schema\": \"dgrr.kernel_times/2\"}\n")
expect(3 "kernel-times-0-0.json: schema 'dgrr.kernel_times/2'" ${PYTHON} ${script} ${WORK_DIR}/times)
file(WRITE ${WORK_DIR}/times/kernel-times-0-0.json "{\"schema\": \"dgrr.kernel_times/1\", \"rows\": [")
expect(3 "kernel-times-0-0.json: not JSON" ${PYTHON} ${script} ${WORK_DIR}/times)
expect(1 "usage" ${PYTHON} ${script})
expect(2 "cannot read" ${PYTHON} ${script} ${WORK_DIR}/absent.json)
file(REMOVE_RECURSE ${WORK_DIR})
