"""Kernel names demangled: the built-in demangler, c++filt when present, and short names."""

from __future__ import annotations

import shutil

import pytest

from qualify.run.demangle import BUILTIN, builtin_demangle, demangle_all, short_name


@pytest.mark.parametrize(
    "mangled, expected",
    [
        ("_Z4prepPKfPfi", "prep"),
        ("_ZN5flash6kernelILi128ELb1EEEvPK6__halfPS2_i", "flash::kernel<128, true>"),
        ("_Z19attention_gated_fwdILi64EEvPK13__nv_bfloat16S2_S2_iS2_PS0_iiifi", "attention_gated_fwd<64>"),
        ("_ZN12_GLOBAL__N_14prepEPf", "(anonymous namespace)::prep"),
        ("_Z3fwdILin2ELj7EEvv", "fwd<-2, 7u>"),
        ("attention_sigmoid_gate_kernel", None),  # extern "C": nothing to demangle
        ("_Z3fooILZ", None),  # cut short: left as launched
    ],
)
def test_builtin_demangler(mangled, expected):
    assert builtin_demangle(mangled) == expected


def test_unreadable_names_stay_as_launched():
    demangler, names = demangle_all(["_Z3fooILZ", "plain"], demangler=BUILTIN)
    assert demangler == BUILTIN and names == {"_Z3fooILZ": "_Z3fooILZ", "plain": "plain"}


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt not on PATH")
def test_cxxfilt_and_the_builtin_give_the_same_short_names():
    mangled = ["_Z4prepPKfPfi", "_ZN5flash6kernelILi128ELb1EEEvPK6__halfPS2_i", "plain_c_kernel"]
    assert demangle_all(mangled, "c++filt") == ("c++filt", demangle_all(mangled, BUILTIN)[1])


def test_short_name_drops_parameters_and_return_type():
    assert short_name("void flash<(Mode)1>(float const*, int)") == "flash<(Mode)1>"
    assert short_name("void ns::k<std::pair<int, int> >(int)") == "ns::k<std::pair<int, int> >"


def _nested(depth: int) -> str:
    """`k<A<A<...<int>...>>>(void)` with `depth` levels of A, mangled."""
    return "_Z1kI" + "1AI" * depth + "i" + "E" * depth + "Evv"


def test_a_deeply_nested_name_stays_as_launched_instead_of_exhausting_the_stack():
    """Issue 25 item 7: one level of recursion per template level ended `run` in RecursionError
    after timing, before the trial file was written. Past the depth bound the name stays mangled."""
    deep = _nested(250)
    assert builtin_demangle(deep) is None
    assert demangle_all([deep], BUILTIN) == (BUILTIN, {deep: deep})


def test_a_name_nested_within_the_bound_is_still_read():
    assert builtin_demangle(_nested(30)) == "k<" + "A<" * 30 + "int" + ">" * 31
