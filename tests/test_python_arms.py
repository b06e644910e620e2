"""Python arms (kind 'python'): plan check by `ast` alone, the lock, hostile files, and whole trials
on the fake device, whose runtime hands the callable NumPy arrays over its host memory."""

from __future__ import annotations

import copy
import json
import os
import sys

import fakes
import numpy as np
import pytest
from plans import make_repo, plan_copy

from qualify.cli import main
from qualify.commands.pipeline import load_frozen
from qualify.errors import FrozenInputChanged, PlanError
from qualify.plan.load import load_plan
from qualify.run.engine import RunOptions, TrialRunner
from qualify.run.fake import FakeDevice, FakeTelemetry

AXPY = """\
import numpy as np
from helper import scaled


def axpy(x, y, out, N, stream, control=None):
    out[:] = scaled(np.float32(0.5), x, y)
    if control == "nudge_last":
        out[-1] = np.nextafter(out[-1], np.float32(np.inf))
"""
HELPER = """\
def scaled(a, x, y):
    return a * x + y
"""
PYTHON_ARM = {"kind": "python", "callable": "../../kernels/py/axpy.py:axpy"}


@pytest.fixture(autouse=True)
def fresh_process_modules():
    """Each trial runs in a process of its own; these tests run many in one: what one test's arms
    imported (sys.modules, sys.path) is forgotten before the next."""
    modules, path = dict(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - set(modules):
        del sys.modules[name]
    sys.path[:] = path


def python_plan(base=None, candidate=None, **changes) -> dict:
    plan = plan_copy()
    plan["arms"] = {"base": copy.deepcopy(base or PYTHON_ARM), "candidate": copy.deepcopy(candidate or PYTHON_ARM)}
    if all(a["kind"] == "python" for a in plan["arms"].values()):
        del plan["workload"]["launch"]
    plan["schedule"] = {"warmup": 2, "samples_per_block": 3, "blocks": 2, "trials": 2, "cache": "cold"}
    plan["budget"] = {"max_trials": 3, "max_samples": 12, "max_wall_seconds": 60}
    plan["acceptance"]["sanitizer"] = []
    plan.update(changes)
    return plan


def repo(tmp_path, plan=None, files=None, freeze=False):
    base = {"kernels/py/axpy.py": AXPY, "kernels/py/helper.py": HELPER, "kernels/k.cu": fakes_kernel()}
    base.update(files or {})
    base = {k: v for k, v in base.items() if v is not None}
    return make_repo(tmp_path, plan or python_plan(), base, freeze=freeze)


def fakes_kernel() -> str:
    from plans import HEADER, KERNEL

    return KERNEL.replace('#include "common.cuh"\n', HEADER)


def run_trial(loaded, device, tmp_path):
    return TrialRunner(loaded, device, FakeTelemetry(), RunOptions(record_dir=tmp_path / "record")).run()


def fake_device(**kw):
    activity = {"base": [{"name": "axpy_kernel", "ns": 10_000}], "candidate": [{"name": "axpy_kernel", "ns": 8_000}]}
    return FakeDevice({"axpy": fakes.axpy}, durations={"base": 10_000.0, "candidate": 8_000.0}, activity=activity, **kw)


# -- plan check: parsed, never imported -------------------------------------------------------


def test_the_callable_and_its_local_module_are_frozen(tmp_path):
    loaded = load_plan(repo(tmp_path))
    assert {"kernels/py/axpy.py", "kernels/py/helper.py"} <= set(loaded.freeze.files)
    assert "numpy" not in "".join(loaded.freeze.files)  # an installed package is not a local module


def test_a_changed_local_module_is_a_changed_frozen_input(tmp_path):
    path = repo(tmp_path, freeze=True)
    (tmp_path / "kernels/py/helper.py").write_text(HELPER + "# tuned\n")
    with pytest.raises(FrozenInputChanged) as exc:
        load_frozen(path)
    assert "kernels/py/helper.py" in exc.value.one_line()


def test_plan_check_runs_none_of_the_callables_code(tmp_path, capsys):
    marker = tmp_path / "ran"
    hostile = f"open({str(marker)!r}, 'w').write('x')\nimport torch_is_not_installed_here\n" + AXPY
    path = repo(tmp_path, files={"kernels/py/axpy.py": hostile})
    with pytest.raises(SystemExit) as exc:
        main(["plan", "check", str(path)])
    assert exc.value.code == 0, capsys.readouterr().err
    assert not marker.exists()
    assert "torch_is_not_installed_here" not in sys.modules


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("def axpy(x, y, out, N, stream, blocks):\n    pass\n", "takes 'blocks', which is no buffer"),
        ("def axpy(x, y, N, stream):\n    pass\n", "takes no parameter 'out': it could never write that output"),
        ("def other(x, y, out):\n    pass\n", "defines no top-level function 'axpy'"),
        ("def axpy(*args):\n    pass\n", "positional-only or *args"),
        ("import triton\n@triton.jit\ndef axpy(x, y, out):\n    pass\n", "line 3: axpy is a JIT kernel"),
        ("async def axpy(x, y, out):\n    pass\n", "is a coroutine"),
    ],
)
def test_a_callable_the_plan_cannot_call_is_refused_naming_the_field(tmp_path, source, fragment):
    with pytest.raises(PlanError) as exc:
        load_plan(repo(tmp_path, files={"kernels/py/axpy.py": source}))
    assert exc.value.field == "arms.base.callable" and fragment in exc.value.message


