"""The lexer's two small readers that the include scanner and the plan's file collector share:
a directive line's word, and a header name written as a literal."""

from __future__ import annotations

import pytest

from qualify.cpp_lexer import header_name, lex


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"a.h" rest', ("a.h", True, '"a.h"')),
        ("<cuda/std/cstdint>", ("cuda/std/cstdint", False, "<cuda/std/cstdint>")),
        ("< spaced >", (" spaced ", False, "< spaced >")),  # kept as written; callers decide on spaces
        ("<a>b>", ("a", False, "<a>")),
    ],
)
def test_header_name_reads_the_literal_at_the_start(text, expected):
    assert header_name(text) == expected


@pytest.mark.parametrize("text", ['""', "<>", "<a<b>", '"a\nb"', ' "a.h"', "HDR", '"open', "<open"])
def test_header_name_refuses_what_is_not_one_literal_at_the_start(text):
    assert header_name(text) is None


def test_directive_words_as_nvrtc_forms_the_lines():
    source = '%: include "a.h"\n\f#\vdefine X 1\n#\n# 12 "line.cu"\n#inc\\\nlude <b.h>\n??=if 1\nint x;\n'
    read = [(line.number, line.directive()) for line in lex(source).lines]
    assert read == [
        (1, ("include", ' "a.h"')),
        (2, ("define", " X 1")),
        (3, None),  # the null directive has no word
        (4, None),  # a line marker's operand is a number, not a word
        (5, ("include", " <b.h>")),
        (7, ("if", " 1")),
    ]
