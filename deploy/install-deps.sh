#!/usr/bin/env bash
# Installs the Debian 12 packages cq needs to build and test, only those missing.
# Run as root or with sudo available.
set -euo pipefail
if [[ $(uname -s) != Linux ]] || ! command -v dpkg-query >/dev/null; then
  # Not Debian (macOS, another distribution): nothing here can install
  # packages. Say what the build needs instead of failing on apt.
  cat >&2 <<'MSG'
install-deps.sh: this machine has no apt (Debian 12 is what this script knows).
cq needs, by their Debian names: a C++20 compiler, cmake, pkg-config,
libcaf-dev (CAF 0.17, not 1.x), cppzmq-dev, libzmq3-dev, libmsgpack-cxx-dev,
libsqlite3-dev, libboost-filesystem-dev, libsodium-dev, catch2 (v2),
libcli11-dev, libfmt-dev, libspdlog-dev, libtomlplusplus-dev,
nlohmann-json3-dev, libcpp-httplib-dev and libcurl4-openssl-dev (the
coordinator's status page and notifications); libsystemd-dev is optional
(systemd readiness). The tests also use chromium and promtool (prometheus).
Install those with this system's package manager, then run deploy/build.sh.
On macOS, deploy/build-macos.sh builds cq-node with Homebrew and the
libraries it lacks (docs/install.md, "A Mac node").
MSG
  exit 1
fi
packages=(
  build-essential cmake pkg-config git ccache procps jq sqlite3 iproute2 tcpdump systemd python3
  tmux
  libcaf-dev cppzmq-dev libzmq3-dev libmsgpack-cxx-dev libsqlite3-dev
  libboost-dev libboost-filesystem-dev libsodium-dev libsystemd-dev catch2
  libcli11-dev libfmt-dev libspdlog-dev libtomlplusplus-dev nlohmann-json3-dev
  libgoogle-perftools-dev
  libcpp-httplib-dev libcurl4-openssl-dev
  chromium fonts-dejavu-core prometheus
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "cq: all build dependencies are installed"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "cq: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "cq: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# prometheus is here for its promtool (the metrics test); its own server is
# not wanted on a build machine.
if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
