"""Golden files: a good one passes `plan check`; each malformed or mismatched one is one line and its exit code."""

import json

import numpy as np
import pytest
from plans import HEADER, KERNEL, make_repo, plan_copy
from safetensors.numpy import save_file

from qualify.cli import main
from qualify.plan.golden import config_digest, load_golden, write_golden
from qualify.plan.load import load_plan

PRODUCER = "protocols/tiny/make_golden.py"


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def golden_plan(out_dtype="f32"):
    plan = plan_copy()
    plan["workload"]["buffers"][1]["init"] = {"kind": "golden"}  # y comes from the golden
    plan["workload"]["buffers"][2]["dtype"] = out_dtype
    if out_dtype != "f32":  # the axpy kernel writes floats: a golden of another dtype is the test's own
        plan["workload"]["launch"]["args"][2]["reinterpret"] = True
    plan["acceptance"]["fidelity"] = {
        "mode": "tolerance",
        "atol": 1e-6,
        "rtol": 1e-5,
        "against": "golden",
        "golden": "golden.safetensors",
        "golden_script": "make_golden.py",
    }
    return plan


def good_tensors(cases, out_dtype="f32"):
    tensors = {}
    for case in cases:
        n = case.values["N"]
        tensors[f"{case.id}/y"] = ("f32", np.linspace(-1, 1, n, dtype=np.float32))
        out = np.ones(n, np.uint16) * 0x3F80 if out_dtype == "bf16" else np.ones(n, np.float32)
        tensors[f"{case.id}/out"] = (out_dtype, out)
    return tensors


def setup(tmp_path, *, out_dtype="f32", edit=None):
    """A repository whose plan's golden is good, then changed by `edit(tensors, plan)` if given."""
    files = {
        "kernels/k.cu": KERNEL,
        "kernels/common.cuh": HEADER,
        "protocols/tiny/make_golden.py": "# writes it\n",
        "protocols/tiny/golden.safetensors": "",
    }  # the plan loads only with its golden present
    path = make_repo(tmp_path, golden_plan(out_dtype), files)
    loaded = load_plan(path)
    tensors = good_tensors(loaded.cases, out_dtype)
    producer, plan = PRODUCER, loaded.plan
    if edit is not None:
        tensors, producer, plan = edit(tensors, producer, plan)
    write_golden(path.parent / "golden.safetensors", plan, tensors, producer)
    return path


def check_fails(path, capsys, code, field, fragment):
    got, out, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    lines = err.strip().splitlines()
    assert got == code, err
    assert len(lines) == 1 and "Traceback" not in err, err
    golden = path.parent / "golden.safetensors"
    assert lines[0].startswith(f"qualify: error: {golden}: {field}: "), lines[0]
    assert fragment in lines[0], lines[0]


def test_good_golden_passes_plan_check_and_loads_every_tensor(tmp_path, capsys):
    path = setup(tmp_path)
    code, out, err = run_cli(["plan", "check", "--no-compile", str(path)], capsys)
    assert code == 0, err
    loaded = load_plan(path)
    golden = load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)
    assert sorted(golden.tensors) == ["N=1024/out", "N=1024/y", "N=4096/out", "N=4096/y"]
    assert golden.expected("N=1024", "out").view(np.float32).tolist() == [1.0] * 1024
    assert golden.producer == PRODUCER


def test_golden_and_its_script_are_frozen_with_the_plan(tmp_path):
    path = setup(tmp_path)
    files = load_plan(path).files.files
    assert "protocols/tiny/golden.safetensors" in files and PRODUCER in files


def _drop(name):
    def edit(tensors, producer, plan):
        del tensors[name]
        return tensors, producer, plan

    return edit


def _replace(name, dtype, array):
    def edit(tensors, producer, plan):
        tensors[name] = (dtype, array)
        return tensors, producer, plan

    return edit


def _other_config(tensors, producer, plan):
    other = plan.model_copy(update={"seeds": plan.seeds.model_copy(update={"base": plan.seeds.base + 1})})
    return tensors, producer, other


def _other_producer(tensors, producer, plan):
    return tensors, "tools/someone_else.py", plan


def _extra(tensors, producer, plan):
    tensors["N=1024/old_out"] = ("f32", np.zeros(1024, np.float32))
    return tensors, producer, plan


def _nan_at(index):
    values = np.ones(4096, np.float32)
    values[index] = np.nan
    return values


REFUSALS = [
    ("other-configuration", _other_config, 3, "metadata.config_sha256", "rerun its script"),
    ("missing-output", _drop("N=4096/out"), 2, "N=4096/out", "missing: the plan needs this expected output"),
    ("missing-golden-input", _drop("N=1024/y"), 2, "N=1024/y", "missing: the plan needs this golden input"),
    ("wrong-shape", _replace("N=1024/out", "f32", np.ones((2, 512), np.float32)), 2, "N=1024/out", "shape [2, 512]"),
    ("wrong-length", _replace("N=4096/out", "f32", np.ones(4095, np.float32)), 2, "N=4096/out", "needs [4096]"),
    ("wrong-dtype", _replace("N=1024/out", "f64", np.ones(1024)), 2, "N=1024/out", "dtype 'f64'"),
    ("nan-expected", _replace("N=4096/out", "f32", _nan_at(17)), 2, "N=4096/out", "first at flat index 17"),
    (
        "inf-expected",
        _replace("N=1024/out", "f32", np.full(1024, np.inf, np.float32)),
        2,
        "N=1024/out",
        "1024 non-finite",
    ),
    ("unknown-tensor", _extra, 2, "N=1024/old_out", "no use for"),
    ("other-producer", _other_producer, 2, "metadata.producer", "golden_script is 'protocols/tiny/make_golden.py'"),
]


