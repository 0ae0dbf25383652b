#!/usr/bin/env bash
# Installs every C++ build and test dependency of kvcheck from Debian packages.
# Idempotent: packages already present are not reinstalled and apt is not touched at all
# when everything is there. Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential
  cmake
  pkg-config
  libeigen3-dev
  nlohmann-json3-dev
  libsentencepiece-dev
  sentencepiece
  libonig-dev
  libutf8proc-dev
  librapidcheck-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libcli11-dev
  libfmt-dev
  python3
  python3-numpy
  python3-torch
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
