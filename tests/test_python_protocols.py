"""The committed Python-arm protocols on the CPU: frozen, checked by `ast` (no torch, no Triton),
rehearsed and given a golden with the NumPy reference of kernels/softmax."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.cli import main
from qualify.commands.pipeline import load_frozen
from qualify.plan.model import CudaArm, PythonArm

ROOT = Path(__file__).resolve().parent.parent
TRITON = ROOT / "protocols" / "triton-softmax" / "plan.json"
MIXED = ROOT / "protocols" / "softmax-mixed" / "plan.json"
REFERENCE = "kernels/softmax/reference.py:softmax"


def run(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out + out.err


def test_the_triton_pair_is_frozen_with_its_source():
    loaded = load_frozen(TRITON)
    assert all(isinstance(loaded.plan.arm(s), PythonArm) for s in ("base", "candidate"))
    assert set(loaded.lock["files"]) == {"kernels/triton/softmax.py"}
    assert {c.kind for c in loaded.plan.controls.negative} == {"input", "callable"}


def test_the_mixed_pair_is_a_python_arm_against_the_nvrtc_softmax():
    loaded = load_frozen(MIXED)
    assert isinstance(loaded.plan.arms.base, CudaArm) and isinstance(loaded.plan.arms.candidate, PythonArm)
    assert set(loaded.lock["files"]) == {"kernels/softmax/row_softmax.cu", "kernels/triton/softmax.py"}


def test_the_mixed_pair_rehearses_with_the_numpy_reference(tmp_path, capsys):
    code, out = run(
        ["plan", "rehearse", str(MIXED), "--reference", str(ROOT / REFERENCE), "--out", str(tmp_path)], capsys
    )
    assert code == 0, out
    text = (tmp_path / "REHEARSAL.md").read_text()
    assert "No problem found" in text and "a callable control needs the kernel" in text


def test_a_golden_is_made_for_the_mixed_pair_with_the_numpy_reference(tmp_path, capsys):
    out_file = tmp_path / "golden.safetensors"
    code, out = run(
        ["golden", "make", str(MIXED), "--reference", str(ROOT / REFERENCE), "--out", str(out_file)], capsys
    )
    assert code == 0, out
    assert out_file.stat().st_size > 2048 * 256 * 4
