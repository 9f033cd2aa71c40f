# Script run by ctest (tests/replay/CMakeLists.txt): the report page's script
# checked on its own with node. It must parse (node --check on
# replay/report_assets/report.js), and, run on real pages in a stand-in DOM
# (report_script_test.js), draw what their data says: two tiny runs that
# differ in the learning rate (a divergence) and one run against itself.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # dgrr report exits 4 when the runs differ: the page is written all the same.
  if(NOT rc EQUAL 0 AND NOT (rc EQUAL 4 AND "${ARGN}" MATCHES ";report;"))
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
run(${NODE} --check ${SOURCE_DIR}/replay/report_assets/report.js)
run(${DGRR} train --out ${WORK_DIR}/a --steps 2 --quiet)
run(${DGRR} train --out ${WORK_DIR}/b --steps 2 --lr 0.02 --quiet)
run(${DGRR} report ${WORK_DIR}/a ${WORK_DIR}/b -o ${WORK_DIR}/ab.html --quiet)
run(${DGRR} report ${WORK_DIR}/a ${WORK_DIR}/a -o ${WORK_DIR}/aa.html --quiet)
foreach(page ab aa)
  run(${NODE} ${SOURCE_DIR}/tests/replay/report_script_test.js ${WORK_DIR}/${page}.html)
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
