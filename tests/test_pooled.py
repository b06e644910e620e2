"""The two-level interval over trials (each trial one process), on hand-checkable synthetic trials."""

from __future__ import annotations

import math

import pytest
from test_stats import interleaved

from qualify.evaluate.pooled import ONE_PROCESS, pool, satterthwaite_df, trial_moments
from qualify.evaluate.stats import case_stats, classify, mde_pct, t_quantile
from qualify.results.model import CaseStats

T975 = 0.975


def trial(mean: float, sd: float, blocks: int = 10) -> CaseStats:
    """A trial's statistics as case_stats states them, for block log-ratios of this mean and SD."""
    half = t_quantile(T975, blocks - 1) * sd / math.sqrt(blocks)
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    mde = mde_pct(sd, blocks)
    cls, why = classify(math.exp(mean), lo, hi, mde=mde, blocks=blocks)
    return CaseStats(
        ratio=math.exp(mean),
        ci_low=lo,
        ci_high=hi,
        delta_pct=math.expm1(mean) * 100.0,
        case_class=cls,
        reason=why,
        blocks=blocks,
        mde_pct=mde,
        log_mean=mean,
        log_sd=sd,
    )


def test_case_stats_records_the_moments_of_its_block_log_ratios():
    from qualify.evaluate.stats import block_log_ratios

    data = interleaved(100_000, 97_000, blocks=8, seed=3)
    logs = block_log_ratios(*data)
    stats = case_stats(*data)
    assert stats.log_mean == pytest.approx(float(logs.mean()), rel=1e-15)
    assert stats.log_sd == pytest.approx(float(logs.std(ddof=1)), rel=1e-15)
    assert math.exp(stats.log_mean) == stats.ratio


def test_one_trial_is_its_own_interval_and_says_it_covers_one_process():
    stats = case_stats(*interleaved(100_000, 97_000, blocks=8, seed=3))
    p = pool([stats])
    assert (p.ratio, p.ci_low, p.ci_high, p.mde_pct, p.case_class) == (
        stats.ratio,
        stats.ci_low,
        stats.ci_high,
        stats.mde_pct,
        stats.case_class,
    )
    assert p.trials == 1 and p.df == 7.0 and p.between_pct is None
    assert p.within_pct == pytest.approx(math.expm1(stats.log_sd / math.sqrt(8)) * 100.0, rel=1e-12)
    assert p.reason.endswith(ONE_PROCESS) and "one process only" in p.reason


def test_identical_trials_have_no_between_part_and_all_the_within_degrees_of_freedom():
    one = trial(-0.03, 0.01, blocks=10)
    p = pool([one, one, one])
    assert p.between_pct == 0.0 and p.df == 27.0  # Σ(n_i − 1) = 3 × 9
    se = math.sqrt(0.01**2 / 10 / 3)  # (b + w) / k with b = 0, w = s² / n
    half = t_quantile(T975, 27) * se
    assert p.ratio == pytest.approx(math.exp(-0.03), rel=1e-14)
    assert (p.ci_low, p.ci_high) == pytest.approx((math.exp(-0.03 - half), math.exp(-0.03 + half)), rel=1e-14)
    assert p.mde_pct == pytest.approx(math.expm1((t_quantile(T975, 27) + t_quantile(0.8, 27)) * se) * 100, rel=1e-12)
    assert p.within_pct == pytest.approx(math.expm1(0.01 / math.sqrt(10)) * 100, rel=1e-12)
    # three processes that agree narrow the interval below one trial's
    assert p.ci_high - p.ci_low < one.ci_high - one.ci_low


def test_the_formulas_on_a_hand_computed_pair():
    # m = (0, 0.1), s = 0.01, n = 10: w = 1e-5, var(m) = 0.005, b = 0.00499, se² = 0.005 / 2
    p = pool([trial(0.0, 0.01), trial(0.1, 0.01)])
    w, b = 1e-5, 0.005 - 1e-5
    df = (b + w) ** 2 / (b**2 / 1 + w**2 / 18)
    assert p.df == pytest.approx(df, rel=1e-12)
    assert p.within_pct == pytest.approx(math.expm1(math.sqrt(w)) * 100, rel=1e-9)
    assert p.between_pct == pytest.approx(math.expm1(math.sqrt(b)) * 100, rel=1e-9)
    half = t_quantile(T975, df) * math.sqrt(0.0025)
    assert p.ratio == pytest.approx(math.exp(0.05), rel=1e-14)
    assert (p.ci_low, p.ci_high) == pytest.approx((math.exp(0.05 - half), math.exp(0.05 + half)), rel=1e-12)
    assert "pooled over 2 trials (2 processes)" in p.reason


