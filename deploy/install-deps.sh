#!/usr/bin/env bash
# Installs the Debian 12 packages cq needs to build and test, only those missing.
# Run as root or with sudo available.
set -euo pipefail
packages=(
  build-essential cmake pkg-config git ccache procps jq sqlite3 iproute2 tcpdump systemd python3
  libcaf-dev cppzmq-dev libzmq3-dev libmsgpack-cxx-dev libsqlite3-dev
  libboost-dev libboost-filesystem-dev libsodium-dev libsystemd-dev catch2
  libcli11-dev libfmt-dev libspdlog-dev libtomlplusplus-dev nlohmann-json3-dev
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
