#!/usr/bin/env bash
# tools/make_deps_prefix.sh: a relocatable folder of the build dependencies that tools/gpu_check.sh
# needs, taken from this machine's Debian (bookworm) packages with `apt-get download` + `dpkg -x`,
# for a GPU machine that lacks them (no network there, nothing to install). It holds CMake (with
# the libraries its binary needs beyond a minimal Debian), ninja, pkgconf and the headers and
# libraries of zlib, nlohmann-json, CLI11, toml++, md4c, OpenBLAS, GoogleTest and Gloo. Not here:
# a C++ compiler and the CUDA toolkit (nvcc, cuBLAS, NCCL), which a GPU machine must have.
#
#   tools/make_deps_prefix.sh [DIR]   the folder (default build/deps-prefix, about 100 MiB) and DIR.tar.gz
#                                     (about 38 MiB: what travels; a device run carries at most 64 MiB,
#                                     run(carry=["build/deps-prefix.tar.gz"]))
#   tools/gpu_check.sh --deps-prefix build/deps-prefix.tar.gz   (unpacks it into its build folder;
#                                     it also finds build/deps-prefix[.tar.gz] by itself)
#
# pkg-config files are rewritten to be found relative to their own folder (${pcfiledir}); the CMake
# package files Debian ships are relocatable already. Static archives nobody links and the
# documentation are left out to stay small.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=$(realpath -m "${1:-$ROOT/build/deps-prefix}")
PACKAGES=(
  # the build tools
  cmake cmake-data ninja-build pkgconf pkgconf-bin libpkgconf3
  # what the cmake binary links beyond a minimal Debian (ldd in a debootstrap --variant=minbase)
  libjsoncpp25 librhash0 libuv1 libarchive13 libcurl4 libnghttp2-14 libidn2-0 librtmp1 libssh2-1
  libpsl5 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libldap-2.5-0
  libsasl2-2 libsasl2-modules-db libbrotli1 libxml2 libicu72 libexpat1 libssl3 libunistring2
  # the libraries of CMakeLists.txt and tests/CMakeLists.txt (the visualizer is left out)
  zlib1g-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libtomlplusplus3 libmd4c-dev
  libmd4c0 libmd4c-html0 libmd4c-html0-dev libopenblas-dev libopenblas-pthread-dev
  libopenblas0-pthread libopenblas0 libgfortran5 libgtest-dev libgmock-dev
  # Gloo (find_package(Gloo CONFIG REQUIRED): DDP between processes) and what libgloo0 links
  libgloo-dev libgloo0 libhiredis-dev libhiredis0.14 libibverbs-dev libibverbs1 libnl-3-200 libnl-route-3-200
)
command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
  { echo "make_deps_prefix.sh: needs a Debian system (apt-get, dpkg)" >&2; exit 1; }
DEBS=$(mktemp -d)
trap 'rm -rf "$DEBS"' EXIT
(cd "$DEBS" && apt-get download "${PACKAGES[@]}" >/dev/null 2>"$DEBS/download.log") ||
  { cat "$DEBS/download.log" >&2; echo "make_deps_prefix.sh: apt-get download failed (run apt-get update?)" >&2; exit 1; }
rm -rf "$PREFIX"
mkdir -p "$PREFIX"
for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$PREFIX"; done
LIB=$PREFIX/usr/lib/x86_64-linux-gnu
# Debian's alternatives would point libblas.so.3 at /etc/alternatives: link OpenBLAS directly.
ln -sf openblas-pthread/libblas.so.3 "$LIB/libblas.so.3" 2>/dev/null || true
ln -sf openblas-pthread/libopenblas.so.0 "$LIB/libopenblas.so.0"
ln -sf openblas-pthread/libopenblas.so "$LIB/libopenblas.so"
# Debian 12's CMake 3.25.1 FindCUDAToolkit sets a property on CUDA::nvToolsExt even when the
# library was not found, and CUDA 13 ships no nvToolsExt: every configure with CUDA 13 fails
# ("set_property could not find TARGET CUDA::nvToolsExt"). Furnace's CMakeLists.txt steps around it
# itself; the bundled CMake also gets the guard later CMake releases have, for any other project:
sed -i 's/^\(    if(\)CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)$/\1TARGET CUDA::nvToolsExt AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)/' \
  "$PREFIX"/usr/share/cmake-3.25/Modules/FindCUDAToolkit.cmake
grep -q 'if(TARGET CUDA::nvToolsExt AND' "$PREFIX"/usr/share/cmake-3.25/Modules/FindCUDAToolkit.cmake ||
  { echo "make_deps_prefix.sh: could not patch FindCUDAToolkit.cmake (CMake is not 3.25.1?)" >&2; exit 1; }
# Relocatable pkg-config files.
find "$PREFIX" -name '*.pc' -print0 | xargs -0 sed -i 's|^prefix=/usr$|prefix=${pcfiledir}/../../..|'
# Smaller: documentation, and static archives other than GoogleTest's.
rm -rf "$PREFIX"/usr/share/{doc,man,info,lintian,bash-completion,emacs,vim,aclocal} "$PREFIX"/usr/share/cmake-*/Help
find "$PREFIX" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
rm -f "$PREFIX"/usr/bin/{cpack,ctest,ccmake} "$LIB"/openblas-pthread/liblapack.so*
cat >"$PREFIX/README" <<EOF
Made by tools/make_deps_prefix.sh on $(date -u +%Y-%m-%d) from Debian $(cat /etc/debian_version 2>/dev/null || echo '?') packages:
${PACKAGES[*]}
Use: tools/gpu_check.sh --deps-prefix $PREFIX
EOF
tar -C "$(dirname "$PREFIX")" -czf "$PREFIX.tar.gz" "$(basename "$PREFIX")"
echo "make_deps_prefix.sh: $PREFIX ($(du -sm "$PREFIX" | cut -f1) MiB), $PREFIX.tar.gz ($(du -sm "$PREFIX.tar.gz" | cut -f1) MiB)"
