# Runs an MPI job that is meant to fail and checks how it fails: a non-zero exit status,
# within MAX_SECONDS (never a hang), with output matching EXPECT_REGEX. Called by ctest as
#   cmake -DJOB=<command, arguments separated by |> -DEXPECT_REGEX=<regex>
#         -DMAX_SECONDS=<n> -P expect_job_failure.cmake
string(REPLACE "|" ";" job "${JOB}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${job} TIMEOUT ${MAX_SECONDS}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")
message(STATUS "job output:\n${out}${err}")
message(STATUS "job ended after about ${elapsed} s with status '${status}'")
if(status MATCHES "timeout")
  message(FATAL_ERROR "the job hung: still running after ${MAX_SECONDS} s")
endif()
if(status EQUAL 0)
  message(FATAL_ERROR "the job exited with status 0; a failing rank must make it fail")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "the job's output does not match '${EXPECT_REGEX}'")
endif()
