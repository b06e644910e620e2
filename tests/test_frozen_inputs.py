"""The lock binds what NVRTC reads, and hostile input fails closed.

Each attack (and variants of it) is driven through the CLI where a user would meet it, and must end
with its documented exit code and one line naming the file and, where there is one, the field.
Hypothesis fuzzes the include scanner (against NVRTC itself) and the option filter. The compile
cache has its own file (test_compile_cache.py), as has git_dirty (test_provenance.py).
"""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plans import HEADER, KERNEL, make_repo, plan_copy
from test_refused_inputs import refused, run_cli  # one CLI-refusal helper for both refusal suites

from qualify.build import nvrtc
from qualify.build.header_reads import BUILTIN
from qualify.build.nvrtc import KernelSpec, compile_kernel
from qualify.errors import FrozenInputChanged, PlanError, printable
from qualify.plan.checks import warmup_launches
from qualify.plan.files import include_candidates
from qualify.plan.load import load_plan
from qualify.plan.model import normalize_option


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Every test compiles into its own cache, so one test's entries never answer another's."""
    monkeypatch.setenv("QUALIFY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    nvrtc.clear_memo()
    yield
    nvrtc.clear_memo()


@pytest.fixture(autouse=True)
def no_hang():
    """A regression that blocks on a FIFO must fail the test, not hang the suite."""

    def stop(signum, frame):
        raise TimeoutError("blocked for 60 s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def tuned_repo(tmp_path: Path, include: str, plan: dict | None = None, freeze: bool = False) -> Path:
    """The tiny plan whose kernel takes its scale from kernels/tune.h, included by `include`."""
    kernel = KERNEL.replace('#include "common.cuh"\n', f'#include "common.cuh"\n{include}\n').replace(
        "scaled(a, x[i + k], y[i + k])", "scaled(a, x[i + k], y[i + k]) * TUNE"
    )
    files = {"kernels/k.cu": kernel, "kernels/common.cuh": HEADER, "kernels/tune.h": "#define TUNE 1.0f\n"}
    return make_repo(tmp_path, plan, files=files, freeze=freeze)


def lock_files(path: Path) -> dict:
    return json.loads(path.with_name("plan.lock.json").read_text())["files"]


# ---------------------------------------------------------------------------------------------
# cause 1: every header NVRTC reads is frozen, however the include is spelled

INCLUDE_SPELLINGS = {
    "macro": '#define HDR "tune.h"\n#include HDR',
    "digraph": '%:include "tune.h"',
    "line-splice": '#inc\\\nlude "tune.h"',
    "comment-in-string": '__device__ const char kOpen[] = "/*";\n#include "tune.h"\n// */',
    "include-next": '#include_next "tune.h"',
}

# Names a macro computes: no scanner can read them, so they are refused before NVRTC runs
COMPUTED_INCLUDES = {
    "stringized": "#define STR(x) #x\n#include STR(tune.h)",
    "pasted-through-two-macros": "#define STR(x) #x\n#define XSTR(x) STR(x)\n#define NAME tune.h\n#include XSTR(NAME)",
    "has-include-of-a-macro": "#define STR(x) #x\n#if __has_include(STR(tune.h))\n#endif",
    "macro-defined-as-a-call": "#define STR(x) #x\n#define HDR STR(tune.h)\n#include HDR",
}


@pytest.mark.parametrize("spelling", INCLUDE_SPELLINGS.values(), ids=INCLUDE_SPELLINGS.keys())
def test_freeze_binds_the_header_however_it_is_included(tmp_path, capsys, spelling):
    path = tuned_repo(tmp_path, spelling)
    code, _, err = run_cli(["plan", "freeze", path], capsys)
    assert code == 0, err
    assert "kernels/tune.h" in lock_files(path)
    (tmp_path / "kernels" / "tune.h").write_text("#define TUNE 2.0f\n")
    refused(capsys, ["plan", "check", path], 3, "kernels/tune.h", "changed after freezing")


@pytest.mark.parametrize("spelling", COMPUTED_INCLUDES.values(), ids=COMPUTED_INCLUDES.keys())
def test_a_computed_include_is_refused_naming_its_file_and_line(tmp_path, capsys, spelling):
    path = tuned_repo(tmp_path, spelling)
    text = (tmp_path / "kernels" / "k.cu").read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if re.search(r"include (STR|XSTR|HDR)|__has_include", t))
    for command in (["plan", "check"], ["plan", "freeze"]):
        refused(capsys, [*command, path], 2, "k.cu", f"line {line}", "name the header literally")
    assert not path.with_name("plan.lock.json").exists()


def test_a_define_in_the_plan_that_names_the_header_is_frozen(tmp_path, capsys):
    plan = plan_copy()
    for side in ("base", "candidate"):
        plan["arms"][side]["defines"] = {"HDR": '"tune.h"'}
    path = tuned_repo(tmp_path, "#include HDR", plan)
    assert run_cli(["plan", "freeze", path], capsys)[0] == 0
    assert "kernels/tune.h" in lock_files(path)


@pytest.mark.parametrize(
    "guard, extra_plan",
    [
        ("#ifdef MUTANT", {"kind": "build", "name": "mutant", "defines": {"MUTANT": 1}}),  # a build control's header
        ("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 890", None),  # a header only one architecture reads
    ],
)
def test_freeze_binds_headers_of_every_variant_it_compiles(tmp_path, capsys, guard, extra_plan):
    plan = plan_copy()
    plan["hardware"]["architectures"] = ["sm_89", "sm_90"]
    if extra_plan is not None:
        plan["controls"]["negative"].append(extra_plan)
    include = f'#include "tune.h"\n{guard}\n#include "variant.h"\n#endif'
    path = tuned_repo(tmp_path, include, plan)
    (tmp_path / "kernels" / "variant.h").write_text("// read by one variant only\n")
    assert run_cli(["plan", "freeze", path], capsys)[0] == 0
    assert "kernels/variant.h" in lock_files(path)


def test_a_lock_that_misses_a_header_nvrtc_reads_is_refused_at_compile_time(tmp_path):
    """The compile-time check holds NVRTC's own list to the lock, whatever the scanner saw."""
    path = tuned_repo(tmp_path, '#include "tune.h"', freeze=True)
    loaded = load_plan(path)
    from qualify.build.arms import kernel_spec

    spec = kernel_spec(loaded, "base", "sm_90")
    frozen = tuple((rel, digest) for rel, digest in spec.frozen if rel != "kernels/tune.h")
    with pytest.raises(FrozenInputChanged, match="the lock does not freeze it") as exc:
        compile_kernel(replace(spec, frozen=frozen))
    assert exc.value.file == "kernels/tune.h"


