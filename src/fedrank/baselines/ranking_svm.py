"""The RankingSVM baseline of FOLtR-ES: a linear pairwise SVM with svm_rank's objective.

Kharitonov (WSDM 2019), Section 5: "The second baseline is a RankingSVM model [17, 18]. We
use the author's implementation" (svm_rank), with [17] Joachims, "Optimizing search engines
using clickthrough data", KDD 2002 and [18] Joachims, "Training linear SVMs in linear time",
KDD 2006; Section 6.3: "set the RankingSVM's parameter C to 10^3". The reference implementation
(facebookresearch/foltr-es, ``baselines.py``) runs ``svm_rank_learn -c 1000.0`` with the
other options at their defaults and ranks by the learned ``w . x`` (no bias).

The problem svm_rank solves. Every pair of documents ``(i, j)`` of one query with
``label_i > label_j`` asks for ``w . (x_i - x_j) >= 1``; with ``n`` the number of training
queries (svm_rank's "examples", including queries whose documents all have the same label),
svm_rank minimizes::

    1/2 ||w||^2 + (C / n) * sum over pairs of max(0, 1 - w . (x_i - x_j))

Source of the ``C / n`` scaling: svm_rank is an instance of SVM-struct, whose learner
normalizes C by the number of training examples (``svm_struct_learn.c``: "normalize
regularization parameter C by the number of training examples ... svmCnorm=sparm->C/n"); each
query is one example (``svm_struct_api.c``, SVM-rank instance, ``read_struct_examples``); with
the default loss ``-l 1`` ("Total number of swapped pairs summed over all queries") a query's
slack is the sum of its pairs' hinge losses (margin rescaling, ``-o 2``, the default), and the
program's help text states the equivalence with SVM-light's ranking mode: "SVM-light in '-z p'
mode and SVM-rank with loss 1 are equivalent for c_light = c_rank/n, where n is the number of
training rankings (i.e. queries)". The SVMrank page (cs.cornell.edu/people/tj/svm_light/
svm_rank.html) documents ``-c`` ("trade-off between training error and margin") and that
SVMrank "solves the same optimization problem as SVMlight with the '-z p' option".

How it is solved here: the hinge-loss (not squared-hinge) linear SVM without intercept on the
pair differences ``x_i - x_j``, i.e. scikit-learn's ``LinearSVC(loss="hinge", dual=True,
fit_intercept=False, C=C / n)`` (liblinear's dual coordinate descent, run to a small
tolerance). A deterministic half of the pairs (every other one) enters with its sign flipped,
``(-(x_i - x_j), -1)``, so that both classes are present; without an intercept each term
``max(0, 1 - y w . d)`` is unchanged, and so is the solution. svm_rank itself stops its
cutting-plane algorithm at a tolerance (``-e 0.001``, rescaled by the mean number of pairs per
query), so its weights are near-optimal, not exact: on MQ2008 the expected MaxRR of our exact
solution and of the reference's published svm_rank models differ by at most 0.008.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from fedrank.baselines._checks import LinearScoring, check_training_splits
from fedrank.data.letor.split import LetorSplit
from fedrank.errors import ConfigError

__all__ = ["RankingSVM", "ranking_pairs"]


def ranking_pairs(split: LetorSplit) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of documents of one query with different labels: row indices
    ``(better, worse)``, each ``(n_pairs,)`` int64, with ``labels[better] > labels[worse]``.

    Pairs come query by query; within a query, by ``better`` in order of decreasing label
    (documents of one label in file order), then by ``worse`` likewise. Built without a Python
    loop: sorting each query's documents by decreasing label puts every document's worse
    partners in one contiguous run after its own label group, so the pairs are runs of
    consecutive positions (memory is ``O(n_pairs)``, not ``O(sum of squared query sizes)``).
    """
    labels = split.labels.astype(np.int64)
    query = split.query_of_doc
    top = int(labels.max(initial=0))
    key = query * (top + 1) + (top - labels)
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    first_worse = np.searchsorted(sorted_key, sorted_key, side="right")
    query_end = split.query_offsets[1:][query[order]]
    count = query_end - first_worse
    starts = np.repeat(first_worse, count)
    within = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(order, count), order[starts + within]