def test_widely_spread_trials_widen_the_interval_to_cover_them():
    trials = [trial(m, 0.003) for m in (-0.04, -0.01, 0.02)]
    p = pool(trials)
    assert p.between_pct > 1.0 > p.within_pct  # processes differ by more than a trial resolves
    assert all(p.ci_low < t.ratio < p.ci_high for t in trials)
    # each trial's own interval excludes the other trials' ratios: one process's interval is too narrow
    assert all(not (t.ci_low < u.ratio < t.ci_high) for t in trials for u in trials if u is not t)
    assert p.case_class == "cant_tell"  # the processes straddle 1: no verdict either way
    assert all(math.log(p.ci_high / p.ci_low) > 10 * math.log(t.ci_high / t.ci_low) for t in trials)


def test_with_a_between_part_the_standard_error_is_that_of_the_trial_means():
    # b > 0 makes b + w = var(m_i): the trials' means, not their blocks, set the interval's width
    means = (-0.035, -0.040, 0.010, -0.017, -0.042, -0.008)
    p = pool([trial(m, 0.003) for m in means])
    k, mean = len(means), math.fsum(means) / len(means)
    se = math.sqrt(math.fsum((m - mean) ** 2 for m in means) / (k - 1) / k)
    half = t_quantile(T975, p.df) * se
    assert 0.0 < p.between_pct and k - 1 <= p.df < k  # Satterthwaite: the between part dominates
    assert (p.ci_low, p.ci_high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)), rel=1e-12)


@pytest.mark.parametrize("ratio_bw", [0.0, 0.01, 0.1, 0.5, 1.0, 3.0, 30.0, float("inf")])
@pytest.mark.parametrize("blocks", [(2, 2), (5, 8, 12), (10, 10, 10, 10)])
def test_satterthwaite_df_lies_between_the_trials_and_the_blocks(ratio_bw, blocks):
    trials = len(blocks)
    within_df = sum(n - 1 for n in blocks)
    w = 0.0 if ratio_bw == float("inf") else 1e-4
    b = 1e-4 * (1.0 if ratio_bw == float("inf") else ratio_bw)
    df = satterthwaite_df(b, w, trials, within_df)
    assert trials - 1 <= df <= within_df
    if b == 0.0:
        assert df == within_df
    if w == 0.0:
        assert df == trials - 1


def test_satterthwaite_df_by_hand_and_its_cap():
    # b = w, k = 3, Σ(n_i − 1) = 12: (2w)² / (w²/2 + w²/12) = 48/7
    assert satterthwaite_df(1e-4, 1e-4, 3, 12) == pytest.approx(48 / 7, rel=1e-14)
    # b/w = 1/18 would give 1 + 18 = 19 > 18: never more than the blocks within the trials hold
    assert satterthwaite_df(1e-4 / 18, 1e-4, 2, 18) == 18.0
    # no within part (every trial's blocks identical): the trials alone, exactly k − 1 (the
    # formula would give 7.000000000000001 here)
    assert satterthwaite_df(1e-4, 0.0, 5, 40) == 4.0
    assert satterthwaite_df(0.021, 0.0, 8, 100) == 7.0
    # no between part: the blocks alone
    assert satterthwaite_df(0.0, 1e-4, 5, 40) == 40.0


def test_trials_made_before_the_moments_were_recorded_give_them_from_their_interval():
    stats = case_stats(*interleaved(100_000, 97_000, blocks=8, seed=5))
    old = stats.model_copy(update={"log_mean": None, "log_sd": None})
    new_m, old_m = trial_moments(stats), trial_moments(old)
    assert old_m.blocks == new_m.blocks == 8
    assert old_m.mean == pytest.approx(new_m.mean, rel=1e-12, abs=1e-15)
    assert old_m.sd == pytest.approx(new_m.sd, rel=1e-9)
    a, b = pool([stats, stats]), pool([old, old])
    assert (b.ci_low, b.ci_high) == pytest.approx((a.ci_low, a.ci_high), rel=1e-12)


