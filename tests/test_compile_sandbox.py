"""The compiler sees only the repository: every header is found and read by qualify before NVRTC
runs, computed includes are refused, NVRTC compiles from memory in a confined worker, and its log
never quotes a file outside the repository and the CUDA headers (issue 25, cause 1)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from plans import KERNEL, make_repo, plan_copy
from test_refused_inputs import refused, run_cli

from qualify.build import includes, nvrtc, sandbox
from qualify.build.nvrtc import KernelSpec, compile_kernel, scrub_log
from qualify.errors import PlanError

SECRET = b"qualify-secret-7f3a9c"
LANDLOCK = sandbox.support()[0] > 0


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("QUALIFY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    nvrtc.clear_memo()
    yield
    nvrtc.clear_memo()


@pytest.fixture
def secret(tmp_path):
    """A file outside the repository (the repository is tmp_path/repo)."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret").write_bytes(b"#define LEAK 1\n" + SECRET + b"\n")
    return folder


def hostile_repo(tmp_path, lines: str):
    kernel = KERNEL.replace('#include "common.cuh"\n', f'#include "common.cuh"\n{lines}\n')
    return make_repo(tmp_path / "repo", plan_copy(), files={"kernels/k.cu": kernel, "kernels/common.cuh": "\n"})


BUILT = "#define S(x) #x\n#define F(a,b) S(a/b)\n"


@pytest.mark.parametrize(
    "attack",
    [
        BUILT + "#include F({folder},secret)",
        BUILT + "#if __has_include(F({folder},secret))\n#error found\n#endif",
        BUILT + "#if __has_include_next(F({folder},secret))\n#error found\n#endif",
        BUILT + "#define H(x) __has_include(x)\n#if H(F({folder},secret))\n#endif",
    ],
    ids=["include", "has_include", "has_include_next", "wrapper-macro"],
)
def test_a_built_path_cannot_read_or_reveal_a_file_outside_the_repository(tmp_path, capsys, secret, attack):
    path = hostile_repo(tmp_path, attack.format(folder=secret))
    for command in (["plan", "check"], ["plan", "freeze"]):
        err = refused(capsys, [*command, path], 2, "k.cu", "line ", "literal")
        assert SECRET.decode() not in err
    assert not path.with_name("plan.lock.json").exists()


def test_plan_new_compiles_through_the_same_refusal(tmp_path, capsys, secret):
    path = hostile_repo(tmp_path, BUILT + f"#include F({secret},secret)")
    source = path.parents[2] / "kernels" / "k.cu"
    target = path.parent / "new.json"
    code, out, err = run_cli(["plan", "new", target, "--cuda", source, "--kernel", "axpy<1>"], capsys)
    assert code == 2, err
    assert "name the header literally" in err and SECRET.decode() not in out + err
    assert not target.exists()


@pytest.mark.parametrize("directive", ["#include", "#if __has_include("])
def test_a_literal_path_outside_the_repository_is_refused_whether_or_not_it_exists(tmp_path, capsys, secret, directive):
    said = []
    for name in ("secret", "no-such-file"):
        close = ")\n#endif" if directive.startswith("#if") else ""
        path = hostile_repo(tmp_path / name, f'{directive}"{secret / name}"{close}')
        for command in (["plan", "check"], ["plan", "check", "--no-compile"]):
            err = refused(capsys, [*command, path], 2, "outside the repository")
            said.append(err.replace(str(tmp_path / name), "REPO").replace(name, "NAME"))
        assert SECRET.decode() not in err
    assert said[:2] == said[2:]  # the same words whether the file exists or not


REQUEST = {"program": "/nowhere/k.cu", "kernel": "k", "options": ["--gpu-architecture=sm_90"]}


def request(source: str, headers: dict[str, bytes] | None = None) -> tuple[dict, bytes, list[tuple[str, bytes]]]:
    """_run_worker's arguments but the spec: the options, the source, the headers in memory."""
    return REQUEST, source.encode(), list((headers or {}).items())


