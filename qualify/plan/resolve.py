"""Resolve a plan's expressions for every case and arm into concrete sizes.

This is where a plan's arithmetic meets its parameters: buffer shapes, launch geometry, dynamic
shared memory and scalar arguments become numbers, and every rule that needs numbers is checked
(positive sizes, bounded allocations, block size, offsets inside their buffers). Errors name the
field path so the user can find the expression at fault.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

from qualify import expr
from qualify.dtypes import ITEMSIZE
from qualify.errors import PlanError, all_of
from qualify.plan.model import (
    ARM_SIDES,
    MAX_BUFFER_BYTES,
    MAX_THREADS_PER_BLOCK,
    Arg,
    ArmLaunch,
    BufferArg,
    CudaArm,
    Launch,
    Plan,
    PythonArm,
    ScalarArg,
)

# the values a case's expressions see: the workload's, the arm's and the case's parameters
Params = Mapping[str, expr.Number]

_INT_RANGES = {
    "i32": (-(2**31), 2**31 - 1),
    "u32": (0, 2**32 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u64": (0, 2**64 - 1),
}
_GRID_LIMITS = (2**31 - 1, 65_535, 65_535)


def case_id(case: dict[str, Union[int, float]]) -> str:
    """Stable, readable id of a case: 'T=512' or 'B=2,T=512'. Keys are sorted, as the digest's
    canonical JSON sorts them, so reordering a case's keys changes neither its id nor the digest."""
    return ",".join(f"{k}={case[k]}" for k in sorted(case))


def canonical_number(value: Union[int, float]) -> Union[int, float]:
    """One value per number: 1.0 becomes 1 (the launch sees the same value either way)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def case_key(case: dict[str, Union[int, float]]) -> tuple[tuple[str, int | float], ...]:
    """What makes two cases the same case: their parameters' values, whatever the key order or
    the spelling of a number (S=1 and S=1.0)."""
    return tuple((k, canonical_number(case[k])) for k in sorted(case))


@dataclass(frozen=True)
class ResolvedBuffer:
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class ResolvedArg:
    kind: str  # "buffer" or a scalar type
    buffer: str | None = None
    offset: int = 0
    value: Union[int, float, None] = None


@dataclass(frozen=True)
class ResolvedLaunch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


@dataclass(frozen=True)
class ResolvedStep:
    """One launch of an arm's own sequence."""

    kernel: str
    launch: ResolvedLaunch
    args: tuple[ResolvedArg, ...]


@dataclass(frozen=True)
class ResolvedArm:
    side: str
    params: dict[str, Union[int, float]]
    buffers: tuple[ResolvedBuffer, ...]  # the workload's, then the arm's own scratch
    args: tuple[ResolvedArg, ...]
    launch: ResolvedLaunch | None  # None for shared-library and Python arms and arms with their own launches
    steps: tuple[ResolvedStep, ...] = ()  # an arm's own launches, in order; () for every other arm
    bytes_moved: int = 0  # the plan's expression, or each input read once and each output written once
    bytes_declared: bool = False  # bytes_moved is the plan's own expression
    flops: float | None = None  # the plan's expression; None when it states none

    @property
    def launches(self) -> tuple[ResolvedLaunch, ...]:
        """Every launch one call of the arm makes (none for a library arm)."""
        return tuple(s.launch for s in self.steps) if self.steps else (() if self.launch is None else (self.launch,))

    def buffer(self, name: str) -> ResolvedBuffer:
        return next(b for b in self.buffers if b.name == name)


@dataclass(frozen=True)
class ResolvedCase:
    index: int
    id: str
    values: dict[str, Union[int, float]]
    arms: dict[str, ResolvedArm]


