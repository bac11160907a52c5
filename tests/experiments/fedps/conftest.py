"""The FedPS tests' shared small slice of the real AOL log."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrank.experiments.fedps.data import FedPSData, prepare_aol


@pytest.fixture(scope="session")
def small(aol_log: Path) -> FedPSData:
    """12 real AOL users, 16-dimensional word vectors."""
    return prepare_aol(aol_log, users=12, seed=3, dim=16, word2vec_epochs=1)
