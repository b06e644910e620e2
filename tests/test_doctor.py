"""`qualify doctor`: each check's decision on a fake host, the exit code, and the command's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import qualify.commands.doctor as doctor
from qualify.cli import main
from qualify.commands.doctor import DoctorReport, Host, NvmlState, diagnose, format_report, plan_needs
from qualify.errors import DeviceError, EnvironmentProblem
from qualify.generation import missing_extra
from qualify.plan.load import load_plan
from qualify.results.store import Record

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "qualify" / "schemas" / "doctor.schema.json"  # published for machines reading --json
H200 = Record(ROOT / "records" / "vecload").results().trials[0].provenance.device  # a real H200's identity
QUIET = NvmlState(
    persistence=True,
    sm_mhz=1980,
    sm_max_mhz=1980,
    clock_reasons=0x1,
    applications_clocks_set=False,
    ecc=True,
    mig=False,
    other_processes=[],
)


def no_gpu(ordinal: int):
    raise DeviceError("no NVIDIA driver on this machine (DynamicLibNotFoundError)")


def healthy(**changes) -> Host:
    host = Host(
        open_device=lambda ordinal: H200.model_copy(update={"ordinal": ordinal}),
        nvml_state=lambda uuid: QUIET,
        which=lambda tool: f"/usr/local/cuda/bin/{tool}",
        package_version=lambda name: "13.0.1" if name == "cuda-bindings" else "1.0",
        nvrtc_version=lambda: "13.0",
        include_dir=lambda: Path("/site-packages/nvidia/cu13/include"),
        driver_cuda=lambda: "13.0",
        header_version=lambda folder: "13.0",
    )
    return replace(host, **changes)


def by_name(report: DoctorReport, name: str):
    return [c for c in report.checks if c.name == name]


def statuses(report: DoctorReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_a_ready_runner_passes():
    report = diagnose(healthy())
    assert (report.ok, report.exit_code) == (True, 0)
    assert not [c for c in report.checks if c.status in ("fail", "warn")]
    assert report.device is not None and report.device.name == "NVIDIA H200"


def test_no_gpu_is_exit_5_with_the_drivers_reason():
    report = diagnose(healthy(open_device=no_gpu))
    assert (report.ok, report.exit_code) == (False, 5)
    (gpu,) = by_name(report, "gpu")
    assert gpu.status == "fail" and "no NVIDIA driver" in gpu.detail
    assert report.device is None


def test_no_gpu_wins_over_a_missing_tool():
    """Without a GPU nothing runs: the runner's problem is 5, whatever else is missing."""
    report = diagnose(healthy(open_device=no_gpu, which=lambda tool: None))
    assert report.exit_code == 5
    assert statuses(report)["compute-sanitizer"] == "fail"


@pytest.mark.parametrize("tool", ["compute-sanitizer", "nvcc"])
def test_a_missing_toolkit_tool_is_exit_6(tool):
    report = diagnose(healthy(which=lambda name: None if name == tool else f"/bin/{name}"))
    assert report.exit_code == 6
    (check,) = by_name(report, tool)
    assert check.status == "fail" and check.exit_code == 6 and "install the CUDA toolkit" in check.detail


def test_tools_a_plan_does_not_need_are_not_failures():
    report = diagnose(healthy(which=lambda name: None), needs_nvcc=False, needs_sanitizer=False)
    assert report.exit_code == 0
    assert statuses(report)["nvcc"] == statuses(report)["compute-sanitizer"] == "info"


def test_what_each_committed_plan_needs():
    assert plan_needs(load_plan(ROOT / "protocols/vecload/plan.json").plan) == (False, True)
    assert plan_needs(load_plan(ROOT / "protocols/attention-wide-entry/plan.json").plan) == (True, False)


def test_missing_nvrtc_is_an_environment_failure_naming_the_extra():
    def missing():
        raise missing_extra("libnvrtc", "NVRTC cannot be loaded (DynamicLibNotFoundError)")

    report = diagnose(healthy(nvrtc_version=missing))
    assert report.exit_code == 5
    (nvrtc,) = by_name(report, "nvrtc")
    assert nvrtc.status == "fail" and nvrtc.exit_code == 5 and "qualify[cu13]" in nvrtc.detail
    (cuda,) = by_name(report, "cuda")  # the driver is CUDA 13.0: its extra, not a list of choices
    assert (
        cuda.status == "fail"
        and "NVRTC not installed; install the extra for the driver's CUDA 13.0: pip install 'qualify[cu13]'"
        in cuda.detail
    )


