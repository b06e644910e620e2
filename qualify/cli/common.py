"""What every command of the click face shares: the one printer, error lines, paths shown."""

from __future__ import annotations

from pathlib import Path

import click

from qualify.errors import BuildError, QualifyError


class _Out:
    """Prints through a console made for the stream as it is now (tests and pipes replace it)."""

    def print(self, *objects, **kwargs) -> None:
        from qualify.render.terminal import console

        console().print(*objects, **kwargs)


out = _Out()


def fail_line(text: str) -> None:
    # click.echo, not rich: an error line must never be wrapped or styled.
    click.echo(text, err=True)


def shown(path) -> str:
    """A path for a rich line: control characters made visible, [brackets] not read as markup."""
    from rich.markup import escape

    from qualify.errors import printable

    return escape(printable(str(path)))


def printable(text: str) -> str:
    """One line whatever a path or a quoted value holds: control characters are escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def shown_path(file: str | None) -> str | None:
    """A path in an error as the user would type it: relative to the working folder when inside
    it (library code resolves plan paths; messages should not depend on that)."""
    if file is None or not Path(file).is_absolute():
        return file
    try:
        return str(Path(file).relative_to(Path.cwd()))
    except ValueError:
        return file


def report(exc: QualifyError, limit: int | None = None) -> None:
    """Every error found, one `qualify: error:` line each, in the order to fix them; with `limit`
    (`plan check`, whose errors list cases and fields), each message cut to about that length."""
    for each in exc.each():
        each.file = shown_path(each.file)
        fail_line(f"qualify: error: {each.one_line(limit=limit)}")
        if isinstance(each, BuildError) and each.log:
            fail_line(each.log)
