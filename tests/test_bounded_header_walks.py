"""The header walks do work linear in the headers (issue 36, item 3). No timing is asserted: the
walks are counted in path comparisons, which a list of seen files made quadratic (2,000 empty
headers took 29 s in `plan check`; 20,001 never finished)."""

from __future__ import annotations

from pathlib import Path, PurePath

import pytest

from qualify.build import includes
from qualify.plan.files import local_includes


def _headers(root: Path, n: int) -> Path:
    (root / "h").mkdir(parents=True)
    for i in range(n):
        (root / "h" / f"h{i}.h").write_text(f'#include "h{i + 1}.h"\n' if i + 1 < n else "")
    source = root / "k.cu"
    source.write_text("".join(f'#include "h/h{i}.h"\n' for i in range(0, n, 3)))
    return source


def _comparisons(monkeypatch, walk) -> int:
    count = 0
    eq = PurePath.__eq__

    def counting(self, other):
        nonlocal count
        count += 1
        return eq(self, other)

    monkeypatch.setattr(PurePath, "__eq__", counting)
    try:
        walk()
    finally:
        monkeypatch.setattr(PurePath, "__eq__", eq)
    return count


@pytest.mark.parametrize("which", ["plan files", "include scanner"])
def test_the_header_walks_compare_paths_linearly(tmp_path, monkeypatch, which):
    counts = []
    for n in (300, 1200):
        root = tmp_path / str(n)
        source = _headers(root, n)
        if which == "plan files":
            walk = lambda: local_includes(source, [], root, root / "plan.json", "arms.base.source")  # noqa: E731
        else:
            walk = lambda: includes.resolve_headers(source, source.read_bytes(), (root,), (root,), (), {})  # noqa: E731
        counts.append(_comparisons(monkeypatch, walk))
    # four times the headers: a linear walk compares about four times as often, a quadratic one sixteen
    assert counts[1] <= 6 * max(counts[0], 1), counts


def test_headers_reach_the_compile_worker_without_being_copied(tmp_path, monkeypatch):
    """The 512 MiB header cap once cost 3.2 GiB: every header base64-encoded into one JSON request,
    encoded again to bytes. Now the request is written from the headers as they are: the memory
    qualify allocates to send 64 MiB of headers stays a small fraction of them."""
    import subprocess
    import tracemalloc

    from qualify.build import nvrtc
    from qualify.build.includes import Headers

    blob = 16 << 20
    headers = {f"h{i}.h": (tmp_path / f"h{i}.h", bytes([65 + i]) * blob) for i in range(4)}
    sent = {}

    def worker(cmd, **kwargs):
        data = kwargs["stdin"].read() if kwargs.get("stdin") is not None else kwargs["input"]
        sent["bytes"] = len(data)
        del data
        return subprocess.CompletedProcess(cmd, 0, stdout=b'{"error": "not run"}', stderr=b"")

    monkeypatch.setattr(nvrtc, "_resolve", lambda spec, source: Headers(by_name=headers, allowed=(tmp_path,)))
    monkeypatch.setattr(nvrtc, "_supported", lambda spec: None)
    monkeypatch.setattr(nvrtc.subprocess, "run", worker)
    spec = nvrtc.KernelSpec(source=tmp_path / "k.cu", kernel="k", arch="sm_90")
    tracemalloc.start()
    try:
        with pytest.raises(nvrtc.ToolError, match="not run"):
            nvrtc._compile(spec, b"int x;", [b"--gpu-architecture=sm_90"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sent["bytes"] >= 4 * blob  # every header reached the worker's stdin
    # what the test's stand-in reads back is one copy (64 MiB); qualify itself adds almost nothing
    assert peak < 4 * blob + (8 << 20), f"{peak >> 20} MiB allocated to send {4 * blob >> 20} MiB"


def test_plan_check_shows_a_bounded_table_of_a_large_plan_and_checks_every_case(tmp_path, capsys):
    """Laying out a 1,000-case table took rich 15 s; the table shows SHOWN_CASES cases and says how
    many more were checked, and a fault in a case beyond them is still found."""
    from plans import make_repo, plan_copy
    from test_refused_inputs import run_cli

    from qualify.render.terminal import SHOWN_CASES

    plan = plan_copy()
    extra = 3 * SHOWN_CASES
    plan["workload"]["cases"] += [{"N": 5_000 + i} for i in range(extra)]
    path = make_repo(tmp_path / "ok", plan)
    code, out, err = run_cli(["plan", "check", path, "--no-compile"], capsys)
    shown = len(plan["workload"]["cases"])
    assert code == 0, err
    assert f"and {shown - SHOWN_CASES} more cases, each checked" in " ".join(out.split())
    assert "N=5000 " in out and f"N={5_000 + extra - 1} " not in out
    plan["workload"]["cases"][-1] = {"N": -1}  # the last case: never shown, still checked
    code, _, err = run_cli(["plan", "check", make_repo(tmp_path / "bad", plan), "--no-compile"], capsys)
    assert code == 2 and "N=-1" in err, err
