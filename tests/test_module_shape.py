"""Every module of `qualify/` stays small enough to read in one sitting: at most 500 lines, except
those docs/architecture.md names with a reason (and only while they are over)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 500
BEGIN, END = "<!-- modules over 500 lines -->", "<!-- end -->"


def named_exceptions(text: str) -> dict[str, str]:
    """`- \\`path\\`: reason` lines between the markers of docs/architecture.md."""
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    found = {}
    for item in re.split(r"\n- ", "\n" + block.strip()):
        match = re.match(r"`(qualify/[\w/]+\.py)`: (.+)", item.strip(), re.S)
        if match:
            found[match.group(1)] = " ".join(match.group(2).split())
    return found


def line_counts(root: Path) -> dict[str, int]:
    return {
        p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted((root / "qualify").rglob("*.py"))
    }


def over_the_limit(counts: dict[str, int], exceptions: dict[str, str]) -> list[str]:
    return [f"{m}: {n} lines" for m, n in counts.items() if n > LIMIT and m not in exceptions]


def test_no_module_is_over_500_lines_unless_named_with_a_reason():
    exceptions = named_exceptions((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    counts = line_counts(ROOT)
    assert over_the_limit(counts, exceptions) == []
    for module, reason in exceptions.items():
        assert module in counts, f"{module} is named but does not exist"
        assert counts[module] > LIMIT, f"{module} is named but has {counts[module]} lines: remove it from the list"
        assert len(reason.split()) >= 5, f"{module}: the reason says too little: {reason!r}"


def test_a_module_over_the_limit_is_named_and_one_under_it_is_not_exempt():
    counts = {"qualify/a.py": LIMIT, "qualify/b.py": LIMIT + 1, "qualify/c.py": 900}
    assert over_the_limit(counts, {}) == ["qualify/b.py: 501 lines", "qualify/c.py: 900 lines"]
    assert over_the_limit(counts, {"qualify/c.py": "the one driver session"}) == ["qualify/b.py: 501 lines"]


def test_exceptions_are_read_only_between_the_markers():
    text = f"- `qualify/x.py`: outside\n{BEGIN}\n- `qualify/run/y.py`: a reason that\n  wraps\n{END}\n"
    assert named_exceptions(text) == {"qualify/run/y.py": "a reason that wraps"}
