"""The two trees a regression gate compares, materialized side by side in a private folder.

The base revision's files are read from git by commit and blob digest (`git ls-tree`, then `git
cat-file --batch`), never by checking the revision out, so the user's files are never touched.
The working tree's files are read from disk: the tracked ones and the untracked ones git does not
ignore. Both land in one private folder (`rev/` and `now/`) under a `.git` marker, so the plans a
gate derives resolve their paths inside that folder, and the usual confinement of plan files
(`plan/files.py`) holds there.

Threat model: the base revision is named by a pull request, so its tree is hostile. A path is
written only if every component is a plain name (no `..`, `.`, empty, `.git`, backslash or
control character, not absolute); only regular blobs are written (a symbolic link, a submodule or
any other mode is skipped and listed); a blob over `MAX_BLOB_BYTES`, or past `MAX_TREE_BYTES` or
`MAX_TREE_FILES` in all, is skipped and listed. Files are created with O_EXCL | O_NOFOLLOW inside
folders this module made, so nothing is written outside the private folder and nothing written
twice. The working tree's links are skipped the same way.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from qualify.errors import ToolError, UsageError
from qualify.io import UnreadableFile, read_limited

MAX_BLOB_BYTES = 64 << 20  # a source, a golden or a plan; larger is no input a plan reads
MAX_TREE_BYTES = 1 << 30
MAX_TREE_FILES = 100_000
MAX_PATH_CHARS = 1024
GIT_TIMEOUT_S = 300
REGULAR_MODES = ("100644", "100755")


@dataclass(frozen=True)
class Skipped:
    path: str
    why: str


@dataclass
class Materialized:
    folder: Path
    files: dict[str, str] = field(default_factory=dict)  # path -> git blob id ("" for working-tree files)
    skipped: list[Skipped] = field(default_factory=list)
    total_bytes: int = 0


def git(root: Path, *args: str, check: bool = True, stdin: bytes | None = None) -> bytes:
    """git's stdout; a failure is a one-line UsageError naming what git said."""
    cmd = ["git", "-C", str(root), *args]
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise ToolError("git not found on PATH; qualify gate reads revisions through it") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"git {args[0]} did not finish within {GIT_TIMEOUT_S} s") from None
    if check and done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git {args[0]}: {lines[-1] if lines else f'exit {done.returncode}'}", field="--base")
    return done.stdout


def resolve_commit(root: Path, rev: str) -> str:
    """The commit `rev` names (40 or 64 hex digits); a revision that starts with '-' is refused."""
    if not rev or rev.startswith("-") or not rev.isprintable():
        raise UsageError(f"{rev!r} is not a git revision", field="--base")
    out = git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
    sha = out.decode(errors="replace").strip()
    if not sha:
        raise UsageError(f"{rev!r} names no commit in {root}", field="--base")
    return sha


