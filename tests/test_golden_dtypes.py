"""Goldens of every dtype the plan schema allows: each is stored as its safetensors type, read back
bit for bit, and (for floats) refused when it holds a non-finite expected value (tests written
from the survivors of mutating qualify/plan/golden.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from plans import HEADER, KERNEL, make_repo
from test_golden import PRODUCER, golden_plan

from qualify.errors import PlanError
from qualify.plan.golden import load_golden, write_golden
from qualify.plan.load import load_plan

# dtype → (its safetensors type, sample values as that dtype's numpy array; bf16 as bit patterns)
DTYPES = {
    "bf16": ("BF16-as-U16", np.array([0x3F80, 0xC000, 0x0001], np.uint16)),
    "f16": ("F16", np.array([1.0, -2.5, 6.1e-5], np.float16)),
    "f32": ("F32", np.array([1.0, -2.5, 1e-40], np.float32)),
    "f64": ("F64", np.array([1.0, -2.5, 5e-324])),
    "i8": ("I8", np.array([-128, 0, 127], np.int8)),
    "u8": ("U8", np.array([0, 1, 255], np.uint8)),
    "i16": ("I16", np.array([-32768, 0, 32767], np.int16)),
    "u16": ("U16", np.array([0, 1, 65535], np.uint16)),
    "i32": ("I32", np.array([-(2**31), 0, 2**31 - 1], np.int32)),
    "u32": ("U32", np.array([0, 1, 2**32 - 1], np.uint32)),
    "i64": ("I64", np.array([-(2**63), 0, 2**63 - 1], np.int64)),
    "u64": ("U64", np.array([0, 1, 2**64 - 1], np.uint64)),
    # narrow floats as their bit patterns: 448 and the smallest subnormal; 57344 and -0
    "f8e4m3": ("F8_E4M3", np.array([0x7E, 0x01, 0xB8], np.uint8)),
    "f8e5m2": ("F8_E5M2", np.array([0x7B, 0x80, 0x3C], np.uint8)),
    "f6e2m3": ("U8", np.array([0x1F, 0x21, 0x08], np.uint8)),
    "f6e3m2": ("U8", np.array([0x1F, 0x3E, 0x0C], np.uint8)),
    "f4e2m1": ("U8", np.array([0x7, 0xF, 0x1], np.uint8)),
}
# the pattern of a non-finite value of each float dtype
NON_FINITE = {
    "bf16": np.uint16(0x7FC0),
    "f16": np.float16(np.inf),
    "f32": np.float32(np.nan),
    "f64": -np.inf,
    "f8e4m3": np.uint8(0xFF),  # e4m3's NaN: it has no infinity
    "f8e5m2": np.uint8(0x7C),  # e5m2's infinity
}


def _repo(tmp_path, dtype: str):
    """The test plan with its output of `dtype`; returns (plan path, loaded plan)."""
    files = {
        "kernels/k.cu": KERNEL,
        "kernels/common.cuh": HEADER,
        "protocols/tiny/make_golden.py": "# writes it\n",
        "protocols/tiny/golden.safetensors": "",
    }
    path = make_repo(tmp_path, golden_plan(dtype), files)
    return path, load_plan(path)


def _tensors(loaded, dtype: str, values: np.ndarray) -> dict:
    tensors = {}
    for case in loaded.cases:
        n = case.values["N"]
        tensors[f"{case.id}/y"] = ("f32", np.linspace(-1, 1, n, dtype=np.float32))
        tensors[f"{case.id}/out"] = (dtype, np.resize(values, n))
    return tensors


def _load(path, loaded):
    return load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_a_golden_of_every_dtype_reads_back_bit_for_bit(tmp_path, dtype):
    path, loaded = _repo(tmp_path, dtype)
    values = DTYPES[dtype][1]
    write_golden(path.parent / "golden.safetensors", loaded.plan, _tensors(loaded, dtype, values), PRODUCER)
    golden = _load(path, loaded)
    if DTYPES[dtype][0] != "BF16-as-U16":
        from safetensors import safe_open

        with safe_open(str(path.parent / "golden.safetensors"), framework="numpy") as f:
            assert {f.get_slice(k).get_dtype() for k in f.keys() if k.endswith("/out")} == {DTYPES[dtype][0]}
    for case in loaded.cases:
        assert np.array_equal(golden.expected(case.id, "out"), np.resize(values, case.values["N"]).view(np.uint8))


@pytest.mark.parametrize("dtype", sorted(NON_FINITE))
def test_a_non_finite_expected_value_of_every_float_dtype_is_refused(tmp_path, dtype):
    path, loaded = _repo(tmp_path, dtype)
    tensors = _tensors(loaded, dtype, DTYPES[dtype][1])
    name = f"{loaded.cases[-1].id}/out"
    bad = tensors[name][1].copy()
    bad[2] = NON_FINITE[dtype]
    tensors[name] = (dtype, bad)
    write_golden(path.parent / "golden.safetensors", loaded.plan, tensors, PRODUCER)
    with pytest.raises(PlanError, match="1 non-finite values, the first at flat index 2") as exc:
        _load(path, loaded)
    assert exc.value.field == name


@pytest.mark.parametrize("dtype", ["i32", "u8"])
def test_integers_are_never_judged_finite_or_not(tmp_path, dtype):
    """Every bit pattern of an integer is a value: one that reads as NaN as a float is still fine."""
    path, loaded = _repo(tmp_path, dtype)
    patterns = (
        np.array([0x7FC00000, 0xFFFFFFFF], np.uint32).view(np.int32) if dtype == "i32" else np.array([255], np.uint8)
    )
    write_golden(path.parent / "golden.safetensors", loaded.plan, _tensors(loaded, dtype, patterns), PRODUCER)
    assert _load(path, loaded).producer == PRODUCER


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_a_narrow_float_tensor_cut_short_after_the_header_was_read_is_refused(tmp_path, dtype):
    """fp8 tensors are read at their header's offsets, by qualify, not safetensors (which has no fp8
    type for NumPy). A file replaced by a shorter one after the header was read (the header still
    announcing the tensor's full size) must be refused naming the tensor, never read short."""
    import os

    from qualify.plan.golden import _Reader

    path, loaded = _repo(tmp_path, dtype)
    golden = path.parent / "golden.safetensors"
    write_golden(golden, loaded.plan, _tensors(loaded, dtype, DTYPES[dtype][1]), PRODUCER)
    whole = golden.read_bytes()
    name = f"{loaded.cases[-1].id}/out"
    size = int.from_bytes(whole[:8], "little")  # the layout safetensors documents: u64, JSON, data
    end = json.loads(whole[8 : 8 + size])[name]["data_offsets"][1]
    with _Reader(golden) as reader:
        assert reader.tensor(name).size == loaded.cases[-1].values["N"]
        cut = tmp_path / "cut.safetensors"
        cut.write_bytes(whole[: 8 + size + end - 1])  # one byte short of the tensor's end
        os.replace(cut, golden)  # a new file at the path; the open one keeps its header
        with pytest.raises(PlanError, match=f"{name}: the file ends inside the tensor"):
            reader.tensor(name)
