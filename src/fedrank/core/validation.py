"""One declarative style of validating a configuration dataclass.

Every configuration derives from :class:`Validated` and declares two class attributes:

* ``ACCEPTS``, what each of its fields accepts: a table from every field's name to an entry,
  which is a constraint (:class:`Options`, :class:`Interval`, or a type such as ``bool`` or
  ``str``), ``None`` (the value ``None``), or :class:`Accepts` for several alternatives
  and a note on what the field is;
* ``RULES``, the few rules between fields (:class:`Rule`) and the checks another object
  makes of its own (:class:`Delegated`: a privacy budget calibrated before any work).

:func:`validate`, which :meth:`Validated.__post_init__` runs, checks every field against its
entry, then every rule in order, and raises :class:`~fedrank.errors.ConfigError` at the first
that fails. A field's message always has one form, ``<field> (<note>) must be <what it
accepts>, got <value>``, e.g. ``trim (the trimmed mean's fraction dropped from each end) must
be in [0, 0.5) (a number), got 0.7``; the server's TOML loader puts the section in front
(``[frecency] trim ...``). A rule's message says which keys disagree and how to fix it.

The idea is scikit-learn's ``_parameter_constraints`` (``sklearn/base.py``, checked by
``sklearn/utils/_param_validation.py``): a table per class of what each parameter accepts,
checked by one function, in place of hand-written checks.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from fractions import Fraction
from numbers import Integral, Real
from typing import Any, ClassVar, Literal

import numpy as np

from fedrank.errors import ConfigError

#: Which ends of an :class:`Interval` belong to it.
Closed = Literal["both", "left", "right", "neither"]


class Constraint(ABC):
    """One kind of value a field accepts; ``str()`` says which, as in ``must be <str>``."""

    @abstractmethod
    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is of this kind."""

    @abstractmethod
    def __str__(self) -> str: ...


class Options(Constraint):
    """One of a few values, compared by equality (a bool matches only a bool)."""

    def __init__(self, *values: Any) -> None:
        if not values:
            raise TypeError("Options needs at least one value")
        self.values = values

    def accepts(self, value: Any) -> bool:
        return any(_equal(value, option) for option in self.values)

    def __str__(self) -> str:
        if len(self.values) == 1:
            return _text(self.values[0])
        return "one of " + ", ".join(_text(v) for v in self.values)

    def __repr__(self) -> str:
        return f"Options{self.values!r}"


class Interval(Constraint):
    """An integer (``kind=Integral``) or a finite real number (``kind=Real``) between
    ``low`` and ``high`` (``None``: unbounded on that side); ``closed`` says which ends belong
    to it. A bound may be a :class:`~fractions.Fraction`: written as one (``1/11``), and
    compared as the float it rounds to, the bound the code using the value computes
    (``1 / 11``). Bools are not numbers here, and a real interval never holds NaN or an
    infinity."""

    def __init__(
        self,
        kind: type[Integral] | type[Real],
        low: float | Fraction | None,
        high: float | Fraction | None,
        closed: Closed = "both",
    ) -> None:
        if kind not in (Integral, Real):
            raise TypeError(f"an Interval holds numbers.Integral or numbers.Real, not {kind}")
        if closed not in ("both", "left", "right", "neither"):
            raise TypeError(f"closed must be both, left, right or neither, not {closed!r}")
        if low is not None and high is not None and low > high:
            raise TypeError(f"an empty Interval: low {low} > high {high}")
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    @property
    def _low_closed(self) -> bool:
        return self.closed in ("both", "left")

    @property
    def _high_closed(self) -> bool:
        return self.closed in ("both", "right")

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool | np.bool_) or not isinstance(value, self.kind):
            return False
        if not isinstance(value, Integral) and not math.isfinite(value):
            return False
        low, high = _bound(self.low), _bound(self.high)
        if low is not None and not (value >= low if self._low_closed else value > low):
            return False
        return high is None or (value <= high if self._high_closed else value < high)

    def __str__(self) -> str:
        integer = self.kind is Integral
        low, high = self.low, self.high
        if low is None and high is None:
            return "an integer" if integer else "a finite number"
        if low is not None and high is not None:
            if integer:
                first = low if self._low_closed else low + 1
                last = high if self._high_closed else high - 1
                return f"in {_number(first)}..{_number(last)} (an integer)"
            left = "[" if self._low_closed else "("
            right = "]" if self._high_closed else ")"
            return f"in {left}{_number(low)}, {_number(high)}{right} (a number)"
        if low is not None:
            bound = f"{'>=' if self._low_closed else '>'} {_number(low)}"
        else:
            bound = f"{'<=' if self._high_closed else '<'} {_number(high)}"
        return f"{bound} ({'an integer' if integer else 'a finite number'})"

    def __repr__(self) -> str:
        name = "Integral" if self.kind is Integral else "Real"
        return f"Interval({name}, {self.low!r}, {self.high!r}, closed={self.closed!r})"


class Instance(Constraint):
    """A value of a type: ``bool`` (``True`` or ``False``, numpy's too), ``str``, or any
    other class (``a Path``). A table may name the type itself; it becomes this."""

    def __init__(self, kind: type) -> None:
        self.kind = kind

    def accepts(self, value: Any) -> bool:
        if self.kind is bool:
            return isinstance(value, bool | np.bool_)
        return isinstance(value, self.kind)

    def __str__(self) -> str:
        if self.kind is bool:
            return "True or False"
        if self.kind is str:
            return "a string"
        return f"a {self.kind.__name__}"

    def __repr__(self) -> str:
        return f"Instance({self.kind.__name__})"


class _NoneValue(Constraint):
    """The value ``None`` (a table writes ``None``)."""

    def accepts(self, value: Any) -> bool:
        return value is None

    def __str__(self) -> str:
        return "None"