def test_a_missing_package_is_an_environment_failure():
    report = diagnose(healthy(package_version=lambda name: None if name == "nvidia-ml-py" else "1"))
    assert report.exit_code == 5 and "missing nvidia-ml-py" in by_name(report, "packages")[0].detail


def test_the_gpu_is_checked_against_the_plans_devices():
    plan = load_plan(ROOT / "protocols/vecload/plan.json").plan
    assert diagnose(healthy(), plan=plan).exit_code == 0
    l20 = H200.model_copy(update={"name": "NVIDIA L20", "compute_capability": "8.9", "arch": "sm_89"})
    report = diagnose(healthy(open_device=lambda ordinal: l20), plan=plan)
    assert report.exit_code == 5
    (check,) = [c for c in by_name(report, "plan") if c.status == "fail"]
    assert "NVIDIA L20 (cc 8.9) is not a device plan vecload lists" in check.detail


def test_an_nvrtc_newer_than_the_driver_is_a_warning():
    report = diagnose(healthy(nvrtc_version=lambda: "13.1", header_version=lambda folder: "13.1"))
    assert report.exit_code == 0
    assert any(c.status == "warn" and "newer than the driver" in c.detail for c in by_name(report, "cuda"))


@pytest.mark.parametrize(
    "state, check, status, words",
    [
        ("NVML unavailable (NVMLError_LibraryNotFound)", "nvml", "warn", "NVML unavailable"),
        (replace(QUIET, persistence=False), "persistence", "warn", "persistence mode off"),
        (replace(QUIET, clock_reasons=0x40 | 0x1), "throttle", "warn", "hardware thermal slowdown"),
        (replace(QUIET, clock_reasons=0x4), "throttle", "warn", "software power cap"),
        (replace(QUIET, clock_reasons=0x1 | 0x2 | 0x100), "throttle", "ok", "no slowdown"),
        (replace(QUIET, mig=True), "mig", "warn", "MIG mode on"),
        (replace(QUIET, other_processes=[4242]), "processes", "warn", "pid 4242"),
        (replace(QUIET, applications_clocks_set=True), "clocks", "info", "held by an application-clocks setting"),
        (replace(QUIET, clock_reasons=0x2), "clocks", "info", "held by an application-clocks setting"),
    ],
)
def test_nvml_findings_warn_without_failing(state, check, status, words):
    report = diagnose(healthy(nvml_state=lambda uuid: state))
    assert report.exit_code == 0
    assert any(c.status == status and words in c.detail for c in by_name(report, check)), by_name(report, check)


def test_the_report_is_one_line_per_check_and_failures_carry_their_code():
    report = diagnose(healthy(open_device=no_gpu))
    lines = format_report(report)
    assert len(lines) == len(doctor.ROLES) + len(report.checks)  # the roles first, then one line per check
    assert "FAIL  gpu: device 0: no NVIDIA driver on this machine (DynamicLibNotFoundError) [exit 5]" in lines
    assert all("\n" not in line for line in lines)


# -- the command ------------------------------------------------------------------------------


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_command_without_a_gpu_is_exit_5_for_running_and_one_error_line(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "real_host", lambda: healthy(open_device=no_gpu))
    code, out, err = run_cli(["doctor", "--role", "running"], capsys)
    assert code == 5
    assert err == "qualify: error: doctor: this host cannot serve role running: blocked by gpu (FAIL above)\n"
    assert "FAIL  gpu:" in out