def default_base(root: Path) -> str:
    """The merge base of HEAD with the default branch: origin's HEAD when known, else main or master."""
    candidates = []
    head = git(root, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD", check=False).decode().strip()
    if head:
        candidates.append(head)
    candidates += ["refs/remotes/origin/main", "refs/heads/main", "refs/remotes/origin/master", "refs/heads/master"]
    for ref in candidates:
        if git(root, "rev-parse", "--verify", "--quiet", ref, check=False).strip():
            base = git(root, "merge-base", "HEAD", ref, check=False).decode().strip()
            if base:
                return base
    raise UsageError(
        "no default branch (origin/HEAD, main or master) to take a merge base with; give --base", field="--base"
    )


def changed_since(root: Path, commit: str) -> list[str]:
    """Paths that differ between `commit` and the working tree: committed, staged, unstaged and
    untracked (not ignored) changes alike, renames as a deletion and an addition."""
    diff = git(root, "diff", "--name-only", "--no-renames", "-z", commit, "--")
    untracked = git(root, "ls-files", "-z", "--others", "--exclude-standard")
    names = {p for p in (diff + b"\0" + untracked).decode(errors="surrogateescape").split("\0") if p}
    return sorted(names)


def path_problem(path: str) -> str | None:
    """Why `path` (from a tree or the index) may not be written under the private folder; None if it may."""
    if not path or len(path) > MAX_PATH_CHARS:
        return "an empty or overlong path"
    if not path.isprintable() or "\\" in path:
        return "a control character or backslash in the path"
    if path.startswith("/"):
        return "an absolute path"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return f"a {part!r} component" if part else "an empty component"
        if part.lower() == ".git":
            return "a .git component"
    return None


@dataclass(frozen=True)
class _Entry:
    mode: str
    kind: str
    sha: str
    size: int | None
    path: str


def _tree_entries(root: Path, commit: str) -> list[_Entry]:
    out = git(root, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
    entries = []
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        mode, kind, sha, size = meta.decode(errors="replace").split(None, 3)
        entries.append(
            _Entry(mode, kind, sha, int(size) if size.strip().isdigit() else None, raw_path.decode("utf-8", "replace"))
        )
    return entries


class _Writer:
    """Writes files under a fresh folder, never following a link, never writing a path twice."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=False)
        self.made: set[str] = {""}

    def write(self, rel: str, data: bytes, executable: bool = False) -> None:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            sub = "/".join(parts[:i])
            if sub not in self.made:
                os.mkdir(self.folder / sub, 0o755)  # FileExistsError if a file holds the name
                self.made.add(sub)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.folder / rel, flags, 0o755 if executable else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def materialize_revision(root: Path, commit: str, dest: Path) -> Materialized:
    """Every regular blob of `commit`'s tree under `dest`, by blob digest; the rest listed as skipped."""
    found = Materialized(dest)
    writer = _Writer(dest)
    wanted: list[_Entry] = []
    for e in _tree_entries(root, commit):
        problem = path_problem(e.path)
        if problem is None and e.mode not in REGULAR_MODES:
            problem = {"120000": "a symbolic link", "160000": "a submodule"}.get(e.mode, f"git mode {e.mode}")
        size = e.size if e.size is not None else MAX_BLOB_BYTES + 1
        if problem is None and size > MAX_BLOB_BYTES:
            problem = f"a blob of {e.size} bytes (over {MAX_BLOB_BYTES})"
        if problem is None and (found.total_bytes + size > MAX_TREE_BYTES or len(wanted) >= MAX_TREE_FILES):
            problem = f"past the tree's cap ({MAX_TREE_FILES} files, {MAX_TREE_BYTES} bytes)"
        if problem is not None:
            found.skipped.append(Skipped(e.path, problem))
            continue
        found.total_bytes += size
        wanted.append(e)
    if not wanted:
        return found
    # one git process for every blob: "<sha> blob <size>\n<bytes>\n" per request, in order
    stream = git(root, "cat-file", "--batch", stdin="".join(f"{e.sha}\n" for e in wanted).encode())
    at = 0
    for e in wanted:
        header_end = stream.index(b"\n", at)
        header = stream[at:header_end].decode(errors="replace").split()
        if len(header) != 3 or header[0] != e.sha or header[1] != "blob" or int(header[2]) != e.size:
            raise ToolError(f"git cat-file answered {' '.join(header)!r} for {e.sha} ({e.path})")
        size = int(header[2])
        data = stream[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
        try:
            writer.write(e.path, data, executable=e.mode == "100755")
        except OSError as exc:
            found.skipped.append(Skipped(e.path, f"cannot be written ({exc.strerror})"))
            continue
        found.files[e.path] = e.sha
    return found


def materialize_worktree(root: Path, dest: Path) -> Materialized:
    """The working tree's tracked and untracked (not ignored) regular files under `dest`; links,
    folders (submodules) and files over the caps are skipped and listed, deleted ones left out."""
    found = Materialized(dest)
    writer = _Writer(dest)
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for rel in sorted({p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p}):
        problem = path_problem(rel)
        source = root / rel
        if problem is None:
            try:
                st = os.lstat(source)
            except FileNotFoundError:
                continue  # deleted in the working tree: the change removes it
            except OSError as exc:
                problem = f"cannot be read ({exc.strerror})"
            else:
                import stat

                if stat.S_ISLNK(st.st_mode):
                    problem = "a symbolic link"
                elif not stat.S_ISREG(st.st_mode):
                    problem = "not a regular file"
                elif st.st_size > MAX_BLOB_BYTES:
                    problem = f"a file of {st.st_size} bytes (over {MAX_BLOB_BYTES})"
                elif found.total_bytes + st.st_size > MAX_TREE_BYTES or len(found.files) >= MAX_TREE_FILES:
                    problem = f"past the tree's cap ({MAX_TREE_FILES} files, {MAX_TREE_BYTES} bytes)"
        if problem is None:
            try:
                data = read_limited(source, MAX_BLOB_BYTES, root=root)
                writer.write(rel, data, executable=os.access(source, os.X_OK))
            except UnreadableFile as exc:
                problem = exc.message
            except OSError as exc:
                problem = f"cannot be written ({exc.strerror})"
        if problem is not None:
            found.skipped.append(Skipped(rel, problem))
            continue
        found.total_bytes += len(data)
        found.files[rel] = ""
    return found