def test_a_header_outside_the_repository_is_refused_even_when_no_scanner_sees_it(tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "evil.h").write_text("#define TUNE 1.0f\n")
    repo = tmp_path / "repo"
    path = tuned_repo(repo, f"#define STR(x) #x\n#include STR({outside / 'evil.h'})")
    refused(capsys, ["plan", "check", path], 2, "name the header literally")
    (repo / "kernels" / "k.cu").write_text(
        (repo / "kernels" / "k.cu")
        .read_text()
        .replace(f"#include STR({outside / 'evil.h'})", f'#include "{outside / "evil.h"}"')
    )
    refused(capsys, ["plan", "check", path], 2, "outside the repository")


def test_a_header_changed_between_lock_check_and_compile_is_caught_by_its_bytes(tmp_path):
    path = tuned_repo(tmp_path, '#include "tune.h"', freeze=True)
    loaded = load_plan(path)  # the lock still matches here
    (tmp_path / "kernels" / "tune.h").write_text("#define TUNE 3.0f\n")
    from qualify.build.arms import kernel_spec

    with pytest.raises(FrozenInputChanged, match="bytes NVRTC read differ"):
        compile_kernel(kernel_spec(loaded, "base", "sm_90"))


def test_the_source_itself_is_checked_against_the_lock_at_compile_time(tmp_path):
    path = make_repo(tmp_path, freeze=True)
    loaded = load_plan(path)
    (tmp_path / "kernels" / "k.cu").write_text(KERNEL + "// edited\n")
    from qualify.build.arms import kernel_spec

    with pytest.raises(FrozenInputChanged, match="bytes NVRTC read differ") as exc:
        compile_kernel(kernel_spec(loaded, "base", "sm_90"))
    assert exc.value.file == "kernels/k.cu"


