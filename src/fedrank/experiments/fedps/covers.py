"""Cover queries of the FedPS runs (FedPS Sec. 3.2): an LDA topic model of the past
documents' texts draws ``m`` cover queries per real query, for the CoverQuery baseline's
server log and for FedPSFlat's search requests (which the KL measure then sees).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import Future

import numpy as np

from fedrank.data.aol import AolCorpus, UserLog
from fedrank.experiments.executors import side_process
from fedrank.experiments.fedps.baselines import cover_queries_for
from fedrank.experiments.fedps.settings import FedPSSettings
from fedrank.experiments.fedps.training import stream_seeds
from fedrank.privacy.cover_queries import CoverQueryGenerator


def fit_cover_generator(
    past_tokens: np.ndarray, vocab_size: int, settings: FedPSSettings
) -> CoverQueryGenerator:
    """LDA over the past documents' texts ``past_tokens`` (Sec. 3.2)."""
    generator = CoverQueryGenerator(n_topics=settings.n_topics)
    return generator.fit(
        past_tokens, vocab_size, np.random.default_rng(stream_seeds(settings.seed)["lda"])
    )


def cover_inputs(corpus: AolCorpus) -> tuple[np.ndarray, int, list[UserLog]]:
    """What the cover queries need: the past documents' word ids, the vocabulary size and
    the users' logs (the corpus only: no lists, no word vectors)."""
    return corpus.pool.tokens[corpus.past_docs].astype(np.int64), len(corpus.vocab), corpus.users


def start_covers(
    corpus: AolCorpus, settings: FedPSSettings, stack: contextlib.ExitStack
) -> Future[list[np.ndarray]]:
    """FedPSFlat's cover queries for ``settings``, computed in a process beside the driver
    (:func:`~fedrank.experiments.executors.side_process`, closed with ``stack``; a thread
    would hold the GIL the driver's steps need). On Dask only the KL measure at the end
    needs them, so they are computed while the cluster trains; the CLI starts them as soon
    as the corpus is built, while the driver prepares the lists and word2vec."""
    return stack.enter_context(side_process()).submit(
        compute_covers, *cover_inputs(corpus), settings
    )


def compute_covers(
    past_tokens: np.ndarray,
    vocab_size: int,
    logs: Sequence[UserLog],
    settings: FedPSSettings,
) -> list[np.ndarray]:
    """Every user's ``m`` cover queries per query (none when ``cover_queries`` is 0)."""
    if settings.cover_queries > 0:
        return cover_queries_for(
            logs,
            fit_cover_generator(past_tokens, vocab_size, settings),
            settings.cover_queries,
            np.random.default_rng(stream_seeds(settings.seed)["covers"]),
        )
    return [np.zeros((log.n_events, 0, log.queries.shape[1]), np.int32) for log in logs]
