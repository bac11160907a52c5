"""The MSE baseline of FOLtR-ES: least-squares regression of relevance labels on features.

Kharitonov (WSDM 2019), Section 5 "Baselines": "MSE, is a linear regression model (as
implemented in scikit-learn) that is fit to predict relevance of a document to a query given
the feature representation of the query-document pair. The model is obtained by minimizing
the mean squared loss across all query-document pairs in the training set." Section 6.3:
"We turn the regularization off for MSE". The reference implementation
(facebookresearch/foltr-es, ``baselines.py``) fits ``Ridge(alpha=0.0, fit_intercept=True)``
and keeps only ``coef_`` as a linear ranker without bias; the intercept adds the same amount
to every document of a query, so it cannot change a ranking.

:class:`MSERanker` solves the same least-squares problem exactly (ordinary least squares with
an intercept, no regularization) instead of calling ``Ridge(alpha=0)``, because that call is
numerically ill-posed on the LETOR data: six MQ2008 features are zero on every document,
``X^T X`` is singular, Ridge falls back to an SVD whose cut-off (``s > 1e-15``) keeps
rounding-noise singular values, and the fit puts weights of ~1e13 on the all-zero features
and errors of order 1 on the others. That result depends on the row order and on the LAPACK
build (permuting the training rows changes its expected MaxRR by up to 0.05 on MQ2008), and
its squared error is larger than the least-squares optimum. Here, features that are constant
over the training split get weight 0 (any weight gives the same rankings), and the centered
remaining features are solved by SVD least squares with the minimum norm
(:func:`numpy.linalg.lstsq`), which is deterministic and attains the least squared error.

Scores are computed in float32 (:class:`~fedrank.models.linear.LinearRanker`), as the
reference implementation's PyTorch model does.
"""

from __future__ import annotations

import numpy as np

from fedrank.baselines._checks import LinearScoring, check_training_splits
from fedrank.data.letor.split import LetorSplit

__all__ = ["MSERanker"]


class MSERanker(LinearScoring):
    """Linear ranker fit by ordinary least squares of the label on the features (see the
    module docstring); ranks by ``w . x`` without the intercept.

    Attributes (after :meth:`fit`):
        coef_: ``(n_features,)`` float64 weights ``w``; 0 for features that are constant over
            the training split.
        intercept_: float; the fitted intercept (not used for ranking).
        rank_: int; rank of the centered design matrix of the non-constant features.
        n_features_in_: int; the number of features seen in :meth:`fit`.
    """

    def __repr__(self) -> str:
        return "MSERanker()"

    def fit(self, split: LetorSplit, vali: LetorSplit | None = None) -> MSERanker:
        """Fit on every document of ``split``. ``vali`` is accepted for a uniform interface
        with the other baselines and is not used (the paper fits MSE on the training set).

        Raises:
            DataFormatError: ``split`` has no documents, or ``vali`` has another width.
        """
        check_training_splits(split, vali, "MSERanker")
        x = split.features.astype(np.float64)
        y = split.labels.astype(np.float64)
        varying = ~np.all(split.features == split.features[0], axis=0)
        coef = np.zeros(split.n_features)
        rank = 0
        if varying.any():
            xc = x[:, varying] - x[:, varying].mean(axis=0)
            solution, _, rank, _ = np.linalg.lstsq(xc, y - y.mean(), rcond=None)
            coef[varying] = solution
        self.coef_ = coef
        self.intercept_ = float(y.mean() - x.mean(axis=0) @ coef)
        self.rank_ = int(rank)
        self.n_features_in_ = split.n_features
        return self
