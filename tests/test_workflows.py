"""The CI workflows, checked statically (zizmor, the workflow schema, the rules a GPU runner needs),
and their scripts run on the CPU: gpu-job.sh against a stand-in qualify, merge-records.sh for real."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
SCRIPTS = ROOT / ".github" / "scripts"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' installs it")
    return found


def load(path: Path) -> dict:
    # imported here, not at the top: a GPU host running only `pytest -m gpu` collects this file too
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(path.read_text())


def zizmor(*paths: Path) -> list[dict]:
    # auditor: every audit at every confidence, so a finding cannot hide below the default filter
    done = subprocess.run(
        [tool("zizmor"), "--offline", "--persona", "auditor", "--format", "json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 10, 11, 12, 13, 14), done.stderr  # 1x: findings of some severity
    return json.loads(done.stdout)


def schema_check(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_workflows_exist():
    assert [p.name for p in WORKFLOWS] == ["ci.yml", "gpu.yml"]


def test_zizmor_finds_nothing():
    findings = zizmor(*WORKFLOWS)
    assert findings == [], [f.get("ident") for f in findings]


def test_zizmor_would_catch_an_unsafe_workflow(tmp_path):
    """The check above can fail: tag-pinned actions and pull_request_target are findings."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        textwrap.dedent("""\
        on: pull_request_target
        jobs:
          build:
            runs-on: ubuntu-24.04
            steps:
              - uses: actions/checkout@v4
              - run: echo "${{ github.event.pull_request.title }}"
        """)
    )
    idents = {f["ident"] for f in zizmor(bad)}
    assert {"unpinned-uses", "dangerous-triggers", "template-injection"} <= idents


def test_the_workflows_follow_the_github_workflow_schema():
    done = schema_check(*WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_would_catch_a_malformed_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs_on: ubuntu-24.04\n    steps: [{run: true, usez: x}]\n")
    assert schema_check(bad).returncode != 0


# -- the rules, read from the workflows ----------------------------------------------------------


def jobs() -> dict[str, tuple[str, dict]]:
    return {f"{p.name}:{name}": (p.name, job) for p in WORKFLOWS for name, job in load(p)["jobs"].items()}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_token_is_read_only_and_no_trigger_runs_foreign_code_with_secrets(path):
    workflow = load(path)
    assert workflow["permissions"] == {"contents": "read"}
    assert "pull_request_target" not in workflow["on"] and "workflow_run" not in workflow["on"]
    for job in workflow["jobs"].values():
        assert job.get("permissions", {"contents": "read"}) == {"contents": "read"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit(path):
    uses = [s["uses"] for job in load(path)["jobs"].values() for s in job.get("steps", []) if "uses" in s]
    assert uses
    for ref in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert f"{ref}  # v" in path.read_text(), f"{ref}: say which release the commit is"


def test_every_job_has_a_timeout():
    for name, (_, job) in jobs().items():
        assert isinstance(job.get("timeout-minutes"), int), name


def gpu_jobs() -> list[dict]:
    return [job for _, job in jobs().values() if "self-hosted" in job["runs-on"]]


def qualify_job() -> dict:
    return load(ROOT / ".github" / "workflows" / "gpu.yml")["jobs"]["qualify"]


def test_every_gpu_job_is_kept_from_forks():
    assert len(gpu_jobs()) == 2
    for job in gpu_jobs():
        assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
        assert "github.event_name == 'pull_request' && " in job["if"]  # no other event slips through


def test_the_gate_job_runs_on_pull_requests_and_nightly_on_the_default_branch():
    workflow = load(ROOT / ".github" / "workflows" / "gpu.yml")
    assert [c["cron"] for c in workflow["on"]["schedule"]] == ["23 2 * * *"]
    job = workflow["jobs"]["gate"]
    assert "github.event_name == 'schedule' && github.ref == format('refs/heads/{0}'," in job["if"]
    assert "workflow_dispatch" not in job["if"]
    assert job["runs-on"][:4] == ["self-hosted", "linux", "x64", "gpu"]
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert runs == [".github/scripts/gate-job.sh"]
    checkout = job["steps"][0]
    assert checkout["with"]["fetch-depth"] == 0 and checkout["with"]["persist-credentials"] is False
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "gate-out/"
    # the scheduled run must not start the qualify job, which reads a pull request's base
    assert "github.event_name == 'pull_request' &&" in workflow["jobs"]["qualify"]["if"]


def test_the_gpu_job_runs_on_the_documented_labels_and_never_for_forks():
    job = qualify_job()
    assert job["runs-on"][:5] == ["self-hosted", "linux", "x64", "gpu", "${{ matrix.gpu }}"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert "vars.QUALIFY_GPU_LABELS" in str(job["strategy"]["matrix"]["gpu"])
    assert job["timeout-minutes"] <= 360


def test_the_gpu_job_calls_the_script_and_uploads_the_records():
    job = qualify_job()
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert runs == [".github/scripts/gpu-job.sh"]  # no inline shell: the script is what was tested
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "ci-records/" and upload["if"] == "${{ !cancelled() }}"
    env = next(s for s in job["steps"] if "run" in s)["env"]
    assert env["QUALIFY_OUT"] == "ci-records"


def test_the_fleet_is_merged_on_a_hosted_runner():
    workflow = load(ROOT / ".github" / "workflows" / "gpu.yml")
    merge = workflow["jobs"]["merge"]
    assert merge["needs"] == "qualify" and merge["runs-on"] == "ubuntu-24.04"
    assert ".github/scripts/merge-records.sh downloaded merged" in [s.get("run") for s in merge["steps"]]


def test_the_cpu_job_runs_the_readme_commands_and_checks_every_plan():
    workflow = load(ROOT / ".github" / "workflows" / "ci.yml")
    (job,) = workflow["jobs"].values()
    assert job["strategy"]["matrix"]["python"] == ["3.10", "3.11", "3.12", "3.13"]
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert "chromium" in runs[0]  # the browser tests' browser, before the README's commands
    assert runs[1] == ".ci/run"
    assert "qualify plan check" in runs[2] and "protocols/*/plan.json" in runs[2]


def test_no_run_step_expands_an_expression_into_shell():
    for name, (_, job) in jobs().items():
        for step in job.get("steps", []):
            assert "${{" not in step.get("run", ""), name


@pytest.mark.parametrize("script", sorted(SCRIPTS.glob("*.sh")), ids=lambda p: p.name)
def test_the_scripts_parse(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if shutil.which("shellcheck"):
        done = subprocess.run(
            ["shellcheck", "-x", "-e", "SC1091", str(script)], capture_output=True, text=True, cwd=ROOT
        )
        assert done.returncode == 0, done.stdout


def test_the_ci_config_names_protocols_and_files_that_exist():
    config = json.loads((ROOT / ".github" / "qualify-ci.json").read_text())
    assert config["ci_version"] == 1
    for name, entry in config["compare"].items():
        assert (ROOT / "protocols" / name / "plan.json").is_file(), name
        assert set(entry) == {"build", "base", "candidate", "sources"}
        assert all((ROOT / s).exists() for s in entry["sources"]), entry["sources"]


# -- gpu-job.sh against a stand-in qualify --------------------------------------------------------

FAKE_PYTHON = """\
#!/usr/bin/env bash
# Stands in for Python: `-m qualify CMD` and `-m pytest` answer from FAKE_* variables and log
# their arguments; anything else is the real interpreter.
if [ "$1" = -m ] && [ "$2" = qualify ]; then
  echo "qualify ${*:3}" >> "$FAKE_LOG"
  case "$3" in
    doctor) echo "ok    gpu: device 0: NVIDIA H200"; exit "${FAKE_DOCTOR:-0}" ;;
    changed) printf '%s' "$FAKE_CHANGED"; exit 0 ;;
    run|compare)
      for ((i = 1; i <= $#; i++)); do [ "${!i}" = --record ] && { j=$((i + 1)); record=${!j}; }; done
      name=$(basename "$record")
      if [ -n "${FAKE_SLOW:-}" ]; then  # a long trial that keeps itself when terminated, as qualify does
        trap 'echo "terminated $name" >> "$FAKE_LOG"; mkdir -p "$record"; echo "{}" > "$record/results.json"; exit 130' TERM
        echo "started $name" >> "$FAKE_LOG"
        for _ in $(seq 600); do sleep 0.1; done
        exit 0
      fi
      code_var="FAKE_CODE_${name//-/_}"
      if [ "${!code_var:-0}" != 5 ]; then mkdir -p "$record"; echo '{}' > "$record/results.json"; fi
      exit "${!code_var:-0}" ;;
    summary) echo "### summary of $4" >> "$6"; exit 0 ;;
    report) exit 0 ;;
  esac
  exit 99