K = '\nextern "C" __global__ void k(int* x) { x[0] = 1; }\n'


@pytest.mark.skipif(not LANDLOCK, reason="the kernel does not enforce Landlock")
def test_the_confined_worker_opens_no_file_even_when_the_scanner_is_bypassed(secret):
    spec = KernelSpec(source=secret / "k.cu", kernel="k", arch="sm_90")
    reply = nvrtc._run_worker(*request(f'#include "{secret / "secret"}"' + K), spec)
    assert reply["sandbox"].startswith("landlock")
    assert not reply["compiled"]
    assert "Permission denied" in reply["log"] and SECRET.decode() not in str(reply)
    # __has_include cannot tell an existing file from a missing one
    probe = nvrtc._run_worker(*request(f'#if __has_include("{secret / "secret"}")\n#error found\n#endif' + K), spec)
    assert probe["compiled"], probe["log"]


@pytest.mark.skipif(not LANDLOCK, reason="the kernel does not enforce Landlock")
def test_a_header_handed_in_memory_compiles_inside_the_sandbox(tmp_path):
    spec = KernelSpec(source=tmp_path / "k.cu", kernel="k", arch="sm_90")
    reply = nvrtc._run_worker(
        *request('#include "v.h"\n#if V != 3\n#error\n#endif' + K, {"v.h": b"#define V 3\n"}), spec
    )
    assert reply["compiled"], reply["log"]
    assert "v.h" in reply["headers"]


def test_without_landlock_the_worker_says_why(monkeypatch):
    """The worker on a kernel without Landlock (simulated in a child process: NVRTC run inside the
    test process would leave its state there) compiles from memory and says why it is unconfined."""
    why = "the kernel 5.4 refuses Landlock (Function not implemented)"
    script = (
        "import json, sys\n"
        "from qualify.build import compile_worker, sandbox\n"
        f"sandbox.support = lambda: (0, {why!r})\n"
        "sandbox.restrict = lambda *a, **k: sys.exit('restricted without Landlock')\n"
        "print(json.dumps(compile_worker.compile_request(compile_worker.read_request(sys.stdin.buffer))))\n"
    )
    framed = io.BytesIO()
    nvrtc.write_request(framed, *request(K))
    done = subprocess.run([sys.executable, "-c", script], input=framed.getvalue(), capture_output=True)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["compiled"] and reply["sandbox"] == f"none: {why}"
    monkeypatch.setattr(sandbox, "support", lambda: (0, why))
    assert sandbox.describe() == f"none: {why}"


def test_compiled_kernels_and_plan_check_say_how_the_compile_was_confined(tmp_path, capsys):
    path = make_repo(tmp_path)
    code, out, err = run_cli(["plan", "check", path], capsys)
    assert code == 0, err
    assert f"confined: {sandbox.describe()}" in " ".join(out.split())
    source = path.parents[2] / "kernels" / "k.cu"
    compiled = compile_kernel(KernelSpec(source=source, kernel="axpy<1>", arch="sm_90", root=tmp_path))
    assert compiled.sandbox == sandbox.describe()


def test_the_log_withholds_lines_naming_files_outside(tmp_path):
    inside = tmp_path / "repo"
    log = (
        f"{inside}/kernels/k.cu(3): error: bad\n  out[i] = x /y;\n"
        f'/etc/shadow(1): error: root:x:0:0\n  "{inside}/../outside/secret": warning\nptxas info : Used 8 registers\n'
    )
    kept = scrub_log(log, (inside,))
    assert f"{inside}/kernels/k.cu(3): error: bad" in kept and "Used 8 registers" in kept and "x /y;" in kept
    assert "root:x" not in kept and "outside/secret" not in kept
    assert kept.count("withheld") == 2