#: What a table may name as one kind of value: a constraint, a type, or ``None``.
Spec = Constraint | type | None


class Accepts:
    """A field's entry: any of the ``alternatives`` (each a :data:`Spec`), and a ``note``
    saying what the field is, written after its name in a message."""

    def __init__(self, *alternatives: Spec, note: str = "") -> None:
        if not alternatives:
            raise TypeError("Accepts needs at least one alternative")
        self.alternatives = tuple(_constraint(a) for a in alternatives)
        self.note = note

    def accepts(self, value: Any) -> bool:
        return any(a.accepts(value) for a in self.alternatives)

    def __str__(self) -> str:
        return " or ".join(str(a) for a in self.alternatives)

    def typed(self) -> str:
        """What an option typed on a command line may be: the alternatives but ``None``
        (an option left out, not a value anyone types)."""
        typed = [str(a) for a in self.alternatives if not isinstance(a, _NoneValue)]
        return " or ".join(typed) if typed else str(self)

    def message(self, name: str, value: Any) -> str:
        """The one form of a field's error: the field, what it accepts, what was given."""
        note = f" ({self.note})" if self.note else ""
        return f"{name}{note} must be {self}, got {_given(value)}"


#: A table's entry for one field.
Entry = Spec | Accepts


class Rule:
    """A rule between fields: ``holds(config)`` must be true, else ``message`` is raised.
    A message is a format string of the config's attributes (``"{batch}"``,
    ``"{privacy.clip:g}"``), or a function of the config where it shows a value computed
    from several (``lambda c: f"... got {[b.name for b in c.branches]}"``)."""

    def __init__(self, holds: Callable[[Any], bool], message: str | Callable[[Any], str]) -> None:
        self.holds = holds
        self.message = message

    def check(self, config: Any) -> None:
        if self.holds(config):
            return
        if callable(self.message):
            raise ConfigError(self.message(config))
        raise ConfigError(self.message.format_map(_Attributes(config)))


class Delegated:
    """A check another object makes of its own, run with the config's rules:
    ``check(config)`` raises that object's :class:`~fedrank.errors.ConfigError` (a privacy
    budget calibrated before any work)."""

    def __init__(self, check: Callable[[Any], object]) -> None:
        self._check = check

    def check(self, config: Any) -> None:
        self._check(config)


class Validated:
    """The base of every configuration dataclass: it declares ``ACCEPTS`` (every field's
    entry) and ``RULES``, and :func:`validate` checks them when an instance is made (also by
    :func:`dataclasses.replace`)."""

    ACCEPTS: ClassVar[Mapping[str, Entry]]
    RULES: ClassVar[tuple[Rule | Delegated, ...]] = ()

    def __post_init__(self) -> None:
        validate(self)


def validate(config: Any) -> None:
    """Check every field of the dataclass ``config`` against its class's ``ACCEPTS`` (in
    the table's order), then every one of its ``RULES``.

    Raises:
        ConfigError: naming the first field or rule that fails.
        TypeError: if the table does not name exactly the class's fields (a programming
            error: a field nobody said anything about would go unchecked).
    """
    cls = type(config)
    table = cls.ACCEPTS
    names = {f.name for f in fields(config)}
    if set(table) != names:
        raise TypeError(
            f"{cls.__name__}.ACCEPTS must name exactly its fields: missing "
            f"{sorted(names - set(table))}, unknown {sorted(set(table) - names)}"
        )
    for name, entry in table.items():
        accepted = entry if isinstance(entry, Accepts) else Accepts(entry)
        value = getattr(config, name)
        if not accepted.accepts(value):
            raise ConfigError(
                accepted.message(name, value),
                field=name,
                requirement=f"must be {accepted.typed()}, got {_given(value)}",
                value=value,
            )
    for rule in cls.RULES:
        rule.check(config)


def _given(value: Any) -> str:
    """``value`` as a message shows what was given: its ``repr``, a numpy scalar as the
    Python number it holds."""
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def _constraint(spec: Spec) -> Constraint:
    if spec is None:
        return _NoneValue()
    if isinstance(spec, Constraint):
        return spec
    if isinstance(spec, type):
        return Instance(spec)
    raise TypeError(f"a table names constraints, types or None, not {spec!r}")


def _bound(x: float | Fraction | None) -> float | None:
    return float(x) if isinstance(x, Fraction) else x


def _equal(value: Any, option: Any) -> bool:
    if isinstance(value, bool | np.bool_) != isinstance(option, bool | np.bool_):
        return False
    try:
        return bool(value == option)
    except (TypeError, ValueError):  # an array, or a value that does not compare
        return False


def _number(x: float | Fraction) -> str:
    """A bound as a message writes it: ``1/11``, ``3``, ``65535``, ``1e9``, ``0.5``,
    ``1e-12`` (a whole number of a million or more with one significant digit in
    scientific notation)."""
    if isinstance(x, Fraction):
        return str(x)
    if isinstance(x, Integral) or (float(x).is_integer() and abs(x) < 1e15):
        n = int(x)
        digits = str(abs(n)).rstrip("0")
        if abs(n) >= 10**6 and len(digits) == 1:
            return f"{'-' if n < 0 else ''}{digits}e{len(str(abs(n))) - 1}"
        return str(n)
    return repr(float(x))


def _text(value: Any) -> str:
    return _number(value) if isinstance(value, Real) and not isinstance(value, bool) else str(value)


class _Attributes(Mapping[str, Any]):
    """A config's attributes (fields and properties) by name, for a rule's message."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self._config, name)
        except AttributeError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in fields(self._config))

    def __len__(self) -> int:
        return len(fields(self._config))
