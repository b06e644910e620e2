"""Terminal output: whole numbers in a CI log, labels as plain text, the verdict in words first."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest
from plans import make_repo, plan_copy
from test_headline import SLOWER, make_plan, results, trial

from qualify.build.arms import FitRow
from qualify.build.nvrtc import CompiledKernel
from qualify.build.resources import KernelResources
from qualify.commands.check import check_plan
from qualify.commands.pipeline import RunOutcome
from qualify.render.terminal import LOG_WIDTH, console, label, plan_check, run_summary

HOSTILE = "[bold red]QUALIFIED[/] \x1b[2J\x1b[32mgreen\nfrozen  yes (matches plan.lock)\u202eevil"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def printed(renderable, stream=None) -> str:
    stream = stream or io.StringIO()
    console(file=stream).print(renderable)
    return stream.getvalue()


@pytest.fixture
def checked(tmp_path):
    """A plan check with compiled resources: large numbers in every column (no NVRTC needed)."""
    check = check_plan(make_repo(tmp_path), compile=False)
    resources = KernelResources(
        registers=255,
        stack_bytes=123_456,
        spill_store_bytes=1_048_576,
        spill_load_bytes=2_097_152,
        static_shared_bytes=101_376_000,
        barriers=1,
    )
    compiled, fits = {}, []
    for side in ("base", "candidate"):
        compiled[(side, "sm_90")] = CompiledKernel(spec=None, lowered_name="k", cubin=b"", log="", resources=resources)
        fits += [FitRow(side, "sm_90", cid, 98_765_432, 199_999_999, 232_448_000) for cid in ("N=1024", "N=4096")]
    return dataclasses.replace(check, compiled=compiled, fits=fits, nvrtc="13.0")


def test_a_pipe_gets_every_number_whole_and_no_colour(checked):
    out = printed(plan_check(checked))
    assert "…" not in out and "\x1b" not in out
    for number in ("101,376,000", "98,765,432", "232,448,000", "1048576/2097152", "123456"):
        assert number in out
    # one table row per line: nothing wrapped at 80 columns
    row = next(line for line in out.splitlines() if "base (axpy<1>)" in line)
    assert len(row) > 80 and "101,376,000" in row and "232,448,000" in row
    assert console(file=io.StringIO()).width == LOG_WIDTH


def test_a_narrow_terminal_folds_numbers_instead_of_cutting_them(checked):
    stream = Tty()
    con = console(file=stream)
    con.width = 60  # a narrow terminal window
    con.print(plan_check(checked))
    out = stream.getvalue()
    assert "…" not in out
    # every digit of each number survives, folded over lines inside its column
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    columns: dict[int, str] = {}
    for line in plain.splitlines():
        for j, cell in enumerate(line.split("│")[1:-1]):
            columns[j] = columns.get(j, "") + cell.strip()
    assert any("101,376,000" in col for col in columns.values())
    assert any("232,448,000" in col for col in columns.values())
    assert any("base(axpy<1>)" in col for col in columns.values())  # folded at its space


def test_hostile_labels_print_as_text(tmp_path):
    import dataclasses

    from qualify.errors import PlanError

    data = plan_copy()
    data["revisions"] = {"base": HOSTILE, "candidate": "[link=http://x]c[/link]"}
    # the plan loader refuses escape characters in a label (issue 15) ...
    with pytest.raises(PlanError, match="plain text"):
        check_plan(make_repo(tmp_path / "refused", data), compile=False)
    # ... and the terminal prints one as text anyway, should it come from elsewhere (a record)
    data["revisions"] = {"base": "b", "candidate": "c"}
    check = check_plan(make_repo(tmp_path / "ok", data), compile=False)
    plan = check.loaded.plan.model_copy(
        update={
            "revisions": check.loaded.plan.revisions.model_copy(
                update={"base": HOSTILE, "candidate": "[link=http://x]c[/link]"}
            )
        }
    )
    check = dataclasses.replace(check, loaded=dataclasses.replace(check.loaded, plan=plan))
    stream = Tty()  # on a terminal rich would act on markup and escapes
    console(file=stream).print(plan_check(check))
    out = stream.getvalue()
    assert "[bold red]QUALIFIED[/]" in out and "[link=http://x]c[/link]" in out
    assert "\\x1b[2J" in out and "\x1b[2J" not in out and "\u202e" not in out and "\\u202e" in out
    # the forged "frozen yes" stays on the revision's line; the real one says no
    frozen = [line for line in out.splitlines() if re.sub(r"\x1b\[[0-9;]*m", "", line).startswith("frozen")]
    assert len(frozen) == 1 and "no (run `qualify plan freeze`)" in frozen[0]


def test_run_summary_opens_with_the_verdict_in_words_and_grouped_reasons():
    plan = make_plan()
    res = results(plan, [trial(1, SLOWER[0]), trial(2, SLOWER[1])])
    out = printed(run_summary(RunOutcome(trials=res.trials, results=res), "records/tiny", plan))
    lines = out.splitlines()
    assert lines[0] == "verdict: not qualified"
    assert lines[1].startswith("The candidate is slower at all 6 cases, by 11.0 % to 23.4 %")
    assert lines[4] == "why, case by case (base → candidate):"
    causes = lines[5 : lines.index("reasons (changes in time per launch: negative is faster):")]
    assert len(causes) == 6 and all(line.startswith("  - N=") for line in causes)
    at = lines.index("reasons (changes in time per launch: negative is faster):")
    assert lines[at + 1].startswith(
        "  - gate faster_from_2048 missed at N=2048, N=4096, N=8192, all its cases "
        "(change <= -5%; 6 of 6 judgements): slower by"
    )
    assert lines[at + 3].rstrip() == "record records/tiny"
    assert not any("speed-up" in line for line in lines)


def test_run_summary_escapes_labels_from_the_record():
    plan = make_plan(gates=[])
    t = trial(1, SLOWER[0])
    t = t.model_copy(
        update={
            "provenance": t.provenance.model_copy(
                update={"device": t.provenance.device.model_copy(update={"name": HOSTILE})}
            )
        }
    )
    res = results(plan, [t])
    stream = Tty()
    console(file=stream).print(run_summary(RunOutcome(trials=res.trials, results=res), "rec[/]", plan))
    out = stream.getvalue()
    assert "\x1b[2J" not in out and "\\x1b[2J" in out
    assert "[bold red]QUALIFIED[/]" in out and "rec[/]" in out


def test_label_is_plain_text():
    text = label("a\nb[/]\x07")
    assert text.plain == "a\\nb[/]\\x07" and not text.spans
