"""The machine term: a case over several machines of one GPU model, machines as the replicates.

Within one machine the pooled interval (qualify.evaluate.pooled) holds; between machines it does
not always (issue 34: vecload 1 Mi at −1.90 % [−2.30, −1.50] on one H200, −2.86 % and −2.93 % on
two others). A reader of a merged record asks about the GPU model, not one board, so the spread
between machines enters beside the spread within each, by the same method of moments one level up:

For J machines, machine j with pooled log-ratio mean m_j and standard error se_j (its pooled
interval's half-width over t_{0.975, df_j}):

    w     = mean(se_j²)                         the within-machine part
    b     = max(0, var(m_j, ddof=1) − w)        the between-machine part
    M     = mean(m_j),  se(M)² = (b + w) / J
    df    = Welch–Satterthwaite, capped at Σ df_j (pooled.satterthwaite_df)
    CI    = exp(M ± t_{0.975, df} · se(M)),  MDE as in pooled

Devices of different models are never pooled together; one machine has no machine term. Pure
functions of the pooled statistics, so `report --check` re-derives them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from qualify.evaluate.pooled import pool, satterthwaite_df
from qualify.evaluate.stats import CONFIDENCE, POWER, classify, t_quantile
from qualify.plan.model import Plan
from qualify.plan.resolve import case_id
from qualify.results.model import MachineTerm, PooledStats, Trial


def _pct(log_sd: float) -> float:
    return math.expm1(log_sd) * 100.0


def machine_term(per_machine: dict[str, PooledStats]) -> MachineTerm | None:
    """The case over its machines; None below two machines or when one has no interval."""
    if len(per_machine) < 2:
        return None
    stats = list(per_machine.values())
    if any(s.ci_low is None or s.ci_high is None or s.df is None for s in stats):
        return None
    means = [math.log(s.ratio) for s in stats]
    ses = [
        0.5 * (math.log(s.ci_high) - math.log(s.ci_low)) / t_quantile(0.5 + CONFIDENCE / 2.0, s.df)  # type: ignore[arg-type]
        for s in stats
    ]
    k = len(stats)
    mean = math.fsum(means) / k
    within = math.fsum(se**2 for se in ses) / k
    spread = math.fsum((m - mean) ** 2 for m in means) / (k - 1)
    between = max(0.0, spread - within)
    se = math.sqrt((between + within) / k)
    df = satterthwaite_df(between, within, k, max(k - 1, int(sum(s.df or 0 for s in stats))))
    t_level = t_quantile(0.5 + CONFIDENCE / 2.0, df)
    ratio, lo, hi = math.exp(mean), math.exp(mean - t_level * se), math.exp(mean + t_level * se)
    mde = _pct((t_level + t_quantile(POWER, df)) * se)
    case_class, reason = classify(ratio, lo, hi, mde=mde, blocks=sum(s.trials for s in stats))
    deltas = {name: s.delta_pct for name, s in per_machine.items()}
    return MachineTerm(
        machines=k,
        ratio=ratio,
        ci_low=lo,
        ci_high=hi,
        delta_pct=(ratio - 1.0) * 100.0,
        case_class=case_class,
        reason=f"{reason}; over {k} machines, each machine one replicate",
        df=df,
        within_pct=_pct(math.sqrt(within)),
        between_pct=_pct(math.sqrt(between)),
        mde_pct=mde,
        per_machine_delta_pct=deltas,
    )


def machines_by_model(trials: Sequence[Trial]) -> dict[str, dict[str, list[Trial]]]:
    """Complete trials per GPU model (the device's name) and machine (its label), models with at
    least two machines only."""
    from qualify.evaluate.device_match import device_label

    out: dict[str, dict[str, list[Trial]]] = defaultdict(lambda: defaultdict(list))
    for t in trials:
        if t.status == "complete":
            out[t.provenance.device.name][device_label(t)].append(t)
    return {model: dict(m) for model, m in out.items() if len(m) >= 2}


def model_label(model: str, machines: int) -> str:
    """How a verdict names a judgement over machines (beside each machine's own label)."""
    return f"{model} over {machines} machines"


def machine_terms(plan: Plan, trials: Sequence[Trial]) -> dict[str, dict[str, MachineTerm]]:
    """Per GPU model with two or more machines and per case: the machine term."""
    planned = [case_id(c) for c in plan.workload.cases]
    out: dict[str, dict[str, MachineTerm]] = {}
    for model, machines in machines_by_model(trials).items():
        terms: dict[str, MachineTerm] = {}
        for cid in planned:
            per_machine = {
                label: pool([c.stats for t in mtrials for c in t.cases if c.case == cid])
                for label, mtrials in machines.items()
                if any(c.case == cid for t in mtrials for c in t.cases)
            }
            term = machine_term(per_machine)
            if term is not None:
                terms[cid] = term
        if terms:
            out[model_label(model, len(machines))] = terms
    return out
