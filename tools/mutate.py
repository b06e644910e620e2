#!/usr/bin/env python3
"""Mutation testing for qualify's core: would the tests notice if this code were wrong?

Each mutant is one small, deliberate bug (an operator swapped, a comparison moved by one, a
constant changed, a statement or a branch deleted). The tool copies the repository to a temporary
folder, writes one mutant at a time into the copy, runs the tests that cover the module there
with `-x` and a timeout, and restores the original. A failing test kills the mutant; a green run
means the suite cannot tell the bug from the real code. See docs/mutation.md.

    python tools/mutate.py qualify/expr.py                   # tests from tools/mutation.json
    python tools/mutate.py --all-targets --out benchmarks/mutation/run
    python tools/mutate.py --list qualify/evaluate/fidelity.py    # the mutants, nothing run

The mutations are made on the source text, at the positions `ast` gives, so the module keeps its
comments and layout and a surviving mutant's diff names the real line.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPORT_FORMAT = "qualify-mutation/1"
# How a report's score treats timeouts: reports written since issue 25 say "set aside" (never a
# kill); one without the key scored a timeout as a kill and is rendered with the rule it used.
TIMEOUTS = "set aside"
CONFIG = Path(__file__).with_name("mutation.json")
NO_MUTATE = "pragma: no mutate"
# Outside git, these are left out of the scratch copy: slow to copy (.venv), or wrong to import
# (a stale __pycache__ could be imported instead of the mutant).
_SKIP_COPY = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache"}
_BINOP_SWAP = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
    ast.LShift: ("<<", ">>"),
    ast.RShift: (">>", "<<"),
    ast.BitAnd: ("&", "|"),
    ast.BitOr: ("|", "&"),
    ast.BitXor: ("^", "|"),
}
_CMP_SWAP = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
}
# The ordering comparisons, reversed: `a < b` → `a > b` reads as `b < a`, operands swapped.
_CMP_REVERSE = {ast.Lt: ">", ast.LtE: ">=", ast.Gt: "<", ast.GtE: "<="}
# Calls of a statistic or a reduction, each replaced by its sibling: the same shape of answer, the
# wrong summary. Matched on the called name alone (`np.median`, `statistics.median`, `x.min()`).
_CALL_SIBLING = {
    "median": "mean",
    "mean": "median",
    "nanmedian": "nanmean",
    "nanmean": "nanmedian",
    "min": "max",
    "max": "min",
    "amin": "amax",
    "amax": "amin",
    "nanmin": "nanmax",
    "nanmax": "nanmin",
    "minimum": "maximum",
    "maximum": "minimum",
    "argmin": "argmax",
    "argmax": "argmin",
    "any": "all",
    "all": "any",
    "floor": "ceil",
    "ceil": "floor",
}
# Expressions whose value is a truth value: a returned one is negated rather than replaced by None.
_BOOLEAN = (ast.Compare, ast.BoolOp)


class ToolError(Exception):
    """A problem with the command line, the configuration or the unmutated test run."""


class _Parser(argparse.ArgumentParser):
    """argparse, its errors one line like the tool's own (exit 2)."""

    def error(self, message: str):  # type: ignore[override]
        print(f"mutate: error: {message}", file=sys.stderr)
        raise SystemExit(2)


@dataclass(frozen=True)
class Mutant:
    """One text replacement in a module: source[start:end] becomes `replacement`."""

    module: str
    operator: str  # binop, compare, reverse, boolop, unary, constant, condition, delete, args, call, return, membership
    description: str
    line: int
    start: int
    end: int
    replacement: str

    def apply(self, source: str) -> str:
        return source[: self.start] + self.replacement + source[self.end :]

    def key(self, source: str) -> dict[str, str]:
        """What identifies the mutant across edits elsewhere in the file (line numbers move)."""
        before = source.splitlines()[self.line - 1].strip()
        after = self.apply(source).splitlines()[self.line - 1].strip()
        return {"module": self.module, "description": self.description, "line": before, "mutated": after}

    def diff(self, source: str) -> str:
        lines = difflib.unified_diff(
            source.splitlines(keepends=True),
            self.apply(source).splitlines(keepends=True),
            fromfile=f"a/{self.module}",
            tofile=f"b/{self.module}",
            n=1,
        )
        return "".join(lines)


