"""NVRTC's compile cache: a hit in memory and on disk, a miss on any input change, damaged or
swapped entries rebuilt, an unwritable cache only costing time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_frozen_inputs import private_cache  # noqa: F401 - autouse: each test compiles into its own cache

from qualify.build import nvrtc
from qualify.build.nvrtc import KernelSpec, compile_kernel


@pytest.fixture
def cached_source(tmp_path):
    (tmp_path / "tune.h").write_text("#define TUNE 2\n")
    source = tmp_path / "k.cu"
    source.write_text('#include "tune.h"\nextern "C" __global__ void k(int* x) { x[0] = TUNE; }\n')
    return KernelSpec(source=source, kernel="k", arch="sm_90", root=tmp_path)


def _entries() -> list[Path]:
    return sorted((nvrtc.cache_dir() / "nvrtc").glob("*.json"))


def test_second_compile_hits_in_memory_and_on_disk(cached_source):
    first = compile_kernel(cached_source)
    assert not first.cached and len(_entries()) == 1
    assert compile_kernel(cached_source).cached  # memo
    nvrtc.clear_memo()
    again = compile_kernel(cached_source)  # disk, as a worker process would find it
    assert again.cached and again.cubin == first.cubin and again.lowered_name == first.lowered_name


@pytest.mark.parametrize("change", ["header", "source", "option", "define", "arch", "kernel"])
def test_any_input_change_misses(cached_source, change):
    from dataclasses import replace

    compile_kernel(cached_source)
    spec = cached_source
    if change == "header":
        (spec.source.parent / "tune.h").write_text("#define TUNE 3\n")
    elif change == "source":
        spec.source.write_text(spec.source.read_text() + "// edit\n")
    elif change == "option":
        spec = replace(spec, options=("--use_fast_math",))
    elif change == "define":
        spec = replace(spec, defines=(("EXTRA", "1"),))
    elif change == "arch":
        spec = replace(spec, arch="sm_89")
    else:
        spec.source.write_text(spec.source.read_text() + 'extern "C" __global__ void k2(int* x) { x[0] = 1; }\n')
        spec = replace(spec, kernel="k2")
    assert not compile_kernel(spec).cached


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"format": 1}', b"\xff\xfe"])
def test_a_damaged_entry_is_ignored_and_rebuilt(cached_source, damage):
    good = compile_kernel(cached_source)
    (entry,) = _entries()
    entry.write_bytes(damage)
    nvrtc.clear_memo()
    rebuilt = compile_kernel(cached_source)
    assert not rebuilt.cached and rebuilt.cubin == good.cubin
    nvrtc.clear_memo()
    assert compile_kernel(cached_source).cached  # the entry was written again, whole


def test_an_entry_whose_cubin_was_swapped_is_not_used(cached_source):
    import base64

    compile_kernel(cached_source)
    (entry,) = _entries()
    data = json.loads(entry.read_text())
    data["cubin"] = base64.b64encode(b"\x7fELF" + b"\0" * 60).decode()
    entry.write_text(json.dumps(data))
    nvrtc.clear_memo()
    assert not compile_kernel(cached_source).cached


def test_an_unwritable_cache_only_costs_time(cached_source, monkeypatch, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("QUALIFY_CACHE_DIR", str(blocker))
    assert compile_kernel(cached_source).cubin[:4] == b"\x7fELF"