# ---------------------------------------------------------------------------------------------
# cause 2: the working directory is never an include path


def test_a_tune_h_in_the_working_directory_is_not_picked_up(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    path = tuned_repo(repo, '#include "tune.h"')
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "tune.h").write_text("#define TUNE 100.0f\n")
    monkeypatch.chdir(cwd)
    spec = KernelSpec(source=(repo / "kernels" / "k.cu").resolve(), kernel="axpy<1>", arch="sm_90", root=repo.resolve())
    read = [Path(name) for name, digest in compile_kernel(spec).headers if digest != BUILTIN]
    assert (repo / "kernels" / "tune.h").resolve() in read
    assert all(p.is_absolute() and not p.is_relative_to(cwd) for p in read), read
    assert path.exists()


def test_a_header_only_the_working_directory_has_is_not_found(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    path = tuned_repo(repo, '#include "tune.h"')
    (repo / "kernels" / "tune.h").unlink()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "tune.h").write_text("#define TUNE 100.0f\n")
    monkeypatch.chdir(cwd)
    code, _, err = run_cli(["plan", "check", path], capsys)
    assert code == 4, err  # NVRTC cannot open it: a build error, never a silent compile of cwd/tune.h
    assert 'cannot open source file "tune.h"' in err


# ---------------------------------------------------------------------------------------------
# cause 3: NVRTC options from a closed list

REFUSED_OPTIONS = [
    " --pre-include=/etc/hostname",
    "\t--pre-include=/etc/hostname",
    " -I/elsewhere",
    "-I /elsewhere",
    "--include-path=/elsewhere",
    "-isystem=/elsewhere",
    "--use-pch=/tmp/evil.pch",
    "--pch",
    "--create-pch=/tmp/out.pch",
    "--time=/tmp/qualify-time.csv",
    "--fdevice-time-trace=/tmp/trace",
    "--ptxas-options=--output-file=/tmp/x",
    "-Xptxas=-o",
    "--gpu-architecture=sm_80",
    " -arch sm_80",
    "--maxrregcount=0",
    "--maxrregcount=/etc",
    "--use_fast_math=yes",
    "--std=gnu++17",
    "-include tune.h",
]


@pytest.mark.parametrize("option", REFUSED_OPTIONS)
def test_options_outside_the_allow_list_are_refused_with_their_index(tmp_path, capsys, option):
    plan = plan_copy()
    plan["arms"]["candidate"]["options"] = ["--use_fast_math", option]
    path = make_repo(tmp_path, plan)
    refused(capsys, ["plan", "check", "--no-compile", path], 2, f"{path}: arms.candidate.options[1]: ")


def test_a_refused_option_writes_no_file(tmp_path, capsys):
    target = tmp_path / "time.csv"
    plan = plan_copy()
    plan["arms"]["base"]["options"] = [f" --time={target}"]
    path = make_repo(tmp_path / "repo", plan)
    refused(capsys, ["plan", "check", path], 2, "arms.base.options[0]")
    assert not target.exists()


@pytest.mark.parametrize(
    "given, canonical",
    [
        ("-use_fast_math", "--use_fast_math"),
        ("  --ftz=true ", "--ftz=true"),
        ("-maxrregcount 64", "--maxrregcount=64"),
        ("-w", "--disable-warnings"),
        ("--ptxas-options=-O3", "--ptxas-options=-O3"),
    ],
)
def test_allowed_options_normalise_to_one_spelling_and_compile(tmp_path, capsys, given, canonical):
    assert normalize_option(given) == canonical
    plan = plan_copy()
    plan["arms"]["candidate"]["options"] = [given]
    code, _, err = run_cli(["plan", "check", make_repo(tmp_path, plan)], capsys)
    assert code == 0, err