class _Positions:
    """ast gives (line, UTF-8 byte column); the mutator works on str offsets."""

    def __init__(self, source: str):
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),
        )  # type: ignore[attr-defined]


def _token_span(source: str, start: int, end: int, words: str) -> tuple[int, int] | None:
    """Find the operator `words` ('<=', 'not in') in source[start:end], the text between two operands.

    Between two operands there can only be blanks, brackets, comments, line continuations and the
    operator itself, so the operator is what remains once those are set aside.
    """
    gap = source[start:end]
    significant: list[int] = []
    in_comment = False
    for i, ch in enumerate(gap):
        if ch == "#":
            in_comment = True
        elif ch == "\n":
            in_comment = False
        elif not in_comment and not ch.isspace() and ch not in "()\\":
            significant.append(i)
    if "".join(gap[i] for i in significant) != words.replace(" ", ""):
        return None
    return start + significant[0], start + significant[-1] + 1


def _skipped_nodes(tree: ast.AST) -> set[int]:
    """Ids of nodes never mutated: docstrings, annotations and f-string parts."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                mark(body[0])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node.returns)
        if isinstance(node, ast.arg):
            mark(node.annotation)
        if isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        if isinstance(node, ast.JoinedStr):  # f-string pieces have unreliable positions in 3.10/3.11
            mark(node)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mark(node)
    return skip


def _inside_function(tree: ast.AST) -> set[int]:
    """Ids of statements inside a function body: deleting a module-level statement only breaks imports."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in ast.walk(node):
                if stmt is not node and isinstance(stmt, ast.stmt):
                    inside.add(id(stmt))
    return inside


def _call_mutants(source: str, pos: _Positions, node: ast.Call):
    """(operator, description, start, end, text): two neighbouring positional arguments swapped,
    and a statistic or reduction replaced by its sibling."""
    args = node.args
    for a, b in zip(args, args[1:]):
        if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
            continue
        (a0, a1), (b0, b1) = pos.span(a), pos.span(b)
        text = source[b0:b1] + source[a1:b0] + source[a0:a1]  # the separator between them stays
        yield "args", f"arguments {args.index(a) + 1} and {args.index(a) + 2} swapped", a0, b1, text
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    sibling = _CALL_SIBLING.get(name or "")
    if sibling:
        end = pos.span(func)[1]
        if source[end - len(name) : end] == name:  # type: ignore[arg-type]
            yield "call", f"`{name}()` → `{sibling}()`", end - len(name), end, sibling  # type: ignore[arg-type]