def test_a_trial_without_an_interval_leaves_the_pooled_case_without_one():
    short = trial(-0.1, 0.01).model_copy(
        update={"ci_low": None, "ci_high": None, "blocks": 1, "log_sd": None, "mde_pct": None}
    )
    p = pool([trial(-0.1, 0.01), short])
    assert p.ci_low is None and p.ci_high is None and p.mde_pct is None and p.df is None
    assert p.case_class == "cant_tell" and "1 of 2 trials have fewer than two blocks" in p.reason
    assert p.ratio == pytest.approx(math.exp(-0.1), rel=1e-14)


def test_pool_is_deterministic_and_refuses_no_trials():
    trials = [trial(m, 0.004, blocks=n) for m, n in ((-0.02, 6), (-0.03, 9), (-0.025, 12))]
    assert pool(trials) == pool(list(trials))
    with pytest.raises(ValueError):
        pool([])


# ---------------------------------------------------------------------------------------------
# gates judged over trials read the pooled interval


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One trial of the fake engine under a plan whose regression gate is judged over trials."""
    from test_verdict import _plan, _trial

    gates = [{"name": "no_regression", "max_regression_pct": 2.0}]
    return _trial(tmp_path_factory.mktemp("pooled"), _plan(gates, every_trial=False), 10_000.0, noise=0.002)


def planted(base, means: list[float], sd: float = 0.003, device: str | None = None):
    """Trials 1, 2 … of `base`, every case's statistics those of block log-ratios of these means."""
    out = []
    for i, m in enumerate(means, 1):
        cases = [c.model_copy(update={"stats": trial(m, sd)}) for c in base.cases]
        update = {"index": i, "cases": cases, "started_at": f"2026-03-0{i}T10:00:00.000+00:00"}
        if device is not None:
            dev = base.provenance.device.model_copy(update={"uuid": device})
            update["provenance"] = base.provenance.model_copy(update={"device": dev})
        out.append(base.model_copy(update=update))
    return out


def test_a_gate_over_trials_that_each_pass_but_disagree_cannot_tell(measured):
    from qualify.evaluate.verdict import judge_gate, judge_gates

    plan, base = measured
    trials = planted(base, [0.0, math.log(1.015), math.log(0.985)])
    for t in trials:  # each trial alone passes the gate, and so would the median of their ratios
        assert all(
            judge_gate(plan.acceptance.gates[0], c.stats.ratio, c.stats.ci_low, c.stats.ci_high, c.stats.mde_pct)[0]
            == "pass"
            for c in t.cases
        )
    judged, undecided = judge_gates(plan, trials)
    assert judged == [] and len(undecided) == len(base.cases)
    assert all("(pooled over 3 trials (3 processes))" in r and "can't tell" in r for r in undecided)


def test_a_gate_over_trials_that_agree_passes_on_the_pooled_interval(measured):
    from qualify.evaluate.verdict import judge_gates

    plan, base = measured
    judged, undecided = judge_gates(plan, planted(base, [0.0, 0.001, -0.001]))
    assert undecided == [] and [g.passed for g in judged] == [True] * len(base.cases)
    assert all(g.trial is None for g in judged)


def test_a_missed_gate_over_trials_names_the_pooled_trials(measured):
    from qualify.evaluate.verdict import verdict

    plan, base = measured
    v = verdict(plan, planted(base, [0.05, 0.052, 0.048]))
    assert v.status == "not_qualified" and [g.passed for g in v.gates] == [False] * len(base.cases)
    assert any(
        r.startswith("gate no_regression missed at") and "(pooled over 3 trials (3 processes))" in r for r in v.reasons
    )
    assert not any("median of trials" in r for r in v.reasons)


def test_devices_are_never_pooled_together(measured):
    from qualify.evaluate.verdict import judge_gates, pooled_cases

    plan, base = measured
    here = planted(base, [0.0, 0.001])
    there = [t.model_copy(update={"index": t.index + 2}) for t in planted(base, [0.05, 0.051], device="GPU-other")]
    pooled = pooled_cases(plan, here + there)
    assert len(pooled) == 2 and all(p.trials == 2 for cases in pooled.values() for p in cases.values())
    ratios = sorted(round(p.ratio, 3) for cases in pooled.values() for p in cases.values())
    assert ratios == [round(math.exp(0.0005), 3)] * len(base.cases) + [round(math.exp(0.0505), 3)] * len(base.cases)
    judged, _ = judge_gates(plan, here + there)
    assert sorted(g.passed for g in judged) == [False] * len(base.cases) + [True] * len(base.cases)