_FILE_OPTIONS = [
    "pre-include",
    "include",
    "preinclude",
    "use-pch",
    "create-pch",
    "pch-dir",
    "time",
    "fdevice-time-trace",
    "include-path",
    "I",
    "isystem",
    "dependency-output",
    "MF",
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(_FILE_OPTIONS),
    st.sampled_from(["-", "--"]),
    st.text(" \t\n\r\x0b\x0c", max_size=3),
    st.sampled_from(["=", " ", "", "  "]),
    st.text(max_size=20),
)
def test_fuzz_no_file_option_passes_the_filter(name, dashes, space, sep, value):
    with pytest.raises(ValueError):
        normalize_option(f"{space}{dashes}{name}{sep}{value}{space}")


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=40))
def test_fuzz_whatever_passes_is_a_canonical_allowed_option(text):
    try:
        canonical = normalize_option(text)
    except ValueError:
        return
    assert canonical == normalize_option(canonical)  # canonical forms are fixed points
    assert canonical.startswith("--") and canonical.isprintable() and " " not in canonical
    name = canonical[2:].split("=", 1)[0]
    from qualify.plan.model import _OPTION_VALUES

    assert name in _OPTION_VALUES


# ---------------------------------------------------------------------------------------------
# the include scanner, fuzzed against NVRTC's own list

_SPLICE = "\\\n"


@st.composite
def include_lines(draw):
    """`#include "tune.h"` as a preprocessor may meet it: another spelling of '#', blanks,
    comments, line splices inside the directive's words."""
    hash_ = draw(st.sampled_from(["#", "%:", "# ", "#\t", " #  "]))
    word = draw(st.sampled_from(["include", "include_next"]))
    cut = draw(st.integers(0, len(word)))
    if draw(st.booleans()):
        word = word[:cut] + _SPLICE + word[cut:]
    gap = draw(st.sampled_from([" ", "\t", " /* c */ ", "/**/", _SPLICE + " "]))
    before = draw(st.sampled_from(["", '__device__ const char s[] = "/*";\n', "// a comment\n", "/* block\n */\n"]))
    after = draw(st.sampled_from(["", " // trailing", " /* trailing */"]))
    return f'{before}{hash_}{word}{gap}"tune.h"{after}'


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(include_lines())
def test_fuzz_scanner_sees_every_include_spelling(line):
    assert ("tune.h", True) in include_candidates(line + "\n"), line


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(include_lines())
def test_fuzz_nvrtc_reports_what_the_scanner_proposes(tmp_path_factory, line):
    root = tmp_path_factory.mktemp("scan")
    (root / "tune.h").write_text("#define TUNE 2\n")
    source = root / "k.cu"
    source.write_text(f'{line}\nextern "C" __global__ void k(int* x) {{ x[0] = TUNE; }}\n')
    compiled = compile_kernel(KernelSpec(source=source, kernel="k", arch="sm_90", root=root))
    read = {Path(n).name for n, d in compiled.headers if d != BUILTIN}
    proposed = {name for name, _ in include_candidates(source.read_text())}
    assert read == {"tune.h"} and read <= proposed, (line, read, proposed)


# ---------------------------------------------------------------------------------------------
# cause 4: `compare` cannot swap a frozen library


