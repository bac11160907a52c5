"""Every configuration class of the project declares what each of its fields accepts
(:mod:`fedrank.core.validation`): a dataclass named ``*Config``, ``*Settings`` or
``*Section`` anywhere in ``src/fedrank`` derives from
:class:`~fedrank.core.validation.Validated`, its ``ACCEPTS`` names exactly its fields, and
its defaults pass its own table and rules. A new config cannot skip the table."""

from __future__ import annotations

import ast
import importlib
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from fedrank.core.validation import Accepts, Delegated, Rule, Validated

SRC = Path(__file__).resolve().parents[1] / "src" / "fedrank"
SUFFIXES = ("Config", "Settings", "Section")


def _is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _config_classes() -> list[tuple[str, str]]:
    """``(module, class name)`` of every dataclass named like a config."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ClassDef)
                and node.name.endswith(SUFFIXES)
                and _is_dataclass(node)
            ):
                found.append((".".join(("fedrank", *parts)), node.name))
    return found


CONFIGS = _config_classes()


def test_the_configs_are_found() -> None:
    names = {name for _, name in CONFIGS}
    assert {"FrecencyConfig", "ServerSection", "FedPSSettings", "PrivacyConfig"} <= names
    assert len(CONFIGS) >= 18


@pytest.mark.parametrize(("module", "name"), CONFIGS)
def test_every_config_declares_its_table(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, Validated), f"{name} must derive from Validated"
    assert set(cls.ACCEPTS) == {f.name for f in fields(cls)}, f"{name}.ACCEPTS"
    for entry in cls.ACCEPTS.values():
        if not isinstance(entry, Accepts):
            Accepts(entry)  # a constraint, a type or None; else TypeError
    assert all(isinstance(rule, Rule | Delegated) for rule in cls.RULES)
    if all(f.default is not MISSING or f.default_factory is not MISSING for f in fields(cls)):
        cls()  # the defaults pass the table and the rules