def _return_mutants(source: str, pos: _Positions, node: ast.Return):
    """A returned truth value negated; any other returned value replaced by None."""
    value = node.value
    if value is None or (isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, bool))):
        return  # nothing to replace, or a constant the constant operator already flips
    start, end = pos.span(value)
    if isinstance(value, _BOOLEAN) or (isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
        yield "return", "returned truth value negated", start, end, f"not ({source[start:end]})"
    else:
        yield "return", "returned value → `None`", start, end, "None"


def _membership_mutants(source: str, pos: _Positions, node: ast.Compare):
    """Each element of a literal tuple, list or set tested with `in`/`not in` dropped in turn:
    `x in ("a", "b")` → `x in ("a",)`. (Blanking a string element, → `("a", "")`, is the constant
    operator's mutant.)"""
    for op, container in zip(node.ops, node.comparators):
        if not isinstance(op, (ast.In, ast.NotIn)) or not isinstance(container, (ast.Tuple, ast.List, ast.Set)):
            continue
        elements = container.elts
        if len(elements) < 2 or any(isinstance(e, ast.Starred) for e in elements):
            continue
        start, end = pos.span(container)
        for i, dropped in enumerate(elements):
            kept = [source[slice(*pos.span(e))] for j, e in enumerate(elements) if j != i]
            inner = ", ".join(kept) + ("," if len(kept) == 1 and isinstance(container, ast.Tuple) else "")
            brackets = {ast.Tuple: "()", ast.List: "[]", ast.Set: "{}"}[type(container)]
            yield (
                "membership",
                f"element {i + 1} of {len(elements)} dropped",
                start,
                end,
                brackets[0] + inner + brackets[1],
            )


def find_mutants(source: str, module: str) -> list[Mutant]:
    """Every mutant of a module, in source order; each one parses and changes the module's AST."""
    tree = ast.parse(source)
    pos = _Positions(source)
    skip = _skipped_nodes(tree)
    in_function = _inside_function(tree)
    lines = source.splitlines()
    original_dump = ast.dump(tree)
    found: list[Mutant] = []

    def add(operator: str, description: str, node: ast.AST, start: int, end: int, text: str) -> None:
        found.append(Mutant(module, operator, description, node.lineno, start, end, text))  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "lineno"):
            continue
        if NO_MUTATE in lines[node.lineno - 1]:  # type: ignore[attr-defined]
            continue
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            swap = _BINOP_SWAP.get(type(node.op))
            if swap:
                left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
                token = swap[0] + ("=" if isinstance(node, ast.AugAssign) else "")
                span = _token_span(source, pos.span(left)[1], pos.span(right)[0], token)
                if span:
                    new = swap[1] + ("=" if isinstance(node, ast.AugAssign) else "")
                    add("binop", f"`{token}` → `{new}`", node, *span, new)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                old, new = _CMP_SWAP[type(op)]
                span = _token_span(source, pos.span(operands[i])[1], pos.span(operands[i + 1])[0], old)
                if span:
                    add("compare", f"`{old}` → `{new}`", node, *span, new)
                    if type(op) in _CMP_REVERSE:
                        add("reverse", f"`{old}` → `{_CMP_REVERSE[type(op)]}`", node, *span, _CMP_REVERSE[type(op)])
            for mutant in _membership_mutants(source, pos, node):
                add(*mutant[:2], node, *mutant[2:])
        elif isinstance(node, ast.Call):
            for mutant in _call_mutants(source, pos, node):
                add(*mutant[:2], node, *mutant[2:])
        elif isinstance(node, ast.BoolOp):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            spans = [
                _token_span(source, pos.span(a)[1], pos.span(b)[0], old) for a, b in zip(node.values, node.values[1:])
            ]
            if all(spans):
                # one mutant flips every keyword of the chain: `a and b and c` → `a or b or c`
                first, last = spans[0], spans[-1]  # type: ignore[index]
                text = source[first[0] : last[1]]
                for s in reversed(spans):  # type: ignore[union-attr]
                    text = text[: s[0] - first[0]] + new + text[s[1] - first[0] :]
                add("boolop", f"`{old}` → `{new}`", node, first[0], last[1], text)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.Invert)):
            symbol = {ast.Not: "not", ast.USub: "-", ast.Invert: "~"}[type(node.op)]
            start, end = pos.span(node)
            inner = source[slice(*pos.span(node.operand))]
            add("unary", f"`{symbol}` removed", node, start, end, f"({inner})")
        elif isinstance(node, ast.Constant):
            value = node.value
            start, end = pos.span(node)
            if isinstance(value, bool):
                add("constant", f"`{value}` → `{not value}`", node, start, end, str(not value))
            elif isinstance(value, int):
                add("constant", f"`{source[start:end]}` → `{value + 1}`", node, start, end, str(value + 1))
            elif isinstance(value, float):
                add("constant", f"`{source[start:end]}` → `{value + 1.0!r}`", node, start, end, repr(value + 1.0))
            elif isinstance(value, str):
                new = '""' if value else '"mutant"'
                add("constant", f"string → {new}", node, start, end, new)
        if isinstance(node, (ast.If, ast.While)) and not _is_elif(source, pos, node):
            start, end = pos.span(node.test)
            add("condition", "condition → `False`", node, start, end, "False")
            if isinstance(node, ast.If):
                add("condition", "condition → `True`", node, start, end, "True")
        elif isinstance(node, ast.If):  # an elif: its test, not the whole chain
            start, end = pos.span(node.test)
            add("condition", "elif condition → `False`", node.test, start, end, "False")
            add("condition", "elif condition → `True`", node.test, start, end, "True")
        if isinstance(node, ast.IfExp):
            start, end = pos.span(node)
            for label, branch in (("if-branch", node.body), ("else-branch", node.orelse)):
                text = source[slice(*pos.span(branch))]
                add("condition", f"conditional expression → its {label}", node, start, end, f"({text})")
        if isinstance(node, ast.Return):
            for mutant in _return_mutants(source, pos, node):
                add(*mutant[:2], node, *mutant[2:])
        if (
            isinstance(node, ast.stmt)
            and id(node) in in_function
            and not isinstance(node, ast.Pass)
            and not _is_elif(source, pos, node)
        ):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Global, ast.Nonlocal)):
                start, end = pos.span(node)
                add("delete", f"`{type(node).__name__}` statement deleted", node, start, end, "pass")

    valid = []
    seen: set[str] = set()
    for m in sorted(found, key=lambda m: (m.start, m.end, m.description)):
        text = m.apply(source)
        try:
            mutated = ast.parse(text)
        except SyntaxError:
            continue  # a position the mutator got wrong: never reported as a mutant
        if ast.dump(mutated) != original_dump and text not in seen:  # two operators, one mutant: counted once
            seen.add(text)
            valid.append(m)
    return valid


