"""Random numbers that belong to a client and a round, not to a process.

A simulated round draws, for every client, its seed, its queries, its users' clicks and its
privatization coins. Drawn from one shared ``numpy.random.Generator``, the numbers a client
gets depend on how many clients were served before it in the same process, so splitting
the clients over workers (:mod:`fedrank.experiments.executors`) would change the result.
:class:`ClientRandom` instead makes every number a pure function of

    (run seed, round, client id, stream, counter)

with the counter-based SplitMix64 hashing of :mod:`fedrank.core.seeded_noise`: a block of
clients gives the same numbers on one process or spread over many, in any order, and a
single client computes exactly what the vectorized batch computed for it
(``tests/core/test_client_random.py``, and for whole FOLtR-ES reports
``tests/estimators/test_evolution_strategies.py``). Streams keep the purposes apart
(:class:`Stream`); the counter numbers the draws within a stream (e.g. interaction ``b``
of a client), and :meth:`ClientRandom.uniform_slots` gives a row of numbers per draw (e.g.
one per document slot).

The key of client ``c`` in round ``t`` of run ``s`` is
``mix(mix(mix(s * G + K_RUN) ^ (t * G + K_ROUND)) ^ (c * G + K_CLIENT))`` and draw
``(stream, counter)`` is ``mix(key ^ mix((counter * N_STREAMS + stream) * G + K_DRAW))``
for the first five streams (later ones: ``(counter * N_LATER + stream - 5) * G +
K_DRAW_LATER``); uniforms take its top 53 bits.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from fedrank.core.seeded_noise import GOLDEN, SEED_BITS, mix64
from fedrank.errors import ConfigError

_K_RUN = np.uint64(0x3C6EF372FE94F82B)
_K_ROUND = np.uint64(0xA54FF53A5F1D36F1)
_K_CLIENT = np.uint64(0x510E527FADE682D1)
_K_DRAW = np.uint64(0x9B05688C2B3E6C1F)
_K_DRAW_LATER = np.uint64(0x1F83D9ABFB41BD6B)
_TWO_POW_M53 = 2.0**-53


class Stream(IntEnum):
    """What a draw is for (one independent sequence per purpose)."""

    SEED = 0  # the client's 32-bit ES seed
    QUERY = 1  # which query each interaction serves
    CLICK = 2  # the simulated user's click coins
    KEEP = 3  # randomized response: keep the true value?
    SHIFT = 4  # randomized response: which other value
    GUMBEL = 5  # PDGD: the Gumbel keys that sample a displayed ranking
    NOISE = 6  # differential privacy: the noise added to a client's update


#: Streams ``SEED .. SHIFT`` hash as ``counter * N_STREAMS + stream`` with ``_K_DRAW`` (their
#: numbers are pinned by golden values and the published FOLtR-ES figures); streams added
#: later hash in their own domain (``_K_DRAW_LATER``), so adding one changes no number.
N_STREAMS = 5
_N_LATER = len(Stream) - N_STREAMS


class ClientRandom:
    """The random numbers of clients ``ids`` in round ``round`` of the run seeded ``seed``.

    Methods take ``rows`` (positions in ``ids``) and ``counter`` arrays that broadcast
    together, so one call draws, e.g., every document slot of every interaction of a
    bucket of interactions.
    """

    def __init__(self, seed: int, round: int, ids: np.ndarray) -> None:
        for name, value in (("seed", seed), ("round", round)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or (ids.size and ids.min() < 0):
            raise ConfigError(f"client ids must be a 1-D array of integers >= 0, got {ids!r}")
        with np.errstate(over="ignore"):
            run = mix64(np.array([int(seed) % 2**64], dtype=np.uint64) * GOLDEN + _K_RUN)
            rnd = mix64(run ^ (np.uint64(int(round) % 2**64) * GOLDEN + _K_ROUND))
            self.keys = mix64(rnd ^ (ids.astype(np.uint64) * GOLDEN + _K_CLIENT))
        self.seed, self.round = int(seed), int(round)
        self.ids = ids.astype(np.int64)

    @property
    def size(self) -> int:
        return int(self.ids.size)

    def block(self, start: int, stop: int) -> ClientRandom:
        """The clients at positions ``start:stop`` (their numbers do not change)."""
        return ClientRandom(self.seed, self.round, self.ids[start:stop])

    def bits(self, rows: np.ndarray, stream: Stream, counter: np.ndarray) -> np.ndarray:
        """uint64 hashes of draws ``counter`` of ``stream`` for the clients at ``rows``."""
        first = stream < N_STREAMS
        width, index = (N_STREAMS, stream) if first else (_N_LATER, stream - N_STREAMS)
        ctr = np.asarray(counter).astype(np.uint64) * np.uint64(width) + np.uint64(index)
        with np.errstate(over="ignore"):
            return mix64(
                self.keys[rows] ^ mix64(ctr * GOLDEN + (_K_DRAW if first else _K_DRAW_LATER))
            )

    def uniform(self, rows: np.ndarray, stream: Stream, counter: np.ndarray) -> np.ndarray:
        """float64 uniforms in ``[0, 1)``, one per broadcast entry of ``rows`` and
        ``counter``."""
        return (self.bits(rows, stream, counter) >> np.uint64(11)) * _TWO_POW_M53

    def uniform_slots(
        self, rows: np.ndarray, stream: Stream, counter: np.ndarray, n: int
    ) -> np.ndarray:
        """``(len(rows), n)`` float64 uniforms: ``n`` per row, e.g. one per document slot of
        an interaction. Row ``i`` starts a SplitMix64 sequence at its draw ``(stream,
        counter[i])`` (:meth:`bits`) and slot ``j`` is that sequence's ``j + 1``-th output,
        ``mix(state + (j + 1) * G)``: one hash per slot."""
        state = self.bits(np.asarray(rows), stream, np.asarray(counter))
        with np.errstate(over="ignore"):
            steps = np.arange(1, n + 1, dtype=np.uint64) * GOLDEN
            h = mix64(state[:, None] + steps[None, :])
        return (h >> np.uint64(11)) * _TWO_POW_M53

    def integers(
        self, rows: np.ndarray, stream: Stream, counter: np.ndarray, high: int
    ) -> np.ndarray:
        """int64 in ``[0, high)`` (``floor(u * high)``; bias below ``high / 2**53``)."""
        if high < 1:
            raise ConfigError(f"high must be >= 1, got {high}")
        return np.minimum((self.uniform(rows, stream, counter) * high).astype(np.int64), high - 1)

    def seeds(self) -> np.ndarray:
        """Every client's 32-bit ES seed (uint32, :data:`~fedrank.core.seeded_noise.
        SEED_BITS`)."""
        h = self.bits(np.arange(self.size), Stream.SEED, np.zeros(self.size, np.int64))
        return (h >> np.uint64(64 - SEED_BITS)).astype(np.uint32)
