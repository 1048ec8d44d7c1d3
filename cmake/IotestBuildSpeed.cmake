# How long a build takes (issue 45): a fresh `make run` on 2 cores spent
# most of its time parsing the same third-party headers (nlohmann-json,
# fmt, CLI11, the standard library) once per file, and optimising code that
# runs once a job. Three remedies, each one switch:
#
#   IOTEST_UNITY_GROUPS  (ON)  a library's files compiled in groups of about
#                              eight (CMake's unity build), so the headers
#                              are parsed once a group. OFF: one unit a
#                              file, for quick rebuilds after a one-line
#                              change (a group recompiles whole).
#   precompiled headers  (always) the heavy headers a target's files share.
#   IOTEST_CCACHE        (ON)  ccache as the compiler's launcher where it is
#                              installed; never required.
#
# Code that runs once a job (the command line, the report, the job's
# set-up) is compiled with -O1: it is most of the compile time and none of
# the run time (iotest_once_a_job).

option(IOTEST_UNITY_GROUPS
  "Compile each library's files in groups (faster from scratch; OFF: one unit a file)" ON)
option(IOTEST_CCACHE "Use ccache as the compiler launcher where it is installed" ON)

if(IOTEST_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(IOTEST_CCACHE_PROGRAM ccache)
  if(IOTEST_CCACHE_PROGRAM)
    # With precompiled headers ccache caches only when told that the
    # header's timestamps and __DATE__ do not matter.
    set(iotest_launcher ${CMAKE_COMMAND} -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        ${IOTEST_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${iotest_launcher})
    set(CMAKE_C_COMPILER_LAUNCHER ${iotest_launcher})
    message(STATUS "ccache: ${IOTEST_CCACHE_PROGRAM}")
  endif()
endif()

# The headers nearly every file of iotest parses: the standard library's
# containers, fmt and nlohmann-json (through report.hpp) and MPI's.
set(IOTEST_SHARED_HEADERS
  <algorithm> <array> <chrono> <cmath> <complex> <cstdint> <cstring> <functional>
  <map> <memory> <mutex> <optional> <stdexcept> <string> <string_view> <utility>
  <vector> <fmt/format.h> <nlohmann/json.hpp> <mpi.h>)

# C++ only: nvcc compiles the CUDA files of the same targets.
function(iotest_header_list out)
  set(headers "")
  foreach(header IN LISTS IOTEST_SHARED_HEADERS ARGN)
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
  set(${out} ${headers} PARENT_SCOPE)
endfunction()

# The shared headers precompiled once, by a target of their own that
# defines nothing, for the libraries: GCC takes a precompiled header in a
# file whose command line defines more than the header's did (the
# libraries' own definitions), not one that defines less, nor one made
# with other code-generation options (-fPIC against the default -fPIE);
# -O levels may differ. CLI11 stays out of it: every file loads the whole
# header, and with CLI11's (152 MB against 114) the libraries' files took
# longer than the three headers saved (a fresh `iotest` build, 2026-11-29:
# 120 s with it, 92 s without, 100 s with a header per target).
# Arguments: the targets whose include folders and options the libraries
# share.
function(iotest_make_precompiled_headers)
  iotest_header_list(headers)
  add_library(iotest_precompiled OBJECT ${PROJECT_SOURCE_DIR}/cmake/precompiled.cpp)
  target_link_libraries(iotest_precompiled PRIVATE ${ARGN})
  target_precompile_headers(iotest_precompiled PRIVATE ${headers})
endfunction()

# `target` reuses iotest_precompiled's header; with headers of its own
# (the command line's CLI11, the unit tests' GoogleTest) it makes its own,
# of the shared and those.
function(iotest_precompile_headers target)
  if(ARGN)
    iotest_header_list(headers ${ARGN})
    target_precompile_headers(${target} PRIVATE ${headers})
  else()
    target_precompile_headers(${target} REUSE_FROM iotest_precompiled)
  endif()
endfunction()

# Groups of `size` files each, in the order the target lists them (files of
# one folder, which share headers, stay together). CMake leaves alone the
# files with options or definitions of their own, and those marked
# SKIP_UNITY_BUILD_INCLUSION.
function(iotest_compile_in_groups target size)
  if(IOTEST_UNITY_GROUPS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${size})
  endif()
endfunction()

# A target whose code runs once a job: -O1 (see above).
function(iotest_once_a_job target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
endfunction()