@pytest.mark.parametrize("edit, code, field, fragment", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refused_golden_is_one_line_naming_file_and_tensor(tmp_path, capsys, edit, code, field, fragment):
    check_fails(setup(tmp_path, edit=edit), capsys, code, field, fragment)


def test_non_finite_bf16_expected_value_is_refused(tmp_path, capsys):
    def edit(tensors, producer, plan):
        bits = np.full(1024, 0x3F80, np.uint16)
        bits[5] = 0x7F80  # +inf in bf16
        tensors["N=1024/out"] = ("bf16", bits)
        return tensors, producer, plan

    check_fails(setup(tmp_path, out_dtype="bf16", edit=edit), capsys, 2, "N=1024/out", "first at flat index 5")


def test_bf16_stored_as_float_is_refused(tmp_path, capsys):
    """A bf16 output saved as float32 values would be compared as the wrong bits."""
    path = setup(tmp_path, out_dtype="bf16")
    loaded = load_plan(path)
    tensors = {k: v[1] for k, v in good_tensors(loaded.cases, "bf16").items()}
    tensors["N=1024/out"] = np.ones(1024, np.float32)
    dtypes = {k: ("f32" if k.endswith("/y") else "bf16") for k in tensors}
    save_file(
        tensors,
        str(path.parent / "golden.safetensors"),
        metadata={
            "format": "qualify-golden",
            "format_version": "1",
            "producer": PRODUCER,
            "config_sha256": config_digest(loaded.plan),
            "dtypes": json.dumps(dtypes),
        },
    )
    check_fails(path, capsys, 2, "N=1024/out", "stored as F32")


def _metadata_case(tmp_path, **changes):
    path = setup(tmp_path)
    loaded = load_plan(path)
    tensors = {k: v[1] for k, v in good_tensors(loaded.cases).items()}
    metadata = {
        "format": "qualify-golden",
        "format_version": "1",
        "producer": PRODUCER,
        "config_sha256": config_digest(loaded.plan),
        "dtypes": json.dumps({k: "f32" for k in tensors}),
    }
    metadata.update(changes)
    metadata = {k: v for k, v in metadata.items() if v is not None}
    save_file(tensors, str(path.parent / "golden.safetensors"), metadata=metadata)
    return path


@pytest.mark.parametrize(
    "changes, field, fragment",
    [
        ({"format_version": "2"}, "metadata.format_version", "'2' is not supported"),
        ({"format": None}, "metadata.format", "expected 'qualify-golden'"),
        ({"producer": None}, "metadata.producer", "which script wrote it"),
        ({"dtypes": "not json"}, "metadata.dtypes", "JSON object"),
    ],
    ids=["future-version", "no-format", "no-producer", "bad-dtypes"],
)
def test_bad_metadata_is_refused(tmp_path, capsys, changes, field, fragment):
    check_fails(_metadata_case(tmp_path, **changes), capsys, 2, field, fragment)


@pytest.mark.parametrize(
    "content",
    [b"", b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}", b"not a golden at all"],
    ids=["empty", "broken-header", "text"],
)
def test_unreadable_golden_is_refused(tmp_path, capsys, content):
    path = setup(tmp_path)
    (path.parent / "golden.safetensors").write_bytes(content)
    check_fails(path, capsys, 2, "header", "not a readable safetensors file")


def test_config_digest_ignores_arms_and_gates_but_not_the_workload():
    from qualify.plan.model import Plan

    base = Plan.model_validate(golden_plan())
    other_arm = golden_plan()
    other_arm["arms"]["candidate"]["params"]["VEC"] = 2
    other_gate = golden_plan()
    other_gate["acceptance"]["gates"] = []
    other_case = golden_plan()
    other_case["workload"]["cases"][0]["N"] = 2048
    digest = config_digest(base)
    assert config_digest(Plan.model_validate(other_arm)) == digest
    assert config_digest(Plan.model_validate(other_gate)) == digest
    assert config_digest(Plan.model_validate(other_case)) != digest


def test_a_golden_reader_out_of_memory_names_the_header_and_a_panic_reading_values_is_the_hosts(tmp_path, monkeypatch):
    """The two ways the safetensors reader can fail that are not the file's fault: no memory for
    the header (named as the header) and a panic (a BaseException, not an Exception) while reading
    a tensor's values, which is the host's problem (EnvironmentProblem), not a bad file (PlanError)."""
    import safetensors

    from qualify.errors import EnvironmentProblem, PlanError
    from qualify.plan import golden as golden_module

    path = tmp_path / "g.safetensors"
    path.write_bytes(b"\0" * 16)

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(safetensors, "safe_open", no_memory)
    with pytest.raises(EnvironmentProblem) as exc:
        golden_module._Reader(path).__enter__()
    assert exc.value.field == "header"

    class Panic(BaseException):
        pass

    def panic():
        raise Panic("allocation failed")

    reader = golden_module._Reader(path)
    with pytest.raises(EnvironmentProblem):
        reader._call(panic, "x", data=True)
    with pytest.raises(PlanError):
        reader._call(panic, "x", data=False)
