"""The on-device frecency update of the real Firefox profiles in ../shared/data/firefox."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from fedrank.client.frecency_update import ProfileSearches, frecency_update, page_words, typed_form
from fedrank.core.codec import unpack_signs
from fedrank.errors import ConfigError
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores
from fedrank.models.frecency.scorer import page_scorer
from fedrank.models.frecency.weights import classic_defaults
from fedrank.systems.frecency.config import FrecencyConfig


def test_words_and_typed_form() -> None:
    assert typed_form("https://www.mozilla.org/about/") == "mozilla.org"
    words = page_words("https://support.mozilla.org/kb/customize-firefox", "Customize Firefox")
    assert {"support", "mozilla", "org", "kb", "customize", "firefox"} <= words
    assert "https" not in words and "www" not in words


@pytest.mark.parametrize("name", ["places.sqlite", "places-aged.sqlite"])
def test_classic_update_of_a_real_profile(firefox_dir: Path, name: str) -> None:
    searches = ProfileSearches(firefox_dir / name)
    assert searches.source == "typed-visits"  # the sample profiles have no input history
    assert searches.n_searches == 46
    payload, metrics = frecency_update(searches, classic_defaults())
    assert len(payload["gradient"]) == 22 and payload["n"] == metrics["searches"] > 30
    assert 0 <= metrics["selected_rank"] < 3 and metrics["chars_typed"] >= 1
    # the reported loss is the SVM loss of the replayed shown lists under the served weights
    replayed = searches.replay(classic_defaults())
    scores = scaled_scores(searches.scores(classic_defaults()), "log")
    losses = [
        pointwise_svm_loss(
            scores[r.shown][None, :], np.array([r.selected]), np.ones((1, r.shown.size), bool), 0.1
        )[0]
        for r in replayed
    ]
    assert metrics["loss"] == pytest.approx(np.mean(losses))


def test_gradient_matches_a_finite_difference_of_the_loss(firefox_dir: Path) -> None:
    searches = ProfileSearches(firefox_dir / "places-aged.sqlite")
    theta = classic_defaults()
    payload, _ = frecency_update(searches, theta)
    replayed = searches.replay(theta)
    weight = np.array([r.weight for r in replayed])

    def mean_loss(params: np.ndarray) -> float:
        scores = scaled_scores(searches.scores(params), "log")
        per = [
            pointwise_svm_loss(
                scores[r.shown][None, :],
                np.array([r.selected]),
                np.ones((1, r.shown.size), bool),
                0.1,
            )[0]
            for r in replayed
        ]
        return float(weight @ np.array(per) / weight.sum())

    for j in (4, 7, 11, 13):  # weights with signal in this profile
        e = np.zeros(22)
        e[j] = 1.0
        fd = (mean_loss(theta + e) - mean_loss(theta - e)) / 2
        assert payload["gradient"][j] == pytest.approx(fd)


def test_modern_update_in_signs(firefox_dir: Path) -> None:
    searches = ProfileSearches(firefox_dir / "places.sqlite", model="modern")
    payload, metrics = frecency_update(
        searches,
        page_scorer("modern").defaults(),
        FrecencyConfig(model="modern", message="sign"),
    )
    signs = unpack_signs(base64.b64decode(payload["signs"]), 5)
    assert set(np.unique(signs)) <= {-1.0, 0.0, 1.0} and metrics["searches"] > 0
    with pytest.raises(ConfigError, match="5 weights|has 22"):
        frecency_update(searches, classic_defaults())


def test_randomized_signs_draw_fresh_coins_on_the_device(firefox_dir: Path) -> None:
    """A device's randomized-response coins come from the operating system's entropy unless
    the caller seeds them: two updates of the same profile differ, two with the same seed
    agree (coins a server could guess, e.g. a fixed seed, would undo the randomization)."""
    searches = ProfileSearches(firefox_dir / "places.sqlite")
    config = FrecencyConfig(message="sign", sign_epsilon=0.05)
    fresh = [frecency_update(searches, classic_defaults(), config)[0] for _ in range(2)]
    assert fresh[0]["signs"] != fresh[1]["signs"]
    seeded = [
        frecency_update(searches, classic_defaults(), config, rng=np.random.default_rng(3))[0]
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1]
