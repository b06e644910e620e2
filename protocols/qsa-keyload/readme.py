"""Write the generated parts of protocols/qsa-keyload/README.md from the plan, calibrate.py and a record.

    python protocols/qsa-keyload/readme.py [--record records/qsa-keyload] [--check]

The README's prose is written by hand; every figure in it sits between a pair of markers
`<!-- generated:NAME -->` … `<!-- /generated:NAME -->` and is written here:

- `bounds`: each case's bound per output and the emulated kernel's worst bound fraction under it
  (calibrate.py's evaluation);
- `controls`: the negative controls as the plan declares them, with their reasons, and what the
  emulation says each does per case;
- `grid`: per case and arm, the launch's blocks (R × HQ / G, from the plan) against the device's
  SMs, the work each block does serially, and the key and value bytes the grid reads;
- `record`: the H200 record's change per case beside the seed's sm_120 figures, or a line saying
  the record is not made yet.

--check writes nothing and exits 1 when the README differs from what would be written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import calibrate  # noqa: E402

from qualify import expr  # noqa: E402
from qualify.plan.load import load_plan  # noqa: E402
from qualify.results.store import Record  # noqa: E402

README = HERE / "README.md"
FIRST_RECORD = ROOT / "tests/fixtures/qsa-keyload-first-plan"  # made under the plan's first, global bound
H200_SMS = 132  # `qualify doctor` on the lent H200 (README.md); a record's own device count wins
# The seed's figures on one RTX 5060 (sm_120), quoted from ../shared/seeds/qsa-attention-pr.txt:
# rows × tokens → milliseconds before and after (four heads per CTA and 128-bit key loads).
SEED_SM120 = {(512, 512): (12.18, 6.93), (1024, 1024): (48.12, 26.67), (2048, 2048): (192.84, 111.55)}
HEAD_DIM_BYTES = 256 * 2


def _cases(loaded):
    return [(c, {**loaded.plan.workload.params, **c.values}) for c in loaded.cases]


def first_record_max_abs() -> dict[tuple[str, str], float]:
    """The first H200 record's largest |err| per case and output (its trials agree; the largest is kept)."""
    out: dict[tuple[str, str], float] = {}
    if not (FIRST_RECORD / "results.json").exists():
        return out
    for t in Record(FIRST_RECORD).trials():
        for c in t.cases:
            for n in c.tolerance.counts["candidate"] if c.tolerance is not None else []:
                out[(c.case, n.output)] = max(out.get((c.case, n.output), 0.0), n.max_abs)
    return out


def bounds_section(candidate, resolutions) -> list[str]:
    first = first_record_max_abs()
    caught = {(r.case, r.output): r.smallest_caught for r in resolutions}
    lines = [
        "| case | output | bound (atol + rtol·\\|expected\\|) | emulated: bit-identical | emulated: worst fraction "
        "of the bound | smallest perturbation caught (emulated) | first H200 record: max \\|err\\| / atol |",
        "|---|---|---|---:|---:|---|---:|",
    ]
    for r in candidate:
        exact = r.atol == 0 and r.rtol == 0
        bound = "bit-exact" if exact else f"{r.atol:.3g} + {r.rtol:g}·\\|e\\|"
        seen = first.get((r.case, r.output))
        measured = (
            "-"
            if seen is None
            else ("0 (bit-exact)" if seen == 0 else "over (not bit-exact)" if exact else f"{seen / r.atol:.3g}")
        )
        step = caught.get((r.case, r.output))
        resolution = "none: vacuous" if step is None else f"{step.quanta} quanta on {step.elements} elements"
        lines.append(
            f"| {r.case} | `{r.output}` | {bound} | {r.identical:,} of {r.elements:,} | {r.fraction:.3g} "
            f"| {resolution} | {measured} |"
        )
    worst = max(r.fraction for r in candidate)
    lines += [
        "",
        f"The emulated kernel's worst fraction of any bound is {worst:.3g}: "
        f"{1 - worst:.0%} of the bound is left for what the emulation cannot reproduce (CUDA's expf).",
    ]
    return lines


