"""Negative controls run once per device and case (qualify.run.engine.controlled_cases): the
first trial on a device that reaches a case runs them, later trial processes on that device do
not, another device runs its own."""

from __future__ import annotations

from test_engine import fake, frozen, run_trial

from qualify.run.fake import FAKE_INFO


def _controls(trial):
    return sorted((c.name, c.case) for c in trial.controls)


def test_the_second_trial_on_a_device_spends_no_time_on_controls_the_first_kept(tmp_path):
    loaded = frozen(tmp_path)
    first = run_trial(loaded, fake(), tmp_path)
    second = run_trial(loaded, fake(), tmp_path)
    assert first.status == second.status == "complete"
    assert _controls(first) and {case for _, case in _controls(first)} == {c.id for c in loaded.cases}
    assert _controls(second) == []
    assert "controls" not in {k for k, v in second.cost.stages_s.items() if v > 0}


def test_another_device_runs_its_own_controls(tmp_path):
    loaded = frozen(tmp_path)
    first = run_trial(loaded, fake(), tmp_path)
    other = FAKE_INFO.model_copy(update={"uuid": "GPU-another-one"})
    on_other = run_trial(loaded, fake(info=other), tmp_path)
    assert _controls(on_other) == _controls(first) != []


def test_a_case_whose_controls_no_earlier_trial_kept_runs_them(tmp_path, monkeypatch):
    """A first trial that kept none (here: every kept control removed from its record, as a
    trial that stopped before its controls) leaves them to the next trial."""
    import qualify.run.engine as engine

    loaded = frozen(tmp_path)
    monkeypatch.setattr(engine, "controlled_cases", lambda record, uuid: frozenset())
    run_trial(loaded, fake(), tmp_path)
    again = run_trial(loaded, fake(), tmp_path)
    assert _controls(again) != []
    monkeypatch.undo()
    kept = engine.controlled_cases(engine.Record(tmp_path / "record"), FAKE_INFO.uuid)
    assert kept == {c.id for c in loaded.cases}
    assert engine.controlled_cases(engine.Record(tmp_path / "record"), "GPU-none") == frozenset()
