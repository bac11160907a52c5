"""Input checks and linear scoring shared by the baselines of :mod:`fedrank.baselines`."""

from __future__ import annotations

import numpy as np
from sklearn.exceptions import NotFittedError

from fedrank.data.letor.split import LetorSplit
from fedrank.errors import DataFormatError
from fedrank.models.linear import LinearRanker


def check_training_splits(split: LetorSplit, vali: LetorSplit | None, model: str) -> None:
    """``split`` (and ``vali``, if
    given) are :class:`LetorSplit` objects with documents and the same number of features.

    Raises:
        DataFormatError: otherwise.
    """
    for role, value in (("split", split), ("vali", vali)):
        if value is not None and not isinstance(value, LetorSplit):
            raise DataFormatError(
                f"{model}.fit: {role} must be a LetorSplit (see "
                f"fedrank.data.letor.folds.load_fold), got {type(value).__name__}"
            )
    if split.n_docs == 0:
        raise DataFormatError(
            f"{model}.fit: training split {split.name!r} has no documents; pass a split with "
            "at least one query"
        )
    if vali is not None and vali.n_features != split.n_features:
        raise DataFormatError(
            f"{model}.fit: vali {vali.name!r} has {vali.n_features} features but the training "
            f"split {split.name!r} has {split.n_features}; load both from the same dataset "
            "(load_fold gives every split the same width)"
        )


def check_score_features(features: np.ndarray, n_features: int | None, model: str) -> np.ndarray:
    """``features`` as an array of shape
    ``(..., n_features)``, where ``n_features`` is the fitted width (``None``: not fitted).

    Raises:
        NotFittedError: the model has not been fitted.
        DataFormatError: ``features`` is not an array ``(..., n_features)`` of numbers.
    """
    if n_features is None:
        raise NotFittedError(
            f"this {model} is not fitted yet; call fit(train_split) before score(features)"
        )
    x = np.asarray(features)
    if x.ndim == 0 or x.shape[-1] != n_features or x.dtype.kind not in "biuf":
        raise DataFormatError(
            f"{model}.score needs numeric features of shape (..., {n_features}) (the width of "
            f"the training split), got {x.dtype} with shape {x.shape}"
        )
    return x


class LinearScoring:
    """``score`` for baselines that learn a weight vector ``coef_`` (MSE, RankingSVM)."""

    coef_: np.ndarray

    def score(self, features: np.ndarray) -> np.ndarray:
        """Float32 scores ``(...)`` of documents ``(..., n_features)``: ``features @ coef_``
        (:class:`~fedrank.models.linear.LinearRanker`, as the reference's PyTorch model).

        Raises:
            NotFittedError: called before ``fit``.
            DataFormatError: ``features`` does not have ``n_features_in_`` columns.
        """
        name = type(self).__name__
        x = check_score_features(features, getattr(self, "n_features_in_", None), name)
        return np.asarray(LinearRanker(x.shape[-1]).score(self.coef_, x))
