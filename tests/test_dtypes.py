"""qualify.dtypes: every dtype a plan admits, its size and storage, and its bytes read as values and back."""

from __future__ import annotations

import math
import subprocess
import sys
import typing

import numpy as np
import pytest

from qualify import dtypes
from qualify.dtypes import (
    EXPONENT_BITS,
    FLOATS,
    ITEMSIZE,
    LARGEST_FINITE_BITS,
    MANTISSA,
    NUMPY_DTYPES,
    SAFETENSORS,
    SIGNED,
    STORAGE,
    UNSIGNED,
    as_float64,
    bf16_bits_to_f32,
    from_float64,
    to_bf16_bits,
)
from qualify.plan.model import Buffer

WIDE = ("bf16", "f16", "f32", "f64", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64")
NARROW = ("f8e4m3", "f8e5m2", "f6e2m3", "f6e3m2", "f4e2m1")  # tests/test_narrow_floats.py
ALL = WIDE + NARROW
EXPECTED_NUMPY = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i8": np.int8,
    "u8": np.uint8,
    "i16": np.int16,
    "u16": np.uint16,
    "i32": np.int32,
    "u32": np.uint32,
    "i64": np.int64,
    "u64": np.uint64,
}


def test_every_table_covers_exactly_the_plan_dtypes():
    assert typing.get_args(dtypes.DType) == ALL
    assert tuple(ITEMSIZE) == ALL and tuple(STORAGE) == ALL and tuple(SAFETENSORS) == ALL
    assert tuple(dtypes.BITS) == ALL
    assert set(NUMPY_DTYPES) == set(WIDE) - {"bf16"}
    assert FLOATS == ("bf16", "f16", "f32", "f64", *NARROW) and dtypes.NARROW_FLOATS == NARROW
    assert set(MANTISSA) == set(EXPONENT_BITS) == set(LARGEST_FINITE_BITS) == set(FLOATS)
    assert set(dtypes.ML_DTYPES) == set(NARROW)


def test_the_plan_model_admits_every_dtype_and_no_other():
    for name in ALL:
        Buffer(name="x", dtype=name, shape=[1], role="output")
    with pytest.raises(ValueError):
        Buffer(name="x", dtype="f8", shape=[1], role="output")


@pytest.mark.parametrize("name", WIDE)
def test_sizes_and_numpy_types(name):
    storage = np.dtype(STORAGE[name])
    assert storage.itemsize == ITEMSIZE[name]
    assert np.dtype(UNSIGNED[ITEMSIZE[name]]) == np.dtype(f"uint{8 * ITEMSIZE[name]}")
    assert np.dtype(SIGNED[ITEMSIZE[name]]) == np.dtype(f"int{8 * ITEMSIZE[name]}")
    if name == "bf16":
        assert storage == np.uint16 and SAFETENSORS[name] == "U16"
        return
    assert np.dtype(NUMPY_DTYPES[name]) == np.dtype(EXPECTED_NUMPY[name]) == storage
    kind = {"f": "F", "i": "I", "u": "U"}[storage.kind]
    assert SAFETENSORS[name] == f"{kind}{8 * storage.itemsize}"


@pytest.mark.parametrize("name", ["f16", "f32", "f64"])
def test_float_format_tables_match_numpy(name):
    info = np.finfo(NUMPY_DTYPES[name])
    assert MANTISSA[name] == (info.nmant, info.minexp)
    unsigned = UNSIGNED[ITEMSIZE[name]]
    largest = np.asarray([info.max], dtype=NUMPY_DTYPES[name]).view(unsigned)[0]
    assert int(largest) == LARGEST_FINITE_BITS[name]
    inf = np.asarray([np.inf], dtype=NUMPY_DTYPES[name]).view(unsigned)[0]
    assert int(inf) == EXPONENT_BITS[name]


def test_bf16_format_tables():
    assert MANTISSA["bf16"] == (7, -126)
    assert float(bf16_bits_to_f32(np.array([LARGEST_FINITE_BITS["bf16"]], np.uint16))[0]) == (2 - 2.0**-7) * 2.0**127
    assert float(bf16_bits_to_f32(np.array([EXPONENT_BITS["bf16"]], np.uint16))[0]) == math.inf