class _Resolver:
    def __init__(self, plan: Plan, file: str | None):
        self.plan = plan
        self.file = file

    def fail(self, field: str, message: str) -> PlanError:
        return PlanError(message, file=self.file, field=field)

    def int_(self, source: str | int, params: Params, field: str, where: str, minimum: int | None = 1) -> int:
        try:
            value = expr.evaluate_int(source, params)
        except expr.ExprError as exc:
            raise self.fail(field, f"{where}: {exc}") from None
        if minimum is not None and value < minimum:
            raise self.fail(field, f"{where}: {source!r} = {value}, must be at least {minimum}")
        return value

    def resolve(self) -> list[ResolvedCase]:
        """Every case, or every refusal: the first of each field, whichever case meets it first
        (one wrong expression is one line, not one per case)."""
        plan = self.plan
        out = []
        problems: dict[str | None, PlanError] = {}
        for index, case in enumerate(plan.workload.cases):
            cid = case_id(case)
            arms: dict[str, ResolvedArm] = {}
            for side in ARM_SIDES:
                try:
                    arms[side] = self.arm(side, case, cid)
                except PlanError as exc:
                    problems.setdefault(exc.field, exc)
            if not problems:
                out.append(ResolvedCase(index=index, id=cid, values=dict(case), arms=arms))
        if problems:
            raise all_of(list(problems.values()))
        return out

    def arm(self, side: str, case: dict[str, int | float], cid: str) -> ResolvedArm:
        plan = self.plan
        arm = plan.arm(side)
        params = {**plan.workload.params, **arm.params, **case}
        where = f"case {cid}, {side} arm"
        buffers = []
        for i, buf in enumerate(plan.workload.buffers):
            shape = tuple(
                self.int_(dim, params, f"workload.buffers[{i}].shape[{j}]", where) for j, dim in enumerate(buf.shape)
            )
            rb = ResolvedBuffer(buf.name, buf.dtype, shape, buf.role)
            if rb.nbytes > MAX_BUFFER_BYTES:
                raise self.fail(
                    f"workload.buffers[{i}].shape",
                    f"{where}: {rb.nbytes:,} bytes exceeds the {MAX_BUFFER_BYTES:,}-byte limit",
                )
            buffers.append(rb)
        if isinstance(arm, CudaArm) and arm.launches is not None:
            for j, scratch in enumerate(arm.scratch):
                field = f"arms.{side}.scratch[{j}]"
                shape = tuple(
                    self.int_(dim, params, f"{field}.shape[{k}]", where) for k, dim in enumerate(scratch.shape)
                )
                rb = ResolvedBuffer(scratch.name, scratch.dtype, shape, "scratch")
                if rb.nbytes > MAX_BUFFER_BYTES:
                    raise self.fail(
                        f"{field}.shape", f"{where}: {rb.nbytes:,} bytes exceeds the {MAX_BUFFER_BYTES:,}-byte limit"
                    )
                buffers.append(rb)
            by_name = {b.name: b for b in buffers}
            steps = []
            for i, spec in enumerate(arm.launches):
                field = f"arms.{side}.launches[{i}]"
                launch = self.launch(params, where, spec, field)
                args = tuple(self.arg(a, params, by_name, f"{field}.args[{k}]", where) for k, a in enumerate(spec.args))
                steps.append(ResolvedStep(spec.kernel, launch, args))
            # scratch is the sequence's own business: the default bytes are the workload's buffers
            moved, declared, flops = self.work(params, [b for b in buffers if b.role != "scratch"], where)
            return ResolvedArm(
                side,
                params,
                tuple(buffers),
                (),
                None,
                tuple(steps),
                bytes_moved=moved,
                bytes_declared=declared,
                flops=flops,
            )
        by_name = {b.name: b for b in buffers}
        shared: ResolvedLaunch | None = None
        arg_specs: list[Arg]
        if isinstance(arm, CudaArm):
            workload_launch = plan.workload.launch
            assert workload_launch is not None  # Plan's validator: a CUDA arm without launches of its own uses it
            shared = self.launch(params, where, workload_launch, "workload.launch")
            args_field, arg_specs = "workload.launch.args", workload_launch.args
        elif isinstance(arm, PythonArm):  # its function takes buffers and parameters by name
            args_field, arg_specs = "", []
        else:
            assert plan.workload.call is not None  # Plan's validator: a library arm is called with workload.call
            args_field, arg_specs = "workload.call", plan.workload.call
        args = tuple(self.arg(a, params, by_name, f"{args_field}[{k}]", where) for k, a in enumerate(arg_specs))
        moved, declared, flops = self.work(params, buffers, where)
        return ResolvedArm(
            side, params, tuple(buffers), args, shared, bytes_moved=moved, bytes_declared=declared, flops=flops
        )

    def work(self, params: Params, buffers: list[ResolvedBuffer], where: str) -> tuple[int, bool, float | None]:
        """(bytes one launch moves, whether the plan stated them, its FLOPs or None)."""
        spec = self.plan.workload
        if spec.bytes_moved is not None:
            moved = self.int_(spec.bytes_moved, params, "workload.bytes_moved", where, minimum=0)
        else:
            moved = sum(b.nbytes for b in buffers if b.role in ("input", "output"))
        flops = None
        if spec.flops is not None:
            try:
                flops = float(expr.evaluate(spec.flops, params))
            except expr.ExprError as exc:
                raise self.fail("workload.flops", f"{where}: {exc}") from None
            if not math.isfinite(flops) or flops < 0:
                raise self.fail("workload.flops", f"{where}: {flops!r} must be a finite number, at least 0")
        return moved, spec.bytes_moved is not None, flops

    def launch(self, params: Params, where: str, spec: Launch | ArmLaunch, field: str) -> ResolvedLaunch:
        """The geometry of workload.launch or of one of an arm's own launches (`field` names it)."""
        grid = [self.int_(g, params, f"{field}.grid[{j}]", where) for j, g in enumerate(spec.grid)]
        block = [self.int_(b, params, f"{field}.block[{j}]", where) for j, b in enumerate(spec.block)]
        grid += [1] * (3 - len(grid))
        block += [1] * (3 - len(block))
        for j, (g, limit) in enumerate(zip(grid, _GRID_LIMITS)):
            if g > limit:
                raise self.fail(f"{field}.grid[{j}]", f"{where}: {g} exceeds {limit}")
        if math.prod(block) > MAX_THREADS_PER_BLOCK:
            raise self.fail(
                f"{field}.block",
                f"{where}: {math.prod(block)} threads exceed {MAX_THREADS_PER_BLOCK} per block",
            )
        smem = self.int_(spec.shared_bytes, params, f"{field}.shared_bytes", where, minimum=0)
        return ResolvedLaunch((grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), smem)  # 1 to 3 given, padded

    def arg(self, spec: Arg, params: Params, by_name: dict[str, ResolvedBuffer], field: str, where: str) -> ResolvedArg:
        if isinstance(spec, BufferArg):
            buf = by_name.get(spec.name)
            if buf is None:
                raise self.fail(f"{field}.name", f"unknown buffer {spec.name!r}")
            offset = self.int_(spec.offset, params, f"{field}.offset", where, minimum=0)
            if offset >= buf.elements:
                raise self.fail(f"{field}.offset", f"{where}: offset {offset} outside {buf.elements} elements")
            return ResolvedArg("buffer", buffer=spec.name, offset=offset)
        assert isinstance(spec, ScalarArg)
        try:
            value = expr.evaluate(spec.value, params)
        except expr.ExprError as exc:
            raise self.fail(f"{field}.value", f"{where}: {exc}") from None
        if spec.kind in _INT_RANGES:
            if isinstance(value, float):
                if not value.is_integer():
                    raise self.fail(f"{field}.value", f"{where}: {value!r} is not an integer")
                value = int(value)
            lo, hi = _INT_RANGES[spec.kind]
            if not lo <= value <= hi:
                raise self.fail(f"{field}.value", f"{where}: {value} does not fit {spec.kind}")
        else:
            value = float(value)
        return ResolvedArg(spec.kind, value=value)


def resolve_cases(plan: Plan, file: str | None = None) -> list[ResolvedCase]:
    """Every case of the plan with both arms' sizes as numbers; PlanError on any bad value."""
    return _Resolver(plan, file).resolve()
