"""Load a plan file: JSON → validated Plan → cross-checked → files found → every case resolved.

Any failure becomes one PlanError naming the file and the field path
(`workload.buffers[2].shape[0]`), never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from qualify import strict_json
from qualify.errors import PlanError, Problems
from qualify.io import MAX_PLAN_BYTES, UnreadableFile, read_limited
from qualify.plan.checks import cross_check
from qualify.plan.digest import Freeze, compute_freeze, read_lock
from qualify.plan.files import PlanFiles, collect_files
from qualify.plan.model import LibraryArm, Plan
from qualify.plan.resolve import ResolvedCase, resolve_cases


@dataclass(frozen=True)
class LoadedPlan:
    path: Path
    plan: Plan
    files: PlanFiles
    cases: list[ResolvedCase]
    freeze: Freeze
    lock: dict[str, Any] | None  # the lock on disk, if the plan was frozen

    @property
    def digest(self) -> str:
        return self.freeze.digest

    def library(self, side: str, given: Mapping[str, str | Path] | None = None) -> Path | None:
        """The one answer to which shared library a side loads: the build the command line gave
        (`compare`'s BASE.so and CAND.so, `probe`'s --base-so and --candidate-so), else the one the
        plan names, beside the plan. None for a side that is no library arm, or whose plan leaves
        the build to the command line and none was given."""
        arm = self.plan.arm(side)
        if not isinstance(arm, LibraryArm):
            return None
        if given and given.get(side) is not None:
            return Path(given[side])
        return None if arm.library is None else self.path.parent / arm.library


def read_plan_json(path: Path, *, root: Path | None = None) -> dict[str, Any]:
    try:
        raw = read_limited(path, MAX_PLAN_BYTES, root=root)
    except UnreadableFile as exc:
        if "more than the" in exc.message or "grew past" in exc.message:
            raise PlanError(f"larger than {MAX_PLAN_BYTES} bytes; not a plan", file=path) from None
        raise PlanError(exc.message, file=path) from None
    if not raw.strip():
        raise PlanError("empty file; expected a JSON plan", file=path)
    try:
        data = strict_json.parse(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise PlanError("not UTF-8 text", file=path) from None
    except strict_json.JSONProblem as exc:
        raise PlanError(exc.message, file=path, field=exc.field) from None
    if not isinstance(data, dict):
        raise PlanError(f"expected a JSON object, got {type(data).__name__}", file=path)
    return data


def schema_plan(data: dict[str, Any], path: Path) -> Plan:
    """The plan as the schema reads it, no cross-field rule applied; every field refused at once."""
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise plan_error_from_validation(exc, data, path) from None
    except RecursionError:
        raise PlanError("nested too deeply", file=path) from None


def validate_plan(data: dict[str, Any], path: Path) -> Plan:
    plan = schema_plan(data, path)
    cross_check(plan, str(path))
    return plan


def load_plan(path: str | Path) -> LoadedPlan:
    path = Path(path)
    plan = validate_plan(read_plan_json(path), path)
    lock = read_lock(path.resolve())
    files = collect_files(plan, path, tuple(lock["files"]) if lock else ())
    cases = resolve_cases(plan, str(path))
    return LoadedPlan(
        path=path.resolve(), plan=plan, files=files, cases=cases, freeze=compute_freeze(plan, files), lock=lock
    )


_MESSAGES = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field",
    "union_tag_invalid": "unknown kind",
}


def plan_error_from_validation(exc: ValidationError, data: object, path: Path) -> PlanError:
    """Every field pydantic refused, one PlanError each (one per field, in the plan's order)."""
    found: dict[str, PlanError] = {}
    for error in exc.errors(include_url=False):
        field = field_path(error["loc"], data) or "(top level)"
        if field not in found:
            found[field] = PlanError(_validation_message(error), file=path, field=field)
    errors = list(found.values())
    return errors[0] if len(errors) == 1 else Problems(errors)


def _validation_message(error: ErrorDetails) -> str:
    message: str = _MESSAGES.get(error["type"], error["msg"].removeprefix("Value error, "))
    if error["type"] == "union_tag_invalid":
        message = error["msg"]
    elif error["type"] not in ("missing", "extra_forbidden") and "input" in error:
        shown = json.dumps(error["input"], default=str)
        if len(shown) <= 60:
            message = f"{message} (got {shown})"
    return message


def field_path(loc: tuple[int | str, ...], data: object) -> str:
    """`('workload','buffers',2,'cuda','shape',0)` → `workload.buffers[2].shape[0]`.

    Pydantic inserts union member tags into locations; walking the input alongside tells a real
    key (present in the data, or the last element of a 'missing' error) from a tag.
    """
    out = ""
    node = data
    tagged = None  # the object whose discriminator tag was skipped
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and node.get("kind") == part and tagged is not node:
            # a discriminated union's tag is the object's own kind; it can also be a key of the
            # object (a library arm's `library`), so the walk alone cannot tell them apart
            tagged = node
            continue
        if isinstance(part, int) and isinstance(node, list):
            out += f"[{part}]"
            node = node[part] if 0 <= part < len(node) else None
        elif isinstance(part, str) and isinstance(node, dict) and (part in node or last):
            out = strict_json.join_field(out, part)
            node = node.get(part)
        # anything else is a union tag ('cuda', 'int', 'function-after[...]'): skip it
    return out