def sample_mutants(every: list[Mutant], sample: int, seed: int, module: str) -> list[Mutant]:
    """`sample` of the mutants (all when 0), the same ones for the same seed and source, in source order."""
    rng = random.Random(f"{seed}:{module}")
    chosen = rng.sample(every, min(sample, len(every))) if sample > 0 else every
    return sorted(chosen, key=lambda m: (m.start, m.end, m.description))


def _is_elif(source: str, pos: _Positions, node: ast.AST) -> bool:
    return isinstance(node, ast.If) and source.startswith("elif", pos.span(node)[0])


# --- running -------------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: str  # killed, timeout, survived, error
    seconds: float
    killed_by: str | None = None
    diff: str = ""
    key: dict[str, str] = field(default_factory=dict)
    line: int = 0
    operator: str = ""
    description: str = ""
    equivalent: str | None = None  # the reason, when the equivalence list names this survivor


def _copy_repository(root: Path, dest: Path) -> None:
    """Copy what the tests can see: in a git checkout, every file git does not ignore.

    A missing file is worse than a slow copy: a package left out of the copy (say qualify/build,
    whose name .gitignore also uses for build output at the root) would be imported from the
    installed qualify instead, and the tests would run against a mixture of two versions.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True
    )
    if listed.returncode != 0:  # not a git checkout (an exported tree, a test's project)
        shutil.copytree(
            root, dest, ignore=lambda d, names: [n for n in names if n in _SKIP_COPY or n.endswith(".egg-info")]
        )
        return
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = root / rel
        if src.is_file():  # a deleted but still tracked file is listed too
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _environment(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    # No bytecode cache: a mutant of the same size written within the same second as the original
    # would otherwise be shadowed by the original's .pyc (its check is mtime in seconds + size).
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _pytest(copy: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    """Run the tests in the copy; (result, seconds, first failing test). result: pass, fail, timeout, error."""
    shutil.rmtree(copy / ".hypothesis", ignore_errors=True)  # no examples carried over between mutants
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE", *tests]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=copy,
        env=_environment(copy),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole session: tests may have spawned workers
        proc.communicate()
        return "timeout", time.monotonic() - start, ""
    seconds = time.monotonic() - start
    failing = next(
        (ln.split(" - ")[0].split(" ", 1)[1] for ln in out.splitlines() if ln.startswith(("FAILED ", "ERROR "))), ""
    )
    # pytest: 0 all passed, 1 a test failed, 2 interrupted (a collection error under -x: the
    # mutant broke an import, which the suite did notice); 3-5 are pytest's own trouble.
    result = {0: "pass", 1: "fail", 2: "fail"}.get(proc.returncode, "error")
    return result, seconds, (failing or out[-2000:]) if result != "pass" else ""


def _check_import(copy: Path, module: str) -> None:
    name = module.removesuffix(".py").replace("/", ".")
    code = f"import importlib; print(importlib.import_module({name!r}).__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=_environment(copy), capture_output=True, text=True)
    if out.returncode != 0 or not Path(out.stdout.strip()).resolve().is_relative_to(copy.resolve()):
        raise ToolError(
            f"{module}: importing it from the scratch copy gives {out.stdout.strip() or out.stderr.strip()!r}"
        )


def _equivalence(config: dict, key: dict[str, str]) -> str | None:
    for entry in config.get("equivalents", []):
        if all(entry.get(k) == v for k, v in key.items()):
            return entry["reason"]
    return None


def mutate_module(
    root: Path,
    copy: Path,
    module: str,
    tests: list[str],
    *,
    sample: int,
    seed: int,
    timeout: float | None,
    config: dict,
    log=print,
    only: list[dict] | None = None,
) -> dict:
    """Run a sample of one module's mutants against `tests`; the module's section of the report.
    `only`: run just the mutants with these keys (the survivors of an earlier report) instead."""
    for t in tests:
        if not (root / t.split("::")[0]).exists():
            raise ToolError(f"{module}: test file {t} does not exist")
    target = copy / module
    original = target.read_text(encoding="utf-8")
    every = find_mutants(original, module)
    if only is None:
        chosen = sample_mutants(every, sample, seed, module)
    else:
        chosen = [m for m in every if m.key(original) in only]
    _check_import(copy, module)
    result, baseline, failing = _pytest(copy, tests, timeout=max(timeout or 0, 600))
    if result != "pass":
        raise ToolError(f"{module}: the tests fail without any mutant ({failing.strip()[:300]})")
    if timeout is not None and timeout < baseline:
        # every mutant would time out, and a timeout says nothing about the tests
        raise ToolError(
            f"{module}: --timeout {timeout:g} s is shorter than the clean run of its tests ({baseline:.1f} s)"
        )
    # a mutant that makes the tests three times slower than the clean run has most likely made
    # them loop; an explicit --timeout is taken as given
    limit = timeout if timeout else 3 * baseline + 10
    outcomes: list[Outcome] = []
    for i, m in enumerate(chosen, 1):
        key = m.key(original)
        target.write_text(m.apply(original), encoding="utf-8")
        try:
            result, seconds, failing = _pytest(copy, tests, limit)
        finally:
            target.write_text(original, encoding="utf-8")
        status = {"pass": "survived", "fail": "killed", "timeout": "timeout", "error": "error"}[result]
        o = Outcome(
            status,
            round(seconds, 2),
            failing if status == "killed" else None,
            m.diff(original),
            key,
            m.line,
            m.operator,
            m.description,
        )
        if status == "survived":
            o.equivalent = _equivalence(config, key)
        outcomes.append(o)
        log(
            f"  [{i}/{len(chosen)}] {module}:{m.line} {m.description}: {status}"
            + (" (listed as equivalent)" if o.equivalent else "")
        )
    return summarize(module, tests, len(every), baseline, outcomes)


def summarize(module: str, tests: list[str], total: int, baseline: float, outcomes: list[Outcome]) -> dict:
    """Counts and the score. Only a failing test kills a mutant: a timeout is counted apart and set
    aside with equivalent survivors and errors (a limit too short, or a mutant that loops, cannot be
    told apart), so a run whose mutants all time out has no score and fails any --fail-under."""
    count = {s: sum(o.status == s for o in outcomes) for s in ("killed", "timeout", "survived", "error")}
    equivalent = sum(o.equivalent is not None for o in outcomes)
    detected = count["killed"]
    scored = len(outcomes) - equivalent - count["error"] - count["timeout"]
    return {
        "module": module,
        "tests": tests,
        "mutants_total": total,
        "sampled": len(outcomes),
        **count,
        "equivalent": equivalent,
        "score": round(100 * detected / scored, 1) if scored else None,
        "raw_score": round(100 * detected / len(outcomes), 1) if outcomes else None,
        "baseline_seconds": round(baseline, 2),
        "mutants": [asdict(o) for o in outcomes],
    }


# --- reports -------------------------------------------------------------------------------------


def format_markdown(report: dict) -> list[str]:
    lines = [
        "# Mutation report",
        "",
        f"Seed {report['seed']}, up to {report['sample']} mutants per module, code: {report['commit']}. "
        + (
            "Score = killed / (sampled − equivalent − errors − timeouts)."
            if report.get("timeouts") == TIMEOUTS
            else "Score = (killed + timeout) / (sampled − equivalent − errors)."
        ),
        "",
        "| module | mutants | sampled | killed | timeout | survived | equivalent | errors | score | raw |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in report["modules"]:
        lines.append(
            f"| `{m['module']}` | {m['mutants_total']} | {m['sampled']} | {m['killed']} | {m['timeout']} | "
            f"{m['survived']} | {m['equivalent']} | {m['error']} | {_pct(m['score'])} | {_pct(m['raw_score'])} |"
        )
    for m in report["modules"]:
        survivors = [o for o in m["mutants"] if o["status"] == "survived" and not o["equivalent"]]
        equivalents = [o for o in m["mutants"] if o["equivalent"]]
        errors = [o for o in m["mutants"] if o["status"] == "error"]
        lines += ["", f"## `{m['module']}`", "", "Tests: " + ", ".join(f"`{t}`" for t in m["tests"]), ""]
        if not survivors:
            lines.append("No surviving mutant outside the equivalence list.")
        for o in survivors:
            lines += [
                f"### survived: line {o['line']}, {o['description']}",
                "",
                "```diff",
                o["diff"].rstrip(),
                "```",
                "",
            ]
        for o in equivalents:
            lines.append(f"- equivalent, line {o['line']} ({o['description']}): {o['equivalent']}")
        for o in errors:
            lines.append(f"- error (pytest's own failure), line {o['line']} ({o['description']})")
    return lines


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} %"


def _commit(root: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    return (out.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def load_config(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"targets": {}, "equivalents": []}
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ToolError(f"{path}: needs a JSON object with 'targets' and 'equivalents'")
    if not isinstance(data.get("targets"), dict) or not isinstance(data.get("equivalents", []), list):
        raise ToolError(f"{path}: needs 'targets' (module → test files) and 'equivalents' (a list)")
    core = data.get("core", [])
    if not isinstance(core, list) or not all(isinstance(m, str) and m in data["targets"] for m in core):
        raise ToolError(f"{path}: 'core' lists modules, each with its tests in 'targets'")
    for entry in data.get("equivalents", []):
        if not isinstance(entry, dict):
            raise ToolError(f"{path}: equivalents: an entry is not an object")
        missing = {"module", "description", "line", "mutated", "reason"} - set(entry)
        if missing:
            raise ToolError(f"{path}: equivalents: an entry lacks {', '.join(sorted(missing))}")
    return data


def rotation(core: list[str], count: int, seed: int) -> list[str]:
    """`count` core modules for this seed: a window of the sorted list starting at seed mod its
    length (wrapping round), so every module is as likely as any other to be drawn and the windows
    of successive start points cover the whole list. Fewer core modules than `count`: all of them."""
    ordered = sorted(core)
    if not ordered:
        raise ToolError("--rotate: the configuration names no 'core' modules")
    start = seed % len(ordered)
    return [ordered[(start + i) % len(ordered)] for i in range(min(count, len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="tools/mutate.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="repository-relative module paths, e.g. qualify/expr.py")
    parser.add_argument("--all-targets", action="store_true", help="every module in the configuration")
    parser.add_argument(
        "--rotate",
        type=int,
        metavar="N",
        help="N of the core modules (the configuration's 'core'), chosen from the seed: successive "
        "seeds bring every core module in turn (CI: a fresh seed per commit)",
    )
    parser.add_argument("--tests", nargs="+", help="test files to run (default: the configuration's)")
    parser.add_argument("--sample", type=int, default=40, help="mutants per module; 0 for all (default 40)")
    parser.add_argument(
        "--seed",
        default="0",
        help="an integer, or 'git' for a fresh sample per commit (derived from HEAD; "
        "outside a checkout, from the clock); printed first so a run can be repeated",
    )
    parser.add_argument("--timeout", type=float, help="seconds per mutant (default: 3× the clean run + 10)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--out", type=Path, help="folder for report.json and report.md")
    parser.add_argument("--list", action="store_true", help="list the sampled mutants and run nothing")
    parser.add_argument("--fail-under", type=float, help="exit 1 when a module's score is below this")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="REPORT",
        help="combine report.json files of earlier runs into one report (with --out)",
    )
    parser.add_argument("--label", help="what was mutated, e.g. 'before: commit abc1234' (default: the commit)")
    parser.add_argument(
        "--recheck",
        type=Path,
        metavar="REPORT",
        help="run again only the survivors of an earlier report.json (after new tests), "
        "and write that report with their new outcomes (with --out)",
    )
    args = parser.parse_args(argv)
    try:
        check_arguments(args)
        return _main(args)
    except ToolError as exc:
        print(f"mutate: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file the tool reads or writes: named, one line
        print(f"mutate: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2


MAX_MODULE_BYTES = 16 << 20  # far above any module of qualify's; a larger "module" is not one


def _check_module(path: Path, module: str) -> None:
    """A module to mutate is UTF-8 Python that parses: anything else is one line, before any run."""
    if path.stat().st_size > MAX_MODULE_BYTES:
        raise ToolError(f"{module}: {path.stat().st_size} bytes, not a Python module of this repository")
    try:
        ast.parse(path.read_bytes().decode("utf-8"), filename=module)
    except UnicodeDecodeError as exc:
        raise ToolError(f"{module}: not UTF-8 text (byte {exc.start}); give a Python module") from None
    except (SyntaxError, ValueError) as exc:
        where = f" (line {exc.lineno}: {exc.msg})" if isinstance(exc, SyntaxError) else ""
        raise ToolError(f"{module}: not Python that parses{where}; give a Python module") from None


def check_arguments(args: argparse.Namespace) -> None:
    """What argparse's types cannot say: the ranges, and the folders that must be folders."""
    if args.sample < 0:
        raise ToolError(f"--sample: {args.sample} is negative (0 samples every mutant)")
    if args.rotate is not None and args.rotate < 1:
        raise ToolError(f"--rotate: {args.rotate} modules; give at least 1")
    if args.rotate is not None and (args.modules or args.all_targets):
        raise ToolError("--rotate chooses the modules itself: name none, and no --all-targets")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ToolError(f"--timeout: {args.timeout} is not a positive number of seconds")
    if args.fail_under is not None and not (math.isfinite(args.fail_under) and 0 <= args.fail_under <= 100):
        raise ToolError(f"--fail-under: {args.fail_under} is not a percentage from 0 to 100")
    if not args.root.is_dir():
        raise ToolError(f"--root: {args.root} is not a folder")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise ToolError(f"--out: {args.out} exists and is not a folder")


