"""The antithetic differences a FOLtR-ES run reports for choosing ``difference_bound``
(fedrank.experiments.foltr.differences)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.experiments.foltr.differences import ReportDifferences


def _batch(metric: list[float], anti: list[float] | None) -> MessageBatch:
    return MessageBatch.of_es(np.arange(len(metric)), metric, anti)


def test_quantiles_and_shares_of_known_differences() -> None:
    diffs = ReportDifferences()
    # differences 0, 0.1, 0.25 (twice), 0.5, 1 (the liar's), over two batches
    diffs.add(_batch([0.5, 0.6, 0.25], [0.5, 0.5, 0.5]))
    diffs.add(_batch([0.75, 0.0, 1.0], [0.5, 0.5, 0.0]))
    diffs.add(_batch([0.3], None))  # a plain report has no difference
    report = diffs.to_json()
    assert report["reports"] == 6
    assert report["median"] == 0.25 and report["p90"] == 1.0
    assert report["share_within"] == {"0.25": pytest.approx(4 / 6), "0.5": 5 / 6, "0.75": 5 / 6}
    assert report["share_of_one"] == pytest.approx(1 / 6)
    assert diffs.quantile(0.1) == 0.0
    assert ReportDifferences().to_json() == {"reports": 0}