def test_a_syntax_error_is_one_line_exit_2_naming_file_and_line(tmp_path, capsys):
    path = repo(tmp_path, files={"kernels/py/helper.py": "def scaled(a, x, y):\n    return (a * x +\n"})
    with pytest.raises(SystemExit) as exc:
        main(["plan", "check", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("qualify: error:") == 1
    assert "kernels/py/helper.py line 2: syntax error" in err and "arms.base.callable" in err


def test_a_kwargs_callable_takes_everything(tmp_path):
    load_plan(repo(tmp_path, files={"kernels/py/axpy.py": "def axpy(**buffers):\n    pass\n"}))


def test_a_callable_control_needs_a_control_parameter(tmp_path):
    plan = python_plan()
    plan["controls"]["negative"].append({"kind": "callable", "name": "nudge_last"})
    source = "def axpy(x, y, out, N, stream):\n    pass\n"
    with pytest.raises(PlanError, match="takes no 'control' parameter") as exc:
        load_plan(repo(tmp_path, plan, files={"kernels/py/axpy.py": source}))
    assert exc.value.field == "arms.candidate.callable"


def test_a_callable_control_needs_a_python_candidate(tmp_path):
    plan = python_plan(candidate=plan_copy()["arms"]["candidate"])
    plan["workload"]["launch"] = plan_copy()["workload"]["launch"]
    plan["controls"]["negative"].append({"kind": "callable", "name": "nudge_last"})
    with pytest.raises(PlanError, match="callable controls need a Python candidate arm"):
        load_plan(repo(tmp_path, plan))


# -- hostile files ----------------------------------------------------------------------------


def test_a_callable_outside_the_repository_by_dot_dot_is_refused(tmp_path):
    (tmp_path / "outside.py").write_text(AXPY)
    inner = tmp_path / "repo"
    plan = python_plan(candidate={"kind": "python", "callable": "../../../outside.py:axpy"})
    with pytest.raises(PlanError, match="resolves outside the repository") as exc:
        load_plan(repo(inner, plan))
    assert exc.value.field == "arms.candidate.callable"


def test_an_absolute_callable_path_is_refused(tmp_path):
    (tmp_path / "outside.py").write_text(AXPY)
    plan = python_plan(candidate={"kind": "python", "callable": f"{tmp_path / 'outside.py'}:axpy"})
    with pytest.raises(PlanError, match="resolves outside the repository"):
        load_plan(repo(tmp_path / "repo", plan))


def test_a_callable_linked_from_outside_the_repository_is_refused(tmp_path):
    (tmp_path / "outside.py").write_text(AXPY)
    inner = tmp_path / "repo"
    path = repo(inner)
    os.remove(inner / "kernels/py/axpy.py")
    os.symlink(tmp_path / "outside.py", inner / "kernels/py/axpy.py")
    with pytest.raises(PlanError, match="resolves outside the repository"):
        load_plan(path)


def test_a_module_linked_from_outside_the_repository_is_refused(tmp_path):
    (tmp_path / "evil.py").write_text("def scaled(a, x, y):\n    return x\n")
    inner = tmp_path / "repo"
    path = repo(inner)
    os.remove(inner / "kernels/py/helper.py")
    os.symlink(tmp_path / "evil.py", inner / "kernels/py/helper.py")
    with pytest.raises(PlanError) as exc:
        load_plan(path)
    assert "axpy.py line 2 imports 'helper', which is a link to a file outside the repository" in exc.value.message


def test_a_relative_import_above_the_repository_is_refused(tmp_path):
    inner = tmp_path / "repo"
    source = "from .... import secrets\n" + AXPY
    with pytest.raises(PlanError, match="imports '....' from outside the repository"):
        load_plan(repo(inner, files={"kernels/py/axpy.py": source}))


# -- whole trials on the fake device ------------------------------------------------------------


def test_a_python_pair_runs_a_whole_trial_on_numpy_arrays(tmp_path):
    plan = python_plan()
    plan["controls"]["negative"].append({"kind": "callable", "name": "nudge_last"})
    loaded = load_plan(repo(tmp_path, plan, freeze=True))
    device = fake_device()
    trial = run_trial(loaded, device, tmp_path)
    assert trial.status == "complete", trial.failures
    assert all(p.equal for c in trial.cases for p in c.parity)
    assert all(c.deterministic == {"base": True, "candidate": True} for c in trial.cases)
    controls = {(c.name, c.kind): c.caught for c in trial.controls}
    assert controls[("nudge_last", "callable")] and controls[("flip", "input")]
    info = trial.python["candidate"]
    assert info.callable == PYTHON_ARM["callable"] and info.graph is False
    assert "numpy" in info.packages and info.first_call_s is not None and info.null_call_ns > 0
    assert info.call_ns is not None
    assert trial.code.arms == "python" and trial.code.status == "unknown"
    assert "wrote no cubin" in trial.code.reason
    assert ("python_runtime",) in device.calls
    # the fake times each arm by its declared activity: the faster candidate is measured faster
    case = next(c for c in trial.cases if c.case == "N=4096")
    assert case.stats.delta_pct < 0


def test_the_callable_writes_qualifys_own_buffers(tmp_path):
    """Zero-copy: what the callable writes into its `out` array is what qualify reads back."""
    source = "def axpy(x, y, out, N, stream):\n    out[:] = 7.0\n"
    loaded = load_plan(repo(tmp_path, files={"kernels/py/axpy.py": source}, freeze=True))
    from qualify.run import python_arm
    from qualify.run.arms import ArmExec

    device = fake_device()
    entry = python_arm.load(loaded, "base", device.python_runtime())
    arm = loaded.cases[0].arms["base"]
    buffers = {b.name: device.alloc(b.nbytes) for b in arm.buffers}
    ex = ArmExec("base", entry, arm, buffers, ["out"])
    ex.bind_args()
    out = ex.run_once(device)["out"].view(np.float32)
    assert out.size == arm.buffer("out").elements and (out == 7.0).all()


def test_a_mixed_pair_python_against_a_cuda_kernel_has_byte_parity(tmp_path):
    cuda = plan_copy()["arms"]["base"] | {"source": "../../kernels/k.cu"}
    plan = python_plan(base=cuda)
    plan["workload"]["launch"] = plan_copy()["workload"]["launch"]
    plan["arms"]["base"] = cuda
    loaded = load_plan(repo(tmp_path, plan, freeze=True))
    trial = run_trial(loaded, fake_device(), tmp_path)
    assert trial.status == "complete", trial.failures
    assert all(p.equal for c in trial.cases for p in c.parity)
    assert set(trial.python) == {"candidate"}
    assert trial.code.arms == "python" and "Python arm" in trial.code.reason


def test_a_wrong_callable_fails_fidelity(tmp_path):
    wrong = AXPY.replace("out[:] = scaled(np.float32(0.5), x, y)", "out[:] = scaled(np.float32(0.25), x, y)")
    files = {"kernels/py/wrong.py": wrong}
    plan = python_plan(candidate={"kind": "python", "callable": "../../kernels/py/wrong.py:axpy"})
    loaded = load_plan(repo(tmp_path, plan, files=files, freeze=True))
    trial = run_trial(loaded, fake_device(), tmp_path)
    (failure,) = [f for f in trial.failures if f.kind == "fidelity"]
    assert "out: 1024 of 1024 elements differ from base" in failure.message


def test_a_callable_that_raises_fails_the_trial_naming_its_line(tmp_path):
    source = "def axpy(x, y, out, N, stream):\n    raise ValueError('bad tile')\n"
    plan = python_plan(candidate={"kind": "python", "callable": "../../kernels/py/bad.py:axpy"})
    loaded = load_plan(repo(tmp_path, plan, files={"kernels/py/bad.py": source}, freeze=True))
    trial = run_trial(loaded, fake_device(), tmp_path)
    assert trial.status == "failed"
    (failure,) = [f for f in trial.failures if f.side == "candidate"]
    assert "ValueError: bad tile (bad.py line 2)" in failure.message


def test_a_module_the_parser_could_not_see_is_refused_in_the_child(tmp_path):
    """An import by a computed name escapes the parser; loading it from an unfrozen file is refused."""
    source = "import importlib\nNAME = 'hid' + 'den'\nimportlib.import_module(NAME)\n" + AXPY
    files = {"kernels/py/axpy.py": source, "kernels/py/hidden.py": "X = 1\n"}
    loaded = load_plan(repo(tmp_path, files=files, freeze=True))
    from qualify.run import python_arm

    with pytest.raises(FrozenInputChanged, match="loaded module 'hidden' from a file the lock does not freeze"):
        python_arm.load(loaded, "base", fake_device().python_runtime())


def test_an_autotuner_is_refused_unless_the_plan_lets_it_run_in_warm_up(tmp_path):
    source = AXPY + "\n\nclass Autotuner:\n    configs = []\n    best_config = 'BLOCK=64'\n\n\ntuner = Autotuner()\n"
    from qualify.run import python_arm

    loaded = load_plan(repo(tmp_path / "a", files={"kernels/py/axpy.py": source}, freeze=True))
    with pytest.raises(PlanError, match="holds a Triton autotuner") as exc:
        python_arm.load(loaded, "base", fake_device().python_runtime())
    assert exc.value.field == "arms.base.autotune"
    sys.modules.pop("helper")  # the next repository's helper.py, as a fresh trial process would import it
    plan = python_plan(base=PYTHON_ARM | {"autotune": "warmup"})
    loaded = load_plan(repo(tmp_path / "b", plan, files={"kernels/py/axpy.py": source}, freeze=True))
    entry = python_arm.load(loaded, "base", fake_device().python_runtime())
    assert list(entry.autotuned().values()) == ["BLOCK=64"]


def test_a_same_named_module_of_another_folder_is_refused_not_shared(tmp_path):
    """Two arms in two folders, each with its own helper.py: Python holds one 'helper' per process,
    so the second arm would silently run the first's; it is refused instead, naming both."""
    other = HELPER.replace("a * x + y", "a * x + y + 1")
    files = {"kernels/py2/axpy.py": AXPY, "kernels/py2/helper.py": other}
    plan = python_plan(candidate={"kind": "python", "callable": "../../kernels/py2/axpy.py:axpy"})
    loaded = load_plan(repo(tmp_path, plan, files=files, freeze=True))
    with pytest.raises(PlanError, match="module 'helper' beside axpy.py is already loaded from") as exc:
        run_trial(loaded, fake_device(), tmp_path)
    assert exc.value.field == "arms.candidate.callable"
    assert "kernels/py/helper.py" in exc.value.message and "rename one" in exc.value.message
    (path,) = (tmp_path / "record").rglob("trial-*.json")  # the trial is kept, failed, naming the arm
    (failure,) = json.loads(path.read_text())["failures"]
    assert failure["side"] == "candidate" and "rename one" in failure["message"]


def test_graph_mode_is_recorded_and_captures_once_per_placement(tmp_path):
    plan = python_plan(candidate=PYTHON_ARM | {"graph": True})
    loaded = load_plan(repo(tmp_path, plan, freeze=True))
    runner = TrialRunner(loaded, fake_device(), FakeTelemetry(), RunOptions(record_dir=tmp_path / "record"))
    trial = runner.run()
    entry = runner.found.python["candidate"]
    assert len(entry._bound) == sum(c.placements["used"] for c in trial.cases) > len(trial.cases)
    assert all(b.graph is not None for b in entry._bound.values())
    assert trial.status == "complete", trial.failures
    assert trial.python["candidate"].graph and not trial.python["base"].graph
    (path,) = (tmp_path / "record").rglob("trial-*.json")
    saved = json.loads(path.read_text())
    assert saved["python"]["candidate"]["graph"] is True


# -- autotuning: the first trial's choice is the record's -----------------------------------------

TUNED = (
    AXPY
    + """

import os


class Autotuner:
    configs = []
    best_config = os.environ.get("QUALIFY_TEST_CHOICE", "BLOCK=64")


tuner = Autotuner()
"""
)


def test_a_later_trial_whose_autotuner_chose_otherwise_fails_and_the_check_says_so(tmp_path, monkeypatch):
    from qualify.record.python_facts import python_problems

    tuned = PYTHON_ARM | {"autotune": "warmup"}
    loaded = load_plan(repo(tmp_path, python_plan(tuned, tuned), files={"kernels/py/axpy.py": TUNED}, freeze=True))
    first = run_trial(loaded, fake_device(), tmp_path)
    assert first.status == "complete" and first.python["candidate"].autotuned == {
        "qualify_arm_candidate_axpy.tuner": "BLOCK=64"
    }
    monkeypatch.setenv("QUALIFY_TEST_CHOICE", "BLOCK=128")
    second = run_trial(loaded, fake_device(), tmp_path)
    assert second.status == "failed", second.failures
    assert any("not trial 1's configuration" in f.message and f.side == "candidate" for f in second.failures)
    assert python_problems([first, second], loaded.plan) == []  # a failed trial states the difference
    forged = second.model_copy(update={"status": "complete"})
    problems = python_problems([first, forged], loaded.plan)
    assert [p.split(": ")[1].split(".autotuned")[0] for p in problems] == ["python.base", "python.candidate"]
    assert all("autotuned differs from trial 1's" in p for p in problems)


def test_the_record_holds_python_facts_to_the_plan(tmp_path):
    from qualify.record.python_facts import python_problems

    loaded = load_plan(repo(tmp_path, freeze=True))
    trial = run_trial(loaded, fake_device(), tmp_path)
    assert python_problems([trial], loaded.plan) == []
    info = trial.python["base"]
    other = trial.model_copy(update={"python": {"base": info.model_copy(update={"callable": "x.py:f"})}})
    problems = python_problems([other], loaded.plan)
    assert any("python.base: x.py:f (graph False), the plan's arm is" in p for p in problems)
    assert any("python.candidate is missing" in p for p in problems)
    failed = trial.model_copy(update={"python": {}, "status": "failed"})  # a trial that failed to load its arms
    assert python_problems([failed], loaded.plan) == []
    graphed = {**trial.python, "candidate": trial.python["candidate"].model_copy(update={"graph": True})}
    (problem,) = python_problems([trial.model_copy(update={"python": graphed})], loaded.plan)
    assert "python.candidate: ../../kernels/py/axpy.py:axpy (graph True), the plan's arm is" in problem
    mixed = python_plan(base=plan_copy()["arms"]["base"])
    mixed["workload"]["launch"] = plan_copy()["workload"]["launch"]
    cuda_base = load_plan(repo(tmp_path / "m", mixed)).plan
    assert any("the plan's base arm is not a Python arm" in p for p in python_problems([trial], cuda_base))


def test_a_python_record_renders_its_arms_and_passes_report_check(tmp_path, capsys):
    plan = python_plan(candidate=PYTHON_ARM | {"graph": True})
    plan["controls"]["negative"].append({"kind": "callable", "name": "nudge_last"})
    loaded = load_plan(repo(tmp_path, plan, freeze=True))
    run_trial(loaded, fake_device(), tmp_path)
    record = tmp_path / "record"
    for argv, codes in ((["report", str(record)], (0, 1, 7)), (["report", "--check", str(record)], (0,))):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code in codes, capsys.readouterr()  # report exits with the verdict (one trial of two)
    readme = (record / "README.md").read_text()
    assert "Python callable `../../kernels/py/axpy.py:axpy`, timed as CUDA-graph replays" in readme
    assert "| 1 | candidate | `../../kernels/py/axpy.py:axpy` | graph replays |" in readme
    assert "| 1 | base | `../../kernels/py/axpy.py:axpy` | eager calls |" in readme


def test_a_package_installed_in_a_virtual_environment_inside_the_repository_is_not_the_arms_code(tmp_path):
    """A .venv at the repository's root holds torch and Triton: importing them is not loading an
    unfrozen module of the repository."""
    site = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "fakepkg_for_qualify").mkdir(parents=True)
    (site / "fakepkg_for_qualify" / "__init__.py").write_text("VALUE = 1\n")
    source = "import sys\nsys.path.append(" + repr(str(site)) + ")\nimport fakepkg_for_qualify\n" + AXPY
    loaded = load_plan(repo(tmp_path, files={"kernels/py/axpy.py": source}, freeze=True))
    from qualify.run import python_arm

    entry = python_arm.load(loaded, "base", fake_device().python_runtime())
    assert any(m.__name__ == "helper" for m in entry.modules)
    assert not any(m.__name__ == "fakepkg_for_qualify" for m in entry.modules)


def test_a_compiler_error_names_its_place_and_its_cause():
    """Triton's CompilationError opens with the place and ends with the cause, source lines between:
    the failure keeps both ends (on the H200 the first line alone said only 'at 5:31:')."""
    from qualify.run.python_arm import _where

    try:
        raise RuntimeError(
            "at 5:31:\n    running = tl.full([BLOCK], NEG_INF)\n                   ^\nNameError('NEG_INF')"
        )
    except RuntimeError as exc:
        text = _where(exc)
    assert text.startswith("RuntimeError: at 5:31: … NameError('NEG_INF')"), text
