"""fp8 (e4m3, e5m2), fp6 (e2m3, e3m2) and fp4 (e2m1): values, rounding, saturation, quanta counts,
the tolerance bound, input generation and controls, against cases computed by hand from the formats
(e4m3: bias 7, no infinity, S.1111.111 NaN; e5m2: bias 15, IEEE-like; e2m3 bias 1, e3m2 bias 3, e2m1
bias 1, none of them with an infinity or a NaN)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qualify.dtypes import BITS, LARGEST_FINITE_BITS, MANTISSA, NARROW_FLOATS, as_float64, from_float64, largest_finite
from qualify.evaluate.parity_counts import count, step_index
from qualify.evaluate.tolerance_gate import perturb, quantum_at_rms
from qualify.plan.model import Buffer, Mutation, Seeds
from qualify.plan.resolve import ResolvedBuffer
from qualify.run.controls import mutate
from qualify.run.inputs import generate


def b(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint8)


# dtype → (bit pattern, its value by hand)
VALUES = {
    "f8e4m3": [
        (0x38, 1.0),
        (0x39, 1.125),
        (0x7E, 448.0),  # largest finite: exponent all ones is still finite in e4m3
        (0x78, 256.0),
        (0x01, 2.0**-9),  # smallest subnormal
        (0x08, 2.0**-6),  # smallest normal
        (0xB8, -1.0),
        (0x80, -0.0),
    ],
    "f8e5m2": [(0x3C, 1.0), (0x3D, 1.25), (0x7B, 57344.0), (0x01, 2.0**-16), (0x04, 2.0**-14), (0xFC, -math.inf)],
    "f6e2m3": [(0x08, 1.0), (0x09, 1.125), (0x1F, 7.5), (0x01, 0.125), (0x3F, -7.5), (0x20, -0.0)],
    "f6e3m2": [(0x0C, 1.0), (0x0D, 1.25), (0x1F, 28.0), (0x01, 0.0625), (0x3E, -24.0)],
    "f4e2m1": [(0x2, 1.0), (0x3, 1.5), (0x7, 6.0), (0x1, 0.5), (0xF, -6.0), (0x8, -0.0)],
}


@pytest.mark.parametrize("dtype", NARROW_FLOATS)
def test_bit_patterns_read_as_their_hand_computed_values(dtype):
    bits, values = zip(*VALUES[dtype])
    got = as_float64(b(*bits), dtype)
    assert got.tolist() == list(values)
    assert np.array_equal(np.signbit(got), np.signbit(np.array(values)))
    assert from_float64(np.array(values), dtype).tolist() == list(bits)


@pytest.mark.parametrize(
    "dtype, width, largest, mantissa",
    [
        ("f8e4m3", 8, 448.0, (3, -6)),
        ("f8e5m2", 8, 57344.0, (2, -14)),
        ("f6e2m3", 6, 7.5, (3, 0)),
        ("f6e3m2", 6, 28.0, (2, -2)),
        ("f4e2m1", 4, 6.0, (1, 0)),
    ],
)
def test_format_tables(dtype, width, largest, mantissa):
    assert BITS[dtype] == width and largest_finite(dtype) == largest and MANTISSA[dtype] == mantissa
    # one step above the largest finite pattern is not a finite value larger than it
    above = as_float64(b(LARGEST_FINITE_BITS[dtype] + 1), dtype)[0]
    assert not (math.isfinite(above) and abs(above) > largest)


def test_e4m3_nan_encodings_and_no_infinity():
    assert all(math.isnan(v) for v in as_float64(b(0x7F, 0xFF), "f8e4m3"))
    # casting: infinities and overflow become NaN (there is no infinity), NaN stays NaN
    assert from_float64(np.array([math.inf, -1e6, math.nan]), "f8e4m3").tolist() == [0x7F, 0xFF, 0x7F]


def test_e5m2_has_infinities_and_nans():
    values = as_float64(b(0x7C, 0xFC, 0x7D, 0x7E, 0xFF), "f8e5m2")
    assert values[0] == math.inf and values[1] == -math.inf and all(math.isnan(v) for v in values[2:])
    assert from_float64(np.array([1e6, -1e6]), "f8e5m2").tolist() == [0x7C, 0xFC]


@pytest.mark.parametrize(
    "dtype, big, nonfinite, saturated",
    [
        ("f8e4m3", 1000.0, 0x7F, 0x7E),
        ("f8e5m2", 1e6, 0x7C, 0x7B),
        ("f6e2m3", 100.0, 0x1F, 0x1F),  # no non-finite encoding: the cast saturates by itself
        ("f4e2m1", 100.0, 0x7, 0x7),
        ("f16", 1e6, None, None),
    ],
)
def test_overflow_choice(dtype, big, nonfinite, saturated):
    values = np.array([big, -big, 1.0, math.nan])
    cast = as_float64(from_float64(values, dtype), dtype)
    kept = as_float64(from_float64(values, dtype, "saturate"), dtype)
    assert kept[:2].tolist() == [largest_finite(dtype), -largest_finite(dtype)] and kept[2] == 1.0
    if nonfinite is not None:
        assert from_float64(values[:1], dtype).tolist() == [nonfinite]
        assert from_float64(values[:1], dtype, "saturate").tolist() == [saturated]
    else:
        assert cast[0] == math.inf
    if dtype.startswith("f8"):
        assert math.isnan(kept[3])  # saturation keeps NaN a NaN


def test_rounding_is_to_nearest_even_straight_from_float64():
    # e4m3 around 1.0: quantum 1/8. 1 + 1/16 is a tie, 1.0 is even; 1 + 3/16 a tie, 1.25 is even;
    # 1 + 1/16 + 2^-40 is above the tie (a float32 round trip would have lost that bit)
    values = np.array([1 + 1 / 16, 1 + 3 / 16, 1 + 1 / 16 + 2.0**-40])
    assert as_float64(from_float64(values, "f8e4m3"), "f8e4m3").tolist() == [1.0, 1.25, 1.125]


def test_step_index_uses_the_formats_sign_bit():
    assert step_index(b(0x38, 0xB8, 0x80, 0x7E), "f8e4m3").tolist() == [0x38, -0x38, 0, 0x7E]
    assert step_index(b(0x08, 0x28, 0x20), "f6e2m3").tolist() == [8, -8, 0]
    assert step_index(b(0x2, 0xA, 0x8), "f4e2m1").tolist() == [2, -2, 0]


def test_e4m3_quanta_counts_by_hand():
    # 1.0 (0x38) against: itself, 1.125 (one quantum), 1.25 (two), 1.375 (three), 0.9375 (0x37: one
    # quantum below although the step below is half as wide); 448 against NaN (0x7F); -0 against +0
    expected = b(0x38, 0x38, 0x38, 0x38, 0x38, 0x7E, 0x80)
    actual = b(0x38, 0x39, 0x3A, 0x3B, 0x37, 0x7F, 0x00)
    c = count("o", "f8e4m3", expected, actual, atol=0.125)
    assert (c.elements, c.identical, c.one_quantum, c.over_one_quantum, c.over_two_quanta) == (7, 1, 2, 3, 2)
    assert c.non_finite == 1 and c.max_abs == 0.375
    assert c.worst_index == 5 and c.first_offending == 2 and not c.within


def test_e4m3_saturated_against_its_largest_is_one_quantum_of_32():
    # 416 (0x7D) against 448 (0x7E): one quantum, and at that binade a quantum is 32
    c = count("o", "f8e4m3", b(0x7E), b(0x7D), atol=32.0)
    assert (c.one_quantum, c.max_abs, c.within) == (1, 32.0, True)
    assert count("o", "f8e4m3", b(0x7E), b(0x7D), atol=31.0).within is False


def test_e5m2_infinity_is_never_within_a_bound():
    c = count("o", "f8e5m2", b(0x7B, 0x3C), b(0x7C, 0x3C), atol=1e30)
    assert (c.non_finite, c.identical, c.within, c.first_offending) == (1, 1, False, 0)


def test_f4_quanta_across_zero():
    # 0.5 (0x1) against -0.5 (0x9): two quanta, zero between them
    c = count("o", "f4e2m1", b(0x1), b(0x9), atol=1.0)
    assert (c.one_quantum, c.over_one_quantum, c.over_two_quanta, c.max_abs, c.within) == (0, 1, 0, 1.0, True)


def test_quantum_at_rms_on_the_e4m3_grid():
    # RMS 1.0 sits in [1, 2): the quantum is 2^(0-3); all zeros: the smallest normal's step 2^(-6-3)
    assert quantum_at_rms("f8e4m3", b(0x38, 0xB8)) == 0.125
    assert quantum_at_rms("f8e4m3", b(0x00, 0x80)) == 2.0**-9


def test_perturbation_of_the_largest_e4m3_stays_finite():
    moved = perturb(b(0x7E, 0xFE), "f8e4m3", quanta=1, elements=2, seed=0)
    assert moved.tolist() == [0x7D, 0xFD]  # up would be NaN: it steps toward zero instead
    assert perturb(b(0x1F), "f6e2m3", quanta=1, elements=1, seed=0).tolist() == [0x1E]


@pytest.mark.parametrize("bit, flipped, value", [(0, 0x39, 1.125), (7, 0xB8, -1.0), (6, 0x78, 256.0)])
def test_a_control_flips_one_e4m3_bit(bit, flipped, value):
    mutation = Mutation(op="flip_bit", index=1, bit=bit)
    out = mutate(b(0x38, 0x38, 0x38), "f8e4m3", mutation, {})
    assert out.tolist() == [0x38, flipped, 0x38] and as_float64(out, "f8e4m3")[1] == value


def test_a_flip_that_makes_e4m3_nan_fails_the_gate():
    # 0x7E (448) with bit 0 flipped is 0x7F: NaN, outside every bound
    out = mutate(b(0x7E), "f8e4m3", Mutation(op="flip_bit", index=0, bit=0), {})
    assert out.tolist() == [0x7F] and not count("o", "f8e4m3", b(0x7E), out, atol=1e9).within


def test_a_flip_outside_the_formats_bits_is_refused():
    with pytest.raises(ValueError, match="bit 6 outside a 6-bit f6e2m3 element"):
        mutate(b(0x08), "f6e2m3", Mutation(op="flip_bit", index=0, bit=6), {})
    with pytest.raises(ValueError, match="bit 4 outside a 4-bit f4e2m1 element"):
        mutate(b(0x2), "f4e2m1", Mutation(op="flip_bit", index=0, bit=4), {})


def test_set_and_scale_controls_round_to_the_narrow_grid():
    out = mutate(b(0x38, 0x38), "f8e4m3", Mutation(op="scale", index=0, value=1000.0), {})
    assert out.tolist() == [0x7F, 0x38]  # 1000 overflows e4m3 to NaN: the gate sees it
    assert mutate(b(0x2), "f4e2m1", Mutation(op="set", index=0, value=2.9), {}).tolist() == [0x5]  # 3.0


def _generate(dtype: str, overflow: str | None, init: dict) -> np.ndarray:
    spec = Buffer(name="x", dtype=dtype, shape=[4096], role="input", init=init, overflow=overflow)
    resolved = ResolvedBuffer(name="x", dtype=dtype, shape=(4096,), role="input")
    return generate(Seeds(base=7), "N=4096", spec, resolved)


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2"])
def test_generated_fp8_inputs_saturate_or_overflow_as_declared(dtype):
    wide = {"kind": "normal", "std": 3 * largest_finite(dtype)}
    cast = as_float64(_generate(dtype, None, wide), dtype)
    kept = as_float64(_generate(dtype, "saturate", wide), dtype)
    assert (~np.isfinite(cast)).sum() > 100  # a third of the draws fall beyond the largest finite
    assert np.isfinite(kept).all() and np.abs(kept).max() == largest_finite(dtype)
    # where the cast stayed finite, both choices agree bit for bit
    finite = np.isfinite(cast)
    assert np.array_equal(cast[finite], kept[finite])


def test_generated_inputs_are_on_the_grid_and_reproducible():
    data = _generate("f8e4m3", "saturate", {"kind": "uniform", "low": -2, "high": 2})
    assert data.dtype == np.uint8 and data.size == 4096
    assert np.array_equal(data, _generate("f8e4m3", "saturate", {"kind": "uniform", "low": -2, "high": 2}))
    values = as_float64(data, "f8e4m3")
    assert np.abs(values).max() <= 2 and len(np.unique(values)) > 30


def test_overflow_is_for_float_inputs_only():
    with pytest.raises(ValueError, match="overflow applies to float inputs only"):
        Buffer(name="x", dtype="i8", shape=[1], role="input", init={"kind": "zeros"}, overflow="saturate")
    with pytest.raises(ValueError, match="overflow applies to float inputs only"):
        Buffer(name="x", dtype="f8e4m3", shape=[1], role="output", overflow="saturate")


def test_overflow_left_unset_leaves_a_buffers_dump_as_before():
    spec = Buffer(name="x", dtype="f32", shape=[1], role="input", init={"kind": "zeros"})
    assert "overflow" not in spec.model_dump(mode="json")
    assert Buffer(**{**spec.model_dump(), "overflow": "saturate"}).model_dump(mode="json")["overflow"] == "saturate"


def test_a_golden_takes_narrow_floats_as_ml_dtypes_values_or_bit_patterns():
    import ml_dtypes

    from qualify.plan.golden import _narrow_for_file

    typed = np.array([1.0, -448.0], dtype=ml_dtypes.float8_e4m3fn)
    stored = _narrow_for_file("c/out", "f8e4m3", typed)
    assert stored.dtype == typed.dtype and stored.view(np.uint8).tolist() == [0x38, 0xFE]
    assert _narrow_for_file("c/out", "f8e4m3", b(0x38, 0xFE)).view(np.uint8).tolist() == [0x38, 0xFE]
    assert _narrow_for_file("c/out", "f4e2m1", b(0x2)).dtype == np.uint8  # fp4: U8 bit patterns
    with pytest.raises(ValueError, match="c/out: a f8e4m3 tensor is given as float8_e4m3fn values or uint8"):
        _narrow_for_file("c/out", "f8e4m3", np.array([1.0]))  # float64 values would be cast, not kept
