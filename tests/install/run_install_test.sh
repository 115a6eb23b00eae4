#!/usr/bin/env bash
# usage: run_install_test.sh BUILD_DIR CONSUMER_SOURCE WORK_DIR [SANITIZER]
set -euo pipefail
build_dir=$1 consumer=$2 work=$3 sanitize=${4:-}
rm -rf "$work"
prefix="$work/prefix"
cmake --install "$build_dir" --prefix "$prefix" >/dev/null

for path in include/shmccl/shmccl.hpp lib/libshmccl.so lib/libshmccl.a \
            lib/cmake/shmccl/shmcclConfig.cmake lib/pkgconfig/shmccl.pc bin/shmrun \
            bin/shmccl-perf; do
  [ -e "$prefix/$path" ] || { echo "missing from the install: $path" >&2; exit 1; }
done
# The shared library calls its own functions directly (-Bsymbolic-functions): through its PLT,
# a synchronous collective's call overhead was a third larger (docs/performance.md).
own_plt=$(readelf -rW "$prefix/lib/libshmccl.so" | awk '/JUMP_SLOT/ && $5 ~ /^_ZNK?6shmccl/' | wc -l)
if [ "$own_plt" -ne 0 ]; then
  echo "libshmccl.so calls $own_plt of its own functions through its PLT" >&2
  exit 1
fi
# It exports its interface only (the public headers' declarations), none of its internals: no
# symbol (function, object, vtable or typeinfo) of an internal namespace, at any depth
# (shmccl::detail::, shmccl::npu::detail::, shmccl::json::, ...). Public functions may still name
# internal types in their parameters.
internal=$(nm -DC --defined-only "$prefix/lib/libshmccl.so" | sed -E 's/^[0-9a-f]+ [A-Za-z] //' |
           grep -cE '^((typeinfo|typeinfo name|vtable|VTT|guard variable) for )?shmccl::([a-z_]+::)*(collectives|transport|device|ops|kernels|config|log|json|detail)::' || true)
if [ "$internal" -ne 0 ]; then
  echo "libshmccl.so exports $internal internal symbols" >&2
  exit 1
fi
# The installed tools run from the prefix (shmccl-perf alone is a job of one rank).
"$prefix/bin/shmrun" --version >/dev/null
"$prefix/bin/shmccl-perf" -o all_gather_uneven -b 8 -e 1K -f 8 -n 1 -w 0 >/dev/null

flags=""
case "$sanitize" in
  address) flags="-fsanitize=address,undefined" ;;
  thread) flags="-fsanitize=thread" ;;
esac

# 1. find_package(shmccl), libshmccl.so, on a machine without shmccl's own dependencies'
# packages: oneDNN, OpenMP, pkg-config and libnuma's and liburing's .pc files are all hidden.
PKG_CONFIG_LIBDIR="$prefix/lib/pkgconfig" \
  cmake -S "$consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=TRUE \
      -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=TRUE \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$work/cmake-build/consumer"

# 2. find_package(shmccl COMPONENTS static), libshmccl.a, where its dependencies are installed.
cmake -S "$consumer" -B "$work/cmake-build-static" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCONSUMER_STATIC=ON -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$work/cmake-build-static" >/dev/null
if readelf -d "$work/cmake-build-static/consumer" | grep -q 'libshmccl\.so'; then
  echo "the static consumer links libshmccl.so" >&2
  exit 1
fi
"$work/cmake-build-static/consumer"

# 3. pkg-config, with only shmccl's .pc file to be found.
export PKG_CONFIG_LIBDIR="$prefix/lib/pkgconfig"
pkg-config --exists shmccl
g++ $flags $(pkg-config --cflags shmccl) "$consumer/main.cc" -o "$work/pkg-consumer" \
    $(pkg-config --libs shmccl)
LD_LIBRARY_PATH="$prefix/lib" "$work/pkg-consumer"
echo "install test passed"
