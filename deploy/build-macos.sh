#!/usr/bin/env bash
# Builds cq on macOS (Apple Silicon or Intel) into build/: the libraries
# Homebrew has in a version cq accepts come from Homebrew; the ones it has
# only in a newer, incompatible major version (CAF 0.17, msgpack-cxx 4,
# Catch2 2, fmt 9 and spdlog 1.10 as Debian 12 ships them) are built from
# their release tarballs into $CQ_DEPS (default ~/.local/cq-deps), once.
#
#   deploy/build-macos.sh [--test]   (--test: then run the unit tests)
#
# Needs the Xcode command line tools (xcode-select --install) and Homebrew.
# No macOS machine builds this project's own CI; .github/workflows/macos.yml
# runs this on a hosted runner (docs/install.md, "A Mac node").
set -euo pipefail
[[ $(uname -s) == Darwin ]] || { echo "build-macos.sh: this is for macOS" >&2; exit 2; }
command -v brew >/dev/null || { echo "build-macos.sh: install Homebrew first (https://brew.sh)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
deps=${CQ_DEPS:-$HOME/.local/cq-deps}
jobs=$(sysctl -n hw.ncpu)

brew install cmake pkg-config ccache jq zeromq cppzmq libsodium sqlite cli11 nlohmann-json \
  tomlplusplus boost@1.85
boost=$(brew --prefix boost@1.85)

# fetch NAME URL: downloads and unpacks a release tarball into $deps/src/NAME.
fetch() {
  mkdir -p "$deps/src"
  [[ -d $deps/src/$1 ]] && return 0
  curl -fsSL "$2" -o "$deps/src/$1.tar.gz"
  mkdir -p "$deps/src/$1"
  tar -xzf "$deps/src/$1.tar.gz" -C "$deps/src/$1" --strip-components 1
}
# build NAME [CMAKE ARGS...]: configures, builds and installs into $deps.
build() {
  local name=$1
  shift
  [[ -f $deps/src/$name/.installed ]] && return 0
  cmake -S "$deps/src/$name" -B "$deps/src/$name/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$deps" -DCMAKE_PREFIX_PATH="$deps" "$@"
  cmake --build "$deps/src/$name/build" -j "$jobs"
  cmake --install "$deps/src/$name/build"
  touch "$deps/src/$name/.installed"
}

fetch caf https://github.com/actor-framework/actor-framework/archive/refs/tags/0.17.6.tar.gz
build caf -DCAF_NO_EXAMPLES=ON -DCAF_NO_UNIT_TESTS=ON -DCAF_NO_TOOLS=ON -DCAF_NO_OPENSSL=ON \
  -DCAF_NO_OPENCL=ON -DCAF_NO_BENCHMARKS=ON -DCAF_NO_PYTHON=ON -DCMAKE_CXX_STANDARD=17
fetch msgpack https://github.com/msgpack/msgpack-c/releases/download/cpp-4.1.3/msgpack-cxx-4.1.3.tar.gz
build msgpack -DMSGPACK_USE_BOOST=OFF -DMSGPACK_BUILD_TESTS=OFF -DMSGPACK_BUILD_EXAMPLES=OFF
fetch catch2 https://github.com/catchorg/Catch2/archive/refs/tags/v2.13.10.tar.gz
build catch2 -DCATCH_BUILD_TESTING=OFF -DCATCH_INSTALL_DOCS=OFF
fetch fmt https://github.com/fmtlib/fmt/archive/refs/tags/9.1.0.tar.gz
build fmt -DFMT_TEST=OFF -DFMT_DOC=OFF
fetch spdlog https://github.com/gabime/spdlog/archive/refs/tags/v1.10.0.tar.gz
build spdlog -DSPDLOG_FMT_EXTERNAL=ON -DSPDLOG_BUILD_EXAMPLE=OFF

cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$deps;$boost;$(brew --prefix)"
cmake --build "$root/build" -j "$jobs" --target cq-node cq-shim cq cq_unit_tests
echo "built: $root/build/bin/cq-node (cq-node --version; cq-node doctor)"
if [[ ${1:-} == --test ]]; then
  "$root/build/bin/cq_unit_tests" "~[linux]" # [linux]: cases that read /proc
  "$root/build/bin/cq-node" --version
  "$root/build/bin/cq-node" doctor --state "$(mktemp -d)"
fi
