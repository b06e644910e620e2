"""A record's plots: drawn from the raw samples, deterministic, and checked like every other file.

The records are the synthetic ones of tests/test_record.py (raw samples in the runner's ABBA order).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_record import H200, add_trial, h200_trials, l40s_trials, new_record, plan_and_lock

from qualify.plan.schedule import block_halves
from qualify.record.assemble import write_record
from qualify.render.plots import (
    AA,
    MAIN,
    device_plots,
    plot_problems,
    render_plots,
    svg_facts,
    taken_order,
    write_plots,
)
from qualify.results.samples import TrialSamples
from qualify.results.store import Record

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> Path:
    rec, plan, lock = new_record(tmp_path_factory.mktemp("plots") / "vecwidth")
    h200_trials(rec, lock)
    l40s_trials(rec, lock)
    write_record(rec, plan, lock)
    write_plots(rec.folder, rec.results(), plan)
    return rec.folder


@pytest.fixture
def copy(record, tmp_path) -> Path:
    return Path(shutil.copytree(record, tmp_path / "vecwidth"))


def digests(plots: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in plots.items()}


@pytest.mark.slow
def test_every_device_gets_four_plots_named_in_the_readme(record):
    names = sorted(p.relative_to(record).as_posix() for p in (record / "plots").iterdir())
    kinds = ("order", "ratio", "roofline", "samples")
    assert names == [f"plots/device-{k}-{kind}.svg" for k in (1, 2) for kind in kinds]
    readme = (record / "README.md").read_text(encoding="utf-8")
    for name in names:
        assert f"]({name})" in readme
    results = Record(record).results()
    assert list(device_plots(results)) == ["NVIDIA H200 (GPU-1111aaaa)", "NVIDIA L40S (GPU-2222bbbb)"]


@pytest.mark.slow
def test_plots_are_the_same_bytes_every_time_and_in_another_process(record):
    plan, _ = plan_and_lock()
    results = Record(record).results()
    first = render_plots(record, results, plan)
    assert digests(first) == digests(render_plots(record, results, plan))
    # a fresh interpreter with another hash seed: ids and ordering must not depend on either
    code = (
        "import sys, hashlib, json; sys.path[:0] = sys.argv[1:3]\n"
        "from test_record import plan_and_lock\n"
        "from qualify.render.plots import render_plots\n"
        "from qualify.results.store import Record\n"
        "r = Record(sys.argv[3]).results()\n"
        "print(json.dumps({k: hashlib.sha256(v).hexdigest() for k, v in "
        "render_plots(sys.argv[3], r, plan_and_lock()[0]).items()}))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "MPLCONFIGDIR": str(record.parent / "mplconfig")}
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT), str(ROOT / "tests"), str(record)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    import json

    assert json.loads(out.stdout) == digests(first)


@pytest.mark.slow
def test_svgs_carry_no_date_and_name_their_matplotlib_and_data(record):
    import matplotlib

    data = (record / "plots" / "device-1-ratio.svg").read_bytes()
    assert b"<dc:date>" not in data
    version, digest = svg_facts(data)
    assert version == matplotlib.__version__
    assert re.fullmatch(r"[0-9a-f]{64}", digest)


@pytest.mark.slow
def test_report_adds_plots_to_a_record_without_changing_its_numbers(copy):
    shutil.rmtree(copy / "plots")
    before = {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    plan, _ = plan_and_lock()
    problems = plot_problems(copy, Record(copy).results(), plan)
    assert len(problems) == 8 and all(p.endswith(f"missing; `qualify report {copy}` draws it") for p in problems)
    write_plots(copy, Record(copy).results(), plan)
    after = {p.relative_to(copy).as_posix(): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if not k.startswith("plots/")} == before
    assert plot_problems(copy, Record(copy).results(), plan) == []


@pytest.mark.slow
def test_a_tampered_or_stale_plot_is_found(copy):
    plan, _ = plan_and_lock()
    results = Record(copy).results()
    path = copy / "plots" / "device-2-samples.svg"
    path.write_bytes(path.read_bytes().replace(b"#ff7f0e", b"#1f77b4"))  # candidate drawn as base
    (copy / "plots" / "device-3-ratio.svg").write_bytes(b"<svg/>")
    assert plot_problems(copy, results, plan) == [
        "plots/device-2-samples.svg: differs from the plot its raw samples draw",
        "plots/device-3-ratio.svg: not a plot of this record's devices",
    ]
    write_plots(copy, results, plan)
    assert not (copy / "plots" / "device-3-ratio.svg").exists()
    assert b"#ff7f0e" in path.read_bytes()


@pytest.mark.slow
def test_under_another_matplotlib_the_declared_data_is_compared(copy):
    import matplotlib

    plan, _ = plan_and_lock()
    results = Record(copy).results()
    path = copy / "plots" / "device-1-order.svg"
    original = path.read_bytes()
    # drawn by another version: other bytes, the same data -> no problem
    other = original.replace(f"Matplotlib v{matplotlib.__version__}".encode(), b"Matplotlib v0.1").replace(
        b'<g id="figure_1">', b'<g id="figure_1" class="older-layout">'
    )
    path.write_bytes(other)
    assert plot_problems(copy, results, plan) == []
    # ... but a declared data digest that the raw samples do not give is a problem
    declared = svg_facts(original)[1]
    path.write_bytes(other.replace(declared.encode(), b"0" * 64))
    (problem,) = plot_problems(copy, results, plan)
    assert problem.startswith("plots/device-1-order.svg: the data it declares (sha256 0000000000000000…) is not")
    assert f"drawn by matplotlib 0.1, this is {matplotlib.__version__}" in problem


def test_samples_are_put_back_in_the_order_they_were_taken():
    # values are the running sample number, stored per series as the runner stores them, in the
    # schedule's own order (blocks alternate ABBA and BAAB)
    s = TrialSamples()
    n = 0
    for pair in (MAIN, AA):
        for block in range(3):
            for series in [h.series for h in block_halves(block, pair)]:
                for _ in range(4):
                    s.add("N=1", series, ns=float(n), block=block, sm_mhz=1.0, throttle=0, temp_c=1.0)
                    n += 1
    arrays = s.arrays()
    values = {name: arrays[f"N=1/{name}/ns"] for name in ("base", "candidate", "aa_a", "aa_b")}
    taken = [chunk for pair in (MAIN, AA) for _, chunk in taken_order(arrays, "N=1", pair, values)]
    assert np.concatenate(taken).tolist() == list(range(n))
    series = [name for name, _ in taken_order(arrays, "N=1", MAIN, values)]
    abba, baab = ["base", "candidate", "candidate", "base"], ["candidate", "base", "base", "candidate"]
    assert series == abba + baab + abba


def test_hostile_device_names_are_drawn_as_plain_text(tmp_path):
    rec, plan, lock = new_record(tmp_path / "hostile")
    hostile = H200.model_copy(update={"name": "$\\frac{1}{2}$ </text><script>x</script>\x1b[2J"})
    add_trial(rec, lock, hostile, 1)
    write_record(rec, plan, lock)
    plots = render_plots(rec.folder, rec.results(), plan)  # mathtext would raise on a bad expression
    text = plots["plots/device-1-ratio.svg"].decode()
    assert "<script>" not in text and "\x1b" not in text
    assert "$\\frac{1}{2}$ &lt;/text&gt;&lt;script&gt;x&lt;/script&gt;\\x1b[2J" in text


@pytest.mark.slow
def test_report_check_refuses_an_edited_or_missing_plot(tmp_path):
    import shutil

    from qualify.record.check import check_record

    root = Path(__file__).resolve().parents[1] / "records" / "vecload"
    edited, missing = tmp_path / "edited", tmp_path / "missing"
    shutil.copytree(root, edited)
    shutil.copytree(root, missing)
    svg = edited / "plots" / "device-1-ratio.svg"
    svg.write_bytes(svg.read_bytes().replace(b"<svg", b'<svg data-edited="1"', 1))
    (missing / "plots" / "device-1-samples.svg").unlink()
    assert any("plots/device-1-ratio.svg" in p for p in check_record(edited))
    assert any("plots/device-1-samples.svg" in p for p in check_record(missing))
    assert check_record(root) == []
