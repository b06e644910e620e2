"""Writes past a scratch buffer's declared size on the GPU (issue 37, item 4; QUALIFY_REQUIRE_GPU=1
fails them without a GPU). The base arm's first launch writes one float past its scratch buffer
`tmp` (inside the guard: memcheck alone cannot see it), or one float past the guard (memcheck sees
it; its address is named by the buffer). Each mechanism must name `tmp`:

| planted write              | mechanism                                          |
|----------------------------|----------------------------------------------------|
| 4 bytes past `tmp`         | `plan rehearse --device 0`: exit 2, one line       |
| 4 bytes past `tmp`         | the preflight worker: the case faults, named       |
| 4 bytes past `tmp`         | compute-sanitizer memcheck: findings, worker line  |
| past `tmp`'s guard         | compute-sanitizer memcheck: the address named      |
| nothing past (the control) | each of the above: clean                           |
"""

from __future__ import annotations

import pytest
from plans import make_repo
from test_arm_launches import FILES, two_step_plan
from test_refused_inputs import run_cli

from qualify.run.device import GUARD_BYTES

pytestmark = pytest.mark.gpu

CLEAN = "if (i < n) tmp[i] = a * x[i];"
PLANTED = {
    "none": CLEAN,
    "one_past": CLEAN + " if (i == 0) tmp[n] = 0.0f;",
    "past_guard": CLEAN + f" if (i == 0) tmp[n + {GUARD_BYTES // 4 + 16}] = 0.0f;",
}


def plan_with(tmp_path, planted: str):
    files = dict(FILES)
    assert CLEAN in files["kernels/k.cu"]
    files["kernels/k.cu"] = files["kernels/k.cu"].replace(CLEAN, PLANTED[planted])
    return make_repo(tmp_path / planted, two_step_plan(), files=files, freeze=True)


def _case(path) -> str:
    from qualify.plan.load import load_plan

    return load_plan(path).cases[0].id


def test_rehearse_on_the_device_names_the_buffer(tmp_path, capsys):
    bad = plan_with(tmp_path, "one_past")
    code, out, err = run_cli(["plan", "rehearse", bad, "--out", tmp_path / "r1", "--device", "0"], capsys)
    print("rehearse one_past:", code, err.strip().splitlines()[-1:])
    assert code == 2 and "wrote 4 byte(s) past the end of scratch buffer 'tmp'" in err
    good = plan_with(tmp_path, "none")
    code, out, err = run_cli(["plan", "rehearse", good, "--out", tmp_path / "r2", "--device", "0"], capsys)
    print("rehearse none:", code, [ln for ln in out.splitlines() if "declared size" in ln])
    assert code == 0, err
    assert "writes past a buffer's declared size: checked on" in out


def test_the_preflight_worker_fails_the_case(tmp_path):
    from qualify.run.isolation import preflight

    bad = plan_with(tmp_path, "one_past")
    out = preflight(bad, "base", [_case(bad)], case_timeout=30)
    print("preflight one_past:", out)
    assert out[0].status == "fault" and "4 byte(s) past the end of scratch buffer 'tmp'" in out[0].message
    good = plan_with(tmp_path, "none")
    assert [o.status for o in preflight(good, "base", [_case(good)], case_timeout=30)] == ["ok"]


@pytest.mark.parametrize("planted, expected", [("one_past", "worker: "), ("past_guard", "address 0x")])
def test_memcheck_names_the_buffer(tmp_path, planted, expected):
    from qualify.run.sanitizer import run_check

    path = plan_with(tmp_path, planted)
    result = run_check("memcheck", path, _case(path), "base", timeout=240)
    print("memcheck", planted, result.status, result.errors, result.excerpt[:3])
    assert result.status == "findings" and (result.errors or 0) >= 1, result
    named = [line for line in result.excerpt if line.startswith(expected)]
    assert named and "'tmp'" in named[0], result.excerpt
    if planted == "past_guard":
        assert "past the end of buffer 'tmp'" in named[0] and "guard)" not in named[0]


def test_memcheck_is_clean_without_a_planted_write(tmp_path):
    from qualify.run.sanitizer import run_check

    path = plan_with(tmp_path, "none")
    result = run_check("memcheck", path, _case(path), "base", timeout=240)
    print("memcheck none", result.status, result.errors)
    assert result.status == "clean", result
