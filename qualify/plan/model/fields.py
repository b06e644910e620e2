"""The base of every plan model and the constrained field types its parts share.

Every model is frozen and rejects unknown fields, so a typo in a plan is an error rather than a
silently ignored control. Text a plan author writes reaches the README, the terminal and one-line
errors, so labels and paths are one line of printable text.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from qualify import expr


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class AddedFields(Strict):
    """A model that gained fields after plans were frozen under schema version 1.

    The plan's digest hashes its dump, defaults included; the fields named in `_added` are left out
    of the dump while they hold their defaults, so a plan frozen before they existed keeps its digest
    (and its records stay checkable) while a plan that sets them is bound to them.
    """

    _added: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_added_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for name in self._added:
            if name in data and getattr(self, name) == type(self).model_fields[name].get_default(
                call_default_factory=True
            ):
                del data[name]
        return data


def _check_expr(value: object) -> object:
    if isinstance(value, str):
        try:
            expr.parse(value)
        except expr.ExprError as exc:
            raise ValueError(str(exc)) from None
    return value


Expr = Annotated[
    Union[int, str],
    AfterValidator(_check_expr),
    Field(description="An integer, or an arithmetic expression over the workload parameters"),
]
FloatExpr = Annotated[
    Union[float, int, str],
    AfterValidator(_check_expr),
    Field(description="A number, or an arithmetic expression over the workload parameters"),
]
ExprText = Annotated[str, AfterValidator(_check_expr)]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]


def _plain_text(value: str) -> str:
    """One line of visible text: no newline, tab, escape (ESC starts every terminal sequence) or
    other control or format character (a bidirectional override can reorder what is shown).

    Labels reach the README, the terminal and one-line errors; a newline there can forge a line of
    its own (a verdict, a "frozen: yes"), an escape sequence can rewrite the screen.
    """
    for i, ch in enumerate(value):
        if not ch.isprintable():
            raise ValueError(f"character {i} is {ascii(ch)}: labels and paths are one line of plain text")
    return value


PlainText = Annotated[str, AfterValidator(_plain_text)]
Label = Annotated[PlainText, Field(min_length=1, max_length=200)]
Prose = Annotated[PlainText, Field(min_length=1, max_length=2000)]
PathText = Annotated[PlainText, Field(min_length=1, max_length=1024)]