def resolve_seed(value: str, root: Path) -> tuple[int, str]:
    """(seed, where it came from). 'git': the first 8 hex digits of HEAD, so each commit draws a
    fresh sample and re-running a commit draws the same one; outside a checkout, the clock."""
    if value != "git":
        try:
            return int(value), "given"
        except ValueError:
            raise ToolError(f"--seed: {value!r} is neither an integer nor 'git'") from None
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode == 0 and head.stdout.strip():
        return int(head.stdout.strip()[:8], 16), f"commit {head.stdout.strip()[:12]}"
    return int(time.time()), "the clock (not a git checkout)"


def _main(args: argparse.Namespace) -> int:
    if args.merge or args.recheck:
        try:
            return _merge(args) if args.merge else _recheck(args)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ToolError(f"a report holds a module or mutant without its fields ({exc!r})") from None
    root = args.root.resolve()
    config = load_config(args.config)
    args.seed, origin = resolve_seed(str(args.seed), root)
    # first, so that a failing sample can be drawn again with --seed N
    print(f"mutate: seed {args.seed} (from {origin}); repeat this sample with --seed {args.seed}", flush=True)
    modules = list(config["targets"]) if args.all_targets else args.modules
    if args.rotate is not None:
        modules = rotation(config.get("core", []), args.rotate, args.seed)
        print(f"mutate: core modules {', '.join(modules)} (--rotate {args.rotate} of {len(config.get('core', []))})")
    if not modules:
        raise ToolError("name a module, or --all-targets")
    plan: list[tuple[str, list[str]]] = []
    for module in modules:
        tests = args.tests or config["targets"].get(module)
        if not tests:
            raise ToolError(f"{module}: no tests configured in {args.config.name}; give --tests")
        if not (root / module).is_file():
            raise ToolError(f"{module}: no such file under {root}")
        _check_module(root / module, module)
        plan.append((module, tests))
    if args.list:
        for module, _ in plan:
            source = (root / module).read_text(encoding="utf-8")
            every = find_mutants(source, module)
            chosen = sample_mutants(every, args.sample, args.seed, module)
            print(f"{module}: {len(every)} mutants, {len(chosen)} sampled")
            for m in chosen:
                print(f"  {m.line}: {m.description}: {m.key(source)['mutated']}")
        return 0
    report = {
        "format": REPORT_FORMAT,
        "seed": args.seed,
        "sample": args.sample,
        "commit": args.label or _commit(root),
        "timeouts": TIMEOUTS,
        "modules": [],
    }
    with tempfile.TemporaryDirectory(prefix="qualify-mutate-") as tmp:
        copy = Path(tmp) / "repo"
        _copy_repository(root, copy)
        for module, tests in plan:
            print(f"{module}: running {', '.join(tests)}", flush=True)
            report["modules"].append(
                mutate_module(
                    root,
                    copy,
                    module,
                    tests,
                    sample=args.sample,
                    seed=args.seed,
                    timeout=args.timeout,
                    config=config,
                    log=lambda s: print(s, flush=True),
                )
            )
    return _finish(report, args)


