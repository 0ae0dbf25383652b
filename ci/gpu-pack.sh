#!/usr/bin/env bash
# Builds the CUDA suite on this machine (which has the toolkit but maybe no GPU) and packs what a
# GPU machine needs to run it without this machine's packages: the GPU test binary, the kvcheck
# CLI and the benchmark binaries, every shared library they load (libc and the loader included)
# except the CUDA driver and cuBLAS, which come from the GPU machine's toolkit. Then:
#   ./ci/gpu-pack.sh [DIR]            (default .gpu; list it in .git/info/exclude)
#   on the GPU machine, in the repo root:  ./ci/gpu.sh --prebuilt .gpu
# KVCHECK_BUILD_DIR (default build-cuda) is the CUDA build directory.
set -euo pipefail
cd "$(dirname "$0")/.."

pack=${1:-.gpu}
build_dir=${KVCHECK_BUILD_DIR:-build-cuda}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKVCHECK_CUDA=ON ${KVCHECK_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "${KVCHECK_JOBS:-$(nproc)}" \
  --target kvcheck kvcheck_gpu_tests kvcheck_bench_kernels kvcheck_bench_pages kvcheck_bench_attention

rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
for b in "$build_dir/properties/kvcheck_gpu_tests" "$build_dir/bin/kvcheck" "$build_dir"/bin/kvcheck_bench_*; do
  [[ -x $b ]] || continue
  cp "$b" "$pack/bin/"
  strip --strip-unneeded "$pack/bin/$(basename "$b")"
  # Every resolved dependency but the CUDA ones (driver, runtime, cuBLAS: the GPU machine's own).
  ldd "$b" | awk '/=> \// {print $3} /^\s*\/.*ld-linux/ {print $1}' | while read -r lib; do
    case "$(basename "$lib")" in
      libcuda.so*|libcudart.so*|libcublas*.so*|libnvidia*) ;;
      *) cp -L -n "$lib" "$pack/lib/" ;;
    esac
  done
done
cp -L "$(ldd "$build_dir/bin/kvcheck" | awk '/ld-linux/ {print $1}')" "$pack/lib/ld-linux-x86-64.so.2"
du -sh "$pack"
echo "packed into $pack; run ./ci/gpu.sh --prebuilt $pack on a machine with a CUDA device"
