#!/usr/bin/env bash
# The CUDA 12 path on the GPU machine: its driver (580, CUDA 13.0) runs CUDA 12 code, so laying the
# cu12 extra's wheels over the machine's cu13 stack proves qualify[cu12] there (cuda-bindings 12.9,
# NVRTC 12.9, its headers and CCCL, chosen by qualify.generation, loaded by the start-up check).
#
# The machine reaches no registry, so the wheels are carried; a call carries at most 64 MiB with the
# working tree (about 9 MB) and NVRTC's wheel alone is 90 MB. `stage` therefore splits it: the first
# 50 MiB in .cu12/a, the rest with cuda-bindings and the runtime headers in .cu12/b (about 48 MB);
# .cu12/ is git-ignored, as carry requires.
# Two calls on the same warm machine (an ignored path carried once stays there):
#
#   here:    tools/cu12_overlay.sh stage
#   call 1:  carry [".cu12/a"]           command: ls -l .cu12/a
#   call 2:  carry [".gpu", ".cu12/b"]   command: source .gpu/setup.sh && tools/cu12_overlay.sh run \
#                                                   python3 -m pytest -m gpu -q tests/gpu/test_generation_gpu.py
#
# `run CMD...` joins and checks the wheels (sha256 from stage), installs them once into
# /tmp/site-cu12, and runs CMD with that folder first on PYTHONPATH (cuda-bindings 12 shadows 13)
# and NVRTC 12's folder on LD_LIBRARY_PATH (cuda-pathfinder searches site-packages, not PYTHONPATH).
set -euo pipefail
action=${1:?usage: tools/cu12_overlay.sh stage | run CMD...}
shift
site=/tmp/site-cu12

case "$action" in
stage)
  root=$(git rev-parse --show-toplevel)
  kit=$root/.cu12
  rm -rf "$kit"
  mkdir -p "$kit/a" "$kit/b" "$kit/download"
  # the GPU machine's python3 is 3.12 on x86-64 Linux
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 \
    -d "$kit/download" "cuda-bindings>=12.9,<13" "nvidia-cuda-nvrtc-cu12==12.9.*" "nvidia-cuda-runtime-cu12==12.9.*" \
    "nvidia-cuda-cccl-cu12==12.9.*"
  (cd "$kit/download" && sha256sum -- *.whl) >"$kit/b/SHA256SUMS"
  nvrtc=$(cd "$kit/download" && ls nvidia_cuda_nvrtc_cu12-*.whl)
  split -b 50M -d "$kit/download/$nvrtc" "$kit/a/$nvrtc.part"
  for part in "$kit/a/$nvrtc".part*; do
    [ "$part" = "$kit/a/$nvrtc.part00" ] || mv "$part" "$kit/b/"
  done
  mv "$kit/download"/cuda_bindings-*.whl "$kit/download"/nvidia_cuda_runtime_cu12-*.whl \
    "$kit/download"/nvidia_cuda_cccl_cu12-*.whl "$kit/b/"
  rm -rf "$kit/download"
  du -sh "$kit/a" "$kit/b"
  ;;
run)
  [ "$#" -gt 0 ] || { echo "cu12_overlay: run needs a command" >&2; exit 2; }
  if [ ! -d "$site/cuda/bindings" ]; then
    [ -d .cu12/a ] && [ -d .cu12/b ] || { echo "cu12_overlay: .cu12/a and .cu12/b are not both here (carry them)" >&2; exit 5; }
    wheels=$(mktemp -d)
    cp .cu12/b/*.whl "$wheels/"
    nvrtc=$(basename "$(ls .cu12/a/*.part00)" .part00)
    cat .cu12/a/"$nvrtc".part* .cu12/b/"$nvrtc".part* >"$wheels/$nvrtc"
    (cd "$wheels" && sha256sum --quiet -c "$OLDPWD/.cu12/b/SHA256SUMS") || { echo "cu12_overlay: a wheel does not match its sha256" >&2; exit 5; }
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl
    rm -rf "$wheels"
  fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  export LD_LIBRARY_PATH=$site/nvidia/cuda_nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # On the H200 the path alone was not enough: cuda-pathfinder found the machine's own NVRTC 13.0
  # (in its torch venv) before this one, and `qualify doctor` refused the mixed stack
  # (docs/ci-h200/cu12/doctor-mixed-stack.txt). NVRTC 12 loaded first is the one pathfinder takes.
  export LD_PRELOAD=$site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12${LD_PRELOAD:+:$LD_PRELOAD}
  exec "$@"
  ;;
*)
  echo "usage: tools/cu12_overlay.sh stage | run CMD..." >&2
  exit 2
  ;;
esac