def test_a_trial_recorded_before_its_moments_without_an_interval_has_no_sd():
    one_block = CaseStats(
        ratio=0.97,
        ci_low=None,
        ci_high=None,
        delta_pct=-3.0,
        case_class="cant_tell",
        reason="1 block with a ratio on both arms: no interval (needs two)",
        blocks=1,
    )
    m = trial_moments(one_block)
    assert (m.mean, m.sd, m.blocks) == (math.log(0.97), None, 1)


def test_a_two_block_trial_keeps_its_recorded_sd():
    two = CaseStats(
        ratio=0.97,
        ci_low=0.9,
        ci_high=1.05,
        delta_pct=-3.0,
        case_class="cant_tell",
        reason="r",
        blocks=2,
        log_mean=math.log(0.97),
        log_sd=0.02,
    )
    assert trial_moments(two).sd == 0.02


def test_without_a_pooled_interval_the_change_is_the_pooled_ratio_in_percent():
    short = CaseStats(
        ratio=0.98,
        ci_low=None,
        ci_high=None,
        delta_pct=-2.0,
        case_class="cant_tell",
        reason="r",
        blocks=1,
        log_mean=math.log(0.98),
        log_sd=None,
    )
    full = CaseStats(
        ratio=0.96,
        ci_low=0.95,
        ci_high=0.97,
        delta_pct=-4.0,
        case_class="faster",
        reason="r",
        blocks=10,
        log_mean=math.log(0.96),
        log_sd=0.01,
    )
    p = pool([short, full])
    assert p.ci_low is None and p.case_class == "cant_tell"
    assert p.ratio == pytest.approx(math.sqrt(0.98 * 0.96), rel=1e-12)
    assert p.delta_pct == pytest.approx((p.ratio - 1.0) * 100.0, rel=1e-12)


def test_the_pooled_change_is_the_pooled_ratio_in_percent():
    trials = [
        CaseStats(
            ratio=r,
            ci_low=r - 0.01,
            ci_high=r + 0.01,
            delta_pct=(r - 1) * 100,
            case_class="faster",
            reason="r",
            blocks=10,
            log_mean=math.log(r),
            log_sd=0.01,
        )
        for r in (0.96, 0.98)
    ]
    p = pool(trials)
    assert p.ci_low is not None
    assert p.delta_pct == pytest.approx((p.ratio - 1.0) * 100.0, rel=1e-12)


def _bare(**fields) -> CaseStats:
    """A trial's statistics with only the fields a test names (a hand-edited or old trial file)."""
    base = {"ratio": 0.97, "ci_low": None, "ci_high": None, "delta_pct": -3.0, "case_class": "cant_tell", "reason": "r"}
    return CaseStats(**(base | fields))


def test_moments_without_a_block_count_have_none_and_one_block_has_no_sd_whatever_was_recorded():
    m = trial_moments(_bare(log_mean=-0.03, log_sd=0.01))
    assert (m.blocks, m.sd) == (0, None)
    assert trial_moments(_bare(blocks=1, log_mean=-0.03, log_sd=0.01)).sd is None


def test_old_trials_two_blocks_are_enough_for_an_sd_and_a_missing_bound_is_not():
    half = 0.02
    two = _bare(ci_low=0.97 * math.exp(-half), ci_high=0.97 * math.exp(half), blocks=2)
    assert trial_moments(two).sd == pytest.approx(half * math.sqrt(2) / t_quantile(T975, 1), rel=1e-12)
    assert trial_moments(two.model_copy(update={"ci_low": None, "blocks": 5})).sd is None
    assert trial_moments(two.model_copy(update={"ci_high": None, "blocks": 5})).sd is None


def test_satterthwaite_df_with_neither_part_is_the_blocks_alone():
    assert satterthwaite_df(0.0, 0.0, 3, 12) == 12.0


def test_one_trial_without_an_interval_states_no_degrees_of_freedom_or_within_part():
    recorded_sd = _bare(blocks=5, log_mean=-0.03, log_sd=0.01)  # its interval lost, its SD kept
    for stats in (recorded_sd, _bare(blocks=1, log_mean=-0.03)):
        p = pool([stats])
        assert (p.df, p.within_pct, p.ci_low, p.ci_high) == (None, None, None, None)
        assert ONE_PROCESS in p.reason


def test_the_trials_without_two_blocks_are_the_ones_counted():
    short = trial(-0.1, 0.01).model_copy(
        update={"ci_low": None, "ci_high": None, "blocks": 1, "log_sd": None, "mde_pct": None}
    )
    p = pool([trial(-0.1, 0.01), trial(-0.1, 0.012), short])
    assert "1 of 3 trials have fewer than two blocks" in p.reason