@pytest.fixture
def library_plan(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("needs a C compiler")
    from test_compare import ARM, PLAN, build

    v1, v2 = build(tmp_path, "v1"), build(tmp_path, "v2", factor=2.0)
    plan = copy.deepcopy(PLAN)
    for side in ("base", "candidate"):
        plan["arms"][side] = {**ARM, "library": "../../libs/libv1.so"}
    path = make_repo(tmp_path / "repo", plan, files={"libs/libv1.so": v1}, freeze=True)
    return path, v1, v2


def test_compare_refuses_a_library_other_than_the_frozen_one(library_plan, capsys):
    path, v1, v2 = library_plan
    refused(capsys, ["compare", v1, v2, "--plan", path], 3, f"{v2}: arms.candidate.library", "another build")


def test_compare_accepts_the_frozen_build_from_another_path(library_plan):
    from qualify.commands.pipeline import bind_libraries, load_frozen

    path, v1, _ = library_plan
    loaded = load_frozen(path)
    assert bind_libraries(loaded, {"base": v1, "candidate": v1}) == {"base": v1, "candidate": v1}


def test_run_plan_itself_refuses_a_swapped_library(library_plan, tmp_path):
    from qualify.commands.pipeline import load_frozen, run_plan

    path, v1, v2 = library_plan
    opened = []
    with pytest.raises(FrozenInputChanged):
        run_plan(
            load_frozen(path),
            tmp_path / "rec",
            lambda: opened.append(1),
            lambda u: None,
            libraries={"base": v1, "candidate": v2},
        )
    assert not opened and not (tmp_path / "rec").exists()  # refused before the device or the record


# ---------------------------------------------------------------------------------------------
# cause 10: bounded reads of regular files


def test_plan_that_is_dev_zero(capsys):
    started = time.monotonic()
    refused(capsys, ["plan", "check", "/dev/zero"], 2, "/dev/zero: ", "not a regular file")
    assert time.monotonic() - started < 5


def test_plan_that_is_a_fifo(tmp_path, capsys):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    refused(capsys, ["plan", "check", fifo], 2, f"{fifo}: ", "not a regular file")


def test_plan_that_is_a_folder(tmp_path, capsys):
    refused(capsys, ["plan", "freeze", tmp_path], 2, f"{tmp_path}: ", "folder")


def test_plan_over_its_size_cap_is_refused_without_reading_it(tmp_path, capsys):
    big = tmp_path / "plan.json"
    with open(big, "wb") as f:
        f.truncate(64 * 2**30)  # sparse: 64 GiB that would take minutes to read
    refused(capsys, ["plan", "check", big], 2, "larger than")


def test_a_fifo_header_inside_the_repository(tmp_path, capsys):
    path = tuned_repo(tmp_path, '#include "tune.h"')
    (tmp_path / "kernels" / "tune.h").unlink()
    os.mkfifo(tmp_path / "kernels" / "tune.h")
    refused(capsys, ["plan", "check", path], 2, "arms.base.source", "not a regular file")


def test_an_include_of_dev_zero(tmp_path, capsys):
    path = tuned_repo(tmp_path, '#include "/dev/zero"')
    # refused by its spelling, before anything asks what /dev/zero is
    refused(capsys, ["plan", "check", path], 2, "/dev/zero", "outside the repository")
    (tmp_path / "kernels" / "zero.h").symlink_to("/dev/zero")
    (tmp_path / "kernels" / "k.cu").write_text(
        (tmp_path / "kernels" / "k.cu").read_text().replace('#include "/dev/zero"', '#include "zero.h"')
    )
    refused(capsys, ["plan", "check", path], 2, "zero.h", "not a regular file")


def test_a_lock_that_is_a_fifo(tmp_path, capsys):
    path = make_repo(tmp_path)
    os.mkfifo(path.with_name("plan.lock.json"))
    refused(capsys, ["plan", "check", "--no-compile", path], 2, "plan.lock.json", "not a regular file")


def test_a_lock_that_links_to_dev_zero(tmp_path, capsys):
    path = make_repo(tmp_path)
    path.with_name("plan.lock.json").symlink_to("/dev/zero")
    refused(capsys, ["plan", "check", "--no-compile", path], 2, "plan.lock.json", "not a regular file")


def test_a_header_over_its_size_cap(tmp_path, capsys):
    path = tuned_repo(tmp_path, '#include "tune.h"')
    with open(tmp_path / "kernels" / "tune.h", "ab") as f:
        f.truncate(17 * 2**20)
    refused(capsys, ["plan", "check", path], 2, "tune.h", "more than the")


@pytest.mark.parametrize("rel", ["../../etc/passwd", "/etc/passwd"])
def test_a_lock_naming_a_file_outside_the_repository(tmp_path, capsys, rel):
    path = make_repo(tmp_path, freeze=True)
    lock = json.loads(path.with_name("plan.lock.json").read_text())
    lock["files"][rel] = "0" * 64
    path.with_name("plan.lock.json").write_text(json.dumps(lock))
    refused(capsys, ["plan", "check", "--no-compile", path], 2, "plan.lock.json", "files[")


# ---------------------------------------------------------------------------------------------
# cause 11: warm-up bounded and inside the budget


@pytest.mark.parametrize(
    "warmup, fragment",
    [("10001", "schedule.warmup"), ("1" + "0" * 4000, "invalid JSON"), ("18446744073709551616", "schedule.warmup")],
)
def test_warmup_beyond_its_bound(tmp_path, capsys, warmup, fragment):
    path = make_repo(tmp_path)
    path.write_text(path.read_text().replace('"samples_per_block": 5', f'"warmup": {warmup}, "samples_per_block": 5'))
    refused(capsys, ["plan", "check", "--no-compile", path], 2, fragment)


@pytest.mark.parametrize(
    "planned, elapsed, per_launch, wall, expected",
    [
        (300_000, 0.0, 2.0**-15, 1.0, 2**15),  # the review's 300,000 warm-ups in a 1 s budget
        (10, 0.5, 0.01, 60.0, 10),
        (10, 61.0, 0.01, 60.0, 0),
        (0, 0.0, 0.01, 60.0, 0),
    ],
)
def test_warmup_launches_fit_the_wall_budget(planned, elapsed, per_launch, wall, expected):
    assert warmup_launches(planned, elapsed, per_launch, wall) == expected


# ---------------------------------------------------------------------------------------------
# cause 12 and 15: large plans, canonical cases, bounds that can pass


def test_twenty_thousand_cases_check_in_linear_time(tmp_path):
    from qualify.plan.checks import cross_check
    from qualify.plan.model import Plan

    plan = plan_copy()
    plan["workload"]["cases"] = [{"N": 1024 * (i + 1)} for i in range(20_000)]
    plan["acceptance"] = {"gates": []}
    plan["controls"] = {"negative": []}
    model = Plan.model_validate(plan)
    started = time.monotonic()
    cross_check(model)
    assert time.monotonic() - started < 3.0


def test_s_1_and_s_1_0_are_one_case(tmp_path, capsys):
    plan = plan_copy()
    plan["workload"]["cases"] = [{"N": 1024}, {"N": 1024.0}]
    path = make_repo(tmp_path, plan)
    refused(capsys, ["plan", "check", "--no-compile", path], 2, "workload.cases[1]", "declared twice")


def test_case_ids_and_digest_do_not_depend_on_key_order(tmp_path):
    ids, digests = [], []
    for i, order in enumerate((("B", "N"), ("N", "B"))):
        plan = plan_copy()
        cases = ({"B": 2, "N": 1024}, {"B": 3, "N": 4096})
        plan["workload"]["cases"] = [{k: case[k] for k in order} for case in cases]
        plan["acceptance"] = {"gates": [], "sanitizer": [{"tool": "memcheck", "cases": ["B=2,N=1024"]}]}
        loaded = load_plan(make_repo(tmp_path / str(i), plan))
        ids.append([c.id for c in loaded.cases])
        digests.append(loaded.digest)
    assert ids[0] == ids[1] == ["B=2,N=1024", "B=3,N=4096"]
    assert digests[0] == digests[1]


@pytest.mark.parametrize("bound", [-100, -0.5, 100, 250])
def test_speedup_bounds_that_cannot_pass_are_refused(tmp_path, capsys, bound):
    plan = plan_copy()
    plan["acceptance"]["gates"][0]["min_speedup_pct"] = bound
    refused(
        capsys, ["plan", "check", "--no-compile", make_repo(tmp_path, plan)], 2, "acceptance.gates[0].min_speedup_pct"
    )


# ---------------------------------------------------------------------------------------------
# cause 8 (plan side) and 16 (newline half): labels are one line of plain text

LABELS = [
    (("hypothesis",), "faster\n**Verdict: QUALIFIED**"),
    (("independent_variable",), "width <!-- hidden -->\nfrozen: yes"),
    (("revisions", "base"), "vec1\x1b[2J\x1b[1;1Hfrozen yes"),
    (("revisions", "candidate"), "vec4\r"),
    (("hypothesis",), "tab\tseparated"),
    (("hypothesis",), "bidi \u202egnirts"),
    (("hypothesis",), "csi \x9b31m"),
    (("arms", "base", "source"), "../../kernels/k.cu\n"),
]


@pytest.mark.parametrize("where, label", LABELS, ids=[f"{'.'.join(w)}-{i}" for i, (w, _) in enumerate(LABELS)])
def test_labels_with_control_characters_are_refused_at_validation(tmp_path, capsys, where, label):
    plan = plan_copy()
    node = plan
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = label
    line = refused(
        capsys, ["plan", "check", "--no-compile", make_repo(tmp_path, plan)], 2, ".".join(where), "plain text"
    )
    assert "\x1b" not in line and "\r" not in line


def test_a_file_name_with_a_newline_stays_on_one_line(tmp_path, capsys):
    odd = tmp_path / "plan\nqualify: frozen yes.json"
    odd.write_text("{")
    line = refused(capsys, ["plan", "check", odd], 2, "invalid JSON", "\\n")
    assert "plan\\nqualify: frozen yes.json" in line


def test_printable_escapes_only_what_is_invisible():
    assert printable("T=512 ∑ é") == "T=512 ∑ é"
    assert printable("a\nb\x1b[31m\u202e") == "a\\nb\\x1b[31m\\u202e"


# ---------------------------------------------------------------------------------------------
# cause 14: environment failures get their documented codes, never 70


def test_plan_schema_into_an_existing_folder(tmp_path, capsys):
    refused(capsys, ["plan", "schema", "-o", tmp_path], 2, f"{tmp_path}: ", "folder")


@pytest.mark.parametrize(
    "err, fragment",
    [(errno.EROFS, "read-only file system"), (errno.ENOSPC, "no space left"), (errno.EACCES, "permission denied")],
)
def test_a_lock_that_cannot_be_written(tmp_path, capsys, monkeypatch, err, fragment):
    path = make_repo(tmp_path)
    real = os.fsync

    def fsync(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".plan.lock.json."):
            raise OSError(err, os.strerror(err))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    refused(capsys, ["plan", "freeze", path], 5, "plan.lock.json: ", fragment)
    assert not path.with_name("plan.lock.json").exists()


def test_an_unreadable_plan(tmp_path, capsys, monkeypatch):
    path = make_repo(tmp_path)
    real = os.open

    def deny(file, *args, **kwargs):  # chmod 000 would not stop root, who runs some CI
        if str(file) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    refused(capsys, ["plan", "check", path], 2, f"{path}: ", "Permission denied")


def test_an_os_error_nobody_caught_names_its_file(tmp_path, capsys, monkeypatch):
    import qualify.commands.check

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error", "/some/file")

    monkeypatch.setattr(qualify.commands.check, "check_plan", broken)
    refused(capsys, ["plan", "check", make_repo(tmp_path)], 5, "/some/file: ", "Input/output error")


@pytest.mark.parametrize("text, fragment", [("2" * 4300, "invalid JSON"), ("18446744073709551616", "seeds.base")])
def test_huge_integers(tmp_path, capsys, text, fragment):
    path = make_repo(tmp_path)
    path.write_text(path.read_text().replace('"base": 7', f'"base": {text}'))
    refused(capsys, ["plan", "check", "--no-compile", path], 2, fragment)


def test_a_cache_hit_still_checks_the_lock(tmp_path):
    path = tuned_repo(tmp_path, '#include "tune.h"', freeze=True)
    from qualify.build.arms import kernel_spec

    loaded = load_plan(path)
    spec = kernel_spec(loaded, "base", "sm_90")
    assert compile_kernel(spec)  # warm the cache with a lock that matches
    lock = path.with_name("plan.lock.json")
    data = json.loads(lock.read_text())
    del data["files"]["kernels/tune.h"]
    from dataclasses import replace

    with pytest.raises(FrozenInputChanged, match="does not freeze it"):
        compile_kernel(replace(spec, frozen=tuple(sorted(data["files"].items()))))


def test_plan_error_from_an_unreadable_source_names_the_file(tmp_path):
    spec = KernelSpec(source=tmp_path / "missing.cu", kernel="k", arch="sm_90")
    with pytest.raises(PlanError, match="no such file"):
        compile_kernel(spec)


@pytest.fixture
def checked_record(tmp_path):
    from test_record import h200_trials, new_record

    from qualify.record.assemble import write_record

    record, plan, lock = new_record(tmp_path / "rec")
    h200_trials(record, lock)
    write_record(record, plan, lock)
    return tmp_path / "rec"


def test_a_readme_that_is_a_folder(checked_record, capsys):
    readme = checked_record / "README.md"
    readme.unlink()
    readme.mkdir()
    refused(capsys, ["report", "--check", checked_record], 2, "README.md")


def test_a_readme_that_is_not_utf8(checked_record, capsys):
    (checked_record / "README.md").write_bytes(b"\xff\xfe not text\n")
    refused(capsys, ["report", "--check", checked_record], 2, "not UTF-8")
