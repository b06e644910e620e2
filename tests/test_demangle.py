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
