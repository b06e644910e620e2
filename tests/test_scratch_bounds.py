"""Writes past a buffer's declared size (issue 37, item 4): every output and scratch buffer gets a
guard after its declared size, read back after each launch. On the fake device: a launch writing 4
bytes past its scratch buffer is reported by the rehearsal (library and command line, exit 2) and by
the preflight worker's code, naming the case, the launch, the buffer and the bytes; one writing
within bounds is not; the sanitizer's faulting addresses are named by the buffer they lie near."""

from __future__ import annotations

import json

import numpy as np
import pytest
from plans import make_repo
from test_arm_launches import FILES, _add_to, _axpy, two_step_plan
from test_refused_inputs import run_cli

from qualify.commands.golden import view_plan
from qualify.commands.rehearse import rehearse
from qualify.evaluate.sanitizer_output import locate, parse
from qualify.plan.load import load_plan
from qualify.run import bounds
from qualify.run.arms import compile_and_load
from qualify.run.device import GUARD_BYTE, GUARD_BYTES
from qualify.run.fake import FakeDevice


def _scale_into_past(extra: int):
    """scale_into, writing `extra` bytes after the n floats of tmp (a loop bound one step too far)."""

    def kernel(memory, args, _kernel):
        (_, x), (_, tmp), (_, a), (_, n) = args
        memory.view(tmp, 4 * n).view(np.float32)[:] = np.float32(a) * memory.view(x, 4 * n).view(np.float32)
        if extra:
            memory.view(tmp + 4 * n, extra)[:] = 0

    return kernel


def _device(extra: int) -> FakeDevice:
    return FakeDevice({"scale_into": _scale_into_past(extra), "add_to": _add_to, "axpy": _axpy})


@pytest.fixture
def plan_path(tmp_path):
    return make_repo(tmp_path / "repo", two_step_plan(), files=FILES)


def test_four_bytes_past_a_scratch_buffer_are_reported_by_the_rehearsal(plan_path, tmp_path):
    found = rehearse(view_plan(plan_path), None, tmp_path / "out", device=_device(4))
    cases = [c.id for c in view_plan(plan_path).cases]
    bad = [p for p in found.problems if "past the end" in p]
    assert len(bad) == len(cases)  # each case's run, none other
    for cid, line in zip(cases, bad):
        assert line == (
            f"{cid}: base: launch 0 (scale_into) wrote 4 byte(s) past the end of scratch buffer 'tmp' "
            f"(declared {4 * view_plan(plan_path).cases[cases.index(cid)].arms['base'].buffer('tmp').elements:,} bytes)"
        )
    assert found.buffer_bounds.startswith("checked on NVIDIA H200 (fake)")
    assert found.overrun_fields == ["arms.base.scratch[0]"] * len(cases)
    assert "Writes past a buffer's declared size: checked" in (tmp_path / "out" / "REHEARSAL.md").read_text()


def test_writes_within_bounds_are_not_reported(plan_path, tmp_path):
    device = _device(0)
    found = rehearse(view_plan(plan_path), None, tmp_path / "out", device=device)
    assert not [p for p in found.problems if "past" in p]
    assert found.buffer_bounds.startswith("checked on")
    # every guard was read back (3 guarded buffers after launch 0 and 1 of the base, then the
    # candidate's one launch), and every buffer freed
    assert sum(c[0] == "guard" for c in device.calls) == len(view_plan(plan_path).cases) * (2 * 2 + 1)
    assert device.live_buffers == 0
    # poisoned before each run: the base's out and tmp, the candidate's out (never an input)
    assert sum(c[0] == "poison" for c in device.calls) == len(view_plan(plan_path).cases) * 3


def test_without_a_device_the_rehearsal_says_it_did_not_check(plan_path, tmp_path):
    found = rehearse(view_plan(plan_path), None, tmp_path / "out")
    assert found.buffer_bounds.startswith("not checked: no device")


def test_the_command_line_exits_2_naming_the_buffer(plan_path, tmp_path, capsys, monkeypatch):
    """`plan rehearse --device 0` opens the device through CudaDevice: the fake stands in for it."""
    import qualify.run.device as device_module

    monkeypatch.setattr(device_module, "CudaDevice", lambda ordinal: _device(4))
    code, out, err = run_cli(["plan", "rehearse", plan_path, "--out", tmp_path / "out", "--device", "0"], capsys)
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert "4 byte(s) past the end of scratch buffer 'tmp'" in line and str(plan_path) in line
    assert "arms.base.scratch[0]" in line and "acceptance.fidelity" not in line
    monkeypatch.setattr(device_module, "CudaDevice", lambda ordinal: _device(0))
    code, out, err = run_cli(["plan", "rehearse", plan_path, "--out", tmp_path / "ok", "--device", "0"], capsys)
    assert code == 0, err
    assert "writes past a buffer's declared size: checked on" in out