fi
if [ "$1" = -m ] && [ "$2" = pytest ]; then echo "pytest ${*:3}" >> "$FAKE_LOG"; exit "${FAKE_PYTEST:-0}"; fi
exec "$REAL_PYTHON" "$@"
"""


def finish(job: subprocess.Popen, log: Path, cancel: bool) -> str:
    """The job's output; with `cancel`, SIGTERM to the script alone, as a runner cancelling the job
    does, once its qualify logged "started" (the job's own line, not a deadline: a loaded machine
    only delays it, and an early exit ends the wait)."""
    if cancel:
        while "started" not in log.read_text() and job.poll() is None:
            time.sleep(0.05)
        job.send_signal(signal.SIGTERM)
    out, _ = job.communicate(timeout=900)  # a hang guard only
    return out


@pytest.fixture
def fake(tmp_path):
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "log"
    log.touch()

    def run(signal_after_start: bool = False, **env) -> tuple[int, str, list[str], str]:
        summary = tmp_path / "summary.md"
        full = {
            **os.environ,
            "QUALIFY_PYTHON": str(python),
            "REAL_PYTHON": sys.executable,
            "FAKE_LOG": str(log),
            "QUALIFY_OUT": str(tmp_path / "out"),
            "GITHUB_STEP_SUMMARY": str(summary),
            "QUALIFY_LABEL": "h200",
            **env,
        }
        job = subprocess.Popen(
            ["bash", str(SCRIPTS / "gpu-job.sh")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full
        )
        out = finish(job, log, cancel=signal_after_start)
        return job.returncode, summary.read_text(), log.read_text().splitlines(), out

    return run


def test_gpu_job_stops_at_doctor_with_its_code(fake):
    code, summary, log, _ = fake(FAKE_DOCTOR="5")
    assert code == 5
    assert log == ["qualify doctor --role ci"]  # no tests, no run
    assert "qualify doctor: exit 5 (device or environment)" in summary


def test_gpu_job_stops_when_the_gpu_tests_fail(fake):
    code, summary, log, out = fake(FAKE_PYTEST="1", FAKE_CHANGED="protocols/vecload/plan.json\n")
    assert code == 70 and log[-1] == "pytest -q -m gpu -p no:cacheprovider"
    assert "::error title=gpu tests::" in out and "no protocol was qualified" in summary


def test_gpu_job_qualifies_each_changed_protocol_and_keeps_the_worst_code(fake, tmp_path):
    changed = "protocols/vecload/plan.json\nprotocols/attention-wide/plan.json\n"
    code, summary, log, out = fake(
        FAKE_CHANGED=changed, FAKE_CODE_vecload="1", FAKE_CODE_attention_wide="7", QUALIFY_BASE="origin/dev"
    )
    assert code == 7  # incomplete evidence outranks a verdict
    assert "qualify changed --base origin/dev --sources attention-wide-entry=kernels/attention/" in log
    out_dir = tmp_path / "out"
    assert f"qualify run protocols/vecload/plan.json --record {out_dir}/vecload" in log
    assert f"qualify run protocols/attention-wide/plan.json --record {out_dir}/attention-wide" in log
    assert f"### summary of {out_dir}/vecload" in summary and f"### summary of {out_dir}/attention-wide" in summary
    assert "::error title=vecload::exit 1: not qualified" in out


def test_gpu_job_cancelled_passes_the_signal_on_and_keeps_the_record(fake, tmp_path):
    changed = "protocols/vecload/plan.json\nprotocols/attention-wide/plan.json\n"
    code, summary, log, out = fake(signal_after_start=True, FAKE_CHANGED=changed, FAKE_SLOW="1")
    assert code == 130, out
    assert "terminated vecload" in log  # qualify got SIGTERM: its trial is kept, marked interrupted
    assert f"### summary of {tmp_path}/out/vecload" in summary
    assert not any("attention-wide" in line for line in log if line.startswith("qualify run"))


def test_gpu_job_without_a_record_says_why_in_the_summary(fake):
    code, summary, _, _ = fake(QUALIFY_PROTOCOL="vecload", FAKE_CODE_vecload="5")
    assert code == 5
    assert "**vecload**: no record: exit 5 (device or environment)" in summary


def test_gpu_job_with_nothing_changed_passes(fake):
    code, summary, log, _ = fake(FAKE_CHANGED="")
    assert code == 0 and "nothing to qualify" in summary
    assert not [line for line in log if line.startswith(("qualify run", "qualify compare"))]


@pytest.mark.parametrize("name", ["../../etc", "a/b", ".hidden"])
def test_gpu_job_refuses_a_protocol_name_that_is_a_path(fake, name):
    code, _, log, _ = fake(QUALIFY_PROTOCOL=name)
    assert code == 2 and not [line for line in log if line.startswith("qualify run")]


def test_gpu_job_with_the_real_qualify_on_a_host_without_a_gpu(tmp_path):
    """End to end on the CPU: the real doctor stops the job with exit 5 and says so in the summary."""
    summary = tmp_path / "summary.md"
    env = {
        **os.environ,
        "QUALIFY_PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
        "QUALIFY_OUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(summary),
        "QUALIFY_LABEL": "cpu",
    }
    done = subprocess.run(["bash", str(SCRIPTS / "gpu-job.sh")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 5, done.stdout + done.stderr
    text = summary.read_text()
    assert text.startswith("## qualify on cpu\n") and "FAIL  gpu: device 0:" in text
    assert "Traceback" not in done.stdout + done.stderr


# -- merge-records.sh with real records -----------------------------------------------------------


def merge(tmp_path, layout: dict[str, list[str]]) -> tuple[int, str, Path]:
    downloaded = tmp_path / "downloaded"
    for artifact, names in layout.items():
        for name in names:
            shutil.copytree(ROOT / "records" / name, downloaded / artifact / name)
    downloaded.mkdir(exist_ok=True)
    summary = tmp_path / "summary.md"
    env = {**os.environ, "QUALIFY_PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "GITHUB_STEP_SUMMARY": str(summary)}
    done = subprocess.run(
        ["bash", str(SCRIPTS / "merge-records.sh"), str(downloaded), str(tmp_path / "merged")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return done.returncode, summary.read_text(), tmp_path / "merged"


@pytest.mark.slow
def test_merge_records_of_every_runner_into_one_per_protocol(tmp_path):
    code, summary, merged = merge(
        tmp_path, {"qualify-records-h200": ["vecload", "attention-wide"], "qualify-records-l20": ["vecload"]}
    )
    assert code == 1  # the most severe of the merged verdicts: attention-wide is not qualified
    assert sorted(p.name for p in merged.iterdir()) == ["attention-wide", "vecload"]
    assert "### ✅ qualify: vecload — QUALIFIED" in summary
    assert "### ❌ qualify: attention-wide — NOT QUALIFIED" in summary
    check = subprocess.run(
        [sys.executable, "-m", "qualify", "report", "--check", str(merged / "vecload")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert check.returncode == 0, check.stderr


def test_merge_with_no_record_is_incomplete(tmp_path):
    code, summary, _ = merge(tmp_path, {})
    assert code == 7 and "No runner uploaded a record" in summary


# -- gate-job.sh against a stand-in qualify -------------------------------------------------------

GATE_PYTHON = """\
#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
exit "${FAKE_GATE_CODE:-0}"
"""


@pytest.mark.parametrize("code", [0, 1, 7])
def test_gate_job_passes_the_gate_exit_code_on(tmp_path, code):
    python = tmp_path / "python"
    python.write_text(GATE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "log"
    env = {**os.environ, "QUALIFY_PYTHON": str(python), "FAKE_LOG": str(log), "FAKE_GATE_CODE": str(code)}
    env |= {"QUALIFY_BASE": "origin/main", "QUALIFY_OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(SCRIPTS / "gate-job.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == code, done.stdout + done.stderr
    assert log.read_text().split() == ["-m", "qualify", "gate", "--out", str(tmp_path / "out"), "--base", "origin/main"]


def test_gate_job_nightly_times_every_protocol_against_itself(tmp_path):
    python = tmp_path / "python"
    python.write_text(GATE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "log"
    env = {**os.environ, "QUALIFY_PYTHON": str(python), "FAKE_LOG": str(log), "QUALIFY_GATE_MODE": "nightly"}
    done = subprocess.run(["bash", str(SCRIPTS / "gate-job.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    words = log.read_text().split()
    assert words[:6] == ["-m", "qualify", "gate", "--out", "gate-out", "--base"] and "--time-identical" in words
    named = [words[i + 1] for i, w in enumerate(words) if w == "--protocol"]
    assert sorted(named) == sorted(p.parent.name for p in (ROOT / "protocols").glob("*/plan.json"))


def test_gate_job_refuses_an_unknown_mode(tmp_path):
    env = {**os.environ, "QUALIFY_PYTHON": "/bin/false", "QUALIFY_GATE_MODE": "weekly"}
    done = subprocess.run(["bash", str(SCRIPTS / "gate-job.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and "must be change or nightly" in done.stdout


SLOW_GATE_PYTHON = """\
#!/usr/bin/env bash
trap 'echo terminated >> "$FAKE_LOG"; exit 130' TERM
echo started >> "$FAKE_LOG"
for _ in $(seq 600); do sleep 0.1; done
exit 0
"""


def test_gate_job_cancelled_passes_the_signal_on(tmp_path):
    """The gate shares gpu-job's signal forwarding (job-setup.sh): a cancelled job reaches qualify gate."""
    python = tmp_path / "python"
    python.write_text(SLOW_GATE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "log"
    log.touch()
    env = {**os.environ, "QUALIFY_PYTHON": str(python), "FAKE_LOG": str(log), "QUALIFY_OUT": str(tmp_path / "out")}
    job = subprocess.Popen(
        ["bash", str(SCRIPTS / "gate-job.sh")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    out = finish(job, log, cancel=True)
    assert job.returncode == 130, out
    assert log.read_text().split() == ["started", "terminated"]


@pytest.mark.parametrize("script", ["gate-job.sh", "gpu-job.sh"])
def test_both_jobs_refuse_an_unknown_install_extra_before_installing(tmp_path, script):
    env = {k: v for k, v in os.environ.items() if k != "QUALIFY_PYTHON"}
    env |= {"QUALIFY_EXTRA": "cu11", "QUALIFY_OUT": str(tmp_path / "out")}
    env |= {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["bash", str(SCRIPTS / script)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 5, done.stdout + done.stderr
    # the refusal comes before `python3 -m venv`: a failed install would say "pip install ... failed"
    assert "::error title=set-up::QUALIFY_EXTRA must be cu13 or cu12" in done.stdout
