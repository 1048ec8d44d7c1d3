# Writes OUTPUT (a header defining IOTEST_GIT_REVISION) from the source
# tree's git revision, only when it changed, so that reports name the code
# that made them without rebuilding everything at each commit.
execute_process(
  COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
  OUTPUT_VARIABLE revision
  OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_QUIET
  RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR revision STREQUAL "")
  # A source tree without git: the revision it was made from, if given
  # (IOTEST_REVISION: containers/build.sh passes the commit), else unknown.
  if(DEFINED GIVEN AND NOT GIVEN STREQUAL "")
    set(revision "${GIVEN}")
  else()
    set(revision "unknown")
  endif()
endif()
set(content "#define IOTEST_GIT_REVISION \"${revision}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUTPUT}" "${content}")
endif()
