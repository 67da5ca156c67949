# Third-party dependencies, all from Debian 12 packages (installed by .ci/install-deps).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PNG REQUIRED)
find_package(yaml-cpp REQUIRED)  # checkpoint config files, extra_model_paths.yaml
find_package(SQLite3 REQUIRED)   # the server's queue and history (libsqlite3-dev)
find_package(Boost 1.74 REQUIRED)  # header-only Beast and Asio for the server (libboost-dev)

# OpenBLAS (libopenblas-dev): multi-threaded sgemm for the CPU backend.
find_path(HR_BLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread
          x86_64-linux-gnu)
find_library(HR_BLAS_LIB NAMES openblas)
if(NOT HR_BLAS_INCLUDE OR NOT HR_BLAS_LIB)
  message(FATAL_ERROR "OpenBLAS not found: install libopenblas-dev (see .ci/install-deps)")
endif()
set(HR_BLAS_LIBS ${HR_BLAS_LIB})
message(STATUS "OpenBLAS: ${HR_BLAS_LIB} (${HR_BLAS_INCLUDE})")

# /view's preview=webp;90 and preview=jpeg;90 (ComfyUI's thumbnails): libwebp-dev and
# libjpeg-dev when present (.ci/install-deps installs both); without them previews are PNG.
find_package(JPEG)
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(HR_WEBP IMPORTED_TARGET libwebp)
endif()

# The Redis Streams queue (`headroom serve --queue`, `headroom worker`): hiredis (libhiredis-dev,
# .ci/install-deps) when present; without it those commands say how to get it.
option(HEADROOM_REDIS "Build the Redis queue when hiredis is found" ON)
if(HEADROOM_REDIS AND PkgConfig_FOUND)
  pkg_check_modules(HR_HIREDIS IMPORTED_TARGET hiredis)
endif()
