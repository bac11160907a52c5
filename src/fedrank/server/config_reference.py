"""The configuration reference, generated from the configuration code: every section of
``server.toml`` (the service's, :mod:`fedrank.server.sections`, and every system's config
in :data:`fedrank.federation.registry.SYSTEMS`), every key with its TOML type, its default,
the values it accepts (the section's ``ACCEPTS`` table, :mod:`fedrank.core.validation`) and
its meaning (the ``Attributes`` section of the section class's docstring, the one place the
meanings are written).

``python -m fedrank.server.config_reference`` writes docs/reference/config.md;
``--check`` only compares and exits 1 when the page is stale (tests/docs run it).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any, get_type_hints

from fedrank.federation.registry import SYSTEMS
from fedrank.server.config import _SECTIONS, _kind
from fedrank.server.sections import MAX_METRIC_NAMES, METRIC_LIMIT, Proxy
from fedrank.systems.system import StudyBranch

#: Where the page goes, relative to the repository root.
DEFAULT_OUTPUT = Path("docs/reference/config.md")

#: The TOML name of each value type a key may take (:func:`fedrank.server.config._kind`).
_TOML_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    object: "string or boolean",
}

#: A Sphinx role such as ``:class:`~fedrank.x.Y``` (group 1: ``~`` or nothing, 2: target).
_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
#: One entry of an ``Attributes:`` section: ``name: meaning`` or ``a, b, c: meaning``.
_ENTRY = re.compile(r"^([A-Za-z_]\w*(?:, [A-Za-z_]\w*)*): (.*)$")


def markdown(text: str) -> str:
    """Docstring text (reStructuredText roles and literals) as Markdown: ``:class:`~a.B```
    becomes `` `B` ``, ``:mod:`a.b``` becomes `` `a.b` ``, a double-backquoted literal a
    single-backquoted one."""
    text = _ROLE.sub(lambda m: f"`{m.group(2).split('.')[-1] if m.group(1) else m.group(2)}`", text)
    return text.replace("``None``", "unset").replace("``", "`")


def attribute_meanings(cls: type) -> dict[str, str]:
    """The meaning of each field of ``cls``, from the ``Attributes:`` section of its
    docstring (Google style; an entry may name several fields, ``a, b: meaning``)."""
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Attributes:")
    except StopIteration:
        return {}
    base = len(lines[start]) - len(lines[start].lstrip())
    out: dict[str, str] = {}
    names: list[str] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= base:
            break
        entry = _ENTRY.match(line.strip())
        if indent == base + 4 and entry:
            names = entry.group(1).split(", ")
            for name in names:
                out[name] = entry.group(2)
        else:
            for name in names:
                out[name] += " " + line.strip()
    return out


def _number(x: float) -> str:
    """``x`` short: ``1e9`` rather than ``1e+09``."""
    return f"{x:g}".replace("e+0", "e").replace("e+", "e")


def toml_value(value: Any) -> str:
    """``value`` as TOML writes it (``None``: the key left out)."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _accepted(cls: type, name: str) -> str:
    """What the key accepts, from the section's ``ACCEPTS`` table."""
    spec = getattr(cls, "ACCEPTS", {}).get(name)
    if spec is None:
        return ""
    if isinstance(spec, type):
        return {str: "a string", bool: "true or false"}.get(spec, spec.__name__)
    text = str(spec).replace(" or None", "; or unset")
    return text.replace("True", "true").replace("False", "false")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def key_table(cls: type) -> list[str]:
    """The Markdown table of ``cls``'s keys: key, type, default, accepts, meaning."""
    meanings = attribute_meanings(cls)
    hints = inspect.get_annotations(cls, eval_str=True)
    rows = ["| key | type | default | accepts | meaning |", "|---|---|---|---|---|"]
    for f in fields(cls):
        default = _default(f)
        shown = "(required)" if default is MISSING else toml_value(default)
        kind = _TOML_TYPES.get(_kind(hints[f.name]), "string")
        meaning = meanings.get(f.name)
        if meaning is None:
            raise ValueError(
                f"{cls.__qualname__}.{f.name} has no meaning: add it to the class's Attributes"
            )
        cells = (f"`{f.name}`", kind, f"`{shown}`", _accepted(cls, f.name), markdown(meaning))
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _summary(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring, as Markdown on one line."""
    doc = inspect.getdoc(cls) or ""
    return markdown(" ".join(doc.split("\n\n")[0].split()))


def _branch_rows() -> list[str]:
    rows = ["| workload | default branches (name, share, served, decay) |", "|---|---|"]
    for name, system in SYSTEMS.items():
        listed = "; ".join(
            f"{b.name} {_number(b.share)} {b.served}" + (" decay" if b.decay else "")
            for b in system.branches
        )
        rows.append(f"| `{name}` | {listed} |")
    return rows


def _metric_rows() -> list[str]:
    rows = ["| workload | default metrics `name = [low, high]` |", "|---|---|"]
    for name, system in SYSTEMS.items():
        listed = ", ".join(
            f"`{m} = [{_number(lo)}, {_number(hi)}]`" for m, lo, hi in system.metrics
        )
        rows.append(f"| `{name}` | {listed} |")
    return rows


def _branch_table() -> list[str]:
    meanings = attribute_meanings(StudyBranch)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    hints = get_type_hints(StudyBranch)
    for name in StudyBranch._fields:
        default = StudyBranch._field_defaults.get(name, MISSING)
        shown = "(required)" if default is MISSING else toml_value(default)
        kind = _TOML_TYPES.get(_kind(hints[name]), "string")
        rows.append(f"| `{name}` | {kind} | `{shown}` | {_cell(markdown(meanings[name]))} |")
    return rows


def render() -> str:
    """The whole reference page, as Markdown."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m fedrank.server.config_reference` from the configuration",
        "code; edit the section classes' docstrings, not this page. -->",
        "",
        "`fedrank serve --config server.toml` reads a TOML file; every key is optional and",
        "flags override the file. The whole file is checked at start: an unknown section or",
        "key, a wrong type or a value out of range stops the server with a message naming",
        "the section and the key. Sections that depend on each other (`[rounds]`,",
        "`[secagg]`, `[privacy]`, `[identity]`, `[[proxies]]`) are checked together, and the",
        "message says what to change. Working files are in `examples/` (see",
        "[Getting started](../getting-started.md)).",
        "",
        "Only the workload's own system section is used (`[server] workload`); the others",
        "are still checked.",
        "",
    ]
    for name, cls in _SECTIONS.items():
        out += [f"## `[{name}]`", "", _summary(cls), "", *key_table(cls), ""]
    out += [
        "## `[metrics]`",
        "",
        "The metrics clients may report, as `name = [low, high]`; given, the table replaces",
        "the workload's defaults. Names have 1 to 64 characters of `A-Z a-z 0-9 . _ : -`,",
        f"at most {MAX_METRIC_NAMES} names, bounds finite within +-{_number(METRIC_LIMIT)} and",
        "`low <= high`; a report outside its bounds is refused.",
        "",
        *_metric_rows(),
        "",
        "## `[[branches]]`",
        "",
        _summary(StudyBranch) + " Given, the array replaces the workload's default branches.",
        "",
        *_branch_table(),
        "",
        *_branch_rows(),
        "",
        "## `[[proxies]]`",
        "",
        _summary(Proxy),
        "",
        *key_table(Proxy),
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Write the reference (or, with ``--check``, compare it); the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m fedrank.server.config_reference", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the page to write")
    parser.add_argument(
        "--check", action="store_true", help="only compare: exit 1 when the page is stale"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run python -m fedrank.server.config_reference")
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
