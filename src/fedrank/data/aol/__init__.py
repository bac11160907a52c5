"""The AOL query log as per-user search logs: the data set of FedPS (paper Sec. 4.1).

FedPS keeps every user's search history on the user's own client (paper Sec. 3.1-3.2); its
AOL experiments simulate those clients by cutting the public three-month AOL log into one log
per anonymous user id. This module does that and the preprocessing the paper describes
(Sec. 4.1, following Ahmad et al. [2, 3]):

1. :func:`load_aol` reads the click log (one row per click, ``AnonID Query QueryTime
   ClickURL``) and groups rows into **query events** ``(user, query, time)`` with their
   clicked URLs in CSR form (``click_ptr``, ``click_docs``); :class:`QueryLog`.
2. :func:`assign_sessions` splits each user's events into **sessions** at more than 30
   minutes of inactivity (done by :func:`load_aol`).
3. :func:`split_by_time` cuts the log into the **background** set (first five weeks, used to
   build interest profiles) and the experimental set, which it splits per user, in time
   order, **6:1:1 into train / valid / test**, and drops users without enough data in some
   part (counted and explained in a :class:`FilterReport`, never silently); :class:`TimeSplit`.
4. Text: :func:`tokenize` for queries; :func:`url_words` and the unigram
   :class:`WordSegmenter` for documents, whose only own text in this log is their URL (mostly
   a bare host such as ``http://www.peabodylibrary.org/`` -> ``peabody library``). The paper
   crawled titles for the clicked URLs; those pages are long gone, so a document's text
   (:func:`document_texts`) is its URL words followed by the words of the queries that led
   to it in the **background** period (click-through text, the search engine's own log from
   before the experiment). A log with real titles plugs in by building the
   :class:`DocumentPool` from the titles' words instead (:meth:`DocumentPool.build` takes any
   word lists).
5. :class:`Vocabulary` (id 0 = padding, 1 = reserved for out-of-vocabulary),
   :class:`DocumentPool` (every distinct clicked URL is a document; padded token-id matrix)
   and :class:`UserLog` (one user's events with encoded queries), tied together by
   :func:`build_corpus`.

**Fit only on the past.** Everything learned from the log -- the segmenter's dictionary,
the vocabulary -- comes from the *past*: background and training events
(:func:`past_events`) and the documents clicked in them (:func:`past_documents`). A
validation or test document never clicked before has the text a real system would give it
(its URL words, segmented with the past segmenter) and words unknown to the past vocabulary
are **dropped** when encoding (:meth:`Vocabulary.encode_batch` with ``drop_unknown``), so
two different unknown words can never look identical to a model.

Candidate generation (BM25) and the ranking samples are in :mod:`fedrank.retrieval`.

Loading is strict: a malformed line raises :class:`~fedrank.errors.DataFormatError` starting
with ``"{file}:{line}: "``. Rows with an empty ``ClickURL`` are kept as query events without
a click (the real file has none); the sample builder skips such events as ranking samples
because they have no relevant document, but they stay in the history. A repeated row (same
user, query, time and URL) is one click.
"""

from __future__ import annotations

from fedrank.data.aol.corpus import (
    OOV_ID,
    PAD_ID,
    AolCorpus,
    DocumentPool,
    UserLog,
    Vocabulary,
    build_corpus,
    build_vocabulary,
    click_through_words,
    default_segmenter,
    document_texts,
    normalized_query_keys,
    user_logs,
)
from fedrank.data.aol.log import (
    HEADER,
    LOG_START,
    SESSION_GAP_SECONDS,
    QueryLog,
    assign_sessions,
    csr_offsets,
    load_aol,
)
from fedrank.data.aol.split import (
    BACKGROUND,
    DEFAULT_BACKGROUND_END,
    SPLIT_NAMES,
    TEST,
    TRAIN,
    VALID,
    FilterReport,
    TimeSplit,
    indexed_documents,
    past_documents,
    past_events,
    split_by_time,
)
from fedrank.data.aol.text import (
    WordSegmenter,
    document_words,
    segmenter_counts,
    tokenize,
    url_site,
    url_words,
)

__all__ = [
    "BACKGROUND",
    "DEFAULT_BACKGROUND_END",
    "HEADER",
    "LOG_START",
    "OOV_ID",
    "PAD_ID",
    "SESSION_GAP_SECONDS",
    "SPLIT_NAMES",
    "TEST",
    "TRAIN",
    "VALID",
    "AolCorpus",
    "DocumentPool",
    "FilterReport",
    "QueryLog",
    "TimeSplit",
    "UserLog",
    "Vocabulary",
    "WordSegmenter",
    "assign_sessions",
    "build_corpus",
    "build_vocabulary",
    "csr_offsets",
    "click_through_words",
    "default_segmenter",
    "document_texts",
    "document_words",
    "indexed_documents",
    "load_aol",
    "normalized_query_keys",
    "past_documents",
    "past_events",
    "segmenter_counts",
    "split_by_time",
    "tokenize",
    "url_site",
    "url_words",
    "user_logs",
]
