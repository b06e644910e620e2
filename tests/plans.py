"""Builders of small valid plans in a temporary repository, for the CPU tests."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

KERNEL = """\
#include "common.cuh"
template <int VEC>
__global__ void __launch_bounds__(256) axpy(const float* x, const float* y, float* out, float a, long long n) {
    const long long i = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
    for (int k = 0; k < VEC; ++k) if (i + k < n) out[i + k] = scaled(a, x[i + k], y[i + k]);
}
"""
HEADER = "__device__ inline float scaled(float a, float x, float y) { return fmaf(a, x, y); }\n"

PLAN = {
    "schema_version": 1,
    "name": "tiny",
    "hypothesis": "vector loads are faster",
    "independent_variable": "load width",
    "revisions": {"base": "vec1", "candidate": "vec4"},
    "hardware": {"devices": [{"compute_capability": "9.0"}], "architectures": ["sm_90"]},
    "arms": {
        "base": {"kind": "cuda", "source": "../../kernels/k.cu", "kernel": "axpy<1>", "params": {"VEC": 1}},
        "candidate": {"kind": "cuda", "source": "../../kernels/k.cu", "kernel": "axpy<4>", "params": {"VEC": 4}},
    },
    "workload": {
        "params": {"THREADS": 256},
        "cases": [{"N": 1024}, {"N": 4096}],
        "buffers": [
            {"name": "x", "dtype": "f32", "shape": ["N"], "role": "input", "init": {"kind": "normal"}},
            {"name": "y", "dtype": "f32", "shape": ["N"], "role": "input", "init": {"kind": "zeros"}},
            {"name": "out", "dtype": "f32", "shape": ["N"], "role": "output"},
        ],
        "launch": {
            "grid": ["cdiv(N, THREADS * VEC)"],
            "block": ["THREADS"],
            "shared_bytes": 0,
            "args": [
                {"kind": "buffer", "name": "x"},
                {"kind": "buffer", "name": "y"},
                {"kind": "buffer", "name": "out"},
                {"kind": "f32", "value": 0.5},
                {"kind": "i64", "value": "N"},
            ],
        },
    },
    "seeds": {"base": 7},
    "schedule": {"samples_per_block": 5, "blocks": 4, "trials": 2},
    "budget": {"max_trials": 2, "max_samples": 100, "max_wall_seconds": 60},
    "acceptance": {
        "gates": [{"name": "faster", "where": "N >= 4096", "min_speedup_pct": 1.0}],
        "sanitizer": [{"tool": "memcheck", "cases": ["N=1024"]}],
    },
    "controls": {
        "negative": [
            {"kind": "input", "name": "flip", "buffer": "x", "mutation": {"op": "flip_bit", "index": 0, "bit": 22}}
        ]
    },
}


def make_repo(
    root: Path, plan: dict | None = None, files: dict[str, str | Path] | None = None, freeze: bool = False
) -> Path:
    """A repository at `root` holding `files` (repository path → text, or a file to copy; by
    default kernels/k.cu and its header) and protocols/tiny/plan.json, frozen if asked."""
    (root / ".git").mkdir(parents=True, exist_ok=True)
    if files is None:
        files = {"kernels/k.cu": KERNEL, "kernels/common.cuh": HEADER}
    for rel, content in files.items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, dest)
        else:
            dest.write_text(content)
    plan_dir = root / "protocols" / "tiny"
    plan_dir.mkdir(parents=True, exist_ok=True)
    path = plan_dir / "plan.json"
    path.write_text(json.dumps(plan if plan is not None else PLAN, indent=2))
    if freeze:
        from qualify.plan.digest import freeze as write_lock
        from qualify.plan.load import load_plan

        loaded = load_plan(path)
        write_lock(loaded.path, loaded.freeze)
    return path


def plan_copy() -> dict:
    return copy.deepcopy(PLAN)
