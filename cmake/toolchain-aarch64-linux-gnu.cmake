# Cross-compiles for arm64 (aarch64-linux-gnu) with Debian's crossbuild-essential-arm64 and the
# multiarch arm64 -dev packages (scripts/cross-arm64.sh sets them up in a container).
# With qemu-user-static present, ctest runs the arm64 test executables under qemu-aarch64-static.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Programs (protoc-c) come from the build host; libraries and headers from the arm64 packages.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config must see only the arm64 .pc files (multiarch puts them under the triplet).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
find_program(MV_QEMU_AARCH64 qemu-aarch64-static)
if(MV_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${MV_QEMU_AARCH64})
endif()
