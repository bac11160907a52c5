"""Issue acceptance on real data: on MQ2008, over the five folds, FOLtR-ES final models
(paper settings: 2,000 clients, B = 4, antithetic, p = 0.9, 2M interactions) reach an
expected MaxRR within 0.02 of the MSE baseline for the Navigational and Perfect click
models, on train and test (means over folds, as the paper's Table 3): the linear ranker
for both click models, the two-layer ranker for Navigational (its Perfect runs would add
about 90 s of CPU to every CI run; `fedrank foltr reproduce` measures all four)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.data.letor import LetorFold, load_folds
from fedrank.experiments.foltr.baselines import run_baselines
from fedrank.experiments.foltr.run import FoltrConfig, run_foltr

MODELS = ("navigational", "perfect")


@pytest.fixture(scope="module")
def folds(mq2008_dir: Path, letor_cache: Path) -> list[LetorFold]:
    return load_folds(mq2008_dir, cache_dir=letor_cache)


@pytest.fixture(scope="module")
def mse(folds: list[LetorFold]) -> dict[str, dict[str, float]]:
    runs = [run_baselines(f, MODELS, which=("mse",))["mse"]["expected_maxrr"] for f in folds]
    return {
        m: {s: float(np.mean([r[m][s] for r in runs])) for s in ("train", "test")} for m in MODELS
    }


@pytest.mark.parametrize(
    ("ranker", "click_model"),
    [("linear", "navigational"), ("linear", "perfect"), ("two-layer", "navigational")],
)
def test_foltr_es_is_within_002_of_mse(
    folds: list[LetorFold], mse: dict[str, dict[str, float]], ranker: str, click_model: str
) -> None:
    results = [
        run_foltr(FoltrConfig(click_model=click_model, ranker=ranker, seed=k), fold)
        for k, fold in enumerate(folds, start=1)
    ]
    for split in ("train", "test"):
        ours = float(np.mean([r.expected_maxrr[split] for r in results]))
        assert ours >= mse[click_model][split] - 0.02, (split, ours, mse[click_model][split])
