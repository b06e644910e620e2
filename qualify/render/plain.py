"""Labels as plain text: the one place that makes control and format characters visible.

A label a plan author wrote (a hypothesis, a revision, a case or gate name) or a string a trial
file holds (a device name, a failure message) is data. Before it lands in any output — Markdown,
a terminal, a plot — its newlines, escape sequences, bidi overrides and zero-width characters are
turned into visible escapes (`\\n`, `\\x1b`, `\\u202e`), so it can neither start a new line, move
the cursor, recolour the terminal nor reorder what a reader sees. Each format then escapes its
own syntax on top (Markdown in qualify.render.readme, rich in qualify.render.terminal).
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Cc: C0/C1 controls and DEL; Cf: bidi overrides, zero-width joiners, soft hyphen; Zl/Zp: the
# Unicode line and paragraph separators, which some viewers break lines at.
_HIDDEN = ("Cc", "Cf", "Zl", "Zp")


def visible(text: object) -> str:
    out = []
    for ch in str(text):
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif unicodedata.category(ch) in _HIDDEN:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)
