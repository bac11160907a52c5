"""Firefox's adaptive history, ``moz_inputhistory`` (Firefox 62-68, ``UnifiedComplete.jsm``).

When a user picks a history or bookmark suggestion, Firefox remembers the typed text for that
page: ``use_count = IFNULL(use_count, 0) * 0.9 + 1`` for the row ``(place, input)``. While
the user types ``s``, every row whose input *starts with* ``s`` brings its page to the top
of the suggestions ("adaptive" results, right after the heuristic result), ranked by
``ROUND(MAX(use_count) * (1 + (input = s)), 1)``. Once a day ``use_count`` is multiplied by
``places.frecency.decayRate`` (0.975) and rows below ``0.975 ** 90`` are deleted.

A simulated input is one token: ``(word, length)`` means the first ``length`` characters of
vocabulary word ``word``. Inputs typed across several words are not stored (the simulated
user almost always selects while typing the first word; :mod:`fedrank.simulation.frecency.urlbar`).
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

__all__ = ["InputHistory"]

#: ``use_count`` kept after a selection: ``use_count * USE_DECAY + 1``.
USE_DECAY = 0.9
#: Rows deleted below ``decay_rate ** EXPIRE_DAYS`` (ADAPTIVE_HISTORY_EXPIRE_DAYS).
EXPIRE_DAYS = 90
_LEN_BITS = 7  # inputs are at most 127 characters


class InputHistory:
    """Rows ``(page, word, length, use_count)`` sorted by ``(page, word, length)``."""

    def __init__(self, n_words: int) -> None:
        if n_words < 1:
            raise ConfigError(f"n_words must be >= 1, got {n_words}")
        self.n_words = int(n_words)
        self.page = np.zeros(0, dtype=np.int64)
        self.word = np.zeros(0, dtype=np.int64)
        self.length = np.zeros(0, dtype=np.int64)
        self.use_count = np.zeros(0, dtype=np.float64)

    def __len__(self) -> int:
        return int(self.page.size)

    def _key(self, page: np.ndarray, word: np.ndarray, length: np.ndarray) -> np.ndarray:
        return (page * self.n_words + word) << _LEN_BITS | length

    def record(self, page: np.ndarray, word: np.ndarray, length: np.ndarray) -> None:
        """Selections of ``page`` after typing ``length`` characters of ``word`` (in order;
        a row selected ``k`` times in one call gets ``u * 0.9**k + sum(0.9**i, i < k)``)."""
        page = np.asarray(page, dtype=np.int64)
        word = np.asarray(word, dtype=np.int64)
        length = np.asarray(length, dtype=np.int64)
        if not (page.shape == word.shape == length.shape):
            raise DataFormatError("page, word and length must have one shape")
        if page.size == 0:
            return
        if (
            (word < 0).any()
            or (word >= self.n_words).any()
            or (length < 1).any()
            or (length >= 1 << _LEN_BITS).any()
        ):
            raise DataFormatError("inputs need word ids in the vocabulary and 1..127 characters")
        keys, times = np.unique(self._key(page, word, length), return_counts=True)
        old = self._key(self.page, self.word, self.length)
        pos = np.searchsorted(old, keys)
        found = np.zeros(keys.size, dtype=bool)
        if old.size:
            found = (pos < old.size) & (old[np.minimum(pos, old.size - 1)] == keys)
        use = np.zeros(keys.size)
        use[found] = self.use_count[pos[found]]
        new_use = use * USE_DECAY**times + (1 - USE_DECAY**times) / (1 - USE_DECAY)
        all_keys = np.concatenate([old, keys[~found]])
        all_use = np.concatenate([self.use_count, new_use[~found]])
        all_use[pos[found]] = new_use[found]
        order = np.argsort(all_keys, kind="stable")
        all_keys, self.use_count = all_keys[order], all_use[order]
        self.length = all_keys & ((1 << _LEN_BITS) - 1)
        pw = all_keys >> _LEN_BITS
        self.page, self.word = pw // self.n_words, pw % self.n_words

    def decay(self, days: int, rate: float = 0.975) -> None:
        """``days`` runs of the idle-daily decay: ``use_count *= rate`` then rows below
        ``rate ** 90`` are deleted."""
        if days < 0:
            raise ConfigError(f"days must be >= 0, got {days}")
        if days == 0 or not len(self):
            return
        self.use_count = self.use_count * rate**days
        keep = self.use_count >= rate**EXPIRE_DAYS
        self.page, self.word = self.page[keep], self.word[keep]
        self.length, self.use_count = self.length[keep], self.use_count[keep]

    def rows_of_pages(self, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(start, stop)`` row ranges of the pages ``first..last - 1`` (a user's pages are
        contiguous, so these are a user's rows)."""
        return np.searchsorted(self.page, first), np.searchsorted(self.page, last)
