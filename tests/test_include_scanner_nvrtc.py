"""The include scanner against NVRTC itself (issue 36, item 2): for every source, the headers the
scanner names are exactly the headers NVRTC's preprocessor opens, or the scanner refuses the source
naming its file and line.

Sources are built from fragments that hide directives from a naive lexer, or make NVRTC obey
ones it does not see: raw string literals holding quotes, `/*` and whole lines; line splices
(inside words, after `//`); form feeds and vertical tabs beside `#`; digit separators; header
names holding comment marks; `__has_include` through an object-like macro, a function-like one or
token pasting; a carriage return alone. NVRTC is observed from a confined worker
(nvrtc_oracle.py): what its time trace says it processed and what its log says it could not open.

The attacks of the issue are the committed corpus (CORPUS, each run every time); hypothesis then
draws combinations of fragments (`fuzz` marker; QUALIFY_FUZZ_PROFILE=explore for longer).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import PROFILE
from hypothesis import given, settings
from hypothesis import strategies as st

from qualify.build import includes
from qualify.cpp_lexer import INCLUDE_WORDS
from qualify.errors import ExitCode, PlanError

cuda = pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is the oracle (pip install -e '.[cu13]')")

from nvrtc_oracle import MISSED, VOCABULARY, Oracle  # noqa: E402 - after the skip above

KERNEL = '\nextern "C" __global__ void k() {}\n'


@pytest.fixture(scope="module")
def oracle():
    o = Oracle()
    yield o
    o.close()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("vocabulary")
    for name in VOCABULARY:
        (folder / name).write_text("/* empty */\n")
    return folder


def scanner_view(source: str, repo: Path) -> tuple[set[str], set[str]] | PlanError:
    """(names the scanner resolves for #include, for __has_include), or its refusal."""
    path = repo / "fuzz.cu"
    data = source.encode()
    try:
        found = includes.resolve_headers(path, data, (repo,), (repo,), (), {})
    except PlanError as exc:
        return exc
    scanned = includes.scan(source)
    include_lines = {d.line for d in scanned.directives if d.word in INCLUDE_WORDS}
    included = {name for line, name, _ in scanned.includes if line in include_lines}
    literal = {m: name for m, name, _, _ in scanned.literal_defines}
    included |= {literal[m] for _, m in scanned.macro_includes if m in literal}
    return included & set(found.by_name), set(found.by_name) - included


def check(source: str, oracle: Oracle, repo: Path) -> None:
    opened, log, compiled = oracle.opened(source)
    view = scanner_view(source, repo)
    if isinstance(view, PlanError):
        # refused: exit 2, naming the file and the line
        assert view.exit_code == ExitCode.BAD_INPUT == 2 and view.field and view.field.startswith("line "), view
        return
    included, probed = view
    assert MISSED not in log, f"__has_include tested a name the scanner did not see\n{source!r}"
    unopened = opened - set(VOCABULARY)  # a name NVRTC could not find stops it there
    assert compiled or unopened, f"the corpus or generator wrote a source NVRTC rejects: {log}\n{source!r}"
    assert opened == included, f"NVRTC opened {sorted(opened)}, the scanner saw {sorted(included)}\n{source!r}"
    assert probed <= set(VOCABULARY)


# the attacks of issue 36, and the shapes that once hid a directive
CORPUS = {
    "raw string with a quote, then a comment hiding nothing": (
        '__device__ const char* s = R"x(")x"; /*\n#include "h2.h"\n*/\n#include "h1.h"'
    ),
    "raw string holding /* and a directive": '__device__ const char* s = R"d( " /* \n#include "h3.h"\n)d";\n#include "h4.h"',
    "raw string with prefix and splice before its quote": '__device__ const auto s = u8R\\\n"q(\n#include "h5.h"\n)q";',
    "identifier ending in R is no raw string": '#define fooR\n__device__ const char* s = fooR"x(" /*\n#include "h2.h"\n*/;',
    "form feed and vertical tab beside #": '\f#\f include "h1.h"\n#\vinclude "h2.h"\n\v#include \v"h3.h"',
    "digraph": '%:include "h1.h"',
    "splice inside the directive word": '#inc\\\nlude "h6.h"',
    "line comment continued by a splice": '// hidden \\\n#include "h1.h"\n#include "h2.h"',
    "backslash space newline is no splice": '// not hidden \\ \n#include "h3.h"',
    "string holding /*": '__device__ const char* t = "/*";\n#include "h1.h"\n__device__ const char* u = "*/";',
    "character literal quote": '__device__ char c = \'"\';\n#include "h2.h"',
    "digit separator": '__device__ int d = 1\'000; /*\n#include "h2.h"\n*/\n#include "h3.h"',
    "header name holding a comment": "#include <h1.h/*x*/>",
    "block comment between # and include": '/**/#/* a\n b */include/**/"h7.h"',
    "carriage return alone is no newline": '#include "h1.h"\r#include "h2.h"',
    "object-like macro for __has_include": f'#define H __has_include\n#if H("/etc/passwd")\n#else\n#error {MISSED}\n#endif',
    "macro operand of __has_include": f'#define M "/etc/passwd"\n#if __has_include(M)\n#else\n#error {MISSED}\n#endif',
    "wrapper of a wrapper": f'#define W(x) __has_include(x)\n#define V W\n#if V("/etc/passwd")\n#else\n#error {MISSED}\n#endif',
    "token pasting builds __has_include": f'#define CAT(a, b) a##b\n#if CAT(__has_, include)("/etc/passwd")\n#else\n#error {MISSED}\n#endif',
    "__has_include spelled whole": f'#if __has_include("h1.h") && __has_include(<h2.h>)\n#else\n#error {MISSED}\n#endif',
    "defined(__has_include)": f'#if defined(__has_include)\n#else\n#error {MISSED}\n#endif\n#include "h1.h"',
    "include through a literal macro": '#define HDR "h4.h"\n#include HDR',
    "include through a stringizing macro": "#define S(x) #x\n#include S(h4.h)",
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_scanner_sees_what_nvrtc_opens_on_the_corpus(name, oracle, repo):
    check(CORPUS[name] + KERNEL, oracle, repo)


# -- generated sources -----------------------------------------------------------------------

_header = st.sampled_from(VOCABULARY)
_space = st.sampled_from([" ", "\t", "\f", "\v", "/**/", " /* c\n */ ", ""])


@st.composite
def _include(draw) -> str:
    name = draw(_header)
    operand = f'"{name}"' if draw(st.booleans()) else f"<{name}>"
    lead = draw(st.sampled_from(["", " ", "\f", "\v", "/**/"]))
    return f"{lead}{draw(st.sampled_from(['#', '%:']))}{draw(_space)}include{draw(_space) or ' '}{operand}"


@st.composite
def _raw(draw) -> str:
    delim = draw(st.sampled_from(["", "x", "abc", "q_1"]))
    pieces = draw(st.lists(st.sampled_from(['"', "/*", "*/", "//", ")", ')z"', "\\\n", "\n", "'", 'R"(']), max_size=6))
    if draw(st.booleans()):
        pieces.append(f"\n{draw(_include())}\n")
    body = "".join(pieces)
    prefix = draw(st.sampled_from(["", "u8", "u", "U", "L"]))
    return f'__device__ const auto r@ID@ = {prefix}R"{delim}({body}){delim}";'


@st.composite
def _hider(draw) -> str:
    """A construct after which a directive is, or is not, visible to the preprocessor."""
    return draw(
        st.sampled_from(
            [
                "/*",  # closed by the fragment after the include
                "// \\",
                "// \\ ",
                '__device__ const char* h@ID@ = "/*"; //',
                "__device__ char c@ID@ = '\"'; /*",
                "__device__ int n@ID@ = 1'0; /*",
            ]
        )
    )


@st.composite
def _fragment(draw) -> str:
    kind = draw(st.sampled_from(["include", "raw", "hidden", "macro", "has_include"]))
    if kind == "include":
        return draw(_include())
    if kind == "raw":
        return draw(_raw())
    if kind == "hidden":
        hider = draw(_hider())
        closer = "\n*/" if hider.endswith("/*") else ""
        name = draw(_header)
        return f'{hider}\n#include "{name}"{closer}'
    if kind == "macro":
        n = "@ID@"
        operand = draw(st.sampled_from(['"{}"', "<{}>"])).format(draw(_header))
        return f"#define M{n} {operand}\n#include M{n}"
    operand = draw(st.sampled_from(['"{}"', "<{}>"])).format(draw(_header))
    spell = draw(st.sampled_from(["__has_include({})", "HI({})", "CAT(__has_, include)({})"]))
    return (
        "#define HI(x) __has_include(x)\n#define CAT(a, b) a##b\n"
        f"#if {spell.format(operand)}\n#else\n#error {MISSED}\n#endif"
    )


@st.composite
def sources(draw) -> str:
    fragments = draw(st.lists(_fragment(), min_size=1, max_size=5))
    text = "\n".join(f.replace("@ID@", str(i)) for i, f in enumerate(fragments))
    for _ in range(draw(st.integers(0, 2))):  # a splice anywhere: phase 2 joins it first
        at = draw(st.integers(0, len(text)))
        if not text[:at].endswith("\\"):  # after a backslash it would leave a stray one
            text = text[:at] + "\\\n" + text[at:]
    return text + "\n" + KERNEL


@pytest.mark.fuzz
@settings(PROFILE, max_examples=max(PROFILE.max_examples // 5, 1))
@given(sources())
def test_the_scanner_sees_what_nvrtc_opens_on_generated_sources(oracle, repo, source):
    check(source, oracle, repo)
