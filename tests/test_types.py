"""The type checker's gate (tools/mypy_baseline.py) and the Device protocol (issue 33 item 3).

The baseline only shrinks: an error not in it fails, an entry that no longer occurs fails, an error
in a strict package fails even when listed, and moving code (new line numbers) changes nothing.
The protocol: both devices satisfy it at run time (names) and under mypy (signatures); a device
that lacks a method the stages call is refused by both.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import mypy_baseline as mb  # noqa: E402

from qualify.run.device import CudaDevice  # noqa: E402
from qualify.run.device_protocol import Device  # noqa: E402
from qualify.run.fake import FakeDevice  # noqa: E402


def _error(file: str, line: int, message: str, code: str = "arg-type", severity: str = "error") -> str:
    return json.dumps(
        {"file": file, "line": line, "column": 4, "message": message, "hint": None, "code": code, "severity": severity}
    )


RENDER = "qualify/render/readme.py"
MSG = 'Argument 1 to "append" of "list" has incompatible type "str"; expected "Md"'


def test_an_error_is_keyed_by_file_code_and_message_not_its_line():
    moved = mb.parse("\n".join([_error(RENDER, 10, MSG)]))
    again = mb.parse("\n".join([_error(RENDER, 250, MSG)]))
    assert moved == again == Counter({f"{RENDER}: [arg-type] {MSG}": 1})
    # a line number inside the message is blanked too: editing above a definition moves it
    a = mb.parse(_error(RENDER, 3, 'Name "x" already defined on line 12', code="no-redef"))
    b = mb.parse(_error(RENDER, 3, 'Name "x" already defined on line 40', code="no-redef"))
    assert a == b


def test_notes_are_not_errors():
    out = "\n".join([_error(RENDER, 1, MSG), _error(RENDER, 1, "See https://mypy.rtfd.io", severity="note")])
    assert sum(mb.parse(out).values()) == 1


def test_a_new_error_fails_and_a_fixed_one_must_leave_the_baseline():
    listed = Counter({f"{RENDER}: [arg-type] {MSG}": 2})
    same = Counter({f"{RENDER}: [arg-type] {MSG}": 2})
    assert mb.compare(same, listed) == ([], [])
    one_more = Counter({f"{RENDER}: [arg-type] {MSG}": 3})  # the same mistake made once more
    assert mb.compare(one_more, listed) == ([f"{RENDER}: [arg-type] {MSG}"], [])
    one_fixed = Counter({f"{RENDER}: [arg-type] {MSG}": 1})
    assert mb.compare(one_fixed, listed) == ([], [f"{RENDER}: [arg-type] {MSG}"])


@pytest.mark.parametrize("package", ["evaluate", "plan", "results"])
def test_an_error_in_a_strict_package_fails_even_when_listed(package):
    line = f"qualify/{package}/stats.py: [no-untyped-def] Function is missing a type annotation"
    assert mb.compare(Counter({line: 1}), Counter({line: 1})) == ([line], [])


def _main(monkeypatch, tmp_path, output: str, baseline: list[str] | None, *args: str, code: int = 1):
    monkeypatch.setattr(mb, "run_mypy", lambda: (code, output, ""))
    path = tmp_path / "baseline.txt"
    if baseline is not None:
        path.write_text(mb.HEADER + "".join(f"{b}\n" for b in baseline))
    return mb.main(["--baseline", str(path), *args]), path


def test_the_gate_exit_codes(monkeypatch, tmp_path, capsys):
    err = _error(RENDER, 5, MSG)
    key = f"{RENDER}: [arg-type] {MSG}"
    assert _main(monkeypatch, tmp_path, err, [key])[0] == 0
    assert _main(monkeypatch, tmp_path, err, [])[0] == 1
    assert f"new: {key}" in capsys.readouterr().out
    assert _main(monkeypatch, tmp_path, "", [key], code=0)[0] == 1  # fixed, still listed
    assert f"fixed, still listed: {key}" in capsys.readouterr().out
    # mypy crashed or refused its configuration: no list of errors to compare, never a pass
    assert _main(monkeypatch, tmp_path, "", [key], code=2)[0] == 2
    assert _main(monkeypatch, tmp_path, "pyproject.toml: error: bad option", [key], code=1)[0] == 2


def test_update_shrinks_the_baseline_and_never_grows_it(monkeypatch, tmp_path):
    kept, fixed = f"{RENDER}: [arg-type] {MSG}", f"{RENDER}: [misc] gone"
    code, path = _main(monkeypatch, tmp_path, _error(RENDER, 5, MSG), [kept, fixed], "--update")
    assert code == 0 and mb.read_baseline(path) == Counter({kept: 1})
    grown = "\n".join([_error(RENDER, 5, MSG), _error(RENDER, 9, "another", code="misc")])
    code, path = _main(monkeypatch, tmp_path, grown, [kept], "--update")
    assert code == 1 and mb.read_baseline(path) == Counter({kept: 1})  # refused, the file unchanged


def test_the_committed_baseline_lists_nothing_in_the_strict_packages():
    listed = mb.read_baseline(mb.BASELINE)
    assert listed, "the baseline is read from tools/mypy-baseline.txt"
    assert not [k for k in listed if k.startswith(mb.STRICT)]


# -- the Device protocol ----------------------------------------------------------------------------


def _protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(Device).items()
        if callable(member) and not name.startswith("_")
    }


def test_the_protocol_names_what_the_stages_call():
    assert {"time_samples", "trace_calls", "upload", "launch", "limits", "close"} <= set(_protocol_methods())


@pytest.mark.parametrize("device_class", [CudaDevice, FakeDevice])
def test_both_devices_take_every_parameter_the_protocol_passes(device_class):
    for name, wanted in _protocol_methods().items():
        have = inspect.signature(getattr(device_class, name)).parameters
        missing = [p for p in wanted.parameters if p not in have]
        assert not missing, f"{device_class.__name__}.{name} lacks {missing}"


def test_the_fake_device_is_a_device_and_a_partial_one_is_not():
    import fakes

    assert isinstance(FakeDevice({"axpy": fakes.axpy}), Device)

    class NoTiming(FakeDevice):
        time_samples = None  # type: ignore[assignment]  # a device that cannot time a batch

    assert not isinstance(NoTiming({"axpy": fakes.axpy}), Device)


HALF_DEVICE = """
from qualify.run.device_protocol import Device
from qualify.run.fake import FakeDevice


class HalfDevice:
    info = FakeDevice({}).info
    stream_handle = 0

    def close(self) -> None: ...


twin: Device = FakeDevice({})
device: Device = HalfDevice()
"""


@pytest.mark.slow
def test_mypy_refuses_a_device_that_lacks_the_protocols_methods(tmp_path):
    """What the conformance check in device_protocol.py rests on: mypy compares a class with the
    protocol method by method (it runs the package's mypy configuration on a snippet)."""
    snippet = tmp_path / "half_device.py"
    snippet.write_text(HALF_DEVICE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    mine = [line for line in done.stdout.splitlines() if line.startswith(str(snippet)) and ": error:" in line]
    assert len(mine) == 1, mine  # the fake passes; the half device does not
    assert 'expression has type "HalfDevice", variable has type "Device"' in mine[0]
