"""run_baselines: the documented report shape, agreement with direct evaluation, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrank.baselines import LambdaMART, MSERanker, RankingSVM
from fedrank.data.letor.folds import load_fold
from fedrank.data.letor.split import LetorFold, LetorSplit
from fedrank.data.query_bank import QueryBank
from fedrank.errors import ConfigError
from fedrank.experiments.foltr.baselines import BASELINES, make_baseline, run_baselines
from fedrank.metrics.evaluate import evaluate
from fedrank.models.click_models import click_model

PAPER_MODELS = ("perfect", "navigational", "informational")


def synthetic_split(rng: np.random.Generator, n_queries: int, name: str) -> LetorSplit:
    sizes = rng.integers(3, 14, size=n_queries)
    features = rng.normal(size=(int(sizes.sum()), 5)).astype(np.float32)
    signal = features @ np.array([1.0, -0.5, 0.3, 0.0, 0.8]) + 0.5 * rng.normal(size=sizes.sum())
    labels = np.digitize(signal, np.quantile(signal, [0.7, 0.9])).astype(np.int8)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return LetorSplit(features, labels, offsets, np.arange(n_queries).astype(str), name)


@pytest.fixture(scope="module")
def small_fold() -> LetorFold:
    rng = np.random.default_rng(0)
    return LetorFold(
        train=synthetic_split(rng, 60, "train"),
        vali=synthetic_split(rng, 20, "vali"),
        test=synthetic_split(rng, 30, "test"),
        name="synthetic fold",
    )


@pytest.fixture(scope="module")
def small_report(small_fold: LetorFold) -> dict:
    return run_baselines(small_fold, seed=3)


@pytest.fixture(scope="module")
def mq2008_fold1(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LetorFold:
    path = data_dir / "MQ2008"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    cache = tmp_path_factory.getbasetemp() / "baselines-letor-cache"
    cache.mkdir(exist_ok=True)
    return load_fold(path, 1, cache_dir=cache)


def test_report_has_exactly_the_documented_keys(small_fold: LetorFold, small_report: dict) -> None:
    assert list(small_report) == ["data", *BASELINES]
    assert small_report["data"] == {
        "name": "synthetic fold",
        "train_queries": 60,
        "test_queries": 30,
        "n_features": 5,
    }
    for name in BASELINES:
        entry = small_report[name]
        assert list(entry) == ["expected_maxrr", "ndcg10", "fit_seconds"]
        assert list(entry["expected_maxrr"]) == list(PAPER_MODELS)
        for per_split in [*entry["expected_maxrr"].values(), entry["ndcg10"]]:
            assert list(per_split) == ["train", "test"]
            assert all(type(v) is float and 0.0 <= v <= 1.0 for v in per_split.values())
        assert type(entry["fit_seconds"]) is float and entry["fit_seconds"] >= 0.0
    assert json.loads(json.dumps(small_report)) == small_report


def test_report_follows_the_requested_order_and_subsets(small_fold: LetorFold) -> None:
    report = run_baselines(small_fold, ("informational",), which=("lambdamart", "mse"))
    assert list(report) == ["data", "lambdamart", "mse"]
    assert list(report["mse"]["expected_maxrr"]) == ["informational"]


def test_same_seed_same_numbers(small_fold: LetorFold, small_report: dict) -> None:
    again = run_baselines(small_fold, seed=3)
    for name in BASELINES:
        again[name]["fit_seconds"] = small_report[name]["fit_seconds"]
    assert again == small_report


def test_fold_without_vali(small_fold: LetorFold) -> None:
    fold = LetorFold(small_fold.train, None, small_fold.test, "no vali")
    report = run_baselines(fold, ("perfect",), which=("lambdamart",))
    assert 0.0 <= report["lambdamart"]["ndcg10"]["test"] <= 1.0


def test_make_baseline() -> None:
    assert isinstance(make_baseline("mse"), MSERanker)
    svm = make_baseline("ranking_svm", seed=4)
    assert isinstance(svm, RankingSVM) and svm.C == 1000.0 and svm.random_state == 4
    trees = make_baseline("lambdamart", seed=5)
    assert isinstance(trees, LambdaMART) and trees.random_state == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"which": ("mse", "xgboost")}, "unknown baseline 'xgboost'"),
        ({"which": "mse"}, "not the string 'mse'"),
        ({"which": ("mse", "mse")}, "lists a name twice"),
        ({"which": ()}, "baselines is empty"),
        ({"click_models": ("perfect", "impatient")}, "unknown click model 'impatient'"),
        ({"click_models": "perfect"}, "not the string 'perfect'"),
        ({"click_models": ()}, "click models is empty"),
    ],
)
def test_bad_names_raise_before_fitting(small_fold: LetorFold, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run_baselines(small_fold, **kwargs)


def test_make_baseline_unknown_name() -> None:
    with pytest.raises(ConfigError, match="choose among mse, ranking_svm, lambdamart"):
        make_baseline("svm")


def test_mq2008_values_equal_direct_evaluation(mq2008_fold1: LetorFold) -> None:
    report = run_baselines(mq2008_fold1, which=("mse",))
    assert report["data"] == {
        "name": "MQ2008 Fold1",
        "train_queries": 471,
        "test_queries": 156,
        "n_features": 46,
    }
    model = MSERanker().fit(mq2008_fold1.train)
    models = {name: click_model(name, 3) for name in PAPER_MODELS}
    for split in ("train", "test"):
        direct = evaluate(QueryBank(getattr(mq2008_fold1, split)), model.score, models)
        for name in PAPER_MODELS:
            assert report["mse"]["expected_maxrr"][name][split] == direct[name]
        assert report["mse"]["ndcg10"][split] == direct["ndcg"]
