"""Every file qualify creates or rewrites goes through qualify.io (issue 36, item 1).

The package's source is walked (ast) for any other way of writing a file: `open` with a mode that
writes, `Path.write_text`/`write_bytes`/`open('w')`, `os.open` with write flags, numpy's `save*`,
`tofile`, matplotlib's `savefig` to a path, `shutil.copy*`/`move`, `os.replace`/`rename`/`link`.
Each hit outside `qualify/io.py` must be in ALLOWED with the reason it cannot be redirected
through a planted link; anything new fails this test until it uses qualify.io or is argued here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "qualify"

# (file relative to qualify/, call as written) -> why it cannot write through a planted link
ALLOWED = {
    ("build/machine_code.py", "path.write_bytes"): "a CUBIN for nvdisasm in a fresh private TemporaryDirectory (0700)",
    ("procs/fleet.py", "open"): "worker logs in a fresh private TemporaryDirectory (0700), removed with it",
    ("run/library.py", "shutil.copyfile"): "a second copy of a library in a fresh private mkdtemp folder (0700)",
    (
        "procs/invocation.py",
        "open",
    ): "the invocation, created exclusively ('xb') in the run's fresh private mkdtemp folder (0700)",
    ("build/compile_worker.py", "open"): "reads /proc/self/maps (mode 'r' is checked below; listed for the call)",
}

_WRITE_MODES = set("wax+")
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
_ALWAYS = {"write_text", "write_bytes", "savefig", "tofile", "save_file"}  # save_file: safetensors'
_NUMPY = {"save", "savez", "savez_compressed", "savetxt"}  # numpy's; safetensors' save returns bytes
_SHUTIL = {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"}
_OS = {"replace", "rename", "renames", "link", "symlink", "truncate", "mkfifo", "mknod"}


def _name(node: ast.AST) -> str:
    return ast.unparse(node)


def _mode(call: ast.Call, position: int) -> str | None:
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value.value if isinstance(kw.value, ast.Constant) else "?"
    if len(call.args) > position:
        arg = call.args[position]
        return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "?"
    return None


def _writes(call: ast.Call) -> bool:
    func = call.func
    name = _name(func)
    attr = func.attr if isinstance(func, ast.Attribute) else name
    if name == "open" or name == "io.open":
        mode = _mode(call, 1)
        return mode is not None and (mode == "?" or bool(_WRITE_MODES & set(mode)))
    if attr == "open" and isinstance(func, ast.Attribute) and name not in ("os.open",):
        mode = _mode(call, 0)  # Path.open(mode)
        return mode is not None and (mode == "?" or bool(_WRITE_MODES & set(mode)))
    if name == "os.open":
        flags = (
            {n.attr for n in ast.walk(call.args[1]) if isinstance(n, ast.Attribute)} if len(call.args) > 1 else set()
        )
        return bool(flags & _WRITE_FLAGS)
    if attr in _ALWAYS or (attr in _NUMPY and name.split(".")[0] in ("np", "numpy")):
        # to an in-memory buffer (BytesIO) is no file; savefig(buf, ...) and np.save(buf, ...) with a
        # first argument named buf/buffer are that
        first = call.args[0] if call.args else None
        return not (isinstance(first, ast.Name) and first.id in ("buf", "buffer"))
    if name.startswith("shutil.") and attr in _SHUTIL:
        return True
    return name.startswith("os.") and attr in _OS


def writes_outside_io() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "io.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _writes(node):
                found.append((rel, node.lineno, _name(node.func)))
    return found


def test_no_file_is_written_outside_qualify_io_but_the_argued_few():
    unexplained = [
        f"qualify/{rel}:{line} {call}(...)" for rel, line, call in writes_outside_io() if (rel, call) not in ALLOWED
    ]
    assert unexplained == [], "write through qualify.io (or argue it in ALLOWED):\n" + "\n".join(unexplained)


def test_every_allowance_is_still_needed():
    used = {(rel, call) for rel, _, call in writes_outside_io()}
    stale = sorted(set(ALLOWED) - used - {("build/compile_worker.py", "open")})
    assert stale == [], f"allowances nothing needs any more: {stale}"


def test_the_walker_sees_each_way_of_writing():
    """The detector itself: each form below is a write it must flag, each read one it must not."""
    writes = [
        "open(p, 'w')",
        "open(p, mode='a')",
        "open(p, 'x')",
        "open(p, 'r+b')",
        "open(p, m)",
        "p.write_text('x')",
        "p.write_bytes(b'')",
        "p.open('w')",
        "os.open(p, os.O_WRONLY | os.O_CREAT)",
        "np.save(p, a)",
        "np.savez_compressed(p, a=a)",
        "fig.savefig(p)",
        "a.tofile(p)",
        "shutil.copy(a, b)",
        "shutil.copyfile(a, b)",
        "shutil.move(a, b)",
        "os.replace(a, b)",
        "os.rename(a, b)",
    ]
    reads = [
        "open(p)",
        "open(p, 'rb')",
        "p.open()",
        "os.open(p, os.O_RDONLY)",
        "fig.savefig(buf)",
        "np.savez(buf, a=a)",
    ]
    for text in writes:
        assert _writes(ast.parse(text).body[0].value), text
    for text in reads:
        assert not _writes(ast.parse(text).body[0].value), text
