"""Golden files: expected outputs (and fixed inputs) of every case, with their provenance.

A golden is a safetensors file. Its tensors are named '<case id>/<buffer>': every output of every
case, and every input whose init is {"kind": "golden"}. Its metadata (safetensors keeps a
str → str map in the header) records:

  format          "qualify-golden"
  format_version  "1" (history: 1 — first version)
  producer        the repository path of the script that wrote it (the plan's golden_script)
  config_sha256   `config_digest` of the plan it was written for
  dtypes          JSON map tensor → qualify dtype; bf16 is stored as U16 bit patterns, since
                  NumPy (and so safetensors' NumPy API) has no bfloat16; fp8 as safetensors'
                  F8_E4M3 and F8_E5M2; fp6 and fp4 as U8 bit patterns, one element a byte

Provenance is checked before any comparison, and every problem is an error naming the golden and
the tensor: a golden for another configuration (exit 3, the input it was frozen for changed), a
missing, extra, misshapen, mistyped or non-finite tensor (exit 2). Nothing is skipped.

A plan that compares against a golden names the script that wrote it (`golden_script`); without
one no producer is accepted (exit 2), since any file claiming any producer would otherwise do.

Reading is bounded by the plan, not by the file: names, dtypes and shapes come from the header
alone, a tensor the plan has no use for is refused before any tensor is read, and each needed
tensor is read only once its dtype and shape are the plan's (so its size is the plan's). The
`dtypes` metadata is parsed by `strict_json` (nesting bounded). A host that cannot hold a needed
tensor is an environment failure (exit 5), never a verdict's exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from qualify import strict_json
from qualify.dtypes import FLOATS, NARROW_FLOATS, SAFETENSORS, STORAGE, as_float64, ml_dtype
from qualify.errors import EnvironmentProblem, FrozenInputChanged, PlanError, QualifyError
from qualify.io import atomic_write_bytes
from qualify.plan.digest import canonical_json, sha256_bytes
from qualify.plan.model import GoldenInit, Plan
from qualify.plan.resolve import ResolvedCase

FORMAT = "qualify-golden"
FORMAT_VERSION = 1

# safetensors types whose tensors safetensors' NumPy API cannot return (NumPy has no fp8): their
# bytes are read raw
RAW_READ = frozenset(SAFETENSORS[d] for d in NARROW_FLOATS) - {"U8"}


def config_digest(plan: Plan) -> str:
    """sha256 of what a golden's values depend on: the seeds and the workload's parameters, cases
    and buffers (names, dtypes, shapes, inits). Arms, launch, schedule and gates are left out: the
    same golden serves any kernel pair and any timing schedule of that workload."""
    workload = plan.workload.model_dump(mode="json", include={"params", "cases", "buffers"})
    return sha256_bytes(canonical_json({"seeds": plan.seeds.model_dump(mode="json"), "workload": workload}).encode())


def tensor_name(case_id: str, buffer: str) -> str:
    return f"{case_id}/{buffer}"


@dataclass(frozen=True)
class Golden:
    path: Path
    producer: str
    config_sha256: str
    tensors: dict[str, np.ndarray]  # name → flat uint8 bytes, in the buffer's dtype

    def expected(self, case_id: str, buffer: str) -> np.ndarray:
        return self.tensors[tensor_name(case_id, buffer)]


def write_golden(
    path: Path,
    plan: Plan,
    tensors: dict[str, tuple[str, np.ndarray]],
    producer: str,
    extra_metadata: dict[str, str] | None = None,
    *,
    root: Path | None = None,
) -> None:
    """Write a golden; `tensors` maps name → (qualify dtype, array of that dtype, bf16 as uint16 bits,
    a narrow float as its ml-dtypes array or uint8 bit patterns)."""
    from safetensors.numpy import save

    arrays, dtypes = {}, {}
    for name, (dtype, array) in tensors.items():
        if dtype in NARROW_FLOATS:
            arrays[name] = _narrow_for_file(name, dtype, np.asarray(array))
        else:
            arrays[name] = np.ascontiguousarray(np.asarray(array).astype(STORAGE[dtype], copy=False))
        dtypes[name] = dtype
    metadata = {
        **(extra_metadata or {}),
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "producer": producer,
        "config_sha256": config_digest(plan),
        "dtypes": json.dumps(dtypes, sort_keys=True),
    }
    # serialized here and written by qualify.io: no link in the golden's place (or, with `root`, on
    # the way from it) is written through
    atomic_write_bytes(path, save(arrays, metadata=metadata), root=root)


def load_golden(plan: Plan, plan_path: Path, root: Path, cases: list[ResolvedCase]) -> Golden:
    """Read the plan's golden and check its provenance and every tensor the plan needs."""
    fid = plan.acceptance.fidelity
    assert fid.golden is not None
    path = (plan_path.parent / fid.golden).resolve()
    with _Reader(path) as reader:
        return _load(plan, plan_path, root, cases, path, reader)