class RankingSVM(LinearScoring):
    """Linear RankingSVM with svm_rank's objective (see the module docstring).

    Args:
        C: svm_rank's ``-c`` (the paper: 10^3); each pair's hinge loss is weighted by
            ``C / n_queries``.
        tol: liblinear's stopping tolerance (1e-4: on MQ2008 the objective then agrees with
            its value at tol 1e-6 to a relative 1e-8).
        max_iter: liblinear's iteration limit (10^6; MQ2008 folds need 5-7 x 10^4).
        random_state: seed of liblinear's coordinate order.

    Attributes (after :meth:`fit`):
        coef_: ``(n_features,)`` float64 weights ``w``.
        pair_C_: float; the weight of each pair's hinge loss, ``C / n_queries``.
        n_pairs_: int; the number of training pairs.
        n_queries_: int; ``n``, the number of training queries (with or without pairs).
        objective_: float; the objective above at ``coef_``.
        n_iter_: int; liblinear's iterations.
        converged_: bool; False if liblinear stopped at ``max_iter`` (a
            :class:`~sklearn.exceptions.ConvergenceWarning` is issued then).
        n_features_in_: int.
    """

    def __init__(
        self,
        C: float = 1000.0,
        *,
        tol: float = 1e-4,
        max_iter: int = 1_000_000,
        random_state: int = 0,
    ) -> None:
        self.C = C
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state

    def __repr__(self) -> str:
        return (
            f"RankingSVM(C={self.C!r}, tol={self.tol!r}, max_iter={self.max_iter!r}, "
            f"random_state={self.random_state!r})"
        )

    def _check_params(self) -> None:
        for name in ("C", "tol"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or not np.isfinite(value) or value <= 0:
                raise ConfigError(f"RankingSVM {name} must be a positive number, got {value!r}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, numbers.Integral):
            raise ConfigError(f"RankingSVM max_iter must be an int, got {self.max_iter!r}")
        if self.max_iter < 1:
            raise ConfigError(f"RankingSVM max_iter must be >= 1, got {self.max_iter}")
        if isinstance(self.random_state, bool) or not isinstance(
            self.random_state, numbers.Integral
        ):
            raise ConfigError(
                f"RankingSVM random_state must be an int seed, got {self.random_state!r}"
            )

    def fit(self, split: LetorSplit, vali: LetorSplit | None = None) -> RankingSVM:
        """Fit on every pair of ``split``. ``vali`` is accepted for a uniform interface with
        the other baselines and is not used (svm_rank trains on the training set only).

        Raises:
            ConfigError: a parameter is invalid, or ``split`` has no pair of documents of one
                query with different labels.
            DataFormatError: ``split`` has no documents, or ``vali`` has another width.
        """
        self._check_params()
        check_training_splits(split, vali, "RankingSVM")
        better, worse = ranking_pairs(split)
        if better.size == 0:
            raise ConfigError(
                f"RankingSVM: training split {split.name!r} has no pair of documents of one "
                "query with different labels, so there is nothing to learn; train on a split "
                "with graded queries"
            )
        features = split.features.astype(np.float64)
        diffs = features[better] - features[worse]
        pair_c = float(self.C) / split.n_queries
        signs = np.where(np.arange(better.size) % 2 == 0, 1.0, -1.0)
        x, y, weight = diffs * signs[:, None], signs, None
        if better.size == 1:
            # One pair gives one class; its two signed copies at half weight are the same term.
            x, y, weight = np.vstack([diffs, -diffs]), np.array([1.0, -1.0]), np.full(2, 0.5)
        svm = LinearSVC(
            loss="hinge",
            dual=True,
            fit_intercept=False,
            C=pair_c,
            tol=float(self.tol),
            max_iter=int(self.max_iter),
            random_state=int(self.random_state),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            svm.fit(x, y, sample_weight=weight)
        coef = svm.coef_.ravel().astype(np.float64)
        n_iter = int(np.max(svm.n_iter_))
        self.converged_ = n_iter < int(self.max_iter)
        if not self.converged_:
            warnings.warn(
                f"RankingSVM on {split.name!r}: liblinear stopped after max_iter="
                f"{self.max_iter} iterations without reaching tol={self.tol}, so coef_ is not "
                "the exact optimum of the svm_rank objective; raise max_iter (or tol)",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.coef_ = coef
        self.pair_C_ = pair_c
        self.n_pairs_ = int(better.size)
        self.n_queries_ = split.n_queries
        self.objective_ = float(
            0.5 * coef @ coef + pair_c * np.maximum(0.0, 1.0 - diffs @ coef).sum()
        )
        self.n_iter_ = n_iter
        self.n_features_in_ = split.n_features
        return self
