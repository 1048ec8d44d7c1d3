# A CUDA toolkit from PyPI wheels (tools/install-deps.sh --cuda): CUDA 13's
# wheels (nvidia-cuda-nvcc, -cuda-runtime, -cufft, -cuda-cccl, with
# nvidia-nvvm and nvidia-cuda-crt) unpack into one toolkit-shaped folder,
# <venv>/lib/pythonX.Y/site-packages/nvidia/cu13 (bin/nvcc, nvvm/bin/cicc,
# include/, lib/). Their shared libraries come versioned only
# (libcufft.so.12), so this assembles a toolkit of links in the build tree
# with the unversioned names FindCUDAToolkit looks for, and points the
# CUDA compiler and CUDAToolkit_ROOT at it.
#
# CUDA 12's wheels (nvidia-cuda-nvcc-cu12 and friends) cannot serve: their
# nvcc wheel holds ptxas, libnvvm and the crt headers but not the nvcc
# driver, cicc, cudafe++, fatbinary or nvlink, so nothing compiles a .cu
# file from them (docs/gpu.md).
function(iotest_cuda_wheels wheels out)
  # The nvidia/ folder, or its cu13 subfolder, or a venv (its site-packages).
  set(root "")
  foreach(candidate ${wheels}/cu13 ${wheels})
    if(EXISTS ${candidate}/bin/nvcc)
      set(root ${candidate})
      break()
    endif()
  endforeach()
  if(NOT root)
    file(GLOB found ${wheels}/lib/python3*/site-packages/nvidia/cu13/bin/nvcc)
    if(found)
      list(GET found 0 nvcc)
      get_filename_component(root ${nvcc} DIRECTORY)
      get_filename_component(root ${root} DIRECTORY)
    endif()
  endif()
  if(NOT root)
    if(EXISTS ${wheels}/cuda_nvcc)
      set(why "it holds CUDA 12's wheels, whose nvidia-cuda-nvcc-cu12 has no nvcc driver: install CUDA 13's (tools/install-deps.sh --cuda)")
    else()
      set(why "no cu13/bin/nvcc under it (tools/install-deps.sh --cuda installs them)")
    endif()
    if(IOTEST_CUDA STREQUAL "ON")
      message(FATAL_ERROR "IOTEST_CUDA_WHEELS=${wheels}: ${why}")
    endif()
    message(STATUS "IOTEST_CUDA_WHEELS=${wheels}: ${why}")
    return()
  endif()
  # The toolkit of links: every top-level entry of the wheels' folder, with
  # lib/ a real folder adding unversioned names (libcufft.so ->
  # libcufft.so.12) and lib64 the same folder.
  file(REMOVE_RECURSE ${out})
  file(MAKE_DIRECTORY ${out}/lib)
  file(GLOB entries RELATIVE ${root} ${root}/*)
  foreach(entry ${entries})
    if(NOT entry STREQUAL "lib")
      file(CREATE_LINK ${root}/${entry} ${out}/${entry} SYMBOLIC)
    endif()
  endforeach()
  file(GLOB libs RELATIVE ${root}/lib ${root}/lib/*)
  foreach(lib ${libs})
    file(CREATE_LINK ${root}/lib/${lib} ${out}/lib/${lib} SYMBOLIC)
    # (${CMAKE_MATCH_1} is expanded before if() matches: a second if.)
    if(lib MATCHES "^(lib[^.]+\\.so)\\.[0-9.]+$")
      set(plain ${CMAKE_MATCH_1})
      if(NOT EXISTS ${out}/lib/${plain})
        file(CREATE_LINK ${root}/lib/${lib} ${out}/lib/${plain} SYMBOLIC)
      endif()
    endif()
  endforeach()
  file(CREATE_LINK lib ${out}/lib64 SYMBOLIC)
  set(CMAKE_CUDA_COMPILER ${out}/bin/nvcc CACHE FILEPATH "nvcc (from the CUDA wheels)" FORCE)
  set(CUDAToolkit_ROOT ${out} CACHE PATH "The CUDA toolkit (from the CUDA wheels)" FORCE)
  set(ENV{CUDACXX} ${out}/bin/nvcc)
  message(STATUS "CUDA toolkit from wheels: ${root} (linked as ${out})")
endfunction()