@pytest.mark.parametrize("name", WIDE)
def test_round_trip_through_float64(name):
    if name in FLOATS:
        values = np.array([0.0, -0.0, 1.0, -2.5, 0.15625, 448.0, 3.0e-3], dtype=np.float64)
    elif name.startswith("u"):
        values = np.array([0, 1, 7, 100, 127], dtype=np.float64)
    else:
        values = np.array([0, 1, -1, -128, 127], dtype=np.float64)
    data = from_float64(values, name)
    assert data.dtype == np.uint8 and data.size == values.size * ITEMSIZE[name]
    back = as_float64(data, name)
    assert back.dtype == np.float64
    if name in FLOATS and name != "f64":
        # 0.003 is representable in f64 only: it comes back as its nearest neighbour
        assert np.array_equal(back[:-1], values[:-1])
        assert back[-1] != 3.0e-3 and back[-1] == pytest.approx(3.0e-3, rel=2.0 ** -(MANTISSA[name][0] + 1))
    else:
        assert np.array_equal(back, values)
    assert np.array_equal(np.signbit(back[:2]), np.signbit(values[:2]))
    assert from_float64(back, name).tobytes() == data.tobytes()


@pytest.mark.parametrize("name", ["f16", "f32", "f64"])
def test_numpy_floats_read_as_numpy_does(name):
    native = np.array([1.5, -np.inf, np.inf, np.nan, 1e-7], dtype=NUMPY_DTYPES[name])
    out = as_float64(native.view(np.uint8), name)
    assert np.array_equal(out, native.astype(np.float64), equal_nan=True)


def test_integers_are_rounded_and_clamped():
    assert as_float64(from_float64(np.array([2.5, 3.5, -2.5, 1e9, -1e9]), "i8"), "i8").tolist() == [2, 4, -2, 127, -128]
    assert as_float64(from_float64(np.array([-5.0, 300.0, 0.5]), "u8"), "u8").tolist() == [0, 255, 0]
    big = from_float64(np.array([2.0**62]), "i64")
    assert int(big.view(np.int64)[0]) == 2**62


def test_bf16_bit_patterns():
    bits = np.array([0x3F80, 0xBF80, 0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001], dtype=np.uint16)
    values = as_float64(bits.view(np.uint8), "bf16")
    assert values[:4].tolist() == [1.0, -1.0, 0.0, -0.0] and math.copysign(1, values[3]) == -1
    assert values[4] == math.inf and values[5] == -math.inf and math.isnan(values[6])
    assert values[7] == 2.0**-133  # the smallest subnormal
    assert to_bf16_bits(values.astype(np.float32)).tolist() == bits.tolist()


def test_bf16_rounds_to_nearest_even_and_keeps_nan():
    one = np.float32(1.0).view(np.uint32)
    halfway_down = np.array([one + 0x8000], dtype=np.uint32).view(np.float32)  # tie, 1.0 is even
    halfway_up = np.array([one + 0x18000], dtype=np.uint32).view(np.float32)  # tie, the odd one rounds up
    above = np.array([one + 0x8001], dtype=np.uint32).view(np.float32)
    assert to_bf16_bits(halfway_down).tolist() == [0x3F80]
    assert to_bf16_bits(halfway_up).tolist() == [0x3F82]
    assert to_bf16_bits(above).tolist() == [0x3F81]
    nan_with_low_bits = np.array([0x7FFFFFFF, 0xFFC00001], dtype=np.uint32).view(np.float32)
    assert to_bf16_bits(nan_with_low_bits).tolist() == [0x7FC0, 0x7FC0]
    assert to_bf16_bits(np.array([3.4e38, -3.4e38])).tolist() == [0x7F80, 0xFF80]  # beyond bf16's max
    assert from_float64(np.array([math.inf, -math.inf, math.nan]), "bf16").view(np.uint16).tolist() == [
        0x7F80,
        0xFF80,
        0x7FC0,
    ]
    assert bf16_bits_to_f32(np.array([0x4049], np.uint16)).dtype == np.float32


def test_the_leaf_loads_without_numpy():
    code = "import sys, qualify.dtypes, qualify.plan.model; sys.exit('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize(
    "dtype, top",
    [
        ("f16", 65504.0),
        ("bf16", 3.3895313892515355e38),
        ("f8e4m3", 448.0),
        ("f8e5m2", 57344.0),
        ("f6e2m3", 7.5),
        ("f6e3m2", 28.0),
        ("f4e2m1", 6.0),
    ],
)
def test_the_largest_finite_value_of_each_float(dtype, top):
    assert dtypes.largest_finite(dtype) == top


@pytest.mark.parametrize("dtype", ["f16", "f8e4m3", "f6e2m3", "f6e3m2", "f4e2m1"])
def test_saturate_clamps_beyond_the_largest_finite_value_of_either_sign(dtype):
    top = dtypes.largest_finite(dtype)
    back = dtypes.as_float64(dtypes.from_float64(np.array([1e30, -1e30, 1.0]), dtype, "saturate"), dtype)
    assert list(back) == [top, -top, 1.0]
