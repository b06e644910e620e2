"""`qualify plan new`: skeletons that pass `plan check` and `plan freeze` once their cases are edited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qualify.build.declarations import declared_params
from qualify.cli import main

SOFTMAX = """\
// row softmax: block tree reduction (base) against warp shuffles (candidate)
template <int SHUFFLE>
__global__ void __launch_bounds__(256) softmax_rows(const float* __restrict__ x, /* in */ float* y,
                                                   int rows, const int cols) {
    const int r = blockIdx.x;
    if (r >= rows) return;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[r * cols + c] = x[r * cols + c] * (SHUFFLE + 1);
}
"""


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def repo(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / ".git").mkdir(parents=True)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def edit_cases(plan_path: Path, sizes: list[int]) -> None:
    """What a team does next: its own sizes, and the gate and sanitizer pointed at them."""
    plan = json.loads(plan_path.read_text())
    if "ROWS" in plan["workload"]["cases"][0]:  # the softmax kernel's (rows, cols): two placeholders
        plan["workload"]["cases"] = [{"ROWS": 64, "COLS": n} for n in sizes]
        plan["acceptance"]["gates"][0]["where"] = f"COLS >= {sizes[-1]}"
        plan["acceptance"]["sanitizer"][0]["cases"] = [f"COLS={sizes[0]},ROWS=64"]
    else:
        plan["workload"]["cases"] = [{"N": n} for n in sizes]
        plan["acceptance"]["gates"][0]["where"] = f"N >= {sizes[-1]}"
        plan["acceptance"]["sanitizer"][0]["cases"] = [f"N={sizes[0]}"]
    plan["hypothesis"] = "warp shuffles beat the shared-memory tree at every width"
    plan_path.write_text(json.dumps(plan))


def test_kernel_pair_skeleton_checks_and_freezes(tmp_path, capsys, monkeypatch):
    root = repo(tmp_path, {"kernels/softmax.cu": SOFTMAX})
    monkeypatch.chdir(root)
    code, out, err = run_cli(
        [
            "plan",
            "new",
            "protocols/softmax/plan.json",
            "--cuda",
            "kernels/softmax.cu",
            "--kernel",
            "softmax_rows<0>",
            "--candidate-kernel",
            "softmax_rows<1>",
            "--fidelity",
            "ulp",
        ],
        capsys,
    )
    assert code == 0, err
    assert "wrote protocols/softmax/plan.json (plan check passes)" in out
    assert "acceptance.fidelity.bound: 4 is a placeholder" in out and "qualify probe" in out
    plan = json.loads((root / "protocols/softmax/plan.json").read_text())
    assert plan["name"] == "softmax"
    assert plan["arms"]["base"] == {"kind": "cuda", "source": "../../kernels/softmax.cu", "kernel": "softmax_rows<0>"}
    assert [b["name"] for b in plan["workload"]["buffers"]] == ["x", "y"]
    assert [b["role"] for b in plan["workload"]["buffers"]] == ["input", "output"]
    assert [a["kind"] for a in plan["workload"]["launch"]["args"]] == ["buffer", "buffer", "i32", "i32"]
    # one placeholder per integer parameter, and the shapes the indexing `x[r * cols + c]` says
    assert [a.get("value") for a in plan["workload"]["launch"]["args"][2:]] == ["ROWS", "COLS"]
    assert [b["shape"] for b in plan["workload"]["buffers"]] == [["ROWS", "COLS"], ["ROWS", "COLS"]]
    assert plan["workload"]["cases"] == [{"ROWS": 64, "COLS": 1024}, {"ROWS": 4096, "COLS": 1024}]
    assert "x ['ROWS', 'COLS']; y ['ROWS', 'COLS'] read from the kernel's indexing" in out
    assert plan["acceptance"]["fidelity"] == {"mode": "ulp", "bound": 4}
    edit_cases(root / "protocols/softmax/plan.json", [1024, 8192, 65536])
    for argv in (["plan", "check", "protocols/softmax/plan.json"], ["plan", "freeze", "protocols/softmax/plan.json"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 0, err
    assert (root / "protocols/softmax/plan.lock.json").exists()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")
@pytest.mark.parametrize("named", [True, False], ids=["libraries-in-plan", "bound-by-compare"])
def test_library_pair_skeleton_checks_and_freezes(tmp_path, capsys, monkeypatch, named):
    from test_compare import build

    root = repo(tmp_path / "repo", {})
    monkeypatch.chdir(root)
    lib = build(tmp_path, "v1")
    (root / "lib").mkdir()
    for n in ("v1", "v2"):
        shutil.copyfile(lib, root / "lib" / f"lib{n}.so")
    argv = [
        "plan",
        "new",
        "protocols/scale/plan.json",
        "--library",
        "--symbol",
        "scale",
        "--signature",
        "ptr,ptr,i32,f32",
        "--abi-symbol",
        "abi_version",
        "--abi-version",
        "3",
    ]
    if named:
        argv += ["--base-so", "lib/libv1.so", "--candidate-so", "lib/libv2.so"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    plan = json.loads((root / "protocols/scale/plan.json").read_text())
    assert [a["kind"] for a in plan["workload"]["call"]] == ["buffer", "buffer", "i32", "f32"]
    assert [b["role"] for b in plan["workload"]["buffers"]] == ["input", "output"]
    assert ("library" in plan["arms"]["base"]) == named
    assert "hardware.architectures: for library arms" in out
    edit_cases(root / "protocols/scale/plan.json", [256, 1000])
    for cmd in ("check", "freeze"):
        code, _, err = run_cli(["plan", cmd, "protocols/scale/plan.json"], capsys)
        assert code == 0, err


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")
def test_a_library_without_the_symbol_is_refused_and_no_plan_is_left(tmp_path, capsys, monkeypatch):
    from test_compare import build

    root = repo(tmp_path / "repo", {})
    monkeypatch.chdir(root)
    (root / "lib").mkdir()
    shutil.copyfile(build(tmp_path, "v1"), root / "lib" / "libv1.so")
    code, _, err = run_cli(
        [
            "plan",
            "new",
            "p/plan.json",
            "--library",
            "--symbol",
            "scale_v2",
            "--signature",
            "ptr,ptr,i32,f32",
            "--base-so",
            "lib/libv1.so",
            "--candidate-so",
            "lib/libv1.so",
        ],
        capsys,
    )
    assert code == 2 and "exports no function 'scale_v2'" in err
    assert not (root / "p" / "plan.json").exists()


def test_refusals(tmp_path, capsys, monkeypatch):
    root = repo(
        tmp_path,
        {
            "k.cu": SOFTMAX,
            "pair.cu": 'struct P { double a, b; };\nextern "C" __global__ void pair(float* y, P p) { y[0] = p.a; }\n',
            "wide.cu": 'extern "C" __global__ void softmax_rows(const float* x, float* y, long long rows, int cols) {}\n',
        },
    )
    monkeypatch.chdir(root)
    code, _, err = run_cli(["plan", "new", "p.json"], capsys)
    assert code == 2 and "--cuda FILE --kernel NAME" in err
    code, _, err = run_cli(["plan", "new", "p.json", "--cuda", "pair.cu", "--kernel", "pair"], capsys)
    assert code == 2 and "parameter 1 (P p)" in err
    code, _, err = run_cli(
        [
            "plan",
            "new",
            "p.json",
            "--cuda",
            "k.cu",
            "--kernel",
            "softmax_rows<0>",
            "--candidate-cuda",
            "wide.cu",
            "--candidate-kernel",
            "softmax_rows",
        ],
        capsys,
    )
    assert code == 2 and "[8, 8, 8, 4]" in err and "[8, 8, 4, 4]" in err
    code, _, err = run_cli(["plan", "new", "p.json", "--library", "--symbol", "f", "--signature", "i32,f32"], capsys)
    assert code == 2 and "no 'ptr' argument" in err
    (root / "p.json").write_text("{}")
    code, _, err = run_cli(["plan", "new", "p.json", "--cuda", "k.cu", "--kernel", "softmax_rows<0>"], capsys)
    assert code == 3 and "never overwrites" in err and (root / "p.json").read_text() == "{}"


def test_declared_params_reads_qualifiers_comments_and_defaults():
    params = declared_params(SOFTMAX, "softmax_rows<0>")
    assert [(p.name, p.ctype, p.pointer, p.const) for p in params] == [
        ("x", "float*", True, True),
        ("y", "float*", True, False),
        ("rows", "int", False, False),
        ("cols", "int", False, False),
    ]
    src = '/* __global__ void k(int wrong) */\nextern "C" __global__ void k(double* __restrict__ out, unsigned long long n = 4) {}'
    assert [(p.name, p.ctype) for p in declared_params(src, "k")] == [("out", "double*"), ("n", "unsigned long long")]
    assert declared_params(src, "missing") is None


LAYERNORM = (Path(__file__).parent.parent / "kernels" / "layernorm" / "layernorm.cu").read_text()


def test_a_real_signature_gets_a_placeholder_per_integer_and_shapes_from_its_indexing(tmp_path, capsys, monkeypatch):
    """LayerNorm's (x, gamma, beta, y, mean, rstd, N, C): x and y are N×C, gamma and beta C (indexed
    by i < C), mean and rstd N (indexed by row < N); N and C are two placeholders, not one."""
    root = repo(tmp_path, {"kernels/ln.cu": LAYERNORM})
    monkeypatch.chdir(root)
    argv = ["plan", "new", "protocols/ln/plan.json", "--cuda", "kernels/ln.cu", "--kernel", "layernorm_two_pass"]
    code, out, err = run_cli([*argv, "--candidate-kernel", "layernorm_welford", "--fidelity", "tolerance"], capsys)
    assert code == 0, err
    plan = json.loads((root / "protocols/ln/plan.json").read_text())
    shapes = {b["name"]: b["shape"] for b in plan["workload"]["buffers"]}
    assert shapes == {
        "x": ["N", "C"],
        "gamma": ["C"],
        "beta": ["C"],
        "y": ["N", "C"],
        "mean": ["N"],
        "rstd": ["N"],
    }
    assert [a.get("value") for a in plan["workload"]["launch"]["args"][6:]] == ["N", "C"]
    assert plan["acceptance"]["fidelity"] == {"mode": "tolerance", "atol": 1e-6, "rtol": 1e-5}
    assert "acceptance.fidelity.atol, rtol" in out
    code, _, err = run_cli(["plan", "check", "--no-compile", "protocols/ln/plan.json"], capsys)
    assert code == 0, err


def test_tolerance_takes_no_bound(tmp_path, capsys, monkeypatch):
    root = repo(tmp_path, {"kernels/ln.cu": LAYERNORM})
    monkeypatch.chdir(root)
    argv = ["plan", "new", "p.json", "--cuda", "kernels/ln.cu", "--kernel", "layernorm_two_pass"]
    code, _, err = run_cli([*argv, "--fidelity", "tolerance", "--bound", "3"], capsys)
    assert code == 2 and "--fidelity tolerance takes no --bound" in err and not (root / "p.json").exists()
