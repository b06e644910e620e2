"""Python arms in a trial process: the callable imported from its frozen files, bound to a case's
buffers, called on qualify's stream, and what it ran with (packages, JIT output, host cost).

Everything that touches torch is in `run/torch_bridge.py`, reached through the device's
`python_runtime()`; the fake device's runtime (`NumpyRuntime`) hands the callable NumPy arrays
over the fake's host memory instead, so CPU tests run a NumPy callable through a whole trial.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import importlib.util
import inspect
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from qualify.dtypes import ITEMSIZE, STORAGE
from qualify.errors import DeviceError, FrozenInputChanged, PlanError
from qualify.plan.digest import sha256_file
from qualify.plan.model import PythonArm
from qualify.plan.python_source import CONTROL, STREAM, imported_top_levels
from qualify.results.model import CompiledCode, PythonArmInfo

NULL_CALLS = 200  # calls of a function that does nothing, for the interpreter's cost per call
HOST_SAMPLES = 64  # host times kept of the arm's own calls after the first
MAX_CUBIN_BYTES = 64 << 20
_CACHE_ENV = "TRITON_CACHE_DIR"


class CallableFailed(DeviceError):
    """The arm's Python function raised."""


class PythonRuntime(Protocol):
    """What a Python arm's call sees: torch_bridge.TorchRuntime on a GPU, NumpyRuntime on the fake."""

    name: str
    stream: Any

    def array(self, ptr: int, nbytes: int, dtype: str, itemsize: int, shape: tuple[int, ...]) -> Any: ...
    def scope(self) -> Any: ...
    def capture(self, call: Callable[[], None]) -> Any: ...
    def replay(self, graph: Any) -> None: ...
    def synchronize(self) -> None: ...


class NumpyRuntime:
    """The fake device's runtime: a buffer is a NumPy array over the fake's host memory (no copy),
    the stream an opaque handle, a 'graph' the call itself."""

    name = "numpy"

    def __init__(self, memory, stream_handle: int):
        self._memory = memory
        self.stream = FakeStream(stream_handle)

    def array(self, ptr: int, nbytes: int, dtype: str, itemsize: int, shape: tuple[int, ...]):
        return self._memory.view(ptr, nbytes).view(np.dtype(STORAGE[dtype])).reshape(shape)

    def scope(self):
        return contextlib.nullcontext()

    def capture(self, call):
        return call

    def replay(self, graph) -> None:
        graph()

    def synchronize(self) -> None:
        pass


@dataclass(frozen=True)
class FakeStream:
    handle: int


@dataclass
class Bound:
    """One arm bound to one placement's buffers: the keyword arguments, and its graph if captured."""

    kwargs: dict[str, Any]
    graph: Any = None


