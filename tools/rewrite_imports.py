"""Rewrite module paths in files according to a moves list (tools/moves-issue23.txt).

Each `old.dotted.module -> new.dotted.module` line rewrites, in every file given:
  - dotted names: `import old.mod`, `from old.mod import x`, `"old.mod"` strings, `python -m old.mod`;
  - file paths: `old/mod.py` (docs, tools/mutation.json, pyproject);
  - `from old.pkg import mod` when `old.pkg.mod` moved (-> `from new.pkg import mod`, one name a line).
Names are matched whole (`qualify.commands.check` never rewrites `qualify.checks`), all moves in one pass, so a
move's target is never rewritten again by another move.

usage: python tools/rewrite_imports.py [--moves FILE] PATH...   (folders are walked for text files)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

SUFFIXES = {".py", ".md", ".json", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini", ".j2", ".sh"}


def read_moves(path: Path) -> dict[str, str]:
    moves = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            old, new = (part.strip() for part in line.split("->"))
            moves[old] = new
    return moves


def rewriter(moves: dict[str, str]):
    dotted = {**moves}
    paths = {old.replace(".", "/") + ".py": new.replace(".", "/") + ".py" for old, new in moves.items()}
    names = sorted(dotted, key=len, reverse=True)
    dotted_re = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, names)) + r")(?![\w])")
    path_re = re.compile(r"(?<![\w/])(" + "|".join(map(re.escape, sorted(paths, key=len, reverse=True))) + r")")
    # `from pkg import a, b as c` where pkg.a moved: one import line per moved name
    from_re = re.compile(
        r"^(?P<indent>[ \t]*)from (?P<pkg>[\w.]+) import (?P<names>[\w, ]+?)(?P<tail>[ \t]*(#.*)?)$", re.M
    )

    def split_from(m: re.Match) -> str:
        pkg, indent = m["pkg"], m["indent"]
        parts = [p.strip() for p in m["names"].split(",") if p.strip()]
        if not any(f"{pkg}.{p.split(' as ')[0].strip()}" in moves for p in parts):
            return m.group(0)
        lines, kept = [], []
        for p in parts:
            name = p.split(" as ")[0].strip()
            target = moves.get(f"{pkg}.{name}")
            if target is None:
                kept.append(p)
                continue
            new_pkg, new_name = target.rsplit(".", 1)
            alias = p.split(" as ")[1].strip() if " as " in p else (name if new_name != name else None)
            lines.append(
                f"{indent}from {new_pkg} import {new_name}" + (f" as {alias}" if alias and alias != new_name else "")
            )
        if kept:
            lines.insert(0, f"{indent}from {pkg} import {', '.join(kept)}")
        lines[-1] += m["tail"]
        return "\n".join(lines)

    def rewrite(text: str) -> str:
        text = from_re.sub(split_from, text)
        text = dotted_re.sub(lambda m: dotted[m.group(1)], text)
        return path_re.sub(lambda m: paths[m.group(1)], text)

    return rewrite


def files(roots: list[Path]):
    for root in roots:
        if root.is_file():
            yield root
        elif root.is_dir():
            for p in sorted(root.rglob("*")):
                if p.is_file() and p.suffix in SUFFIXES and ".venv" not in p.parts and ".git" not in p.parts:
                    yield p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=Path, default=Path(__file__).with_name("moves-issue23.txt"))
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args()
    rewrite = rewriter(read_moves(args.moves))
    for path in files(args.paths):
        if path.resolve() == args.moves.resolve():
            continue
        text = path.read_text()
        new = rewrite(text)
        if new != text:
            path.write_text(new)
            print(f"rewrote {path}")


if __name__ == "__main__":
    main()