def test_the_guard_reports_the_furthest_changed_byte_and_is_filled_again():
    device = FakeDevice({})
    buf = device.alloc_guarded(64)
    assert device.guard_bytes(buf) == GUARD_BYTES and device.guard_bytes(device.alloc(8)) == 0
    assert device.guard_overrun(buf) == 0
    device.memory.view(buf.ptr, 64)[:] = 0  # the whole declared size: no overrun
    assert device.guard_overrun(buf) == 0
    device.memory.view(buf.ptr + 64 + 9, 1)[:] = 0  # one byte, the tenth past the end
    assert device.guard_overrun(buf) == 10
    assert (device.memory.view(buf.ptr + 64, GUARD_BYTES) == GUARD_BYTE).all()
    assert device.guard_overrun(buf) == 0
    device.memory.view(buf.ptr + 64, 1)[:] = GUARD_BYTE - 1
    assert device.guard_overrun(buf) == 1


def test_a_write_into_an_output_guard_is_found_too(plan_path):
    """Outputs are guarded like scratch: the fused candidate writing one float past `out`."""

    def axpy_past(memory, args, kernel):
        _axpy(memory, args, kernel)
        (_, _x), (_, _y), (_, out), (_, _a), (_, n) = args
        memory.view(out + 4 * n + 4, 4)[:] = 0

    device = FakeDevice({"scale_into": _scale_into_past(0), "add_to": _add_to, "axpy": axpy_past})
    loaded = load_plan(plan_path)
    case = loaded.cases[0]
    kernel = compile_and_load(device, loaded, "candidate", [case])[1]
    arm = case.arms["candidate"]
    buffers = bounds.allocate(device, arm)
    inputs = {
        b.name: (np.arange(b.elements, dtype=np.float32) + 1).view(np.uint8) for b in arm.buffers if b.role == "input"
    }
    found = bounds.run_guarded(device, "candidate", kernel, case.id, arm, inputs, buffers)
    assert [(o.buffer, o.role, o.past_bytes, o.launch) for o in found] == [("out", "output", 8, "the launch")]
    # the inputs were uploaded and the output poisoned before the launch, which then wrote it
    out = buffers["out"]
    assert device.calls.index(("poison", out.ptr)) < device.calls.index(("launch", "candidate"))
    x = np.arange(arm.buffer("x").elements, dtype=np.float32) + 1
    a = next(v for kind, v in kernel_args(arm) if kind == "f32")
    assert np.array_equal(device.download(out).view(np.float32), np.float32(a) * x + x)
    laid = {b["name"]: b for b in bounds.layout(device, arm, buffers)}
    assert laid["out"]["guard"] == GUARD_BYTES and laid["x"]["guard"] == 0
    assert all((b["ptr"], b["nbytes"]) == (buffers[n].ptr, arm.buffer(n).nbytes) for n, b in laid.items())


def kernel_args(arm):
    return [(a.kind, a.value) for a in arm.args]


def test_an_output_written_past_is_named_by_its_workload_field(plan_path, tmp_path):
    def axpy_past(memory, args, kernel):
        _axpy(memory, args, kernel)
        (_, _x), (_, _y), (_, out), (_, _a), (_, n) = args
        memory.view(out + 4 * n, 2)[:] = 0

    device = FakeDevice({"scale_into": _scale_into_past(0), "add_to": _add_to, "axpy": axpy_past})
    found = rehearse(view_plan(plan_path), None, tmp_path / "out", device=device)
    names = [b.name for b in load_plan(plan_path).plan.workload.buffers]
    assert set(found.overrun_fields) == {f"workload.buffers[{names.index('out')}]"}
    assert all("candidate: the launch wrote 2 byte(s) past the end of output buffer 'out'" in p for p in found.problems)


LAYOUT = [
    {"name": "x", "role": "input", "ptr": 0x10000, "nbytes": 1024, "guard": 0},
    {"name": "tmp", "role": "scratch", "ptr": 0x20000, "nbytes": 1024, "guard": GUARD_BYTES},
]


def test_an_address_is_named_by_the_buffer_it_lies_in_or_near():
    assert locate(0x20000 + 8, LAYOUT) == "inside buffer 'tmp' at byte 8 of 1,024"
    assert locate(0x20000 + 1024, LAYOUT) == (
        f"1 byte(s) past the end of buffer 'tmp' (in its {GUARD_BYTES:,}-byte guard) (declared 1,024 bytes)"
    )
    past = 0x20000 + 1024 + GUARD_BYTES + 4
    assert locate(past, LAYOUT) == f"{GUARD_BYTES + 5:,} byte(s) past the end of buffer 'tmp' (declared 1,024 bytes)"
    assert locate(0x20000 - 4, LAYOUT) == "4 byte(s) before buffer 'tmp' (declared 1,024 bytes)"
    assert locate(0x10000 + 1024 + 2, LAYOUT).startswith("3 byte(s) past the end of buffer 'x'")
    assert locate(0x7F00_0000_0000, LAYOUT) is None  # nowhere near qualify's buffers