@dataclass
class PythonEntry:
    label: str
    arm: PythonArm
    function: Callable[..., Any]
    runtime: PythonRuntime
    cache_dir: Path
    modules: tuple  # the arm's own modules, kept alive once out of sys.modules
    packages: dict[str, str]
    control: str | None = None
    first_call_s: float | None = None
    null_call_ns: float | None = None
    host_ns: list[int] = field(default_factory=list)
    _bound: dict = field(default_factory=dict)  # buffers' addresses -> Bound: one graph per placement

    def with_control(self, name: str) -> PythonEntry:
        """The same callable, called with control=<name> (a callable control's variant)."""
        return PythonEntry(
            f"{self.label}+{name}",
            self.arm,
            self.function,
            self.runtime,
            self.cache_dir,
            self.modules,
            self.packages,
            name,
        )

    def bind(self, resolved, buffers: dict) -> Bound:
        # the case's resolved arm lives as long as the loaded plan: its identity names the case
        key = (id(resolved), tuple(sorted((n, b.ptr) for n, b in buffers.items())))
        if key not in self._bound:
            self._bound[key] = self._new_bound(resolved, buffers)
        return self._bound[key]

    def _new_bound(self, resolved, buffers: dict) -> Bound:
        offered: dict = dict(resolved.params)
        for spec in resolved.buffers:
            buf = buffers[spec.name]
            offered[spec.name] = self.runtime.array(
                buf.ptr, spec.nbytes, spec.dtype, ITEMSIZE[spec.dtype], tuple(spec.shape)
            )
        offered[STREAM] = self.runtime.stream
        offered[CONTROL] = self.control
        sig = inspect.signature(self.function)
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            kwargs = offered
        else:
            kwargs = {name: offered[name] for name in sig.parameters if name in offered}
        bound = Bound(kwargs)
        if self.arm.graph:
            self._eager(bound)  # compile and autotune outside the capture
            self.runtime.synchronize()
            with self._cache():
                bound.graph = self.runtime.capture(lambda: self.function(**kwargs))
        return bound

    def call(self, bound: Bound) -> None:
        if bound.graph is not None:
            start = time.perf_counter_ns()
            self.runtime.replay(bound.graph)
            self._keep_host(start)
            return
        self._eager(bound)

    def _eager(self, bound: Bound) -> None:
        first = self.first_call_s is None
        start = time.perf_counter_ns()
        try:
            with self._cache(), self.runtime.scope():
                self.function(**bound.kwargs)
            if first:
                self.runtime.synchronize()
        except Exception as exc:  # the arm's own code: its failure is the trial's, with its place
            raise CallableFailed(f"{self.arm.callable} raised {_where(exc)}") from exc
        if first:
            self.first_call_s = (time.perf_counter_ns() - start) / 1e9
            return
        self._keep_host(start)

    def _keep_host(self, start: int) -> None:
        if len(self.host_ns) < HOST_SAMPLES:
            self.host_ns.append(time.perf_counter_ns() - start)

    @contextlib.contextmanager
    def _cache(self):
        """Triton compiles into this arm's own cache folder, so its cubins are the arm's alone."""
        before = os.environ.get(_CACHE_ENV)
        os.environ[_CACHE_ENV] = str(self.cache_dir)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(_CACHE_ENV, None)
            else:
                os.environ[_CACHE_ENV] = before

    def measure_null(self) -> None:
        """The host cost of a call that does nothing, through the same path as an eager call."""

        def null(**_kwargs) -> None:
            return None

        names = {p: None for p in inspect.signature(self.function).parameters}
        times = []
        for _ in range(NULL_CALLS):
            start = time.perf_counter_ns()
            with self._cache(), self.runtime.scope():
                null(**names)
            times.append(time.perf_counter_ns() - start)
        self.null_call_ns = float(np.median(times))

    def cubins(self) -> list[CompiledCode]:
        out = []
        for path in sorted(self.cache_dir.rglob("*.cubin")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(self.cache_dir).as_posix()
                out.append(CompiledCode(name=rel, sha256=sha256_file(path, limit=MAX_CUBIN_BYTES)))
        return out

    def cubin_bytes(self) -> list[bytes]:
        return [(self.cache_dir / c.name).read_bytes() for c in self.cubins()]

    def autotuned(self) -> dict[str, str]:
        """The configuration each Triton autotuner of the arm's modules chose (read by duck type:
        an object named Autotuner with a best_config)."""
        out = {}
        for name, obj in _autotuners(self.modules):
            best = getattr(obj, "best_config", None)
            out[name] = "not run" if best is None else str(best)
        return out

    def info(self) -> PythonArmInfo:
        return PythonArmInfo(
            callable=self.arm.callable,
            graph=self.arm.graph,
            packages=self.packages,
            first_call_s=None if self.first_call_s is None else round(self.first_call_s, 6),
            null_call_ns=self.null_call_ns,
            call_ns=float(np.median(self.host_ns)) if self.host_ns else None,
            cubins=self.cubins(),
            autotuned=self.autotuned(),
        )


def _where(exc: Exception) -> str:
    tb = exc.__traceback__
    line = ""
    while tb is not None:
        line = f" ({Path(tb.tb_frame.f_code.co_filename).name} line {tb.tb_lineno})"
        tb = tb.tb_next
    # the first line and the last: a compiler's message (Triton's CompilationError) opens with the
    # place ("at 5:31:") and ends with the cause, the source lines between
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " … ".join(lines[:1] + lines[-1:]) if len(lines) > 1 else "".join(lines)
    return f"{type(exc).__name__}: {text}{line}"[:500]


def _autotuners(modules) -> list[tuple[str, object]]:
    out = []
    for module in modules:
        for name, obj in sorted(vars(module).items()):
            if type(obj).__name__ == "Autotuner" and hasattr(obj, "configs"):
                out.append((f"{module.__name__}.{name}", obj))
    return out


def load(loaded, side: str, runtime, label: str | None = None) -> PythonEntry:
    """Import the side's callable from its frozen file, in this (child) process.

    Its folder goes first on sys.path, as a script's would (and stays, for imports made inside
    the function when it is called). Every module it loads from the repository must be a file the
    lock froze: one the parser could not see (an import by a computed name) is refused. Python
    keeps one module per name in a process, so a local module of the same name as one the other
    arm already loaded from another file (two `common.py` of different folders) is refused, as
    NVRTC arms' two `common.h` are: rename one.
    """
    arm = loaded.plan.arm(side)
    assert isinstance(arm, PythonArm)
    label = label or side
    field_ = f"arms.{side}.callable"
    root = loaded.files.root
    path = (loaded.path.parent / arm.file).resolve()
    frozen = {p.resolve() for p in loaded.files.files.values()}
    if path not in frozen:
        raise FrozenInputChanged("the callable's file is not in the plan's lock", file=arm.file)
    _refuse_shadowed(path, frozen, loaded.path, field_)
    cache_dir = Path(tempfile.mkdtemp(prefix=f"qualify-jit-{label}-"))
    atexit.register(shutil.rmtree, cache_dir, True)
    before = set(sys.modules)
    name = f"qualify_arm_{label.replace('+', '_')}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PlanError(f"{arm.file} cannot be loaded as a module", file=loaded.path, field=field_)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses and pickling look it up
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    previous = os.environ.get(_CACHE_ENV)
    os.environ[_CACHE_ENV] = str(cache_dir)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise PlanError(f"importing {arm.file} raised {_where(exc)}", file=loaded.path, field=field_) from exc
    finally:
        if previous is None:
            os.environ.pop(_CACHE_ENV, None)
        else:
            os.environ[_CACHE_ENV] = previous
    own = [module]
    for key in sorted(set(sys.modules) - before - {name}):
        real = _file_of(sys.modules[key])
        if real is None or not _inside(root, real) or _installed(real):
            continue
        if real not in frozen:
            raise FrozenInputChanged(
                f"{arm.file} loaded module {key!r} from a file the lock does not freeze",
                file=str(real.relative_to(root)),
            )
        own.append(sys.modules[key])
    function = getattr(module, arm.function, None)
    if not callable(function):
        raise PlanError(f"{arm.file} has no function {arm.function!r}", file=loaded.path, field=field_)
    if arm.autotune == "forbid" and _autotuners(own):
        names = ", ".join(n for n, _ in _autotuners(own))
        raise PlanError(
            f"{arm.file} holds a Triton autotuner ({names}); pin its configuration in the arm's params, or "
            "set autotune 'warmup' to record the one it chooses",
            file=loaded.path,
            field=f"arms.{side}.autotune",
        )
    entry = PythonEntry(label, arm, function, runtime, cache_dir, tuple(own), _packages(own, root))
    entry.measure_null()
    return entry


def _installed(path: Path) -> bool:
    """An installed package's file (a virtual environment may sit inside the repository), or
    qualify's own: neither is the arm's code."""
    if {"site-packages", "dist-packages"} & set(path.parts):
        return True
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(__file__).resolve().parents[1])}
    return any(_inside(Path(p).resolve(), path) for p in prefixes)


def _file_of(module) -> Path | None:
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def _refuse_shadowed(path: Path, frozen: set[Path], plan_path: Path, field: str) -> None:
    """A frozen module beside the callable whose name this process already holds from another file."""
    folder = path.parent
    for file in frozen:
        if file.suffix != ".py" or not _inside(folder, file) or file == path:
            continue
        parts = file.relative_to(folder).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        held = sys.modules.get(name)
        if held is not None and _file_of(held) not in (None, file):
            raise PlanError(
                f"module {name!r} beside {path.name} is already loaded from {_file_of(held)} (the other arm's): "
                "one name must mean one module in a process; rename one",
                file=plan_path,
                field=field,
            )


def _inside(root: Path, path: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _packages(modules, root: Path) -> dict[str, str]:
    """Installed distributions the arm's modules import, and the GPU packages loaded in the process."""
    names: set[str] = set()
    for module in modules:
        file = getattr(module, "__file__", None)
        if file:
            names |= imported_top_levels(Path(file))
    names |= {n for n in ("torch", "triton", "cutlass", "numpy") if n in sys.modules}
    dists = importlib.metadata.packages_distributions()
    out = {}
    for top in sorted(names):
        for dist in dists.get(top, []):
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
    return out
