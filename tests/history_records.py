"""Records for `qualify history`'s tests: the committed vecload record's results.json as a template,
its pooled figures replaced by planted series, each record's trials given their own samples digest
(so no two are one measurement), revision and start time."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path

import numpy as np

TEMPLATE = Path(__file__).resolve().parents[1] / "records" / "vecload" / "results.json"
STEP_CASE = "N=1048576"  # the case a planted step moves
STEP_AT = 10
N_RECORDS = 20


def template() -> dict:
    return json.loads(TEMPLATE.read_text(encoding="utf-8"))


def planted_values(n: int = N_RECORDS, *, step: float = 4.0, seed: int = 0) -> dict[str, list[float]]:
    """Per case, n changes in % (noise SD 0.25): STEP_CASE steps by `step` points at STEP_AT,
    every other case is flat."""
    rng = np.random.default_rng(seed)
    cases = list(template()["pooled"].values())[0]
    out = {}
    for k, case in enumerate(cases):
        level = -2.0 - 5.0 * k
        values = level + rng.normal(0.0, 0.25, size=n)
        if case == STEP_CASE:
            values[STEP_AT:] += step
        out[case] = [float(v) for v in values]
    return out


def record_json(
    index: int,
    deltas: dict[str, float],
    *,
    revision: str | None = "auto",
    plan_name: str = "vecload",
    rename: dict[str, str] | None = None,
) -> dict:
    """One record: the template with each case's pooled change set to `deltas[case]` % (interval
    ±0.3 points), its trials' start times `index` hours apart and their samples digest unique."""
    data = template()
    data["plan_name"] = plan_name
    device = next(iter(data["pooled"]))
    pooled = {}
    for case, stats in data["pooled"][device].items():
        new = copy.deepcopy(stats)
        ratio = 1 + deltas[case] / 100
        new.update(ratio=ratio, ci_low=ratio - 0.003, ci_high=ratio + 0.003, delta_pct=deltas[case])
        new["case_class"] = "faster" if new["ci_high"] < 1 else "slower" if new["ci_low"] > 1 else "cant_tell"
        pooled[(rename or {}).get(case, case)] = new
    data["pooled"] = {device: pooled}
    for t, trial in enumerate(data["trials"]):
        trial["samples_sha256"] = f"{index:032x}{t:032x}"
        trial["started_at"] = f"2026-11-{1 + index // 24:02d}T{index % 24:02d}:00:{t:02d}.000+00:00"
        rev = revision_of(index) if revision == "auto" else revision
        trial["provenance"]["git_revision"] = rev
        if rename:
            for case in trial["cases"]:
                case["case"] = rename.get(case["case"], case["case"])
    return data


def revision_of(index: int) -> str:
    """The commit record `index` states its trials ran on (40 hex digits, like git's)."""
    return hashlib.sha1(f"record {index}".encode()).hexdigest()


def write_artifacts(folder: Path, series: dict[str, list[float]], **options) -> list[Path]:
    """One record folder per value, run-000/vecload … under `folder`."""
    n = len(next(iter(series.values())))
    paths = []
    for i in range(n):
        record = folder / f"run-{i:03d}" / "vecload"
        record.mkdir(parents=True)
        data = record_json(i, {case: values[i] for case, values in series.items()}, **options)
        (record / "results.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
        paths.append(record)
    return paths


def log_pct(delta: float) -> float:
    return 100 * math.log1p(delta / 100)
