"""Fuzzing habit (issue 25, "What to build"): qualify's readers on hostile bytes.

Each property reads an input hypothesis draws — arbitrary bytes, or a committed file with part of
it replaced — and holds the reader to two promises: it answers or raises qualify's own error
(never another exception: a traceback, exit 70, or a panic read as exit 1), and it allocates no
more than a bound proportional to what it was given (tracemalloc's peak). The readers:

- the record's: ledger.jsonl (`Record.ledger`) and trial / results files (`store.load_model`);
- the fat-binary reader (`build.fatbin.entries`) on a `.nv_fatbin` section;
- the golden reader (`plan.golden.load_golden`) on a safetensors file.

The plan loader has its own properties (test_plan_load_properties.py). The corpus is committed as
the `@example`s below: the attacks of the issue and the shapes that once broke a reader, run
every time before hypothesis draws its own. `READERS` (fuzzing.py) time-boxes each example;
QUALIFY_FUZZ_PROFILE=explore searches longer, and `-m fuzz` selects these tests alone.
"""

from __future__ import annotations

import copy
import json
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest
from fuzzing import READERS
from hypothesis import example, given
from hypothesis import strategies as st
from test_plan_load_properties import json_values

from qualify.build import fatbin
from qualify.build.elf import ElfProblem
from qualify.errors import QualifyError
from qualify.results.model import Results, Trial
from qualify.results.store import Record, load_model

pytestmark = pytest.mark.fuzz

ROOT = Path(__file__).resolve().parents[1]
TRIAL = json.loads((ROOT / "records" / "vecload" / "trials" / "trial-1.json").read_text(encoding="utf-8"))
SECTION = fatbin.fatbin_of((ROOT / "tests" / "fixtures" / "fatbin" / "lz4.so").read_bytes())
OVERHEAD = 4 << 20  # what parsing and validation may allocate beyond the input's own size


@contextmanager
def bounded(limit: int):
    """The block's peak allocation (tracemalloc) stays under `limit` bytes."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < limit, f"peak {peak} bytes, bound {limit}"


# -- the ledger ------------------------------------------------------------------------------


@READERS
@given(content=st.binary(max_size=2048) | st.text(max_size=512).map(str.encode))
@example(content=b"[" * 100_000)  # nesting past the interpreter's stack
@example(content=b'{"event": "trial_started", "trial": 1' + b"9" * 5000 + b"}\n")  # an integer past int()'s digits
@example(content=b'{"event": "trial_started", "trial": 1}\n{"event": "trial_ended", "tr')  # cut by a crash
@example(content=b"\xff\xfe\x00{}\n")  # not UTF-8
@example(content=b'{"event": "trial_started", "trial": 1, "trial": 2}\n')  # a key twice
def test_the_ledger_reader_answers_or_names_the_file(tmp_path_factory, content):
    folder = tmp_path_factory.mktemp("record")
    (folder / "ledger.jsonl").write_bytes(content)
    with bounded(64 * len(content) + OVERHEAD):
        try:
            events = Record(folder).ledger()
        except QualifyError as exc:
            assert exc.file is not None and "\n" not in exc.one_line()
            return
    assert all(isinstance(e, dict) and type(e["trial"]) is int for e in events)


# -- trial files and results.json --------------------------------------------------------------


def _paths(node, prefix=(), depth=6) -> list[tuple]:
    """Every place in a JSON document down to `depth` levels, as key paths."""
    out = [prefix]
    if depth and isinstance(node, (dict, list)):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            out.extend(_paths(child, (*prefix, key), depth - 1))
    return out


PLACES = _paths(TRIAL)[1:]  # not the whole document: json_values below stands for that


@st.composite
def edited_trials(draw) -> dict:
    """The committed vecload trial with the value at one place replaced by any JSON value."""
    doc = copy.deepcopy(TRIAL)
    *walk, last = draw(st.sampled_from(PLACES))
    node = doc
    for key in walk:
        node = node[key]
    node[last] = draw(json_values)
    return doc


@pytest.mark.slow
@READERS
@given(doc=edited_trials() | json_values)
@example(doc={**TRIAL, "code": {**TRIAL["code"], "digests": {}}})  # compared code without digests (item 4)
@example(doc={**TRIAL, "index": 2**64})
@example(doc={**TRIAL, "cases": [TRIAL["cases"][0]] * 3})
@example(doc=[])
def test_a_trial_file_loads_or_names_the_file(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("trials") / "trial-1.json"
    text = json.dumps(doc)
    path.write_text(text, encoding="utf-8")
    with bounded(64 * len(text) + OVERHEAD):
        for model in (Trial, Results):
            try:
                load_model(model, path)
            except QualifyError as exc:
                assert exc.file == str(path) and "\n" not in exc.one_line()


# -- the fat-binary reader ----------------------------------------------------------------------


@st.composite
def edited_sections(draw) -> bytes:
    """The lz4 fixture's .nv_fatbin with a few bytes overwritten, or cut short."""
    data = bytearray(SECTION)
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, len(data) - 1))
        chunk = draw(st.binary(min_size=1, max_size=8))
        data[at : at + len(chunk)] = chunk
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) if draw(st.booleans()) else bytes(data)


