"""The registry of systems (:mod:`fedrank.federation.registry`): every system is one folder
with its config, server half, client half and wire format, found by name; its wire encodes
what it parses; and nothing outside the registry and the systems' folders decides what to
do by a system's name, and nothing but the one round loop calls ``server_step``."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.federation.registry import SYSTEMS, system
from fedrank.strategies.base import Strategy

SRC = Path(__file__).resolve().parents[2] / "src" / "fedrank"


def test_every_system_is_one_folder_of_four_parts() -> None:
    folders = {p.name for p in (SRC / "systems").iterdir() if (p / "__init__.py").is_file()}
    assert {s.section for s in SYSTEMS.values()} == folders
    for s in SYSTEMS.values():
        parts = {p.stem for p in (SRC / "systems" / s.section).glob("*.py")}
        assert {"config", "strategy", "client", "wire"} <= parts, s.name


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_a_system_builds_from_its_defaults_and_its_halves_agree(name: str) -> None:
    s = system(name)
    config = s.config()
    strategy = s.strategy(config)
    assert isinstance(strategy, Strategy) and strategy.name == name
    wire = s.wire(config, s.max_n)
    assert wire.name == name and wire.dim == strategy.dim
    half = s.client(config)
    assert type(half.config) is s.config and hasattr(half, "privatizer")
    eps = half.message_epsilon()
    assert eps is None or eps > 0
    assert s.config_from_view({**{"rounds": {}, "max_n": 3}, **vars(config)}) == config
    assert s.metrics and all(low <= high for _, low, high in s.metrics)
    assert sum(b.share for b in s.branches) == pytest.approx(1.0)


def _messages(name: str, dim: int, rng: np.random.Generator) -> MessageBatch:
    if name == "foltr-es":
        seeds = rng.integers(0, 2**32, size=5, dtype=np.uint64)
        return MessageBatch.of_es(seeds, rng.integers(0, 11, 5) / 10, rng.integers(0, 11, 5) / 10)
    n = rng.integers(1, 5, size=5).astype(float)
    return MessageBatch.of_vectors(rng.normal(size=(5, dim)), n)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_a_wire_parses_back_what_it_encodes(name: str) -> None:
    s = system(name)
    wire = s.wire(s.config(), s.max_n)
    batch = _messages(name, wire.dim, np.random.default_rng(3))
    back = wire.parse_batch(wire.encode(batch))
    for column in MessageBatch.FIELDS:
        sent, got = getattr(batch, column), getattr(back, column)
        assert (sent is None) == (got is None), column
        if sent is not None:
            np.testing.assert_array_equal(got, sent)


def test_an_unknown_name_lists_the_systems() -> None:
    with pytest.raises(ConfigError, match="unknown system 'fedsgd'; choose one of frecency"):
        system("fedsgd")


def _python_files_outside(*allowed: str) -> list[Path]:
    return [
        p
        for p in sorted(SRC.rglob("*.py"))
        if not any(p.relative_to(SRC).as_posix().startswith(a) for a in allowed)
    ]


#: Where a system's name appears for another reason: Firefox's own ``frecency`` column of a
#: page (``fedrank frecency score``).
NOT_A_SWITCH = ("data/places.py",)
#: Tables of names that are not switches: the FOLtR simulator's ``--algorithm`` choices,
#: mapped to the systems they train, and the configs' tables of what each field accepts
#: (keyed by field names, such as the FOLtR reproduction's ``fpdgd`` flag).
NAME_TABLES = {"SYSTEM_OF", "ACCEPTS"}


def test_nothing_outside_the_registry_decides_by_a_system_s_name() -> None:
    """A comparison with a system's name (``workload == "foltr-es"``, ``in ("frecency",
    "fedavg")``) or a table keyed by system names is a switch a new system would have to
    be added to: it belongs in the system's record."""
    names = set(SYSTEMS)
    found = []
    for path in _python_files_outside("systems/", "federation/registry.py", *NOT_A_SWITCH):
        tree = ast.parse(path.read_text())
        tables = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(t, ast.Name) and t.id in NAME_TABLES
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        }
        for node in ast.walk(tree):
            consts: list[ast.AST] = []
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    consts += [side, *getattr(side, "elts", [])]
            elif isinstance(node, ast.Dict) and id(node) not in tables:
                consts += [k for k in node.keys if k is not None]
            for c in consts:
                if isinstance(c, ast.Constant) and c.value in names:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} {c.value!r}")
    assert not found, found


def test_only_the_round_calls_server_step() -> None:
    calls = []
    for path in _python_files_outside("federation/round.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "server_step"
            ):
                calls.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not calls, calls
