"""protocols/fp8-rowsum without a GPU: a two-launch base through an f32 scratch against one fused
sm_90a kernel, fp8 input generated with saturation, byte parity against the base, and controls that
flip an fp8 bit. sm_90a is admitted here by extending the architecture table the way issue 28 item 1
does (qualify/build, merged separately), so every launch is compiled and checked as `plan check`
will."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qualify.dtypes import as_float64, largest_finite
from qualify.plan.model import hardware

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "protocols" / "fp8-rowsum" / "plan.json"


@pytest.fixture
def sm_90a(monkeypatch):
    monkeypatch.setitem(hardware.MAX_SHARED_PER_BLOCK, "sm_90a", hardware.MAX_SHARED_PER_BLOCK["sm_90"])


def test_the_plan_is_a_two_launch_base_against_a_fused_fp8_candidate(sm_90a):
    from qualify.plan.load import load_plan

    loaded = load_plan(PLAN)
    assert loaded.plan.hardware.architectures == ["sm_90a"]
    for case in loaded.cases:
        base, cand = case.arms["base"], case.arms["candidate"]
        assert [s.kernel for s in base.steps] == ["dequant_scale", "row_sum"]
        assert [s.kernel for s in cand.steps] == ["fused_rowsum"]
        assert cand.steps[0].launch.threads_per_block % 128 == 0  # setmaxnreg: whole warp groups
        assert base.buffer("deq").role == "scratch" and "deq" not in {b.name for b in cand.buffers}
        assert [b.name for b in base.buffers if b.role == "output"] == ["out"]
        assert base.buffer("q").dtype == "f8e4m3"
    assert loaded.plan.acceptance.fidelity.mode == "bytes"


def test_plan_check_compiles_every_launch_for_sm_90a(sm_90a):
    from qualify.commands.check import check_plan

    check = check_plan(PLAN)
    assert sorted(check.compiled) == [
        ("base.launches[0]", "sm_90a"),
        ("base.launches[1]", "sm_90a"),
        ("candidate.launches[0]", "sm_90a"),
    ]
    assert check.ok


def test_the_fused_kernel_needs_sm_90a():
    from qualify.build.nvrtc import KernelSpec, compile_kernel
    from qualify.errors import BuildError

    source = ROOT / "kernels" / "fp8_rowsum" / "rowsum_fused.cu"
    with pytest.raises(BuildError, match="could not compile fused_rowsum for sm_90"):
        compile_kernel(KernelSpec(source=source, kernel="fused_rowsum", arch="sm_90"))


def test_the_generated_fp8_input_saturates_and_the_controls_flip_an_fp8_bit(sm_90a):
    from qualify.plan.load import load_plan
    from qualify.run.controls import mutate
    from qualify.run.inputs import generate

    loaded = load_plan(PLAN)
    case = loaded.cases[0]
    spec = next(b for b in loaded.plan.workload.buffers if b.name == "q")
    q = generate(loaded.plan.seeds, case.id, spec, case.arms["base"].buffer("q"))
    values = as_float64(q, "f8e4m3")
    assert np.isfinite(values).all() and np.abs(values).max() <= largest_finite("f8e4m3")
    controls = {c.name: c for c in loaded.plan.controls.negative}
    for name in ("flip_first_q_exponent_bit", "flip_last_q_exponent_bit"):
        control = controls[name]
        mutated = mutate(q, "f8e4m3", control.mutation, case.arms["candidate"].params | case.values)
        changed = np.flatnonzero(mutated != q)
        assert changed.size == 1 and (mutated[changed] ^ q[changed]).tolist() == [0x08]
        # bit 3 is the lowest exponent bit: the value always changes (a zero becomes 2^-6)
        assert as_float64(mutated, "f8e4m3")[changed] != values[changed]
    assert controls["fused_misreads_fp8"].defines == {"QUALIFY_CONTROL_FLIP_FP8_BIT": 1}


def test_the_docs_example_is_the_protocols_arms_and_its_snippets_validate():
    import json
    import re

    from qualify.plan.model import Arms, Controls, Fidelity, Workload

    text = (ROOT / "docs" / "plan.md").read_text()
    section = text[text.index("## Example: a two-launch base against a fused fp8 candidate") :]
    example, tolerance = re.findall(r"```json\n(.*?)```", section, re.S)[:2]
    example = json.loads(example)
    real = json.loads(PLAN.read_text())
    assert example["arms"] == real["arms"] and example["hardware"] == real["hardware"]
    Arms.model_validate(example["arms"])
    Workload.model_validate(example["workload"])
    Controls.model_validate(example["controls"])
    rule = Fidelity.model_validate(json.loads("{" + tolerance + "}")["fidelity"]).tolerances[0]
    assert rule.atol_quanta == 1