def test_a_host_fine_for_writing_plans_says_so_without_fail(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "real_host", lambda: healthy(open_device=no_gpu, which=lambda tool: None))
    code, out, err = run_cli(["doctor"], capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("yes   role authoring: write and check plans")
    assert lines[1].startswith("no    role running: run trials") and lines[1].endswith(
        "(blocked by gpu, compute-sanitizer, nvcc)"
    )
    assert "FAIL" not in out and any(line.startswith("no    gpu: device 0: ") for line in lines)
    code, _, err = run_cli(["doctor", "--role", "authoring"], capsys)
    assert (code, err) == (0, "")


def test_a_host_without_nvrtc_serves_no_role(capsys, monkeypatch):
    def missing():
        raise EnvironmentProblem("NVRTC not found: pip install 'qualify[cu13]'")

    monkeypatch.setattr(doctor, "real_host", lambda: healthy(open_device=no_gpu, nvrtc_version=missing))
    code, out, err = run_cli(["doctor"], capsys)
    assert code == 5 and err.startswith("qualify: error: doctor: this host cannot serve any role: blocked by nvrtc")
    assert "FAIL  nvrtc:" not in out and "no    role authoring:" in out


@pytest.mark.parametrize(
    "host, served",
    [
        ({}, {"authoring": True, "running": True, "ci": True}),
        ({"open_device": "no_gpu"}, {"authoring": True, "running": False, "ci": False}),
        ({"which": "no_nvcc"}, {"authoring": True, "running": True, "ci": False}),
    ],
)
def test_roles_follow_the_checks_they_need(host, served):
    probes = {"no_gpu": no_gpu, "no_nvcc": lambda tool: None if tool == "nvcc" else f"/bin/{tool}"}
    # a plan that needs no nvcc: running is served, a CI runner (every protocol) is not
    report = diagnose(
        healthy(**{k: probes[v] for k, v in host.items()}), needs_nvcc=False, needs_sanitizer=True, role=None
    )
    assert {r.name: r.serves for r in report.roles} == served
    assert report.ok and report.exit_code == 0
    if not served["ci"]:
        ci = next(r for r in report.roles if r.name == "ci")
        assert ci.blocked_by == (["gpu"] if host.get("open_device") else ["nvcc"])


def test_command_json_follows_its_schema(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "real_host", lambda: healthy(open_device=no_gpu))
    code, out, _ = run_cli(
        ["doctor", "--json", "--role", "running", "--plan", str(ROOT / "protocols/vecload/plan.json")], capsys
    )
    assert code == 5
    document = json.loads(out)
    import jsonschema  # here, not at the top: a GPU host running only `pytest -m gpu` may lack it

    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert document["doctor_version"] == 3 and document["exit_code"] == 5 and document["ok"] is False
    assert document["role"] == "running" and [r["serves"] for r in document["roles"]] == [True, False, False]


def test_command_on_a_ready_runner_is_exit_0(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "real_host", lambda: healthy())
    code, out, err = run_cli(["doctor", "--device", "1"], capsys)
    assert (code, err) == (0, "")
    assert "ok    gpu: device 1: NVIDIA H200" in out


def test_command_with_a_bad_plan_is_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(doctor, "real_host", lambda: healthy())
    bad = tmp_path / "plan.json"
    bad.write_text("[]")
    code, _, err = run_cli(["doctor", "--plan", str(bad)], capsys)
    assert code == 2 and err.count("\n") == 1


def test_the_real_command_with_no_visible_gpu_is_exit_5_without_traceback():
    """End to end on this host: no driver here, or a GPU hidden by CUDA_VISIBLE_DEVICES on a GPU host."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "qualify", "doctor", "--role", "ci"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 5, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("qualify: error: doctor:")
    assert "Traceback" not in done.stdout + done.stderr
    assert any(line.startswith("FAIL  gpu: device 0: ") for line in done.stdout.splitlines())


def test_the_published_json_schema_is_current():
    """Fails when the model changes without regenerating the file:
    python -c 'import json; from qualify.commands.doctor import DoctorReport; print(json.dumps(DoctorReport.model_json_schema(), indent=2))' \\
      > qualify/schemas/doctor.schema.json"""
    assert json.loads(SCHEMA.read_text()) == DoctorReport.model_json_schema()


def test_cupti_present_or_missing_is_said_and_never_fails():
    (present,) = by_name(diagnose(healthy()), "cupti")
    assert present.status == "ok" and "cupti-python 1.0" in present.detail
    why = "cupti-python is not installed (No module named 'cupti'); pip install 'qualify[cupti-cu13]'"
    report = diagnose(healthy(cupti_missing=lambda: why))
    (missing,) = by_name(report, "cupti")
    assert missing.status == "warn" and missing.detail.startswith(why)
    assert "no kernel inventory or second timer" in missing.detail
    assert (report.ok, report.exit_code) == (True, 0)


def test_a_plan_with_python_arms_needs_torch_in_the_trial_processes(monkeypatch):
    import importlib.util

    plan = load_plan(ROOT / "protocols/triton-softmax/plan.json").plan
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("torch", "triton") else found(name, *a)
    )
    report = diagnose(healthy(), plan=plan)
    assert report.exit_code == 5
    (check,) = [c for c in by_name(report, "plan") if c.status == "fail"]
    assert "Python arms: torch and triton not installed: pip install 'qualify[triton]'" in check.detail
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert diagnose(healthy(), plan=plan).exit_code == 0
    vecload = load_plan(ROOT / "protocols/vecload/plan.json").plan
    assert not [c for c in by_name(diagnose(healthy(), plan=vecload), "plan") if "Python" in c.detail]
