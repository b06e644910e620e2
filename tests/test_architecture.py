"""The package layers hold: the import-linter contracts of pyproject.toml are kept, a planted upward
import breaks them, and `report --check` runs without loading the device floor (qualify.run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
)


def lint(root: Path) -> subprocess.CompletedProcess:
    """The contracts of root/pyproject.toml over the `qualify` package under root."""
    env = {**os.environ, "PYTHONPATH": str(root)}  # ahead of the installed package: root's copy is analysed
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True)


def copy_tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "qualify", tmp_path / "qualify", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_layer_contracts_are_kept():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout


def test_a_planted_upward_import_breaks_the_layers(tmp_path):
    root = copy_tree(tmp_path)
    assert lint(root).returncode == 0, "the unchanged copy keeps the contracts"
    plain = root / "qualify" / "render" / "plain.py"
    plain.write_text(plain.read_text() + "\nfrom qualify.record import check  # planted: render imports record\n")
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Packages import only the layers below them BROKEN" in done.stdout
    assert "qualify.render.plain -> qualify.record.check" in done.stdout


def test_a_planted_import_of_the_device_floor_breaks_the_offline_contract(tmp_path):
    root = copy_tree(tmp_path)
    stats = root / "qualify" / "evaluate" / "stats.py"
    stats.write_text(stats.read_text() + "\nimport qualify.run.device  # planted: judgement needs a GPU\n")
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "report --check runs without the device floor BROKEN" in done.stdout
    assert "qualify.evaluate.stats -> qualify.run.device" in done.stdout


def test_a_planted_cycle_between_two_modules_breaks_the_acyclic_contract(tmp_path):
    """Two modules of one package importing each other (here inside a function, which counts) sit
    in one layer, so only the acyclic contract sees the loop."""
    root = copy_tree(tmp_path)
    hints = root / "qualify" / "build" / "hints.py"
    hints.write_text(
        hints.read_text() + "\n\ndef _planted():\n    from qualify.build import nvrtc  # planted: nvrtc imports hints\n"
    )
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No import cycles between modules BROKEN" in done.stdout
    assert "Packages import only the layers below them KEPT" in done.stdout  # only the new contract sees it


def test_a_command_importing_another_breaks_the_commands_contract(tmp_path):
    root = copy_tree(tmp_path)
    summary = root / "qualify" / "commands" / "summary.py"
    summary.write_text(summary.read_text() + "\nfrom qualify.commands import doctor  # planted: a command's helper\n")
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Commands import no other command but those they build on BROKEN" in done.stdout
    assert "qualify.commands.summary -> qualify.commands.doctor" in done.stdout


def test_a_new_module_in_commands_must_be_placed(tmp_path):
    root = copy_tree(tmp_path)
    (root / "qualify" / "commands" / "helper.py").write_text('"""Planted: a module nobody placed."""\n')
    done = lint(root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Commands import no other command but those they build on BROKEN" in done.stdout


def test_report_check_loads_no_device_module():
    """A fresh process checks a committed record; no module of qualify.run (nor cuda) is loaded."""
    script = (
        "import json, sys; from pathlib import Path; from qualify.record.check import inspect_record; "
        "problems = inspect_record(Path(sys.argv[1])); "
        "print(json.dumps({'problems': [p.text for p in problems], "
        "'loaded': sorted(m for m in sys.modules if m.split('.')[:2] == ['qualify', 'run'] or m.startswith('cuda'))}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "records" / "vecload")], capture_output=True, text=True, check=True
    )
    seen = json.loads(done.stdout)
    assert seen["problems"] == []
    assert seen["loaded"] == []
