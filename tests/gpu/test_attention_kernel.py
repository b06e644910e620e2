"""GPU proof of the attention kernel pair (64-row and 128-row query tiles).

Every test is marked `gpu`: tests/conftest.py skips them without a device and fails them when
QUALIFY_REQUIRE_GPU=1. Importing this module needs numpy only; the two libraries are built by a
session fixture with `make -C kernels/attention BUILD=<dir>` (ATTENTION_BUILD_DIR reuses a folder,
make rebuilds only what is stale).

What is proven, per length T in LENGTHS with strided V and Hq=16, Hk=4:
  * float64 reference on sampled rows, relative error below 1.6e-2 (gated and ungated);
  * gated output == ungated output followed by attention_sigmoid_gate, bit for bit;
  * 64-row and 128-row libraries give the same bytes;
  * prefix windows equal the full pass bit for bit and leave rows below q_base untouched;
  * memcheck and racecheck report no errors at T=640 for both tiles;
  * invalid arguments return cudaErrorInvalidValue.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

_HERE = Path(__file__).resolve().parent


def _load_harness():
    if "attention_harness" in sys.modules:
        return sys.modules["attention_harness"]
    spec = importlib.util.spec_from_file_location("attention_harness", _HERE / "attention_harness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["attention_harness"] = module
    spec.loader.exec_module(module)
    return module


ah = _load_harness()

pytestmark = pytest.mark.gpu

LENGTHS = [1, 63, 64, 65, 127, 128, 129, 139, 640, 700, 2048]
HQ, HK = 16, 4
REL_TOL = 1.6e-2
PREFIX_CASES = [(2048, 64), (2048, 128), (2048, 1024), (700, 64), (700, 128)]
TILES = ("base", "cand")


# ------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def libs(tmp_path_factory):
    build_dir = os.environ.get("ATTENTION_BUILD_DIR") or tmp_path_factory.mktemp("attention-build")
    paths = ah.build_libraries(Path(build_dir))
    return {name: ah.AttentionLib(path) for name, path in paths.items()}


@pytest.fixture(scope="session")
def device():
    dev = ah.Device(0)
    yield dev
    dev.close()


class _Runs:
    """Uploads each shape once and memoises every output, so tests share launches."""

    def __init__(self, device, libs):
        self.device, self.libs = device, libs
        self._cases: dict = {}
        self._outs: dict = {}

    def case(self, T, Hq=HQ, Hk=HK):
        key = (T, Hq, Hk)
        if key not in self._cases:
            self._cases[key] = ah.DeviceCase(self.device, ah.Case(T=T, Hq=Hq, Hk=Hk, seed=1000 + T + 7 * Hq))
        return self._cases[key]

    def out(self, tile, kind, T, Hq=HQ, Hk=HK, q_base=0):
        key = (tile, kind, T, Hq, Hk, q_base)
        if key not in self._outs:
            dc, lib = self.case(T, Hq, Hk), self.libs[tile]
            if kind == "prefix":
                self._outs[key] = dc.gated_prefix(lib, q_base)
            else:
                self._outs[key] = getattr(dc, kind)(lib)
        return self._outs[key]


@pytest.fixture(scope="session")
def runs(device, libs):
    return _Runs(device, libs)


def _mismatch(a: np.ndarray, b: np.ndarray) -> str:
    diff = np.argwhere(a != b)
    first = tuple(int(x) for x in diff[0]) if len(diff) else None
    return f"{len(diff)} of {a.size} elements differ (first at row/head/dim {first})"


def _check_reference(runs, T, Hq, Hk):
    dc = runs.case(T, Hq, Hk)
    rows = ah.sample_rows(T)
    heads = sorted({0, Hq // 2 - 1, Hq // 2, Hq - 1})
    ref_attn, ref_gated = ah.reference_rows(dc.case, rows, heads)
    report = []
    for tile in TILES:
        for kind, ref in (("ungated", ref_attn), ("gated", ref_gated)):
            out = ah.from_bf16(runs.out(tile, kind, T, Hq, Hk)).astype(np.float64)
            got = out[np.asarray(rows)][:, np.asarray(heads)]
            err = np.linalg.norm(got - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
            worst = np.unravel_index(np.argmax(err), err.shape)
            report.append((tile, kind, float(err.max()), rows[worst[0]], heads[worst[1]]))
    bad = [r for r in report if not r[2] < REL_TOL]
    assert not bad, f"T={T} Hq={Hq} Hk={Hk}: relative error >= {REL_TOL}: {bad}"


# ---------------------------------------------------------------------------------------- tests
def test_abi_version_and_error_string(libs):
    for lib in libs.values():
        assert lib.abi_version() == 1
        assert lib.error_string(ah.CUDA_ERROR_INVALID_VALUE)  # cudaGetErrorString text


@pytest.mark.parametrize("T", LENGTHS)
def test_matches_float64_reference(runs, T):
    _check_reference(runs, T, HQ, HK)


def test_matches_float64_reference_gqa_24_4(runs):
    _check_reference(runs, 700, 24, 4)
    assert np.array_equal(runs.out("base", "gated", 700, 24, 4), runs.out("cand", "gated", 700, 24, 4))


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("tile", TILES)
def test_gated_equals_ungated_then_gate(runs, tile, T):
    fused = runs.out(tile, "gated", T)
    separate = runs.out(tile, "ungated_then_gate", T)
    assert not (fused == ah.SENTINEL).any(), "gated pass left rows unwritten"
    assert np.array_equal(fused, separate), _mismatch(fused, separate)


@pytest.mark.parametrize("T", LENGTHS)
def test_tiles_byte_identical(runs, T):
    for kind in ("gated", "ungated"):
        base, cand = runs.out("base", kind, T), runs.out("cand", kind, T)
        assert not (base == ah.SENTINEL).any(), f"{kind}: base left rows unwritten"
        assert np.array_equal(base, cand), f"{kind}: " + _mismatch(base, cand)


@pytest.mark.parametrize("T,q_base", PREFIX_CASES)
@pytest.mark.parametrize("tile", TILES)
def test_prefix_window_matches_full_pass(runs, tile, T, q_base):
    full = runs.out(tile, "gated", T)
    window = runs.out(tile, "prefix", T, q_base=q_base)
    assert (window[:q_base] == ah.SENTINEL).all(), "prefix pass wrote rows below q_base"
    assert np.array_equal(window[q_base:], full[q_base:]), _mismatch(window[q_base:], full[q_base:])
    # and across tiles: a window of one tile equals the full pass of the other
    other = runs.out("cand" if tile == "base" else "base", "gated", T)
    assert np.array_equal(window[q_base:], other[q_base:])


def test_argument_validation(runs, libs, device):
    dc = runs.case(129)
    c, s = dc.case, device.stream
    inval = ah.CUDA_ERROR_INVALID_VALUE
    for lib in libs.values():
        good = dict(
            q=dc.q,
            k=dc.k,
            v=dc.v,
            ldv=c.ldv,
            gate=dc.gate,
            out=dc.tmp,
            T=c.T,
            Hq=c.Hq,
            Hk=c.Hk,
            scale=c.scale,
            stream=s,
        )

        def gated(**kw):
            return lib.gated(**{**good, **kw})

        def prefix(q_base, **kw):
            return lib.gated_prefix(q_base=q_base, **{**good, **kw})

        assert gated(Dh=128) == inval
        assert gated(Hq=0) == inval
        assert gated(Hk=0) == inval
        assert gated(Hq=16, Hk=3) == inval  # Hq % Hk != 0
        assert gated(ldv=c.Hk * 256 - 8) == inval  # ldv < Hk * 256
        assert gated(ldv=c.ldv + 4) == inval  # ldv % 8 != 0
        assert gated(T=-1) == inval
        assert gated(gate=None) == inval
        assert gated(q=None) == inval
        assert prefix(32) == inval  # not a multiple of 64
        assert prefix(-64) == inval
        assert prefix(192) == inval  # beyond T = 129
        assert lib.ungated(dc.q, dc.k, dc.v, c.ldv, dc.tmp, c.T, c.Hq, c.Hk, c.scale, s, Dh=64) == inval
        # empty windows succeed without launching, even with null pointers
        nulls = dict(q=None, k=None, v=None, gate=None, out=None)
        assert gated(T=0, **nulls) == 0
        assert prefix(128, T=128, **nulls) == 0
        assert lib.sigmoid_gate(None, None, None, 0, s) == 0
        assert lib.sigmoid_gate(dc.tmp, dc.gate, dc.out, -1, s) == inval
        assert gated() == 0  # the good arguments still launch
    device.synchronize()


# ------------------------------------------------------------------------------------ sanitizer
_RUNNER = _HERE / "attention_sanitize_run.py"


def _run_sanitizer(tool: str, lib_path: Path, T: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    sanitizer = ah.find_sanitizer()
    if sanitizer is None:
        pytest.fail("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    base = [sanitizer, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20"]
    tail = [sys.executable, str(_RUNNER), str(lib_path), str(T)]
    cmd = base + tail
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    # cuda.bindings resolves driver entry points with cuGetProcAddress; a symbol the driver lacks
    # shows up in memcheck as CUDA_ERROR_NOT_FOUND, which says nothing about the kernel.
    if proc.returncode != 0 and "cuGetProcAddress" in text and "CUDA_ERROR_NOT_FOUND" in text:
        cmd = base + ["--ignore-getprocaddress-notfound"] + tail
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return proc, cmd


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer(libs, tool, tile):
    proc, cmd = _run_sanitizer(tool, libs[tile].path, 640)
    text = proc.stdout + proc.stderr
    shown = "\n".join(text.splitlines()[-40:])
    print(f"$ {' '.join(cmd)}\n{shown}")
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{shown}"
    errors = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", text)]
    hazards = [int(n) for n in re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text)]
    assert errors or hazards, f"no sanitizer summary line:\n{shown}"
    assert sum(errors) == 0 and sum(hazards) == 0, shown
