"""The golden reader on hostile files (issue 25 items 10 and 13): nesting bounded, only needed
tensors read, a host out of memory an environment failure (exit 5) and never exit 1 (a verdict),
and no producer accepted where the plan names no golden_script."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from safetensors.numpy import save_file
from test_golden import PRODUCER, _metadata_case, check_fails, golden_plan, good_tensors, run_cli, setup

from qualify.plan.golden import config_digest
from qualify.plan.load import load_plan

BIG = 8 << 20  # float32 elements of the unneeded tensor: 32 MiB


def test_dtypes_nested_beyond_any_stack_is_one_line(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    check_fails(_metadata_case(tmp_path, dtypes=deep), capsys, 2, "metadata.dtypes", "JSON object")


def _golden_with(tmp_path, name, array):
    """A golden good in every way but for one more (or replaced) tensor `name`."""
    path = setup(tmp_path)
    loaded = load_plan(path)
    tensors = {k: v[1] for k, v in good_tensors(loaded.cases).items()}
    tensors[name] = array
    metadata = {
        "format": "qualify-golden",
        "format_version": "1",
        "producer": PRODUCER,
        "config_sha256": config_digest(loaded.plan),
        "dtypes": json.dumps({k: "f32" for k in tensors}),
    }
    save_file(tensors, str(path.parent / "golden.safetensors"), metadata=metadata)
    return path


@pytest.mark.parametrize(
    "name, field, fragment",
    [("N=1024/aaa_unused", "N=1024/aaa_unused", "no use for"), ("N=1024/out", "N=1024/out", "needs [1024]")],
    ids=["unneeded", "needed-but-oversized"],
)
def test_a_tensor_the_plan_cannot_use_is_refused_before_any_tensor_is_read(tmp_path, capsys, name, field, fragment):
    path = _golden_with(tmp_path, name, np.ones(BIG, np.float32))
    tracemalloc.start()
    try:
        check_fails(path, capsys, 2, field, fragment)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < BIG, f"{peak} bytes at the peak: the refused tensor was read"


class _Panic(BaseException):
    """What a panic in safetensors' Rust code raises: not an Exception."""


class _FailingOpen:
    """safe_open whose tensor reads fail as a host out of memory makes them fail."""

    def __init__(self, real, error):
        self.real, self.error = real, error

    def __enter__(self):
        self.inner = self.real.__enter__()
        return self

    def __exit__(self, *exc):
        return self.real.__exit__(*exc)

    def get_tensor(self, name):
        raise self.error

    def __getattr__(self, attr):
        return getattr(self.inner, attr)


@pytest.mark.parametrize("error", [MemoryError(), _Panic("memory allocation of 2684354560 bytes failed")])
def test_a_host_out_of_memory_is_an_environment_failure_not_a_verdict(tmp_path, capsys, monkeypatch, error):
    import safetensors

    path = setup(tmp_path)
    real = safetensors.safe_open
    monkeypatch.setattr(safetensors, "safe_open", lambda *a, **k: _FailingOpen(real(*a, **k), error))
    code, _, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 5, err
    assert err.count("qualify: error:") == 1 and err.startswith(
        f"qualify: error: {path.parent / 'golden.safetensors'}: "
    )


def test_a_golden_plan_without_golden_script_accepts_no_producer(tmp_path, capsys):
    """Item 13: without the script named, any file claiming any producer would pass."""
    plan = golden_plan()
    del plan["acceptance"]["fidelity"]["golden_script"]
    from plans import HEADER, KERNEL, make_repo

    from qualify.plan.golden import write_golden

    files = {"kernels/k.cu": KERNEL, "kernels/common.cuh": HEADER, "protocols/tiny/golden.safetensors": ""}
    path = make_repo(tmp_path, plan, files)
    loaded = load_plan(path)
    write_golden(path.parent / "golden.safetensors", loaded.plan, good_tensors(loaded.cases), "anything/at_all.py")
    code, _, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 2, err
    assert err.count("qualify: error:") == 1 and "acceptance.fidelity.golden_script" in err and str(path) in err


def test_exact_naming_an_input_is_refused(tmp_path, capsys):
    """Item 13: an input held "bit-exact" would hold nothing; the plan says something it does not do."""
    plan = golden_plan()
    plan["acceptance"]["fidelity"]["exact"] = [{"outputs": ["y"]}]
    from plans import HEADER, KERNEL, make_repo

    files = {
        "kernels/k.cu": KERNEL,
        "kernels/common.cuh": HEADER,
        "protocols/tiny/make_golden.py": "# writes it\n",
        "protocols/tiny/golden.safetensors": "",
    }
    path = make_repo(tmp_path, plan, files)
    code, _, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 2, err
    assert "acceptance.fidelity.exact[0].outputs[0]" in err and "'y' is not an output buffer" in err