def _load(plan: Plan, plan_path: Path, root: Path, cases: list[ResolvedCase], path: Path, reader: _Reader) -> Golden:
    fid = plan.acceptance.fidelity
    metadata = reader.metadata()

    def fail(field: str, message: str, error: type[QualifyError] = PlanError) -> QualifyError:
        return error(message, file=path, field=field)

    if metadata.get("format") != FORMAT:
        raise fail("metadata.format", f"expected {FORMAT!r}, found {metadata.get('format')!r}")
    if metadata.get("format_version") != str(FORMAT_VERSION):
        raise fail(
            "metadata.format_version",
            f"version {metadata.get('format_version')!r} is not supported (this qualify reads {FORMAT_VERSION})",
        )
    producer = metadata.get("producer")
    if not producer:
        raise fail("metadata.producer", "the golden does not say which script wrote it")
    if fid.golden_script is None:
        raise PlanError(
            f"the plan names no golden_script, so the golden's producer {producer!r} cannot be checked; "
            "name the script that wrote it",
            file=plan_path,
            field="acceptance.fidelity.golden_script",
        )
    script = (plan_path.parent / fid.golden_script).resolve()
    declared = script.relative_to(root).as_posix() if script.is_relative_to(root) else str(script)
    if producer != declared:
        raise fail("metadata.producer", f"written by {producer!r}, but the plan's golden_script is {declared!r}")
    wanted = config_digest(plan)
    if metadata.get("config_sha256") != wanted:
        raise fail(
            "metadata.config_sha256",
            f"written for configuration {str(metadata.get('config_sha256'))[:12]}…, the plan's is "
            f"{wanted[:12]}…: the workload or seeds changed after the golden was written; rerun its script",
            FrozenInputChanged,
        )
    try:
        dtypes = strict_json.parse(metadata.get("dtypes", ""))
    except strict_json.JSONProblem:
        dtypes = None
    if not isinstance(dtypes, dict):
        raise fail("metadata.dtypes", "missing or not a JSON object of tensor → dtype")

    needed: dict[str, tuple[str, tuple[int, ...], bool]] = {}  # name → (dtype, shape, is an output)
    golden_inputs = {b.name for b in plan.workload.buffers if isinstance(b.init, GoldenInit)}
    for case in cases:
        for buf in case.arms["candidate"].buffers:
            if buf.role == "output" or buf.name in golden_inputs:
                needed[tensor_name(case.id, buf.name)] = (buf.dtype, buf.shape, buf.role == "output")
    names = reader.names()
    for name in names:
        if name not in needed:
            raise fail(name, "a tensor the plan has no use for (a renamed buffer or case?)")
    tensors = {}
    for name, (dtype, shape, is_output) in needed.items():
        if name not in names:
            kind = "expected output" if is_output else "golden input"
            raise fail(name, f"missing: the plan needs this {kind}")
        stored_dtype, stored_shape = reader.header(name)
        if dtypes.get(name) != dtype:
            raise fail(name, f"dtype {dtypes.get(name)!r}, the plan's buffer is {dtype!r}")
        if stored_dtype != SAFETENSORS[dtype]:
            raise fail(name, f"stored as {stored_dtype}, a {dtype} tensor is stored as {SAFETENSORS[dtype]}")
        if tuple(stored_shape) != tuple(shape):
            raise fail(name, f"shape {list(stored_shape)}, the plan's case needs {list(shape)}")
        data = reader.tensor(name)  # only now: its size is the plan's
        if dtype in FLOATS:
            bad = np.flatnonzero(~np.isfinite(as_float64(data, dtype)))
            if bad.size:
                raise fail(name, f"{bad.size} non-finite values, the first at flat index {int(bad[0])}")
        tensors[name] = data
    return Golden(path=path, producer=producer, config_sha256=wanted, tensors=tensors)


