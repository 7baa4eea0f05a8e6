# Runs a command and checks both its exit status and its output (ctest's PASS_REGULAR_EXPRESSION alone ignores
# the status, so an abort after the right message would pass):
#   cmake -DEXPECT_STATUS=1 "-DEXPECT_OUTPUT=<regex>" -P expect.cmake <command> [args...]
# With -DEXPECT_FILE=<path> "-DEXPECT_FILE_CONTENT=<regex>", the file the command wrote must match too.
set(command "")
set(first -1)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(first EQUAL -1 AND CMAKE_ARGV${i} STREQUAL "-P")
    math(EXPR first "${i} + 2")  # the command follows the script's path
  elseif(NOT first EQUAL -1 AND i GREATER_EQUAL first)
    list(APPEND command "${CMAKE_ARGV${i}}")
  endif()
endforeach()
if(DEFINED EXPECT_FILE)
  file(REMOVE "${EXPECT_FILE}")  # a file left by an earlier run must not pass for this one's
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT "${status}" STREQUAL "${EXPECT_STATUS}")
  message(FATAL_ERROR "exit status ${status}, expected ${EXPECT_STATUS}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match: ${EXPECT_OUTPUT}")
endif()
if(DEFINED EXPECT_FILE)
  file(READ "${EXPECT_FILE}" written)
  if(NOT "${written}" MATCHES "${EXPECT_FILE_CONTENT}")
    message(FATAL_ERROR "${EXPECT_FILE} does not match: ${EXPECT_FILE_CONTENT}")
  endif()
endif()
