"""The run's input store: what one trial process generated, the later ones read back instead of
generating again (qualify.run.inputs.InputStore)."""

from __future__ import annotations

import pytest
from test_engine import fake, frozen, run_trial

from qualify.plan.model import Buffer, Seeds
from qualify.plan.resolve import ResolvedBuffer
from qualify.run import inputs

SEEDS = Seeds(generator="pcg64", base=7)
SPEC = Buffer.model_validate(
    {"name": "x", "dtype": "f32", "shape": ["N"], "role": "input", "init": {"kind": "normal", "std": 1.0}}
)
RESOLVED = ResolvedBuffer("x", "f32", (4096,), "input")


@pytest.fixture(autouse=True)
def fresh_process_cache():
    """Each test starts as a fresh trial process does: nothing generated in this process yet."""
    inputs.clear_cache()
    yield
    inputs.clear_cache()


def _new_process(monkeypatch):
    inputs.clear_cache()


def test_a_later_process_reads_the_inputs_the_first_one_generated(tmp_path, monkeypatch):
    store = inputs.InputStore(tmp_path)
    first = inputs.cached(SEEDS, "N=4096", SPEC, RESOLVED, store)
    assert len(list(tmp_path.glob("input-*.bin"))) == 1
    _new_process(monkeypatch)
    monkeypatch.setattr(inputs, "generate", lambda *a: pytest.fail("generated again although the store holds it"))
    again = inputs.cached(SEEDS, "N=4096", SPEC, RESOLVED, store)
    assert again.tobytes() == first.tobytes()
    assert not again.flags.writeable


def test_the_store_is_keyed_by_what_determines_the_bytes(tmp_path, monkeypatch):
    store = inputs.InputStore(tmp_path)
    a = inputs.cached(SEEDS, "N=4096", SPEC, RESOLVED, store)
    other_seed = inputs.cached(Seeds(generator="pcg64", base=8), "N=4096", SPEC, RESOLVED, store)
    other_case = inputs.cached(SEEDS, "N=4096b", SPEC, RESOLVED, store)
    assert len({a.tobytes(), other_seed.tobytes(), other_case.tobytes()}) == 3
    assert len(list(tmp_path.glob("input-*.bin"))) == 3


@pytest.mark.parametrize("damage", ["short", "long", "link", "folder"])
def test_a_damaged_entry_is_generated_again_never_trusted(tmp_path, monkeypatch, damage):
    store = inputs.InputStore(tmp_path / "store")
    (tmp_path / "store").mkdir()
    want = inputs.generate(SEEDS, "N=4096", SPEC, RESOLVED)
    key = inputs._cache_key(SEEDS, "N=4096", SPEC, RESOLVED)
    path = store.path(key)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * want.nbytes)
    if damage == "short":
        path.write_bytes(b"\0" * (want.nbytes - 4))
    elif damage == "long":
        path.write_bytes(b"\0" * (want.nbytes + 4))
    elif damage == "link":
        path.symlink_to(outside)  # the right size, all zeros: read through the link it would pass
    else:
        path.mkdir()
    got = inputs.cached(SEEDS, "N=4096", SPEC, RESOLVED, store)
    assert got.tobytes() == want.tobytes()
    assert outside.read_bytes() == b"\0" * want.nbytes  # nothing written through the link


def test_nothing_is_stored_past_the_budget(tmp_path):
    store = inputs.InputStore(tmp_path, budget=RESOLVED.nbytes + 100)
    inputs.cached(SEEDS, "N=4096", SPEC, RESOLVED, store)
    inputs.cached(SEEDS, "N=4096b", SPEC, RESOLVED, store)
    assert len(list(tmp_path.glob("input-*.bin"))) == 1


def test_without_a_store_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs.cached(SEEDS, "N=4096", SPEC, RESOLVED)
    assert list(tmp_path.iterdir()) == []


def test_trials_sharing_a_workdir_time_the_same_inputs(tmp_path, monkeypatch):
    """Two trial processes of one run: the second reads the store, and both trials record the
    same input digests (the store changes where the bytes come from, never what they are)."""
    loaded = frozen(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    first = run_trial(loaded, fake(), tmp_path, workdir=work)
    assert list(work.glob("input-*.bin"))
    _new_process(monkeypatch)
    monkeypatch.setattr(inputs, "generate", lambda *a: pytest.fail("the second trial generated its inputs"))
    second = run_trial(loaded, fake(), tmp_path, workdir=work)
    assert [c.input_sha256 for c in first.cases] == [c.input_sha256 for c in second.cases]
    assert all(c.input_sha256 for c in first.cases)


def test_the_budget_counts_what_earlier_processes_stored(tmp_path):
    first = inputs.InputStore(tmp_path, budget=RESOLVED.nbytes + 100)
    inputs.cached(SEEDS, "N=4096", SPEC, RESOLVED, first)
    later = inputs.InputStore(tmp_path, budget=RESOLVED.nbytes + 100)  # a later process's store
    inputs.clear_cache()
    inputs.cached(SEEDS, "N=4096b", SPEC, RESOLVED, later)
    assert len(list(tmp_path.glob("input-*.bin"))) == 1