@pytest.mark.parametrize("says", ["Address", "Access at"])
def test_the_sanitizer_report_names_the_buffer_of_each_faulting_address(says):
    """memcheck's own lines (both spellings: "Address 0x…" of older releases, "Access at 0x…" of
    CUDA 13's, which the H200 printed) and the worker's events, as the child prints them: the
    excerpt begins with the buffer each address lies near."""
    event = {"event": "buffers", "case": "N=256", "side": "base", "buffers": LAYOUT}
    address = 0x20000 + 1024 + GUARD_BYTES + 4
    output = "\n".join(
        [
            json.dumps({"event": "start", "case": "N=256"}),
            json.dumps(event),
            "========= Invalid __global__ write of size 4 bytes",
            "=========     at scale_into(const float *, float *, float, long long)+0x80",
            "=========     by thread (4,0,0) in block (1,0,0)",
            f"=========     {says} {address:#x} is out of bounds",
            "========= ERROR SUMMARY: 1 error",
        ]
    )
    result = parse("memcheck", "N=256", "base", 86, output, 1.0)
    assert result.status == "findings"
    assert result.excerpt[0] == (
        f"address {address:#x}: {GUARD_BYTES + 5:,} byte(s) past the end of buffer 'tmp' (declared 1,024 bytes)"
    )
    without = parse("memcheck", "N=256", "base", 86, output.replace(json.dumps(event), ""), 1.0)
    assert not any(line.startswith("address ") for line in without.excerpt)


def test_the_workers_overrun_fault_is_kept_in_the_sanitizer_report():
    message = "N=256: base: launch 0 (scale_into) wrote 4 byte(s) past the end of scratch buffer 'tmp'"
    output = "\n".join(
        [
            json.dumps({"event": "fault", "case": "N=256", "code": "overrun", "message": message}),
            "========= ERROR SUMMARY: 0 errors",
        ]
    )
    result = parse("memcheck", "N=256", "base", 3, output, 1.0)
    assert result.status == "findings" and result.errors == 1  # memcheck saw none: the guard did
    assert result.excerpt[0] == f"worker: {message}"


class _Opened:
    """CudaDevice(ordinal) as the worker opens it, a context manager over the fake."""

    def __init__(self, device):
        self.device = device

    def __call__(self, ordinal):
        return self

    def __enter__(self):
        return self.device

    def __exit__(self, *exc):
        return False


def test_the_preflight_worker_faults_the_case_naming_the_buffer(plan_path, capsys, monkeypatch):
    """The worker (the preflight's, and the sanitizer's child) lays out the buffers, then reports an
    overrun as a fault of its case: the preflight leaves the case out with that message."""
    import qualify.run.worker as worker

    cases = [c.id for c in load_plan(plan_path).cases]
    overrunning = _device(4)
    monkeypatch.setattr(worker, "CudaDevice", _Opened(overrunning))
    assert worker.run_cases(str(plan_path), cases, "base") == 3
    assert overrunning.live_buffers == 0  # freed before the report: memcheck's leak check sees none
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in events] == ["start", "buffers", "fault"]
    assert events[1]["buffers"][-1]["name"] == "tmp" and events[1]["buffers"][-1]["guard"] == GUARD_BYTES
    roles = {b.name: b.role for b in load_plan(plan_path).cases[0].arms["base"].buffers}
    assert {b["name"]: b["role"] for b in events[1]["buffers"]} == roles and roles["tmp"] == "scratch"
    assert events[2]["code"] == "overrun" and "4 byte(s) past the end of scratch buffer 'tmp'" in events[2]["message"]
    # the layout the worker printed is what the sanitizer's reader names an address by
    tmp = events[1]["buffers"][-1]
    address = tmp["ptr"] + tmp["nbytes"] + GUARD_BYTES + 8
    output = "\n".join([json.dumps(events[1]), f"=========     Address {address:#x} is out of bounds"])
    assert parse("memcheck", cases[0], "base", 86, output, 1.0).excerpt[0] == (
        f"address {address:#x}: {GUARD_BYTES + 9:,} byte(s) past the end of buffer 'tmp' (declared {tmp['nbytes']:,} bytes)"
    )
    monkeypatch.setattr(worker, "CudaDevice", _Opened(_device(0)))
    assert worker.run_cases(str(plan_path), cases, "base") == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in events] == ["start", "buffers", "done"] * len(cases)