@READERS
@given(section=edited_sections() | st.binary(max_size=512))
@example(section=b"")
@example(section=SECTION[:16])  # a container header whose entries are gone
@example(section=b"\x50\xed\x55\xba" + b"\xff" * 12)  # a container claiming 2**64 bytes
@example(section=b"\0" * 4096)  # padding only
def test_the_fat_binary_reader_answers_or_names_the_problem(section):
    """Only FatbinProblem (an ElfProblem) leaves the reader; its output is bounded by the input.
    (The per-entry cap stays MAX_ENTRY_BYTES until the total budget lands: the inputs here are
    too small to reach it, and the bound below is the one a small input must meet.)"""
    with bounded(300 * len(section) + OVERHEAD):  # an LZ4 block expands at most ~255 times
        try:
            found = fatbin.entries(section)
        except ElfProblem:
            return
    assert all(e.kind in (fatbin.KIND_PTX, fatbin.KIND_ELF) or isinstance(e.kind, int) for e in found)


# -- the golden reader --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def golden_repo(tmp_path_factory):
    """A repository whose plan's golden is good (test_golden's), and that golden's bytes."""
    from test_golden import setup

    path = setup(tmp_path_factory.mktemp("golden"))
    return path, (path.parent / "golden.safetensors").read_bytes()


@st.composite
def edited_goldens(draw, good: bytes) -> bytes:
    """The good golden with bytes overwritten, mostly in its JSON header (the 8-byte length, then
    the header), or its header length set to anything."""
    data = bytearray(good)
    header_end = 8 + int.from_bytes(good[:8], "little")
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, header_end - 1) | st.integers(0, len(data) - 1))
        chunk = draw(st.binary(min_size=1, max_size=6) | st.sampled_from([b"[", b"{", b'"', b"9" * 30]))
        data[at : at + len(chunk)] = chunk
    if draw(st.booleans()):
        data[:8] = draw(st.integers(0, 2**64 - 1)).to_bytes(8, "little")
    return bytes(data)


def _load(path: Path):
    from qualify.plan.golden import load_golden
    from qualify.plan.load import load_plan

    loaded = load_plan(path)
    return load_golden(loaded.plan, loaded.path, loaded.files.root, loaded.cases)


@READERS
@given(data=st.data())
def test_the_golden_reader_answers_or_names_the_golden(golden_repo, data):
    path, good = golden_repo
    content = data.draw(edited_goldens(good) | st.binary(max_size=256), label="golden")
    golden = path.parent / "golden.safetensors"
    golden.write_bytes(content)
    try:
        with bounded(4 * len(good) + OVERHEAD):
            try:
                _load(path)
            except QualifyError as exc:
                assert "\n" not in exc.one_line()
    finally:
        golden.write_bytes(good)


def test_the_golden_corpus(golden_repo):
    """The golden's committed examples: a header claiming 2**64 bytes, one cut short, dtypes nested
    past the stack (item 10's attack), and a tensor whose offsets lie past the file."""
    path, good = golden_repo
    n = int.from_bytes(good[:8], "little")
    header = json.loads(good[8 : 8 + n])
    deep = {**header, "__metadata__": {**header["__metadata__"], "dtypes": "[" * 100_000}}
    name = next(k for k in header if k != "__metadata__")
    past = {**header, name: {**header[name], "data_offsets": [0, 2**40]}}

    def with_header(h: dict) -> bytes:
        text = json.dumps(h).encode()
        return len(text).to_bytes(8, "little") + text + good[8 + n :]

    golden = path.parent / "golden.safetensors"
    corpus = [b"\xff" * 8 + good[8:], good[: 8 + n // 2], with_header(deep), with_header(past)]
    try:
        for content in corpus:
            golden.write_bytes(content)
            with bounded(4 * len(good) + OVERHEAD), pytest.raises(QualifyError):
                _load(path)
    finally:
        golden.write_bytes(good)