def controls_section(loaded, controls) -> list[str]:
    lines = ["| control | what it does | declared | reason |", "|---|---|---|---|"]
    for c in loaded.plan.controls.negative:
        what = (
            f"input `{c.buffer}`: {c.mutation.op} {c.mutation.value:g}"
            if c.kind == "input" and c.mutation.op == "fill"
            else f"input `{c.buffer}`: {c.mutation.op}"
            if c.kind == "input"
            else "candidate rebuilt with " + ", ".join(f"{k}={v}" for k, v in c.defines.items())
        )
        declared = []
        for e in c.expect:
            where = "at " + ", ".join(e.cases) if e.cases else (f"where {e.where}" if e.where else "everywhere")
            outs = ", ".join(e.outputs) if e.outputs else "every output"
            declared.append((f"{e.outcome} {where}: {outs}", e.reason or ""))
        declared.append(("fail elsewhere" if c.expect else "fail everywhere", ""))
        for i, (text, reason) in enumerate(declared):
            lines.append(f"| {c.name if i == 0 else ''} | {what if i == 0 else ''} | {text} | {reason} |")
    lines += [
        "",
        "What the emulated kernel does under each control (pass/fail of the gate per output; "
        "every one as declared, or calibrate.py fails):",
        "",
    ]
    cases = list(dict.fromkeys(r.case for r in controls))
    lines += ["| control | " + " | ".join(cases) + " |", "|---|" + "---|" * len(cases)]
    for name in dict.fromkeys(r.control for r in controls):
        cells = []
        for case in cases:
            rows = [r for r in controls if r.control == name and r.case == case]
            cells.append(", ".join(f"{r.output} {'pass' if r.passed else 'fail'}" for r in rows))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _arm_geometry(loaded, params, side):
    arm = loaded.plan.arm(side)
    p = {**params, **arm.params}
    blocks = 1
    for e in loaded.plan.workload.launch.grid:
        blocks *= expr.evaluate_int(e, p)
    S, R, G, HQ = p["S"], p["R"], p["G"], p["HQ"]
    warps = p["THREADS"] // 32
    # row r sits at position S - R + r: its block reads every key row and the value rows up to it
    value_rows = sum(S - R + r + 1 for r in range(R)) * (HQ // G)
    return {
        "blocks": blocks,
        "G": G,
        # the score loop gives each of a block's warps every 8th key, and each key G dots
        "dots_per_warp": -(-S // warps) * G,
        "kv_bytes": (blocks * S + value_rows) * HEAD_DIM_BYTES,
        "unique_bytes": p["HK"] * 2 * S * HEAD_DIM_BYTES,  # what DRAM must deliver at least once
    }


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.0f} KiB"


def grid_section(loaded, sms: int, resident: dict | None) -> list[str]:
    lines = [
        f"| case | arm | blocks (R × HQ / G) | blocks per SM ({sms} SMs) | serial dots per warp | K and V rows "
        "read by the grid | distinct K and V |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    rows = [(case.id, params) for case, params in _cases(loaded)]
    p0 = dict(rows[0][1])
    for (R, S), _ in SEED_SM120.items():
        rows.append((f"seed {R} × {S}", {**p0, "R": R, "S": S}))
    for label, params in rows:
        for side in ("base", "candidate"):
            g = _arm_geometry(loaded, params, side)
            per_sm = g["blocks"] / sms
            fill = f"{per_sm:.2f}" + (f" ({min(g['blocks'], sms)} SMs busy)" if g["blocks"] < sms else "")
            lines.append(
                f"| {label} | {side} (G={g['G']}) | {g['blocks']:,} | {fill} | {g['dots_per_warp']:,} | "
                f"{_size(g['kv_bytes'])} | {_size(g['unique_bytes'])} |"
            )
    if resident:
        lines += [
            "",
            "Blocks one SM can hold at once, from the record's resources: "
            + ", ".join(f"{side} {n}" for side, n in resident.items())
            + ".",
        ]
    return lines


def record_section(loaded, record: Path | None) -> list[str]:
    if record is None or not (record / "results.json").exists():
        return [
            "Not made yet: the plan was re-frozen with per-case tolerances and its H200 record is to be",
            "re-made (`qualify run protocols/qsa-keyload/plan.json --record records/qsa-keyload`); then",
            "`python protocols/qsa-keyload/readme.py --record records/qsa-keyload` fills this section.",
        ]
    results = Record(record).results()
    trials = [t for t in results.trials if t.status == "complete"]
    device = trials[0].provenance.device if trials else None
    shown = record.resolve().relative_to(ROOT).as_posix() if record.resolve().is_relative_to(ROOT) else record.name
    lines = [
        f"From `{shown}` "
        f"({len(trials)} complete trials on {device.name if device else 'no device'}), verdict "
        f"**{results.verdict.status.replace('_', ' ')}**.",
        "",
        "| case | base (median) | candidate (median) | candidate / base per trial | speed-up |",
        "|---|---:|---:|---|---:|",
    ]
    for case, _ in _cases(loaded):
        got = [c for t in trials for c in t.cases if c.case == case.id]
        if not got:
            lines.append(f"| {case.id} | - | - | not measured | - |")
            continue
        base = sorted(c.timing["base"].median_ns for c in got)[len(got) // 2]
        cand = sorted(c.timing["candidate"].median_ns for c in got)[len(got) // 2]
        ratios = ", ".join(f"{c.stats.ratio:.3f}" for c in got)
        lines.append(f"| {case.id} | {base / 1e3:,.2f} µs | {cand / 1e3:,.2f} µs | {ratios} | {base / cand:.2f}× |")
    lines += [
        "",
        "The seed on one RTX 5060 (sm_120), same change, its own harness (rows × tokens):",
        "",
        "| rows × tokens | before | after | speed-up |",
        "|---|---:|---:|---:|",
    ]
    for (R, S), (before, after) in SEED_SM120.items():
        lines.append(f"| {R} × {S} | {before} ms | {after} ms | {before / after:.2f}× |")
    if results.verdict.reasons:
        lines += ["", "The verdict's reasons, as the record gives them:", ""]
        lines += [f"- {r}" for r in results.verdict.reasons[:20]]
    return lines


def generate(record: Path | None) -> dict[str, list[str]]:
    loaded = load_plan(HERE / "plan.json")
    candidate, controls, resolutions = calibrate.evaluate(HERE / "plan.json")
    sms, resident = H200_SMS, None
    if record is not None and (record / "results.json").exists():
        trials = Record(record).results().trials
        if trials:
            sms = trials[0].provenance.device.sm_count
            first = trials[0].cases[0].resources if trials[0].cases else {}
            resident = {side: r.blocks_per_sm for side, r in first.items()} or None
    return {
        "bounds": bounds_section(candidate, resolutions),
        "controls": controls_section(loaded, controls),
        "grid": grid_section(loaded, sms, resident),
        "record": record_section(loaded, record),
    }


def fill(text: str, parts: dict[str, list[str]]) -> str:
    for name, lines in parts.items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"readme.py: {README}: no <!-- generated:{name} --> markers")
        text = pattern.sub(lambda m: m.group(1) + "\n".join(lines) + "\n" + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, default=None)
    parser.add_argument("--check", action="store_true", help="exit 1 when README.md is not current")
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    wanted = fill(current, generate(args.record))
    if args.check:
        if wanted != current:
            print(f"{README}: generated sections are not current; run protocols/qsa-keyload/readme.py")
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
