"""A trial process imports only what a trial needs (issue 32 item 5: each trial process pays its
own start-up, about 5 s of a short kernel's verdict that is not GPU work). The parent checks the
frozen plan and renders the summary; a trial process does neither, so it never imports the plan
checks or the terminal renderer. No timing is asserted here (the GPU benchmark measures it:
benchmarks/startup/trial.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from plans import make_repo, plan_copy

ROOT = Path(__file__).resolve().parents[1]


def _modules_after(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_a_trial_process_loads_its_frozen_plan_without_the_plan_checks(tmp_path):
    path = make_repo(tmp_path, plan_copy(), freeze=True)
    child = _modules_after(
        f"from qualify.commands.pipeline import load_frozen; load_frozen({str(path)!r}, checked=False)"
    )
    parent = _modules_after(f"from qualify.commands.pipeline import load_frozen; load_frozen({str(path)!r})")
    assert "qualify.commands.check" not in child
    assert "qualify.commands.check" in parent  # the guard sees the import when it happens


def test_a_trial_process_never_imports_the_terminal_renderer(tmp_path):
    """The hidden `trial-process` command (what a parent starts) renders nothing; `run`'s parent
    prints the summary. Both driven through the CLI with the trial and the run stubbed."""
    child = _modules_after(
        """
        from types import SimpleNamespace
        import qualify.procs.invocation as invocation
        import qualify.procs.trials as trials
        from qualify.cli import main
        invocation.read = lambda path: SimpleNamespace()
        trials.one_trial = lambda resolved, progress: SimpleNamespace(trials=[])
        try:
            main(["trial-process", "invocation.pickle"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        """
    )
    parent = _modules_after(
        """
        from types import SimpleNamespace
        import qualify.procs.trials as trials
        from qualify.cli import run
        from qualify.errors import ExitCode
        trials.run_on_device = lambda resolved: SimpleNamespace(outcome=SimpleNamespace(trials=[], results=None), codes=())
        try:
            run._execute(None)
        except SystemExit as exc:
            assert exc.code == ExitCode.INCOMPLETE, exc.code
        """
    )
    assert "qualify.render.terminal" not in child
    assert "qualify.render.terminal" in parent
