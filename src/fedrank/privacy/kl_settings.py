"""The KL privacy measure of FedPS (Sec. 4.1, Table 2) under each modelling choice.

The paper defines the measure ("the Kullback-Leibler divergence between the real user
profile and the observed profile on the server") but not who "the server" is, how words an
update reveals are counted, or the smoothing. Those choices decide the order of the methods,
so this module computes the measure under a grid of them (:func:`kl_grid`) and reports, for
every setting, the order of the methods and the pairs reversed against the paper's Table 2
(:func:`order_sensitivity`).

A setting (:class:`KLSetting`) fixes:

* ``observer``: ``"server"`` -- the paper's setting: the *training* server, separate from
  the search engine that answers queries. It sees what training sends it: the log itself
  for the central model, GroupUser and CoverQuery (whose logs are collected to train), and
  only the uploaded updates for FedPS (the queries go to the search engine).
  ``"engine+server"`` -- the search engine and the training server are one party: FedPSFlat
  additionally exposes each user's real queries with their cover queries, FedPSProxy the
  proxy's pooled real queries (no covers through a proxy, Sec. 3.4).
* ``smoothing``: the additive pseudo-count of :func:`fedrank.privacy.profile_kl.term_profile`.
* ``revealed_weighting``: ``"counts"`` -- a revealed word weighs as often as it occurs in
  the client's training data (an embedding row's change grows with the word's frequency);
  ``"presence"`` -- the server learns only which rows changed: every revealed word counts 1.
* ``negatives``: whether the words of the non-clicked candidates a client trains on count as
  revealed (they change the same embedding rows) or only those of its queries and clicked
  documents.

Observed profiles per method (:func:`observed_profiles`): central = the real log (KL 0);
GroupUser = the group's pooled queries + clicks; CoverQuery = queries + covers + clicks;
FedPSFlat = revealed (+ queries + covers under ``engine+server``); FedPSProxy = the
proxy's pooled revealed (+ pooled queries under ``engine+server``). Revealed words are only
those of clients whose update reached the server (``ProfileCounts.received``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import sparse

from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy import profile_kl as kl

__all__ = [
    "CURRENT_SETTING",
    "METHODS",
    "PAPER_SETTING",
    "PAPER_TABLE2_AOL",
    "KLSetting",
    "ProfileCounts",
    "default_grid",
    "kl_grid",
    "observed_profiles",
    "order_sensitivity",
    "reversals",
]

Observer = Literal["server", "engine+server"]
Weighting = Literal["counts", "presence"]
METHODS: tuple[str, ...] = ("central", "groupuser", "coverquery", "flat", "proxy")

#: Table 2 of the paper, AOL column (mean KL; larger = less disclosed).
PAPER_TABLE2_AOL: dict[str, float] = {
    "groupuser": 2.715,
    "coverquery": 5.071,
    "flat": 7.092,
    "proxy": 5.403,
}


@dataclass(frozen=True)
class KLSetting:
    """One modelling choice of the measure (module docstring)."""

    observer: Observer
    smoothing: float = kl.DEFAULT_SMOOTHING
    revealed_weighting: Weighting = "counts"
    negatives: bool = True

    def __post_init__(self) -> None:
        if self.observer not in ("server", "engine+server"):
            raise ConfigError(
                f"observer must be 'server' (training server separate from the search "
                f"engine, the paper's setting) or 'engine+server', got {self.observer!r}"
            )
        if self.revealed_weighting not in ("counts", "presence"):
            raise ConfigError(
                f"revealed_weighting must be 'counts' or 'presence', got "
                f"{self.revealed_weighting!r}"
            )
        if not isinstance(self.negatives, bool):
            raise ConfigError(f"negatives must be True or False, got {self.negatives!r}")
        kl.term_profile(np.zeros(3), 3, self.smoothing)  # validates the smoothing

    def key(self) -> str:
        """A stable text key, e.g. ``"server|1e-03|counts|negatives"``."""
        words = "negatives" if self.negatives else "positives"
        return f"{self.observer}|{self.smoothing:.0e}|{self.revealed_weighting}|{words}"


#: The paper's reading (training server separate from the search engine).
PAPER_SETTING = KLSetting("server")
#: What earlier fedrank versions reported (engine and server one party).
CURRENT_SETTING = KLSetting("engine+server")


def default_grid() -> tuple[KLSetting, ...]:
    """Observer x smoothing {1e-4, 1e-3, 1e-2} x weighting x negatives: 24 settings, the
    paper's and the current one first."""
    grid = [
        KLSetting(o, s, w, n)
        for o, s, w, n in itertools.product(
            ("server", "engine+server"), (1e-3, 1e-4, 1e-2), ("counts", "presence"), (True, False)
        )
    ]
    return tuple(grid)


@dataclass(frozen=True)
class ProfileCounts:
    """Per-user ``(N, V)`` term counts the measure is built from.

    Attributes:
        queries: words of each user's issued queries.
        clicks: words of the documents each user clicked.
        covers: words of the cover queries sent with each user's queries (``None`` for
            methods without covers).
        train_all: words of each client's training samples: queries and every candidate.
        train_positive: the same with the clicked candidates only.
        received: ``(N,)`` bool, whether the client's update ever reached the server.
    """

    queries: sparse.csr_matrix
    clicks: sparse.csr_matrix
    covers: sparse.csr_matrix | None
    train_all: sparse.csr_matrix
    train_positive: sparse.csr_matrix
    received: np.ndarray

    def __post_init__(self) -> None:
        shapes = {
            name: getattr(self, name).shape
            for name in ("queries", "clicks", "covers", "train_all", "train_positive")
            if getattr(self, name) is not None
        }
        if len(set(shapes.values())) != 1:
            raise DataFormatError(f"profile counts must share one (N, V) shape, got {shapes}")
        n = self.queries.shape[0]
        received = np.asarray(self.received)
        if received.dtype != bool or received.shape != (n,):
            raise DataFormatError(
                f"received must be a bool array with one entry per user ({n},), got "
                f"{received.dtype} {received.shape}"
            )

    @property
    def real(self) -> sparse.csr_matrix:
        """The real profile's counts: issued queries + clicked documents."""
        return sparse.csr_matrix(self.queries + self.clicks)