def _narrow_for_file(name: str, dtype: str, array: np.ndarray) -> np.ndarray:
    """A narrow float tensor as safetensors stores it: fp8 typed (safetensors names ml-dtypes' types
    F8_E4M3 and F8_E5M2), fp6 and fp4 as their uint8 bit patterns."""
    values = ml_dtype(dtype)
    if array.dtype == values:
        bits = array.view(np.uint8)
    elif array.dtype == np.uint8:
        bits = array
    else:
        raise ValueError(
            f"{name}: a {dtype} tensor is given as {values.name} values or uint8 bit patterns, not {array.dtype}"
        )
    bits = np.ascontiguousarray(bits)
    return bits.view(values) if SAFETENSORS[dtype] in RAW_READ else bits


_T = TypeVar("_T")


class _Reader:
    """A safetensors file read one piece at a time; each failure of the library is one error.

    A header safetensors refuses is a bad golden (exit 2); a tensor the host has no memory for
    (MemoryError, or a panic of the library's Rust code, which is not an Exception) is the
    environment's failure (exit 5)."""

    def __init__(self, path: Path):
        self.path = path
        self._file: Any = None  # safetensors' safe_open handle: its stubs leave its methods untyped
        self._names: list[str] | None = None

    def __enter__(self) -> _Reader:
        from safetensors import safe_open

        self._file = self._call(lambda: safe_open(str(self.path), framework="numpy").__enter__(), "header")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.__exit__(None, None, None)

    def metadata(self) -> dict[str, str]:
        found: dict[str, str] = self._call(lambda: self._file.metadata() or {}, "header")
        return found

    def names(self) -> list[str]:
        if self._names is None:
            self._names = self._call(lambda: list(self._file.keys()), "header")
        return self._names

    def header(self, name: str) -> tuple[str, list[int]]:
        """The stored dtype and shape, from the header alone."""
        piece = self._call(lambda: self._file.get_slice(name), name)
        return piece.get_dtype(), list(piece.get_shape())

    def tensor(self, name: str) -> np.ndarray:
        """The tensor's bytes, flat (uint8)."""
        if self.header(name)[0] in RAW_READ:  # safetensors' NumPy reader has no fp8 type to return
            return self._call(lambda: self._raw_bytes(name), name, data=True)
        array = self._call(lambda: self._file.get_tensor(name), name, data=True)
        flat: np.ndarray = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return flat

    def _raw_bytes(self, name: str) -> np.ndarray:
        """One tensor's bytes read at its offsets in the file (the layout safetensors documents: a
        little-endian u64 header length, the JSON header, then the data), nothing else read."""
        with open(self.path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = strict_json.parse(f.read(size).decode("utf-8"))
            if not isinstance(header, dict):
                raise ValueError("the header is not a JSON object")
            begin, end = header[name]["data_offsets"]
            f.seek(8 + size + begin)
            data: np.ndarray = np.frombuffer(f.read(end - begin), dtype=np.uint8).copy()
        if data.size != end - begin:
            raise ValueError(f"{name}: the file ends inside the tensor")
        return data

    def _call(self, read: Callable[[], _T], field: str, data: bool = False) -> _T:
        """`data`: the call reads a tensor's values, where a failure to allocate can happen."""
        try:
            return read()
        except FileNotFoundError:
            raise PlanError("no such file", file=self.path, field="acceptance.fidelity.golden") from None
        except MemoryError:
            raise EnvironmentProblem(
                "not enough host memory to read this tensor", file=self.path, field=field
            ) from None
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:  # safetensors raises its own error types, OSError, and panics
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if data and not isinstance(exc, Exception):  # a Rust panic reading values: an allocation failed
                raise EnvironmentProblem(
                    f"the safetensors library failed reading this tensor ({first})", file=self.path, field=field
                ) from None
            raise PlanError(f"not a readable safetensors file ({first})", file=self.path, field="header") from None
