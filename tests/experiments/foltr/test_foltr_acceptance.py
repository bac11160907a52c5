"""Issue acceptance on real data: on MQ2008, over the five folds, FOLtR-ES final models
(paper settings: 2,000 clients, B = 4, antithetic, p = 0.9, 2M interactions) reach an
expected MaxRR within 0.02 of the MSE baseline for the Navigational and Perfect click
models, on train and test (means over folds, as the paper's Table 3), for the linear
ranker under both click models. The two-layer ranker's cells would add about 70 s of CPU each
to every CI run (the suite must stay under 10 minutes on 2 cores): `fedrank foltr reproduce`
measures all four (docs/foltr-es.md), and the two-layer ranker's training is checked on
every run at a smaller budget (``tests/experiments/foltr/test_foltr.py``, the server's
end-to-end test)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.data.letor.folds import load_folds
from fedrank.data.letor.split import LetorFold
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
    ("ranker", "click_model"), [("linear", "navigational"), ("linear", "perfect")]
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
