"""The fill and swap mutations of input controls (a saturated gate, exchanged heads)."""

import numpy as np
import pytest

from qualify.plan.model import Mutation
from qualify.run.controls import mutate


def test_fill_sets_every_bf16_element():
    data = np.arange(6, dtype=np.uint16).view(np.uint8)
    out = mutate(data, "bf16", Mutation(op="fill", value=30.0), {})
    assert out.view(np.uint16).tolist() == [0x41F0] * 6  # 30.0 in bf16


def test_swap_exchanges_two_head_slices():
    data = np.arange(12, dtype=np.float32).view(np.uint8)  # [HK=2 heads of 6], head-major
    m = Mutation(op="swap", index=0, other="S * D", length="S * D")
    out = mutate(data, "f32", m, {"S": 3, "D": 2}).view(np.float32)
    assert out.tolist() == [6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5]
    assert data.view(np.float32).tolist() == list(range(12))  # the original is untouched


@pytest.mark.parametrize("index, other, length", [(0, 4, 5), (0, 8, 5), (0, 4, 0)])
def test_swap_refuses_overlapping_or_outside_slices(index, other, length):
    data = np.zeros(12, dtype=np.float32).view(np.uint8)
    with pytest.raises(ValueError):
        mutate(data, "f32", Mutation(op="swap", index=index, other=other, length=length), {})