def test_one_name_for_two_files_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.h").write_text('#include "common.h"\n')
    (tmp_path / "b" / "x.h").write_text('#include "common.h"\n')
    (tmp_path / "a" / "common.h").write_text("#define A 1\n")
    (tmp_path / "b" / "common.h").write_text("#define A 2\n")
    source = tmp_path / "k.cu"
    text = b'#include "a/x.h"\n#include "b/x.h"\n'
    with pytest.raises(PlanError, match="NVRTC finds headers by the name as written"):
        includes.resolve_headers(source, text, (tmp_path,), (tmp_path,), (), {})


def test_headers_are_found_as_the_preprocessor_finds_them(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "sub" / "a.h").write_text('#include "b.h"\n#include <c.h>\n')
    (tmp_path / "sub" / "b.h").write_text("// beside its includer\n")
    (tmp_path / "inc" / "c.h").write_text("// in a search folder\n")
    (tmp_path / "inc" / "d.h").write_text("// named by a define of the plan\n")
    source = tmp_path / "k.cu"
    text = b'#include "sub/a.h" // comment\n/* #include "not/real.h" */\n#include HDR\n'
    found = includes.resolve_headers(source, text, (tmp_path, tmp_path / "inc"), (tmp_path,), (), {"HDR": '"d.h"'})
    assert {n: p.relative_to(tmp_path).as_posix() for n, (p, _) in found.by_name.items()} == {
        "sub/a.h": "sub/a.h",
        "b.h": "sub/b.h",
        "c.h": "inc/c.h",
        "d.h": "inc/d.h",
    }


def test_a_computed_include_names_its_line_after_splices_and_comments(tmp_path):
    text = b'/* one\n two */\n#define S(x) #x\n#inc\\\nlude "ok.h"\n#include S(x.h)\n'
    with pytest.raises(PlanError) as exc:
        includes.resolve_headers(tmp_path / "k.cu", text, (tmp_path,), (tmp_path,), (), {})
    assert exc.value.field == "line 6" and exc.value.file == str(tmp_path / "k.cu")


@pytest.mark.parametrize(
    "spelling",
    [
        "%:include F(/tmp,secret)",
        "??=include F(/tmp,secret)",
        "#inc\\\nlude F(/tmp,secret)",
        "# /* c */ include F(/tmp,secret)",
        "#include_next F(/tmp,secret)",
        "#import F(/tmp,secret)",
        "#if defined(X) || __has_include \\\n (F(/tmp,secret))\n#endif",
        "#elif __has_include_next(F(/tmp,secret))",
    ],
)
def test_every_spelling_of_a_computed_include_is_refused(tmp_path, spelling):
    text = f"#define S(x) #x\n#define F(a,b) S(a/b)\n{spelling}\n".encode()
    with pytest.raises(PlanError, match="literal") as exc:
        includes.resolve_headers(tmp_path / "k.cu", text, (tmp_path,), (tmp_path,), (), {})
    assert exc.value.field == "line 3"


def test_a_link_inside_the_repository_to_a_file_outside_is_refused_by_where_it_resolves(tmp_path):
    """The allowed folders are checked on the path the file system resolves, not the name as written:
    `"inc/key.h"` is lexically inside the repository, but the link leads out of it. Neither the
    outside file's bytes nor the header are handed to NVRTC."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "inc").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.h").write_text("#define SECRET 42\n")
    (repo / "inc" / "key.h").symlink_to(outside / "secret.h")
    (repo / "inc" / "own.h").write_text("// a header of the repository's own\n")
    text = b'#include "inc/own.h"\n#include "inc/key.h"\n'
    with pytest.raises(PlanError, match="'inc/key.h', which resolves outside the repository") as exc:
        includes.resolve_headers(repo / "k.cu", text, (repo,), (repo,), (), {})
    assert exc.value.field == "line 2"
    # the same link pointing inside the repository is an ordinary header
    (repo / "inc" / "key.h").unlink()
    (repo / "inc" / "key.h").symlink_to(repo / "inc" / "own.h")
    found = includes.resolve_headers(repo / "k.cu", text, (repo,), (repo,), (), {})
    assert found.by_name["inc/key.h"][0] == repo / "inc" / "own.h"
