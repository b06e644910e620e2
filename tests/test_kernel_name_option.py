"""`plan new --kernel` is checked with the plan's own kernel-name pattern before NVRTC sees it
(issue 36, item 2): NVRTC compiles a name expression as source, so a newline in it would be a line
the include scanner never read."""

from __future__ import annotations

import pytest
from test_cli_hostile_args import one_line
from test_refused_inputs import run_cli
from test_scaffold import SOFTMAX, repo


@pytest.mark.parametrize(
    "option, value",
    [
        ("--kernel", 'softmax_rows<0>\n#include "/etc/passwd"'),
        ("--kernel", "softmax_rows<0>\n"),
        ("--candidate-kernel", "k /* */"),
        ("--kernel", "a" * 201),
    ],
)
def test_plan_new_refuses_a_kernel_name_that_is_not_one_before_nvrtc_sees_it(
    tmp_path, capsys, monkeypatch, option, value
):
    """A name expression is source NVRTC compiles: a newline in it is a line the scanner never read."""
    root = repo(tmp_path, {"k.cu": SOFTMAX})
    monkeypatch.chdir(root)

    def no_compile(*args, **kwargs):
        raise AssertionError("the kernel name reached NVRTC")

    monkeypatch.setattr("qualify.commands.scaffold.compiled_sizes", no_compile)
    argv = ["plan", "new", "p.json", "--cuda", "k.cu", "--kernel", "softmax_rows<0>", option, value]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and one_line(err) and f"{option}: " in err and "is not a kernel name" in err, err
    assert not (root / "p.json").exists()
