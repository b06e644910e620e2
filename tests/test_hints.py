"""NVRTC hints for host C macros a ported kernel uses (`INFINITY`, `FLT_MAX`): named, with the
CCCL spelling that compiles under NVRTC."""

from __future__ import annotations

from pathlib import Path

import pytest

from qualify.build import hints
from qualify.build.nvrtc import KernelSpec, cccl_include_dir, compile_kernel
from qualify.errors import BuildError

LOG = (
    'k.cu(2): error: identifier "INFINITY" is undefined\n'
    'k.cu(3): error: identifier "my_thing" is undefined\n'
    'k.cu(4): error: identifier "FLT_MAX" is undefined\n'
    'k.cu(5): error: identifier "INFINITY" is undefined\n'
)


def test_each_host_macro_is_named_once_with_its_fix():
    hint = hints.host_macro(LOG)
    assert hint.startswith("; INFINITY, FLT_MAX are host C macros NVRTC does not define")
    assert "for INFINITY write cuda::std::numeric_limits<float>::infinity()" in hint
    assert "for FLT_MAX write cuda::std::numeric_limits<float>::max()" in hint
    assert "my_thing" not in hint
    assert hint.count("INFINITY") == 2  # listed once, then its fix


def test_an_unknown_identifier_gets_no_hint():
    assert hints.host_macro('k.cu(3): error: identifier "my_thing" is undefined') == ""
    assert hints.for_log('k.cu(3): error: identifier "my_thing" is undefined', None, None) == ""


def test_a_missing_header_hint_comes_before_a_macro_hint(tmp_path):
    log = 'k.cu(1): catastrophic error: cannot open source file "float.h"\n' + LOG
    spec = KernelSpec(source=tmp_path / "k.cu", kernel="k", arch="sm_90", root=tmp_path)
    assert "host C++ headers" in hints.for_log(log, spec, cccl_include_dir())


def _compile(folder: Path, body: str):
    source = folder / "k.cu"
    source.write_text(body)
    return compile_kernel(KernelSpec(source=source, kernel="k", arch="sm_90", root=folder))


def test_nvrtc_refuses_infinity_and_the_hint_names_it(tmp_path):
    with pytest.raises(BuildError) as err:
        _compile(tmp_path, "__global__ void k(float* x) { x[threadIdx.x] = -INFINITY + FLT_MAX; }\n")
    assert "INFINITY, FLT_MAX are host C macros" in err.value.message


def test_the_suggested_spelling_compiles_under_nvrtc(tmp_path):
    """The fix the hint gives must itself compile, or the hint sends the user into a second error."""
    body = (
        "#include <cuda/std/limits>\n"
        "__global__ void k(float* x, double* y) {\n"
        "  x[threadIdx.x] = cuda::std::numeric_limits<float>::infinity() + cuda::std::numeric_limits<float>::max()\n"
        "    + cuda::std::numeric_limits<float>::quiet_NaN() + cuda::std::numeric_limits<float>::epsilon()\n"
        "    + cuda::std::numeric_limits<int>::max() + cuda::std::numeric_limits<unsigned>::max();\n"
        "  y[threadIdx.x] = cuda::std::numeric_limits<double>::infinity() + cuda::std::numeric_limits<double>::max();\n"
        "}\n"
    )
    assert _compile(tmp_path, body).cubin
