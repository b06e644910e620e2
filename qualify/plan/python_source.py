"""A Python arm's files, read by `ast` and never imported: the callable's module and every local
module it imports (frozen in the lock like a CUDA source's headers), and the function's parameters
against what the plan gives it.

`plan check` and `plan freeze` only parse: a Python arm's code runs in trial child processes alone
(README, "Threat model"). The search mirrors what the child does: it puts the callable's folder
first on `sys.path`, so `import helper` finds `helper.py` (or `helper/__init__.py`) there, and a
relative import resolves against the importing file's package. A name found nowhere there is an
installed package (its version is recorded in the trial instead). Imports the parser cannot see
(`importlib.import_module(name)` with a computed name, `sys.path` edits) are caught in the child,
which refuses any module it loaded from the repository that the lock does not hold.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qualify.errors import PlanError
from qualify.io import MAX_SOURCE_BYTES, UnreadableFile, read_limited
from qualify.plan.model import ARM_SIDES, Plan, PythonArm

MAX_MODULES = 256  # local modules one callable may pull in
# what qualify passes besides buffers and parameters
STREAM, CONTROL = "stream", "control"


@dataclass(frozen=True)
class Signature:
    names: tuple[str, ...]  # every parameter, in order
    required: tuple[str, ...]  # those without a default
    var_keyword: bool  # **kwargs: receives everything qualify offers
    line: int


def parse(path: Path, root: Path, plan_path: Path, field: str) -> ast.Module:
    """The module's tree; a syntax error is a plan error naming the file and line."""
    rel = _shown(path, root)
    try:
        data = read_limited(path, MAX_SOURCE_BYTES)
    except UnreadableFile as exc:
        raise PlanError(f"{rel}: {exc.message}", file=plan_path, field=field) from None
    try:
        return ast.parse(data, filename=rel)
    except SyntaxError as exc:
        raise PlanError(f"{rel} line {exc.lineno}: syntax error: {exc.msg}", file=plan_path, field=field) from None
    except ValueError as exc:  # NUL bytes
        raise PlanError(f"{rel}: not Python source: {exc}", file=plan_path, field=field) from None


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _imported_names(tree: ast.Module) -> list[tuple[int, tuple[str, ...], tuple[str, ...], int]]:
    """(level, module parts, imported names, line) of every import anywhere in the tree, and of
    `importlib.import_module('x')` / `__import__('x')` with a literal name."""
    out: list[tuple[int, tuple[str, ...], tuple[str, ...], int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((0, tuple(alias.name.split(".")), (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            parts = tuple(node.module.split(".")) if node.module else ()
            out.append((node.level, parts, tuple(a.name for a in node.names if a.name != "*"), node.lineno))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                text = node.args[0].value
                level = len(text) - len(text.lstrip("."))
                parts = tuple(p for p in text.lstrip(".").split(".") if p)
                out.append((level, parts, (), node.lineno))
    return out


def _candidates(folder: Path, parts: tuple[str, ...]) -> list[Path]:
    """The files a dotted name under `folder` may load: each package's __init__ on the way, then
    the module itself (a .py file or a package)."""
    out = []
    for k in range(1, len(parts) + 1):
        base = folder.joinpath(*parts[:k])
        out += [base / "__init__.py", base.with_name(base.name + ".py")]
    return out


def local_modules(source: Path, root: Path, plan_path: Path, field: str) -> list[Path]:
    """The callable's file and, transitively, every module it imports that resolves to a file of
    the repository. A name spelled to reach outside it, or found there through a link, is refused."""
    top = source.parent
    seen: list[Path] = []
    stack = [source]
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        if len(seen) >= MAX_MODULES:
            raise PlanError(f"more than {MAX_MODULES} local modules", file=plan_path, field=field)
        seen.append(path)
        for level, parts, names, line in _imported_names(parse(path, root, plan_path, field)):
            if level:
                folder = path.parent
                for _ in range(level - 1):
                    folder = folder.parent
            else:
                folder = top
            spelled = ".".join(parts) or "." * level
            files = _candidates(folder, parts) + [f for n in names for f in _candidates(folder, (*parts, n))[-2:]]
            for candidate in files:
                if not _inside(root, Path(os.path.normpath(candidate))):
                    raise PlanError(
                        f"{_shown(path, root)} line {line} imports {spelled!r} from outside the repository",
                        file=plan_path,
                        field=field,
                    )
                try:
                    is_file = candidate.is_file()
                except OSError:
                    continue
                if not is_file:
                    continue
                real = candidate.resolve()
                if not _inside(root, real):
                    raise PlanError(
                        f"{_shown(path, root)} line {line} imports {spelled!r}, which is a link to a file "
                        "outside the repository",
                        file=plan_path,
                        field=field,
                    )
                stack.append(real)
    return seen


def _inside(root: Path, path: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def signature(tree: ast.Module, function: str, rel: str, plan_path: Path, field: str) -> Signature:
    """The top-level function's parameters; one qualify cannot call by name is refused."""
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name == function:
            raise PlanError(
                f"{rel}: {function} is a coroutine; qualify calls a plain function", file=plan_path, field=field
            )
        if not isinstance(node, ast.FunctionDef) or node.name != function:
            continue
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name == "jit":
                raise PlanError(
                    f"{rel} line {node.lineno}: {function} is a JIT kernel; name the Python function that launches it",
                    file=plan_path,
                    field=field,
                )
        a = node.args
        if a.posonlyargs or a.vararg:
            raise PlanError(
                f"{rel} line {node.lineno}: {function} takes positional-only or *args parameters; "
                "qualify passes everything by name",
                file=plan_path,
                field=field,
            )
        positional = [p.arg for p in a.args]
        required = positional[: len(positional) - len(a.defaults)]
        required += [p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
        return Signature(
            names=tuple(positional + [p.arg for p in a.kwonlyargs]),
            required=tuple(required),
            var_keyword=a.kwarg is not None,
            line=node.lineno,
        )
    raise PlanError(f"{rel} defines no top-level function {function!r}", file=plan_path, field=field)


def check_parameters(
    sig: Signature,
    function: str,
    rel: str,
    buffers: Mapping[str, str],
    params: set[str],
    needs_control: bool,
    plan_path: Path,
    field: str,
) -> None:
    """Every parameter without a default is something qualify passes; every output reaches the
    function (else it could never write it); a callable control needs a `control` parameter."""
    offered = set(buffers) | params | {STREAM, CONTROL}
    where = f"{rel} line {sig.line}: {function}"
    for name in sig.required:
        if name not in offered:
            raise PlanError(
                f"{where} takes {name!r}, which is no buffer, parameter, 'stream' or 'control' of the plan",
                file=plan_path,
                field=field,
            )
    if not sig.var_keyword:
        for name, role in buffers.items():
            if role == "output" and name not in sig.names:
                raise PlanError(
                    f"{where} takes no parameter {name!r}: it could never write that output",
                    file=plan_path,
                    field=field,
                )
        if needs_control and CONTROL not in sig.names:
            raise PlanError(
                f"{where} takes no 'control' parameter, and the plan's callable controls pass one",
                file=plan_path,
                field=field,
            )


def imported_top_levels(path: Path) -> set[str]:
    """The top-level names a module imports absolutely (for the packages its trial records)."""
    try:
        tree = ast.parse(read_limited(path, MAX_SOURCE_BYTES))
    except (UnreadableFile, SyntaxError, ValueError):
        return set()
    return {parts[0] for level, parts, _, _ in _imported_names(tree) if level == 0 and parts}


def runtime_missing(plan: Plan) -> list[str] | None:
    """None for a plan without Python arms; else which of torch and Triton, which its trial
    processes import, are not installed (looked up, never imported)."""
    if not any(isinstance(plan.arm(side), PythonArm) for side in ARM_SIDES):
        return None
    return [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]
