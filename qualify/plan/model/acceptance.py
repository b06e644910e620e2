"""What a candidate must show to qualify: speed gates, the fidelity contract, the sanitizer checks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from qualify.plan.model.fields import AddedFields, ExprText, Identifier, PathText, PlainText, Strict


class CaseSelector(Strict):
    cases: list[Annotated[PlainText, Field(max_length=1000)]] | None = Field(
        default=None, description="Case ids ('T=640')."
    )
    where: ExprText | None = Field(default=None, description="Expression over parameters ('T >= 640').")


# Gate names read as labels, as plan names do: letters, digits, '_' and '-' ("p50-speedup").
GateName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$", max_length=64)]


class SpeedGate(CaseSelector):
    name: GateName
    min_speedup_pct: float | None = Field(
        default=None,
        ge=0,
        lt=100,
        description="Candidate at least this much faster (median ratio). 0 to below 100: a negative "
        "bound would be a regression allowance (max_regression_pct says that), 100 % needs zero time.",
    )
    max_regression_pct: float | None = Field(default=None, ge=0, description="Candidate at most this much slower.")
    every_trial: bool = Field(default=True, description="The gate must hold in each trial.")

    @model_validator(mode="after")
    def _one_bound(self) -> SpeedGate:
        if self.min_speedup_pct is None and self.max_regression_pct is None:
            raise ValueError("give min_speedup_pct or max_regression_pct")
        return self


class ExactSelector(CaseSelector):
    outputs: list[Identifier] | None = Field(
        default=None, description="Outputs held bit-exact in the selected cases (None: all)."
    )


class ToleranceRule(CaseSelector):
    """The bound of the selected cases' selected outputs; the first rule that matches rules.

    `atol_quanta` states the absolute part in the unit a reviewer reasons in: k representable
    steps of the output's dtype at the golden's RMS magnitude for that output and case, so a bound
    fitted to values near 1 does not turn meaningless for an output whose values sit near 1e-3."""

    outputs: list[Identifier] | None = Field(default=None, description="None: every output.")
    bit_exact: bool = Field(default=False, description="Hold the selection bit for bit (no rtol, no atol).")
    rtol: float | None = Field(default=None, ge=0, description="|err| <= atol + rtol·|expected|")
    atol: float | None = Field(default=None, ge=0)
    atol_quanta: float | None = Field(
        default=None, gt=0, description="atol as k quanta of the output's dtype at the golden's RMS magnitude."
    )

    @model_validator(mode="after")
    def _one_bound(self) -> ToleranceRule:
        if self.bit_exact:
            if self.rtol is not None or self.atol is not None or self.atol_quanta is not None:
                raise ValueError("a bit_exact rule takes no rtol, atol or atol_quanta")
        elif self.rtol is None or (self.atol is None) == (self.atol_quanta is None):
            raise ValueError("give rtol and one of atol or atol_quanta (or bit_exact)")
        return self


class Calibration(Strict):
    """Mutation calibration: the candidate's outputs perturbed by k quanta on n elements (seeded)."""

    ceiling_quanta: int = Field(ge=1, le=2**20, description="Largest k tried (k doubles from 1).")
    elements: list[int] = Field(min_length=1, max_length=8, description="Values of n tried.")
    seed: int = Field(default=0, ge=0, lt=2**63)

    @field_validator("elements")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(n < 1 for n in value) or len(set(value)) != len(value):
            raise ValueError("element counts must be distinct and at least 1")
        return sorted(value)


class Fidelity(AddedFields):
    _added = frozenset({"atol", "rtol", "rel_floor", "exact", "golden_script", "calibration", "tolerances"})
    mode: Literal["bytes", "ulp", "abs", "rel", "tolerance"] = "bytes"
    bound: float | None = Field(default=None, ge=0, description="ulp count or tolerance.")
    atol: float | None = Field(default=None, ge=0, description="tolerance: |err| <= atol + rtol·|expected|")
    rtol: float | None = Field(default=None, ge=0)
    rel_floor: float = Field(
        default=1e-6, gt=0, description="Relative error is reported only where |expected| reaches this."
    )
    exact: list[ExactSelector] = Field(
        default_factory=list, description="Cases (and outputs) held bit-exact whatever the mode."
    )
    tolerances: list[ToleranceRule] = Field(
        default_factory=list,
        description="Per case and output bounds, first match rules; unmatched outputs keep atol and rtol.",
    )
    against: Literal["base", "float64", "golden"] = "base"
    golden: PathText | None = Field(default=None, description="Golden file, relative to the plan.")
    golden_script: PathText | None = Field(
        default=None, description="The script that wrote the golden, relative to the plan; frozen with it."
    )
    reference: PathText | None = Field(
        default=None, description="float64 reference: 'file.py:function', relative to the plan."
    )
    calibration: Calibration | None = None

    @property
    def counted(self) -> bool:
        """Whether each output of each case is judged by element counts under its entry's bound
        (tolerance_gate): always against a golden, and against the base arm in mode 'tolerance'.
        Otherwise the base-arm parity decides (verdict.fidelity_passes)."""
        return self.against == "golden" or self.mode == "tolerance"

    @model_validator(mode="after")
    def _consistent(self) -> Fidelity:
        if self.mode == "bytes" and self.bound is not None:
            raise ValueError("mode 'bytes' takes no bound")
        if self.mode == "tolerance":
            if self.bound is not None or self.atol is None or self.rtol is None:
                raise ValueError("mode 'tolerance' takes atol and rtol, not bound")
        elif self.atol is not None or self.rtol is not None:
            raise ValueError("atol and rtol belong to mode 'tolerance'")
        elif self.mode != "bytes" and self.bound is None:
            raise ValueError(f"mode {self.mode!r} needs a bound")
        if (self.against == "golden") != (self.golden is not None):
            raise ValueError("golden is required with against 'golden' and only then")
        if self.against == "float64" and (
            self.mode == "tolerance" or self.exact or self.calibration or self.tolerances
        ):
            # the float64 comparison has no counts to judge them by: they would pass vacuously
            raise ValueError("mode 'tolerance', exact, tolerances and calibration need against 'golden' or 'base'")
        if self.against == "base" and (self.exact or self.calibration) and self.mode != "tolerance":
            # against the base arm, only the tolerance mode counts elements per output and case
            raise ValueError("exact and calibration against 'base' belong to mode 'tolerance'")
        if self.tolerances and self.mode != "tolerance":
            raise ValueError("tolerances belong to mode 'tolerance'")
        if self.golden_script is not None and self.golden is None:
            # optional with a golden (older plans have none); when given it is frozen with the golden
            raise ValueError("golden_script is the script that wrote the golden: give the golden too")
        if (self.against == "float64") != (self.reference is not None):
            raise ValueError("reference is required with against 'float64' and only then")
        if self.against == "float64" and self.mode == "bytes":
            raise ValueError("a float64 reference needs a tolerance mode, not 'bytes'")
        return self


class SanitizerCheck(Strict):
    tool: Literal["memcheck", "racecheck", "initcheck", "synccheck"]
    cases: list[str] = Field(min_length=1)
    timeout_seconds: float = Field(default=300, gt=0)


class Acceptance(Strict):
    gates: list[SpeedGate] = Field(default_factory=list)
    fidelity: Fidelity = Field(default_factory=Fidelity)
    sanitizer: list[SanitizerCheck] = Field(default_factory=list)
