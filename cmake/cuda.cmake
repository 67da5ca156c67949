# CUDA backend detection: HEADROOM_CUDA=AUTO builds it when a toolkit (nvcc, cuBLAS, cuDNN)
# is found, ON requires it, OFF skips it.
set(HR_WITH_CUDA OFF)
if(NOT HEADROOM_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${HEADROOM_CUDA_ARCHS})
    enable_language(CUDA)
    # CMake 3.25 predates nvcc 13 and knows no flag for the C++20 dialect our headers need.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    find_package(CUDAToolkit)
    find_path(HR_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS}
              PATHS /usr/include/x86_64-linux-gnu /usr/include)
    find_library(HR_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR}
                 PATHS /usr/lib/x86_64-linux-gnu)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt AND HR_CUDNN_INCLUDE AND HR_CUDNN_LIB
       AND EXISTS ${CMAKE_SOURCE_DIR}/src/backend/cuda/cuda_backend.cpp)
      set(HR_WITH_CUDA ON)
    endif()
  endif()
  if(NOT HR_WITH_CUDA AND HEADROOM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HEADROOM_CUDA=ON but the CUDA toolkit, cuBLASLt or cuDNN was not found")
  endif()
endif()
message(STATUS "CUDA backend: ${HR_WITH_CUDA}")

function(hr_cuda_sources target)
  file(GLOB cu CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu
       ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
  target_sources(${target} PRIVATE ${cu})
  target_include_directories(${target} PRIVATE ${HR_CUDNN_INCLUDE})
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt ${HR_CUDNN_LIB}
                        ${CMAKE_DL_LIBS})
  target_compile_definitions(${target} PUBLIC HEADROOM_WITH_CUDA=1)
  target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xcompiler=-Wall>)
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()
