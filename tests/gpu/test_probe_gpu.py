"""`qualify probe` on the GPU: the softmax tolerance pair, and the tiny axpy pair (bit-identical)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plans import make_repo

from qualify.cli import main

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def probe(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["probe", *argv])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_identical_arms_need_no_bound(tmp_path, capsys):
    code, out, err = probe([str(make_repo(tmp_path))], capsys)
    assert code == 0, err
    assert "every output is bit-identical" in out
    assert not (tmp_path / "records").exists()


def test_softmax_orders_of_summation_differ_by_a_few_ulps(capsys):
    code, out, err = probe([str(ROOT / "protocols/softmax-probe/plan.json")], capsys)
    assert code == 0, err
    assert "exploration, not evidence" in out
    assert "smallest bound that would pass: ulp " in out  # the two orders of summation differ
    for cols in ("COLS=128", "COLS=1024", "COLS=8192", "COLS=65536"):
        assert cols in out
