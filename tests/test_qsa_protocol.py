"""protocols/qsa-keyload on the CPU: its kernels compile for every architecture, the golden is
exactly what the reference script writes, and the reference reproduces the seed's shapes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from qualify.build.nvrtc import KernelSpec, compile_kernel
from qualify.plan.golden import load_golden
from qualify.plan.load import load_plan

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "protocols/qsa-keyload/plan.json"
SOURCE = ROOT / "kernels/qsa/qsa.cu"


def _reference():
    spec = importlib.util.spec_from_file_location("qsa_reference", ROOT / "kernels/qsa/reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_120"])
@pytest.mark.parametrize(
    "kernel, defines",
    [
        ("qsa_forward<1, false>", ()),
        ("qsa_forward<4, true>", ()),
        ("qsa_forward<4, true>", (("QSA_MUTATION_UNROUNDED_GATE", "1"),)),
    ],
)
def test_qsa_arms_compile_without_spills(arch, kernel, defines):
    compiled = compile_kernel(KernelSpec(source=SOURCE, kernel=kernel, arch=arch, defines=defines))
    assert compiled.cubin[:4] == b"\x7fELF"
    assert compiled.resources.spill_store_bytes == 0 and compiled.resources.spill_load_bytes == 0


def test_committed_golden_is_what_the_reference_writes(tmp_path):
    fresh = tmp_path / "golden.safetensors"
    _reference().main(PLAN, fresh)
    loaded = load_plan(PLAN)
    committed = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    from safetensors.numpy import load_file

    rewritten = load_file(str(fresh))
    assert sorted(rewritten) == sorted(committed.tensors)
    for name, data in committed.tensors.items():
        assert np.array_equal(rewritten[name].reshape(-1).view(np.uint8), data), name


def test_reference_rounds_float64_to_bf16_once():
    ref = _reference()
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1.0); just above it rounds up
    assert ref.round_bf16(np.array([1 + 2**-8, 1 + 2**-8 + 2**-30, -3 - 2**-7]))[:2].tolist() == [1.0, 1 + 2**-7]
    # a float64 just above a float32 tie would round twice through float32 and land on the even side
    x = 1 + 2**-8 + 2**-40
    assert ref.round_bf16(np.array([x]))[0] == 1 + 2**-7


def test_reference_semantics_on_a_hand_case():
    """Two keys, one masked: the visible key takes all the weight; out = v · sigmoid(0) = v / 2."""
    ref = _reference()
    D = 256
    q = np.ones((1, 1, D))
    k = np.ones((1, 2, D))
    v = np.stack([np.full(D, 1.0), np.full(D, 5.0)])[None]
    gate = np.zeros((1, 1, D))
    mask = np.array([[0, 1]], dtype=np.uint8)  # the row at position 1 sees key 1 only
    weights, out = ref.forward(q, k, v, gate, mask, S=2, R=1, HQ=1, HK=1, scale=0.0625)
    assert weights.tolist() == [[[0.0, 1.0]]]
    assert np.all(out == 2.5)


def test_kernel_order_dot_sums_like_the_kernel():
    """Lane partials in sequence, then the butterfly: differs from a float64 dot when the order matters."""
    ref = _reference()
    q = np.zeros((1, 256))
    q[0, 0], q[0, 1], q[0, 8] = 2.0**24, 1.0, -(2.0**24)  # lane 0: 2^24 + 1 rounds to 2^24 in float32
    k = np.ones((1, 256))
    assert ref.kernel_order_dot(q, k)[0, 0] == 0.0
    assert (q @ k.T)[0, 0] == 1.0


def test_seed_shapes_and_sparse_case():
    loaded = load_plan(PLAN)
    golden = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    sizes = {c.id: golden.expected(c.id, "weights").size // 2 for c in loaded.cases}
    # the seed's weights per case: 1536, 2400, 98304, 295920
    assert [sizes[c] for c in ("R=8,S=8", "R=10,S=10", "R=64,S=64", "R=6,S=2055")] == [1536, 2400, 98304, 295920]
    assert golden.expected("R=64,S=64", "mask").all()
    sparse = golden.expected("R=6,S=2055", "mask").reshape(6, 2055)
    assert (sparse == 0).sum() == 6 * 2 * 64
