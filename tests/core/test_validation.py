"""The declarative validation of configs (:mod:`fedrank.core.validation`): every constraint
kind accepts and refuses the right values and says what it accepts; every refusal of a
field has one form (the field, its note, what it accepts, what was given); rules run after
the fields, in order; a table must name exactly the class's fields."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from numbers import Integral, Real
from typing import Any

import numpy as np
import pytest

from fedrank.core.validation import (
    Accepts,
    Delegated,
    Instance,
    Interval,
    Options,
    Rule,
    Validated,
    validate,
)
from fedrank.errors import ConfigError


@pytest.mark.parametrize(
    ("constraint", "accepted", "refused", "text"),
    [
        (Options("a", "b"), ["a", "b"], ["c", "A", None, 1, ["a"]], "one of a, b"),
        (Options(0), [0, 0.0, np.int64(0)], [False, 1, "0", None], "0"),
        (Options(True), [True, np.True_], [1, 1.0, "True"], "True"),
        (
            Interval(Integral, 1, None),
            [1, 2, 10**30, np.int64(5)],
            [0, -1, 1.0, 2.5, True, "3", None, np.float64(2)],
            ">= 1 (an integer)",
        ),
        (
            Interval(Integral, 0, 65535),
            [0, 65535, np.int32(80)],
            [-1, 65536, 80.0, False],
            "in 0..65535 (an integer)",
        ),
        (Interval(Integral, 0, 10, closed="neither"), [1, 9], [0, 10], "in 1..9 (an integer)"),
        (Interval(Integral, None, None), [-(10**20), 0, 7], [0.5, True], "an integer"),
        (
            Interval(Real, 0, None, closed="neither"),
            [1e-300, 1, 2.5, np.float32(0.5), Fraction(1, 3)],
            [0, 0.0, -1.0, float("inf"), float("nan"), True, "1", None],
            "> 0 (a finite number)",
        ),
        (Interval(Real, 0, None), [0, 0.0, 3], [-1e-300, float("inf")], ">= 0 (a finite number)"),
        (Interval(Real, None, 5, closed="neither"), [-1e300, 4.9], [5, 6], "< 5 (a finite number)"),
        (Interval(Real, None, 5), [5, -3], [5.0001, float("-inf")], "<= 5 (a finite number)"),
        (
            Interval(Real, None, None),
            [-1e300, 0, 1e300, 10**400],
            [float("inf"), float("-inf"), float("nan"), False],
            "a finite number",
        ),
        (Interval(Real, 0, 1), [0, 0.5, 1], [-0.1, 1.1, float("nan")], "in [0, 1] (a number)"),
        (
            Interval(Real, 0, 0.5, closed="left"),
            [0, 0.49],
            [0.5, -0.01],
            "in [0, 0.5) (a number)",
        ),
        (Interval(Real, 0, 1, closed="right"), [1, 1e-9], [0, 1.5], "in (0, 1] (a number)"),
        (Interval(Real, 0, 1, closed="neither"), [0.5], [0, 1], "in (0, 1) (a number)"),
        (
            Interval(Real, Fraction(1, 11), 1, closed="right"),
            [0.0910, 1],
            [1 / 11, 0.05],
            "in (1/11, 1] (a number)",
        ),
        (
            Interval(Real, 1e-12, 1e9),
            [1e-12, 1e9],
            [1e-13, 1e10],
            "in [1e-12, 1e9] (a number)",
        ),
        (Instance(bool), [True, False, np.bool_(True)], [1, 0, "true", None], "True or False"),
        (Instance(str), ["", "x"], [b"x", 1, None], "a string"),
        (Instance(tuple), [(), (1,)], [[1], "ab"], "a tuple"),
    ],
)
def test_each_constraint_accepts_and_refuses_the_right_values(
    constraint: Any, accepted: list[Any], refused: list[Any], text: str
) -> None:
    for value in accepted:
        assert constraint.accepts(value), value
    for value in refused:
        assert not constraint.accepts(value), value
    assert str(constraint) == text


def test_alternatives_none_and_plain_types() -> None:
    entry = Accepts(Interval(Real, 0, 1, closed="neither"), None, note="a quantile")
    assert entry.accepts(None) and entry.accepts(0.5) and not entry.accepts(1.0)
    assert str(entry) == "in (0, 1) (a number) or None"
    assert str(Accepts(Options("log", "raw"), None)) == "one of log, raw or None"
    assert str(Accepts(Options(0), Interval(Integral, 2, None))) == "0 or >= 2 (an integer)"
    assert Accepts(bool).accepts(False) and not Accepts(bool).accepts(0)
    assert str(Accepts(str, None)) == "a string or None"


def test_bad_declarations_are_programming_errors() -> None:
    with pytest.raises(TypeError):
        Interval(float, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Interval(Real, 1, 0)
    with pytest.raises(TypeError):
        Interval(Real, 0, 1, closed="open")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Options()
    with pytest.raises(TypeError):
        Accepts()
    with pytest.raises(TypeError):
        Accepts("a string is not a constraint")  # type: ignore[arg-type]


def _positive_sum(c: Any) -> bool:
    return c.low + c.high > 0


@dataclass(frozen=True)
class _Example(Validated):
    kind: str = "a"
    count: int = 1
    rate: float | None = None
    low: float = 0.0
    high: float = 1.0

    ACCEPTS = {
        "kind": Options("a", "b"),
        "count": Accepts(Interval(Integral, 1, None), note="how many"),
        "rate": Accepts(Interval(Real, 0, 1, closed="neither"), None),
        "low": Interval(Real, None, None),
        "high": Interval(Real, None, None),
    }
    RULES = (
        Rule(lambda c: c.low <= c.high, "low ({low}) must be <= high ({high})"),
        Rule(_positive_sum, lambda c: f"low + high must be > 0, got {c.low + c.high:g}"),
        Delegated(lambda c: c.kind != "b" or c.count == 1 or _refuse(c.count)),
    )


def _refuse(count: int) -> bool:
    raise ConfigError(f"kind b takes one, got {count}")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "c"}, "kind must be one of a, b, got 'c'"),
        ({"count": 0}, "count (how many) must be >= 1 (an integer), got 0"),
        ({"count": 2.0}, "count (how many) must be >= 1 (an integer), got 2.0"),
        ({"count": np.int64(-3)}, "count (how many) must be >= 1 (an integer), got -3"),
        ({"rate": 1.0}, "rate must be in (0, 1) (a number) or None, got 1.0"),
        ({"rate": np.float64(2.5)}, "rate must be in (0, 1) (a number) or None, got 2.5"),
        ({"low": float("nan")}, "low must be a finite number, got nan"),
        ({"low": 2.0}, "low (2.0) must be <= high (1.0)"),
        ({"low": -1.0}, "low + high must be > 0, got 0"),
        ({"kind": "b", "count": 3}, "kind b takes one, got 3"),
    ],
)
def test_one_error_form(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _Example(**kwargs)
    assert str(caught.value) == message


def test_fields_before_rules_in_the_table_s_order() -> None:
    with pytest.raises(ConfigError, match="^kind must be"):
        _Example(kind="c", count=0, low=5.0)  # three problems: the first field's is named
    with pytest.raises(ConfigError, match="^count"):
        _Example(count=0, low=5.0)  # a field before a rule


def test_replace_validates_again() -> None:
    good = _Example(rate=0.5)
    assert replace(good, count=3).count == 3
    with pytest.raises(ConfigError, match="count"):
        replace(good, count=0)


def test_a_table_names_exactly_the_fields() -> None:
    @dataclass(frozen=True)
    class Missing(Validated):
        a: int = 1
        b: int = 2

        ACCEPTS = {"a": Interval(Integral, 0, None)}

    @dataclass(frozen=True)
    class Unknown(Validated):
        a: int = 1

        ACCEPTS = {"a": Interval(Integral, 0, None), "c": str}

    with pytest.raises(TypeError, match=r"missing \['b'\]"):
        Missing()
    with pytest.raises(TypeError, match=r"unknown \['c'\]"):
        Unknown()


def test_a_subclass_extends_its_parent_s_table_and_rules() -> None:
    @dataclass(frozen=True)
    class Child(_Example):
        extra: bool = False

        ACCEPTS = {**_Example.ACCEPTS, "extra": bool}

    assert Child(extra=True).extra
    with pytest.raises(ConfigError, match="extra must be True or False, got 1"):
        Child(extra=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"low \(2.0\) must be <= high"):
        Child(low=2.0)  # the parent's rules


def test_validate_checks_any_validated_dataclass() -> None:
    config = _Example()
    validate(config)  # no error
    object.__setattr__(config, "count", -1)  # frozen, but forced
    with pytest.raises(ConfigError, match="count"):
        validate(config)
