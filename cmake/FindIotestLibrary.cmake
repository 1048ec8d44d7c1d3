# iotest_find_library(<target> PKG <pkg-config name> LIBRARY <lib> HEADER <header>)
#
# An imported target for a C library that ships a pkg-config file on most
# systems (FFTW3, LAPACKE): pkg-config first (Debian, Spack and most module
# systems set PKG_CONFIG_PATH), then the plain search paths, so a prefix in
# CMAKE_PREFIX_PATH or <PKG>_ROOT (FFTW3_ROOT, LAPACKE_ROOT) works where no
# .pc file is found. Debian's FFTW3Config.cmake is incomplete, hence not
# find_package(FFTW3).
function(iotest_find_library target)
  cmake_parse_arguments(ARG "" "PKG;LIBRARY;HEADER" "" ${ARGN})
  string(TOUPPER "${ARG_PKG}" prefix)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(${prefix}_PC QUIET IMPORTED_TARGET ${ARG_PKG})
  endif()
  if(${prefix}_PC_FOUND)
    add_library(${target} INTERFACE IMPORTED)
    target_link_libraries(${target} INTERFACE PkgConfig::${prefix}_PC)
    message(STATUS "${ARG_PKG}: pkg-config, ${${prefix}_PC_LINK_LIBRARIES}")
    return()
  endif()
  find_library(${prefix}_LIBRARY ${ARG_LIBRARY}
               HINTS ${${prefix}_ROOT} $ENV{${prefix}_ROOT} PATH_SUFFIXES lib lib64)
  find_path(${prefix}_INCLUDE_DIR ${ARG_HEADER}
            HINTS ${${prefix}_ROOT} $ENV{${prefix}_ROOT} PATH_SUFFIXES include)
  if(NOT ${prefix}_LIBRARY OR NOT ${prefix}_INCLUDE_DIR)
    message(FATAL_ERROR "${ARG_PKG} not found: install it (Debian: see tools/install-deps.sh), "
                        "load its module, or give its prefix in CMAKE_PREFIX_PATH or ${prefix}_ROOT")
  endif()
  add_library(${target} INTERFACE IMPORTED)
  target_link_libraries(${target} INTERFACE ${${prefix}_LIBRARY})
  target_include_directories(${target} INTERFACE ${${prefix}_INCLUDE_DIR})
  message(STATUS "${ARG_PKG}: ${${prefix}_LIBRARY}")
endfunction()