def _revealed(
    counts: ProfileCounts,
    setting: KLSetting,
    upload_case: Literal[1, 2, 3],
    uploaded_words: np.ndarray | None,
) -> sparse.csr_matrix:
    train = counts.train_all if setting.negatives else counts.train_positive
    revealed = kl.revealed_words(train, upload_case, uploaded_words=uploaded_words)
    revealed = sparse.csr_matrix(sparse.diags(counts.received.astype(np.float64)) @ revealed)
    revealed.eliminate_zeros()
    if setting.revealed_weighting == "presence":
        revealed.data[:] = 1.0
    return revealed


def _needs(method: str, name: str, value: object) -> None:
    if value is None:
        raise ConfigError(f"the KL measure of {method!r} needs {name}; none was given")


def observed_profiles(
    method: str,
    counts: ProfileCounts,
    setting: KLSetting,
    *,
    groups: np.ndarray | None = None,
    proxies: np.ndarray | None = None,
    upload_case: Literal[1, 2, 3] = 1,
    uploaded_words: np.ndarray | None = None,
) -> kl.ObservedProfiles | sparse.csr_matrix:
    """What ``setting``'s observer attributes to each user under ``method`` (module
    docstring); ``groups`` for GroupUser, ``proxies`` for FedPSProxy."""
    if method == "central":
        return counts.real
    if method == "groupuser":
        _needs(method, "groups", groups)
        return kl.observed_group_user(counts.queries, counts.clicks, groups=groups)
    if method == "coverquery":
        _needs(method, "cover counts", counts.covers)
        return kl.observed_cover_query(counts.queries, counts.covers, counts.clicks)
    if method not in ("flat", "proxy"):
        raise ConfigError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    revealed = _revealed(counts, setting, upload_case, uploaded_words)
    engine = setting.observer == "engine+server"
    zero = sparse.csr_matrix(counts.queries.shape, dtype=np.float64)
    if method == "flat":
        if engine:
            _needs(method, "cover counts", counts.covers)
            return kl.observed_fedps_flat(counts.queries, counts.covers, revealed)
        return revealed
    _needs(method, "proxies", proxies)
    return kl.observed_fedps_proxy(counts.queries if engine else zero, revealed, proxies=proxies)


def kl_grid(
    method: str,
    counts: ProfileCounts,
    *,
    groups: np.ndarray | None = None,
    proxies: np.ndarray | None = None,
    upload_case: Literal[1, 2, 3] = 1,
    uploaded_words: np.ndarray | None = None,
    settings: Iterable[KLSetting] | None = None,
) -> dict[str, float]:
    """Mean KL (nats) of ``method`` under every setting (default :func:`default_grid`),
    keyed by :meth:`KLSetting.key`."""
    real = counts.real
    out: dict[str, float] = {}
    for setting in default_grid() if settings is None else settings:
        observed = observed_profiles(
            method,
            counts,
            setting,
            groups=groups,
            proxies=proxies,
            upload_case=upload_case,
            uploaded_words=uploaded_words,
        )
        out[setting.key()] = kl.mean_kl(real, observed, smoothing=setting.smoothing)
    return out


def reversals(
    values: Mapping[str, float], paper: Mapping[str, float] = PAPER_TABLE2_AOL
) -> list[tuple[str, str]]:
    """Pairs ``(a, b)`` the paper orders ``a > b`` but ``values`` orders ``a < b``, over the
    methods both give, in the paper's order."""
    names = sorted((m for m in paper if m in values), key=lambda m: -paper[m])
    return [(a, b) for a, b in itertools.combinations(names, 2) if values[a] < values[b]]


def order_sensitivity(
    grid_by_method: Mapping[str, Mapping[str, float]],
    paper: Mapping[str, float] = PAPER_TABLE2_AOL,
) -> list[dict[str, object]]:
    """For every setting key (in the first method's order): the methods from most to least
    private (``order``), the ``reversals`` against the paper and their ``count``."""
    methods: Sequence[str] = list(grid_by_method)
    if not methods:
        raise DataFormatError("order_sensitivity needs the KL grid of at least one method")
    keys = list(grid_by_method[methods[0]])
    differ = {
        m: sorted(set(keys) ^ set(grid_by_method[m]))
        for m in methods
        if set(keys) != set(grid_by_method[m])
    }
    if differ:
        raise DataFormatError(
            f"every method needs the same settings as {methods[0]!r}; settings that differ: "
            f"{differ}"
        )
    rows: list[dict[str, object]] = []
    for key in keys:
        values = {m: float(grid_by_method[m][key]) for m in methods}
        pairs = reversals(values, paper)
        rows.append(
            {
                "setting": key,
                "order": sorted(methods, key=lambda m: -values[m]),
                "reversals": pairs,
                "count": len(pairs),
            }
        )
    return rows
