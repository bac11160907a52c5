"""A real Firefox profile's frecency update, computed on the device (Mozilla paper, Sec. 5).

The client reads its own ``places.sqlite`` (nothing of it leaves the device), finds the
URL-bar searches it can learn from, replays them with the served weights, and sends the
mean finite-difference gradient of the pointwise SVM loss, the number of searches, and the
paper's metrics (characters typed, selected rank, loss).

Where the searches come from:

* ``moz_inputhistory`` (Firefox's record of what the user typed in the URL bar and which
  page they picked, with a use count): each row is a search with that input and target.
* Otherwise (a profile without input history, as the two sample profiles in
  ``../shared/data/firefox``): every TYPED visit (``visit_type`` 2, a navigation typed in
  the URL bar) is replayed as the user typing the page's host name (``www.`` dropped)
  character by character until the page is among the first ``attention_depth`` suggestions,
  as the simulated users of :mod:`fedrank.simulation.frecency.urlbar` do.

Matching, as Firefox's default "match on word boundaries": a page matches when every typed
token is a prefix of a word of its title or URL (host labels, path segments; lowercase,
split at non-alphanumerics). Matched pages are ranked by the served frecency; the top ``k``
are shown; the SVM loss of the shown list is the objective whose gradient is estimated.
Scores use today's histories (the visit being replayed is not removed first): a
simplification to keep in mind when reading the numbers.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.core.message import MessageBatch
from fedrank.data.places import PlacesData, classic_histories, modern_samples, read_places
from fedrank.errors import ConfigError
from fedrank.losses.pointwise_svm import pointwise_svm_loss, scaled_scores
from fedrank.models.frecency.classic import ClassicFrecency
from fedrank.models.frecency.modern import ModernFrecency
from fedrank.models.frecency.scorer import page_scorer
from fedrank.systems.frecency.client import FrecencyClient
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.wire import FrecencyWire

_WORD = re.compile(r"[a-z0-9]+")


def page_words(url: str, title: str | None) -> set[str]:
    """The words a query can match: title words and URL parts, lowercase."""
    lowered = url.lower()
    host = re.sub(r"^[a-z]+://", "", lowered).split("/", 1)[0]
    words = set(_WORD.findall(lowered)) | set(_WORD.findall(host.removeprefix("www.")))
    if title:
        words |= set(_WORD.findall(title.lower()))
    return words - {"http", "https", "www"}


def typed_form(url: str) -> str:
    """What a user types to reach ``url`` from the URL bar: its host without ``www.``."""
    host = re.sub(r"^[a-z]+://", "", url.lower()).split("/", 1)[0]
    return host.removeprefix("www.")


@dataclass(frozen=True)
class ReplayedSearch:
    """One replayed search: the shown list (page rows) and where the target was."""

    shown: np.ndarray
    selected: int
    chars_typed: int
    weight: float


def _input_history(path: Path) -> list[tuple[int, str, float]]:
    """``(place_id, input, use_count)`` rows of ``moz_inputhistory`` (empty if absent)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "moz_inputhistory" not in tables:
            return []
        rows = conn.execute("SELECT place_id, input, use_count FROM moz_inputhistory")
        return [(int(p), str(i), float(u)) for p, i, u in rows if i]
    finally:
        conn.close()


