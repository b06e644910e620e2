"""Parity of two outputs: every dtype a plan allows, the edge values, and the gate on each side of its bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qualify.dtypes import NARROW_FLOATS, NUMPY_DTYPES
from qualify.evaluate.fidelity import compare
from qualify.evaluate.verdict import fidelity_passes
from qualify.plan.model import Fidelity
from qualify.results.model import BufferParity

# a comparison prints nothing: numpy's overflow or division warnings would land in the middle of
# a run's terminal output
pytestmark = pytest.mark.filterwarnings("error")

F32_MAX = float(np.finfo(np.float32).max)
F64_MAX = float(np.finfo(np.float64).max)
F32_TINY = 2.0**-149  # the smallest f32 subnormal
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def raw(dtype: str, values) -> np.ndarray:
    """A flat uint8 buffer of `values`; bf16 and narrow float values are given as their bit patterns."""
    kind = np.uint16 if dtype == "bf16" else np.uint8 if dtype in NARROW_FLOATS else NUMPY_DTYPES[dtype]
    return np.asarray(values, dtype=kind).view(np.uint8)


def from_bits(dtype: str, pattern: int) -> float:
    uint = {"f16": np.uint16, "f32": np.uint32, "f64": np.uint64}[dtype]
    return float(np.asarray([pattern], dtype=uint).view(NUMPY_DTYPES[dtype])[0])


def one(dtype: str, expected, actual) -> BufferParity:
    return compare("out", dtype, raw(dtype, [expected]), raw(dtype, [actual]))


# dtype, expected, actual, (max_ulp, max_abs, max_rel); None where no finite value exists
TABLE = [
    ("f32", 1.0, float(np.nextafter(np.float32(1), np.float32(2))), (1, 2.0**-23, 2.0**-23)),
    ("f32", 1.0, from_bits("f32", 0x3F800003), (3, 3 * 2.0**-23, 3 * 2.0**-23)),
    ("f32", -1.0, -from_bits("f32", 0x3F800001), (1, 2.0**-23, 2.0**-23)),
    ("f32", 2.0, 3.0, (0x400000, 1.0, 0.5)),  # relative to the expected value, not the actual
    ("f32", 0.0, -0.0, (0, 0.0, 0.0)),  # bytes differ, values do not
    ("f32", 0.0, F32_TINY, (1, F32_TINY, None)),  # nothing is relative to an expected zero
    ("f32", F32_TINY, -F32_TINY, (2, 2 * F32_TINY, 2.0)),  # across zero through the subnormals
    ("f32", F32_MAX, -F32_MAX, (2 * 0x7F7FFFFF, 2 * F32_MAX, 2.0)),
    ("f32", F32_MAX, math.inf, (None, None, None)),
    ("f32", math.nan, 1.0, (None, None, None)),
    ("f32", 1.0, math.nan, (None, None, None)),
    ("f64", 1.0, float(np.nextafter(1.0, 2.0)), (1, 2.0**-52, 2.0**-52)),
    ("f64", -2.0, -3.0, (1 << 51, 1.0, 0.5)),
    ("f64", F64_MAX, -F64_MAX, (2 * 0x7FEFFFFFFFFFFFFF, None, None)),  # beyond int64 ulps, beyond float64
    ("f64", 5e-324, 0.0, (1, 5e-324, 1.0)),
    ("f64", -math.inf, math.inf, (None, None, None)),
    ("f16", 1.0, 1.0 + 2.0**-10, (1, 2.0**-10, 2.0**-10)),
    ("f16", -1.0, 1.0, (2 * 0x3C00, 2.0, 2.0)),
    ("f16", 65504.0, math.inf, (None, None, None)),
    ("f16", from_bits("f16", 0x0001), from_bits("f16", 0x0003), (2, 2 * 2.0**-24, 2.0)),
    ("bf16", 0x3F80, 0x3F81, (1, 2.0**-7, 2.0**-7)),  # 1.0 and the next bf16
    ("bf16", 0xBF80, 0x3F80, (2 * 0x3F80, 2.0, 2.0)),  # -1.0 and 1.0
    ("bf16", 0x3F80, 0x7FC0, (None, None, None)),  # NaN
    ("bf16", 0x8000, 0x0000, (0, 0.0, 0.0)),  # -0 and +0
    # narrow floats, as bit patterns: e4m3 1.0 = 0x38, e5m2 1.0 = 0x3C, e2m3 1.0 = 0x08,
    # e3m2 1.0 = 0x0C, e2m1 1.0 = 0x2; the sign is the top bit of the format, not of the byte
    ("f8e4m3", 0x38, 0x39, (1, 0.125, 0.125)),
    ("f8e4m3", 0xFE, 0x7E, (252, 896.0, 2.0)),  # -448 and 448, e4m3's largest finite
    ("f8e4m3", 0x7E, 0x7F, (None, None, None)),  # 0x7F is e4m3's NaN, not an infinity
    ("f8e4m3", 0x80, 0x00, (0, 0.0, 0.0)),
    ("f8e4m3", 0x00, 0x01, (1, 2.0**-9, None)),  # the smallest subnormal
    ("f8e5m2", 0x3C, 0x3D, (1, 0.25, 0.25)),
    ("f8e5m2", 0x7B, 0x7C, (None, None, None)),  # 57344 and infinity
    ("f6e2m3", 0x08, 0x09, (1, 0.125, 0.125)),
    ("f6e2m3", 0x1F, 0x3F, (62, 15.0, 2.0)),  # 7.5 and -7.5: sign bit 5
    ("f6e3m2", 0x0C, 0x0D, (1, 0.25, 0.25)),
    ("f6e3m2", 0x1F, 0x3E, (61, 52.0, 52 / 28)),  # 28 and -24
    ("f4e2m1", 0x2, 0x3, (1, 0.5, 0.5)),
    ("f4e2m1", 0x7, 0xF, (14, 12.0, 2.0)),  # 6 and -6: sign bit 3
    ("f4e2m1", 0x8, 0x0, (0, 0.0, 0.0)),
    ("i8", -128, 127, (255, 255.0, 255 / 128)),
    ("u8", 200, 100, (100, 100.0, 0.5)),
    ("i16", -1, 0, (1, 1.0, 1.0)),
    ("u16", 0, 65535, (65535, 65535.0, None)),
    ("i32", -(2**31), 2**31 - 1, (2**32 - 1, float(2**32 - 1), (2**32 - 1) / 2**31)),
    ("u32", 4, 3, (1, 1.0, 0.25)),
    ("i64", 2**53, 2**53 + 1, (1, 1.0, 2.0**-53)),  # float64 would see no difference
    ("i64", I64_MIN, I64_MAX, (2**64 - 1, float(2**64 - 1), 2.0)),
    ("u64", 2**64 - 1, 0, (2**64 - 1, float(2**64 - 1), 1.0)),
]


@pytest.mark.parametrize("dtype, expected, actual, distances", TABLE, ids=lambda v: repr(v)[:24])
def test_distances_of_one_differing_element(dtype, expected, actual, distances):
    p = one(dtype, expected, actual)
    assert (p.equal, p.elements, p.differing_elements, p.first_difference) == (False, 1, 1, 0)
    assert (p.max_ulp, p.max_abs, p.max_rel) == distances


def test_every_dtype_of_the_plan_schema_is_in_the_table():
    from qualify.plan.model import Buffer

    allowed = set(Buffer.model_fields["dtype"].annotation.__args__)
    assert allowed == {row[0] for row in TABLE}


@pytest.mark.parametrize("dtype", sorted({row[0] for row in TABLE}))
def test_identical_buffers_are_equal_whatever_they_hold(dtype):
    values = {
        "bf16": [0x7FC0, 0x8000, 0x0001],
        "f8e4m3": [0x7F, 0x80, 0x01],
        "f8e5m2": [0x7C, 0x80, 0x7E],
        "f6e2m3": [0x3F, 0x20, 0x01],
        "f6e3m2": [0x3F, 0x20, 0x01],
        "f4e2m1": [0xF, 0x8, 0x1],
    }.get(dtype, [0, 1, 2] if dtype[0] in "iu" else [math.nan, -0.0, math.inf])
    p = compare("out", dtype, raw(dtype, values), raw(dtype, values))
    assert p == BufferParity(
        buffer="out",
        equal=True,
        elements=3,
        differing_elements=0,
        first_difference=None,
        max_ulp=0,
        max_abs=0.0,
        max_rel=0.0,
    )


def test_counts_and_maxima_over_several_differing_elements():
    expected = [1.0, 2.0, 3.0, 4.0, 8.0, 0.5]
    actual = [1.0, 2.5, 3.0, 5.0, 8.0, 0.5]
    p = compare("y", "f32", raw("f32", expected), raw("f32", actual))
    assert (p.buffer, p.equal, p.elements, p.differing_elements, p.first_difference) == ("y", False, 6, 2, 1)
    # 2.0 → 2.5 is 0x100000 ulps, 4.0 → 5.0 is 0x200000; abs 0.5 and 1.0; rel 0.25 both
    assert (p.max_ulp, p.max_abs, p.max_rel) == (0x200000, 1.0, 0.25)


def test_each_maximum_is_the_largest_of_its_own_distance_not_the_smallest():
    # the element with the largest absolute error (100 → 110) has the smallest relative one, and the
    # largest relative error (1 → 2) the smallest absolute one: each maximum is taken on its own
    p = compare("y", "f32", raw("f32", [1.0, 100.0, 4.0]), raw("f32", [2.0, 110.0, 5.0]))
    assert (p.max_abs, p.max_rel) == (10.0, 1.0)


@pytest.mark.parametrize("dtype", ["i32", "u8", "i64"])
def test_integer_maxima_over_several_differing_elements(dtype):
    # distances 1, 7 and 3; relative 1/2, 7/100 and 3/4 -- the largest of each, not the first or smallest
    p = compare("y", dtype, raw(dtype, [2, 100, 4, 9]), raw(dtype, [3, 107, 1, 9]))
    assert (p.differing_elements, p.max_ulp, p.max_abs, p.max_rel) == (3, 7, 7.0, 0.75)


def test_the_first_difference_is_an_element_index_not_a_byte_offset():
    p = compare("y", "f64", raw("f64", [0.0, 0.0, 0.0, 1.0]), raw("f64", [0.0, 0.0, 0.0, 2.0]))
    assert (p.first_difference, p.elements) == (3, 4)


def test_one_non_finite_element_leaves_every_distance_unbounded():
    p = compare("y", "f32", raw("f32", [1.0, 2.0, math.nan]), raw("f32", [1.5, 2.0, 7.0]))
    assert (p.differing_elements, p.max_ulp, p.max_abs, p.max_rel) == (2, None, None, None)


@pytest.mark.parametrize(
    "expected, actual", [(b"\0" * 8, b"\0" * 12), (b"\0" * 6, b"\0" * 6)], ids=["lengths", "partial"]
)
def test_buffers_that_are_not_two_arrays_of_one_length_are_refused(expected, actual):
    with pytest.raises(ValueError, match="not two f32 buffers"):
        compare("y", "f32", np.frombuffer(expected, np.uint8), np.frombuffer(actual, np.uint8))


@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"{r[0]}-{r[1]!r}"[:24])
def test_parity_survives_the_results_file(row):
    """What a record stores reads back the same: no infinity turned into null on the way."""
    p = one(*row[:3])
    assert BufferParity.model_validate_json(p.model_dump_json()) == p


# --- the gate on each side of its bound ------------------------------------------------------------


def gate(mode: str, bound: float | None, p: BufferParity) -> bool:
    return fidelity_passes([p], Fidelity(mode=mode, bound=bound))


NEXT_AFTER_ONE = float(np.nextafter(np.float32(1), np.float32(2)))


@pytest.mark.parametrize(
    "mode, at, below",
    [("ulp", 3, 2), ("abs", 3 * 2.0**-23, 2.9 * 2.0**-23), ("rel", 3 * 2.0**-23, 2.9 * 2.0**-23)],
)
def test_each_tolerance_mode_passes_at_its_bound_and_fails_below_it(mode, at, below):
    p = one("f32", 1.0, from_bits("f32", 0x3F800003))  # three ulps, 3·2**-23 apart, from 1.0
    assert gate(mode, at, p) and not gate(mode, below, p)


def test_bytes_mode_fails_on_any_difference_even_one_between_equal_values():
    assert gate("bytes", None, one("f32", 1.0, 1.0))
    assert not gate("bytes", None, one("f32", 0.0, -0.0))
    assert gate("ulp", 0, one("f32", 0.0, -0.0))  # ±0 are zero ulps apart


@pytest.mark.parametrize("mode", ["ulp", "abs", "rel"])
@pytest.mark.parametrize("actual", [math.nan, math.inf])
def test_a_nan_or_infinity_never_passes_a_tolerance(mode, actual):
    p = compare("y", "f32", raw("f32", [1.0, 2.0]), raw("f32", [NEXT_AFTER_ONE, actual]))
    assert not gate(mode, 1e30, p)


def test_a_relative_bound_is_never_met_by_a_change_from_zero():
    assert not gate("rel", 1e30, one("f32", 0.0, F32_TINY))
    assert gate("abs", F32_TINY, one("f32", 0.0, F32_TINY))
