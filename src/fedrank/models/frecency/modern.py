"""Modern ("decay-based") Firefox frecency, Firefox 128+ (exact, as in Firefox ESR 153).

Since 2024 Firefox no longer uses the bucket algorithm of the paper (Section 4). Its
``CalculateFrecency`` (``toolkit/components/places/SQLFunctions.cpp``) samples the
``numSampledVisits`` (10) most recent visits of a page (plus "virtual" visits made of page
interactions, and a bookmark when there is no visit), puts each sample in one of four
weight classes -- low / medium / high / veryHigh, weights ``places.frecency.pages.lowWeight``
= 20, ``mediumWeight`` = 50, ``highWeight`` = 100, ``veryHighWeight`` = 200 -- and decays it
exponentially with ``halfLifeDays`` = 30 (``lambda = ln 2 / halfLifeDays``) relative to the
newest sample day ``t_ref``::

    s         = sum_samples weight(class) * exp(-lambda * (t_ref - day))
    frecency  = t_ref + trunc( ln( s / n_samples * max(visit_count, n_samples) ) / lambda )

i.e. the (integer) day number on which the score, decaying by ``exp(-lambda)`` per day,
would fall to 1. Stored this way it never needs a daily decay job: ranking by it equals
ranking by the decayed score on any day. No samples, ``s <= 0`` or a ``place:`` URL give 0.

Which class a sample gets is decided when the samples are read from ``places.sqlite``
(:func:`fedrank.data.places.modern_samples`); :func:`modern_samples_from_histories`
approximates it for synthetic :class:`PageHistories`. :class:`ModernFrecency` only does the
arithmetic, vectorized over pages and parameter rows; its five tunable parameters are the
four class weights and ``halfLifeDays``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.frecency.classic import as_param_rows
from fedrank.models.frecency.history import NUM_SAMPLED_VISITS, PageHistories, VisitType

#: Preference prefix of the modern frecency weights.
MODERN_PREF_PREFIX = "places.frecency.pages."

#: (name, Firefox default) in parameter-vector order.
MODERN_DEFAULTS: tuple[tuple[str, float], ...] = (
    ("lowWeight", 20.0),
    ("mediumWeight", 50.0),
    ("highWeight", 100.0),
    ("veryHighWeight", 200.0),
    ("halfLifeDays", 30.0),
)
MODERN_WEIGHT_NAMES: tuple[str, ...] = tuple(name for name, _ in MODERN_DEFAULTS)
N_MODERN_WEIGHTS = len(MODERN_WEIGHT_NAMES)

#: Sample classes (``ModernSamples.sample_class``); ``PADDING`` marks unused entries.
LOW, MEDIUM, HIGH, VERY_HIGH = 0, 1, 2, 3
PADDING = -1
N_CLASSES = 4

#: Microseconds (PRTime units) per day.
US_PER_DAY = 86_400_000_000


@dataclass(frozen=True)
class ModernPrefs:
    """The non-tuned integer prefs of modern frecency (``places.frecency.pages.*``), with
    Firefox 153's defaults."""

    numSampledVisits: int = 10
    maxVisitGapSeconds: int = 120
    viewTimeSeconds: int = 60
    manyKeypresses: int = 50
    viewTimeIfManyKeypressesSeconds: int = 20

    def __post_init__(self) -> None:
        for name in (
            "numSampledVisits",
            "maxVisitGapSeconds",
            "viewTimeSeconds",
            "manyKeypresses",
            "viewTimeIfManyKeypressesSeconds",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or value < 0:
                raise ConfigError(f"ModernPrefs.{name} must be an integer >= 0, got {value!r}")
        if self.numSampledVisits < 1:
            raise ConfigError(
                f"ModernPrefs.numSampledVisits must be >= 1, got {self.numSampledVisits}"
            )


@dataclass(frozen=True)
class ModernSamples:
    """The frecency samples of ``n`` pages, padded to ``S`` samples per page.

    Attributes:
        sample_day: int64 ``(n, S)``; absolute day number of each sample
            (``PRTime // 86_400_000_000``).
        sample_class: int8 ``(n, S)``; 0 low, 1 medium, 2 high, 3 veryHigh, -1 padding.
        visit_count: int64 ``(n,)``; ``moz_places.visit_count``.
        is_place_query: bool ``(n,)``; the URL starts with ``place:`` (scores 0).
    """

    sample_day: np.ndarray
    sample_class: np.ndarray
    visit_count: np.ndarray
    is_place_query: np.ndarray

    def __post_init__(self) -> None:
        shape = self.sample_class.shape
        if len(shape) != 2:
            raise DataFormatError(f"sample_class must be 2-D (pages, samples), got shape {shape}")
        if self.sample_day.shape != shape:
            raise DataFormatError(
                f"sample_day has shape {self.sample_day.shape}, expected {shape} like sample_class"
            )
        for name in ("visit_count", "is_place_query"):
            if getattr(self, name).shape != (shape[0],):
                raise DataFormatError(
                    f"{name} has shape {getattr(self, name).shape}, expected ({shape[0]},)"
                )
        cls = self.sample_class
        if cls.size and (cls.min() < PADDING or cls.max() >= N_CLASSES):
            raise DataFormatError(
                f"sample_class values must be in -1..{N_CLASSES - 1}, got range "
                f"{cls.min()}..{cls.max()}"
            )

    @property
    def n_pages(self) -> int:
        return int(self.sample_class.shape[0])

    @property
    def n_samples(self) -> np.ndarray:
        """int64 ``(n,)``: number of samples per page."""
        return (self.sample_class >= 0).sum(axis=1)

    def take(self, index: np.ndarray) -> ModernSamples:
        """The samples of the pages at ``index`` (flattened to 1-D page order)."""
        idx = np.asarray(index).reshape(-1)
        return ModernSamples(
            sample_day=self.sample_day[idx],
            sample_class=self.sample_class[idx],
            visit_count=self.visit_count[idx],
            is_place_query=self.is_place_query[idx],
        )


class ModernFrecency:
    """Firefox 128+ frecency as a vectorized scorer of five parameters (see module doc).

    Args:
        rounding: return Firefox's integer result (``t_ref + trunc(...)``, default);
            ``False`` returns ``t_ref + ln(...) / lambda`` without truncation.
    """

    names: tuple[str, ...] = MODERN_WEIGHT_NAMES

    def __init__(self, rounding: bool = True) -> None:
        self.rounding = bool(rounding)

    @staticmethod
    def defaults() -> np.ndarray:
        """Firefox's defaults, in :attr:`names` order."""
        return np.array([value for _, value in MODERN_DEFAULTS], dtype=np.float64)

    def score(self, params: np.ndarray, samples: ModernSamples) -> np.ndarray:
        """Frecency of every page: ``(n,)`` for a ``(5,)`` vector, ``(P, n)`` for ``(P, 5)``
        rows (float64; integral values when ``rounding``)."""
        rows, single = as_param_rows(params, N_MODERN_WEIGHTS, "modern frecency")
        half_life = rows[:, 4]
        if not np.all(np.isfinite(half_life) & (half_life > 0)):
            raise ConfigError(f"halfLifeDays must be finite and > 0, got {half_life}")
        n_pages = samples.n_pages
        out = np.zeros((rows.shape[0], n_pages), dtype=np.float64)
        cls = samples.sample_class.astype(np.intp)
        valid = cls >= 0
        n_samples = valid.sum(axis=1)
        has = n_samples > 0
        if n_pages == 0 or not has.any():
            return out[0] if single else out

        day = samples.sample_day.astype(np.int64)
        newest = np.where(valid, day, np.iinfo(np.int64).min).max(axis=1)
        newest = np.where(has, newest, 0)
        age = np.where(valid, newest[:, None] - day, 0).astype(np.float64)
        onehot = (cls[:, :, None] == np.arange(N_CLASSES)).astype(np.float64)  # (n, S, 4)
        scale = np.maximum(samples.visit_count, n_samples).astype(np.float64)
        keep = has & ~samples.is_place_query

        unique_h, inverse = np.unique(half_life, return_inverse=True)
        inverse = inverse.reshape(-1)
        for g, h in enumerate(unique_h):
            rows_g = np.flatnonzero(inverse == g)
            lam = math.log(2.0) / float(h)
            decay = np.where(valid, np.exp(-lam * age), 0.0)
            per_class = np.einsum("ns,nsc->nc", decay, onehot)  # (n, 4)
            s = rows[rows_g, :N_CLASSES] @ per_class.T  # (Pg, n)
            with np.errstate(divide="ignore", invalid="ignore"):
                x = s / np.maximum(n_samples, 1) * scale
                offset = np.log(x) / lam
            ok = keep[None, :] & (s > 0) & np.isfinite(offset)
            if self.rounding:
                offset = np.trunc(np.where(ok, offset, 0.0))
            out[rows_g] = np.where(ok, newest[None, :] + offset, 0.0)
        return out[0] if single else out


def modern_samples_from_histories(
    pages: PageHistories,
    now_day: int,
    *,
    num_sampled_visits: int = NUM_SAMPLED_VISITS,
    bookmarked_visits_high: bool = True,
) -> ModernSamples:
    """Modern-frecency samples for histories without interactions (synthetic ones).

    Firefox's sampling (``SQLFunctions.cpp``) is followed as far as :class:`PageHistories`
    allows:

    * DOWNLOAD, FRAMED_LINK and RELOAD visits are not sampled; the first
      ``num_sampled_visits`` remaining rows (newest first) are.
    * Class, with the effective type (a redirect visit takes its origin's type) and ``t`` =
      the visit led to a redirect: high if the effective type is BOOKMARK, or the visit's
      source is "bookmark", or (TYPED and not ``t``); else medium if not ``t`` and not
      EMBED; else low. Nothing is veryHigh (no interactions, so no visit is "interesting").
    * ``bookmarked_visits_high`` (default): every visit to a bookmarked page has source
      "bookmark", as Firefox records it (76 of the 80 visits to already-bookmarked pages in
      the real profile of ``../shared/data/firefox`` carry ``source = 2``).
    * A bookmarked page with no sampled visit gets one high sample on the day of its newest
      bookmark (``now_day - floor(bookmark_age_days)``).
    * ``day = now_day - floor(age_days)``.

    Approximation: Firefox samples older visits to replace excluded ones (histories only
    hold the sampled rows).
    """
    if num_sampled_visits < 1:
        raise ConfigError(f"num_sampled_visits must be >= 1, got {num_sampled_visits}")
    raw = pages.visit_type.astype(np.int64)
    excluded = np.isin(raw, (VisitType.DOWNLOAD, VisitType.FRAMED_LINK, VisitType.RELOAD))
    mask = pages.visit_mask & ~excluded
    # Left-pack the kept rows of every page, keeping their (newest first) order.
    order = np.argsort(~mask, axis=1, kind="stable")

    def packed(x: np.ndarray) -> np.ndarray:
        return np.take_along_axis(x, order, axis=1)[:, :num_sampled_visits]

    mask = packed(mask)
    eff = packed(pages.effective_type.astype(np.int64))
    age = packed(pages.visit_age_days)
    led_to_redirect = packed(pages.redirect_source)
    from_bookmark = np.broadcast_to(pages.bookmarked[:, None] & bookmarked_visits_high, mask.shape)
    top = (
        (eff == VisitType.BOOKMARK) | from_bookmark | ((eff == VisitType.TYPED) & ~led_to_redirect)
    )
    middle = ~led_to_redirect & (eff != VisitType.EMBED)
    cls = np.select([top, middle], [HIGH, MEDIUM], LOW)
    cls = np.where(mask, cls, PADDING)
    day = np.where(mask, int(now_day) - np.floor(age).astype(np.int64), 0)

    if cls.shape[1] == 0:
        cls = np.full((pages.n_pages, 1), PADDING)
        day = np.zeros((pages.n_pages, 1), dtype=np.int64)
    lone_bookmark = pages.bookmarked & ~mask.any(axis=1)
    cls[lone_bookmark, 0] = HIGH
    day[lone_bookmark, 0] = int(now_day) - np.floor(pages.bookmark_age_days[lone_bookmark]).astype(
        np.int64
    )
    return ModernSamples(
        sample_day=day.astype(np.int64),
        sample_class=cls.astype(np.int8),
        visit_count=pages.visit_count.astype(np.int64),
        is_place_query=pages.is_place_query.copy(),
    )