class ProfileSearches:
    """The URL-bar searches of one profile, ready to be ranked by any weights.

    Args:
        path: the profile's ``places.sqlite`` (read only).
        model: ``classic`` or ``modern`` frecency.
        k: suggestions shown; ``attention_depth``: how deep the user looks when typing.
    """

    def __init__(
        self, path: Path, model: str = "classic", k: int = 10, attention_depth: int = 3
    ) -> None:
        self.path = Path(path)
        self.model = model
        self.k = k
        self.attention_depth = attention_depth
        self.scorer_class = page_scorer(model)
        self.data: PlacesData = read_places(self.path)
        if model == "classic":
            self._frecency: Any = ClassicFrecency()
            self._pages: Any = classic_histories(self.data)
        else:
            self._frecency = ModernFrecency()
            self._pages = modern_samples(self.data)
        titles = [t if isinstance(t, str) else None for t in self.data.title]
        self.words = [page_words(str(u), t) for u, t in zip(self.data.url, titles, strict=True)]
        history = _input_history(self.path)
        index = self.data.place_index(np.array([h[0] for h in history], dtype=np.int64))
        self.source = "inputhistory" if history else "typed-visits"
        if history:
            self.queries = [
                (int(i), h[1], h[2]) for i, h in zip(index, history, strict=True) if i >= 0
            ]
        else:
            typed = self.data.place_index(self.data.visit_place_id[self.data.visit_type == 2])
            self.queries = [(int(i), "", 1.0) for i in typed if i >= 0]

    @property
    def n_searches(self) -> int:
        return len(self.queries)

    def scores(self, params: np.ndarray) -> np.ndarray:
        """Frecency of every page under ``params`` (``(n,)``) or rows ``(P, d)``."""
        return np.asarray(self._frecency.score(params, self._pages), dtype=np.float64)

    def _matches(self, text: str) -> np.ndarray:
        tokens = text.lower().split()
        return np.array(
            [all(any(w.startswith(t) for w in words) for t in tokens) for words in self.words]
        )

    def replay(self, params: np.ndarray) -> list[ReplayedSearch]:
        """Every search, ranked by ``params``; searches whose target is never shown are
        left out (nothing to learn from them)."""
        score = self.scores(params)
        order = np.lexsort((np.arange(score.size), -score))  # by score, then page order
        out = []
        for target, text, weight in self.queries:
            inputs = [text] if text else self._typing(target)
            for i, typed in enumerate(inputs):
                matched = self._matches(typed)
                matched[target] = matched[target] or bool(text)  # Firefox offers the chosen page
                shown = order[matched[order]][: self.k]
                hit = np.flatnonzero(shown == target)
                last = i == len(inputs) - 1
                if hit.size and (hit[0] < self.attention_depth or text or last):
                    out.append(ReplayedSearch(shown, int(hit[0]), len(typed), weight))
                    break
        return out

    def _typing(self, target: int) -> list[str]:
        form = typed_form(str(self.data.url[target]))
        return [form[:c] for c in range(1, len(form) + 1)]


def frecency_update(
    searches: ProfileSearches,
    params: np.ndarray,
    config: FrecencyConfig | None = None,
    rng: np.random.Generator | None = None,
    max_n: int | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """``(payload, metrics)`` of this profile for the served ``params``: the weighted mean
    finite-difference gradient of the SVM loss over the replayed searches, privatized and
    encoded by the client half of the served ``config`` (the server's ``[frecency]`` section:
    its ``eps``, margin, loss scale and message form; default: the defaults of
    ``searches.model``), with ``n`` = the number of searches, at most ``max_n`` (the
    server's bound on a message's weight); ``({}, metrics)`` when there is nothing to learn
    from. ``rng``: the randomized signs' coins (``sign_epsilon``); default: fresh from the
    operating system's entropy, as a device's coins must be (coins a server could guess
    would undo the randomization)."""
    client = FrecencyClient(config or FrecencyConfig(model=searches.model))
    if client.config.model != searches.model:
        raise ConfigError(
            f"the server tunes {client.config.model} frecency; these searches were read for "
            f"{searches.model}"
        )
    theta = np.asarray(params, dtype=np.float64)
    if theta.shape != (len(searches.scorer_class.names),):
        raise ConfigError(
            f"the served model has {theta.size} weights; {searches.model} frecency has "
            f"{len(searches.scorer_class.names)}"
        )
    replayed = searches.replay(theta)
    if not replayed:
        return {}, {"searches": 0.0}
    k = searches.k
    shown = np.full((len(replayed), k), -1, dtype=np.int64)
    for i, r in enumerate(replayed):
        shown[i, : r.shown.size] = r.shown
    valid = shown >= 0
    selected = np.array([r.selected for r in replayed])
    weights = np.array([r.weight for r in replayed])
    scale, delta = str(client.config.score_scale), float(client.config.delta)

    def objective(rows: np.ndarray) -> np.ndarray:
        page_scores = scaled_scores(searches.scores(rows), scale)  # (P, n_pages)
        return pointwise_svm_loss(page_scores[:, np.where(valid, shown, 0)], selected, valid, delta)

    grads, losses = client.estimator.estimate_units(theta, objective)
    gradient = weights @ grads / weights.sum()
    metrics = {
        "loss": float(weights @ losses / weights.sum()),
        "chars_typed": float(np.mean([r.chars_typed for r in replayed])),
        "selected_rank": float(np.mean(selected)),
        "searches": float(len(replayed)),
    }
    n = len(replayed) if max_n is None else min(len(replayed), int(max_n))
    sent = client.privatize(gradient[None, :], rng or np.random.default_rng())
    wire = FrecencyWire(client.config, max_n=max(n, 1))
    (payload,) = wire.encode(MessageBatch.of_vectors(sent, np.array([n])))
    return payload, metrics