def _finish(report: dict, args: argparse.Namespace) -> int:
    lines = format_markdown(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (args.out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[: 6 + len(report["modules"])]))
    low = [m for m in report["modules"] if args.fail_under is not None and (m["score"] or 0) < args.fail_under]
    return 1 if low else 0


def _read_report(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ToolError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        raise ToolError(f"{path}: not a {REPORT_FORMAT} report")
    modules = data.get("modules")
    if not (
        isinstance(modules, list)
        and all(isinstance(m, dict) and isinstance(m.get("mutants"), list) for m in modules)
        and {"seed", "sample", "commit"} <= set(data)
    ):
        raise ToolError(f"{path}: a {REPORT_FORMAT} report lacking its seed, sample, commit or modules")
    return data


def _recheck(args: argparse.Namespace) -> int:
    """The earlier report's sample, its survivors run again against the tests as they are now.

    The mutants it killed keep their outcome (a test added since cannot un-kill them); a survivor
    whose line has changed since is no longer a mutant of the module and is reported as it was.
    """
    root = args.root.resolve()
    config = load_config(args.config)
    earlier = _read_report(args.recheck)
    sections = [m for m in earlier["modules"] if not args.modules or m["module"] in args.modules]
    if not sections:
        raise ToolError(f"{args.recheck}: holds none of {', '.join(args.modules)}")
    modules = []
    with tempfile.TemporaryDirectory(prefix="qualify-mutate-") as tmp:
        copy = Path(tmp) / "repo"
        _copy_repository(root, copy)
        for section in sections:
            module = section["module"]
            tests = args.tests or config["targets"].get(module) or section["tests"]
            survivors = [o["key"] for o in section["mutants"] if o["status"] == "survived"]
            if not survivors:
                outcomes = [Outcome(**o) for o in section["mutants"]]
                modules.append(
                    summarize(module, section["tests"], section["mutants_total"], section["baseline_seconds"], outcomes)
                )
                continue
            print(f"{module}: {len(survivors)} survivors of {args.recheck}, running {', '.join(tests)}", flush=True)
            again = mutate_module(
                root,
                copy,
                module,
                tests,
                sample=0,
                seed=earlier["seed"],
                timeout=args.timeout,
                config=config,
                log=lambda s: print(s, flush=True),
                only=survivors,
            )
            fresh = {json.dumps(o["key"], sort_keys=True): o for o in again["mutants"]}
            outcomes = []
            for o in section["mutants"]:
                o = fresh.get(json.dumps(o["key"], sort_keys=True), o)
                outcome = Outcome(**o)
                outcome.equivalent = _equivalence(config, outcome.key) if outcome.status == "survived" else None
                outcomes.append(outcome)
            modules.append(summarize(module, tests, again["mutants_total"], again["baseline_seconds"], outcomes))
    commit = args.label or f"{earlier['commit']}, survivors re-run on {_commit(root)}"
    return _finish({**earlier, "commit": commit, "timeouts": TIMEOUTS, "modules": modules}, args)


def _merge(args: argparse.Namespace) -> int:
    reports = []
    for path in args.merge:
        reports.append(_read_report(path))
    if len({(r["seed"], r["sample"]) for r in reports}) != 1:
        raise ToolError("the reports were sampled with different seeds or sizes")
    commit = args.label or " + ".join(dict.fromkeys(r["commit"] for r in reports))
    config = load_config(args.config)
    modules: dict[str, dict] = {}  # a module run again in a later report replaces its earlier run
    for m in (m for r in reports for m in r["modules"]):
        # the equivalence list as it stands now: a survivor judged after the run is set aside
        outcomes = [Outcome(**o) for o in m["mutants"]]
        for o in outcomes:
            o.equivalent = _equivalence(config, o.key) if o.status == "survived" else None
        modules[m["module"]] = summarize(m["module"], m["tests"], m["mutants_total"], m["baseline_seconds"], outcomes)
    return _finish({**reports[0], "commit": commit, "timeouts": TIMEOUTS, "modules": list(modules.values())}, args)


if __name__ == "__main__":
    sys.exit(main())
