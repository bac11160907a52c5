"""A URL-bar world from the real AOL click log (``../shared/data/AOL``; Mozilla paper,
Sec. 6.1-6.3 with real behaviour instead of a made-up distribution).

Per user, every clicked host is a page (the log keeps only the clicked site, so a host is
one page, its root); a click is a visit at the click's time. The visit is TYPED when the
query was the site's name or address (``ebay``, ``www.ebay.com``), LINK otherwise. A
page's title is the words of the queries (not addresses) that led to it during the
history period, most frequent first; a page first clicked in the study takes its first
query's words.
The log is cut at ``study_start`` (default 2006-05-01): the clicks before it are the
history Firefox holds when the study begins; the clicks after it are replayed in time order
while the study runs:

* a click on a host the user clicked before is a **URL-bar search with a real target**:
  the user types the query's words when the page's words contain them all, the site's name
  otherwise (:attr:`~fedrank.data.browsing.BrowsingWorld.future_typed`);
* a click on a new host is a plain visit: the history grows as the user clicks.

Statistics of the log (:func:`~fedrank.data.browsing.browsing_shapes`) are kept in
``stats`` for the calibration of the synthetic world (``docs/frecency.md``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

from fedrank.data.aol import load_aol, tokenize
from fedrank.data.aol.text import _host_and_path, _split_host
from fedrank.data.browsing import BrowsingWorld, Pages, VisitStream, Vocabulary, browsing_shapes
from fedrank.errors import ConfigError, DataFormatError
from fedrank.models.frecency.history import VisitType

__all__ = ["STUDY_START", "aol_world", "is_site_query", "site_name"]

#: Default cut between the history and the study: 2006-05-01 (two months of history).
STUDY_START = np.datetime64("2006-05-01T00:00:00")
#: Most title words per page.
TITLE_WORDS = 6
_ALNUM = re.compile(r"[^a-z0-9]")


def site_name(host: str) -> str:
    """The site's name label: ``www.peabodylibrary.org`` -> ``peabodylibrary``,
    ``news.bbc.co.uk`` -> ``bbc`` (the registrable label; ``host`` itself if it has none)."""
    labels, _ = _split_host(host)
    if not labels:
        return _ALNUM.sub("", host.lower()) or "site"
    return _ALNUM.sub("", labels[-1]) or "site"


def is_site_query(query: str, host: str) -> bool:
    """The query is the site's address or name (``ebay``, ``ebay.com``, ``www.ebay.com``,
    ``www.bbc.co.uk`` for ``news.bbc.co.uk``): the user typed the site -- a TYPED visit in
    Firefox."""
    q = re.sub(r"^[a-z]+://", "", query.strip().lower()).rstrip("/")
    name = site_name(host)
    if "." in q and " " not in q:  # typed as an address: compare the sites' names
        return site_name(q.split("/", 1)[0]) == name
    bare = host.lower().removeprefix("www.")
    return _ALNUM.sub("", q) in {name, _ALNUM.sub("", bare)}


def aol_world(
    path: str | Path,
    *,
    study_start: np.datetime64 = STUDY_START,
    users: int | None = None,
    rng: np.random.Generator | None = None,
) -> BrowsingWorld:
    """The AOL world (see the module docstring). ``users``/``rng`` draw a subset of users
    (:func:`fedrank.data.aol.load_aol`). Users without a click before ``study_start`` are
    dropped (they have no history to search)."""
    log = load_aol(path, users=users, rng=rng)
    start = np.datetime64(study_start, "s")
    click_event = np.repeat(np.arange(log.n_events), np.diff(log.click_ptr))
    if click_event.size == 0:
        raise DataFormatError(f"{path}: no clicks")
    c_user = log.event_user[click_event].astype(np.int64)
    c_time = (log.time[click_event] - start).astype(np.float64) / 86_400.0
    c_url = log.urls[log.click_docs]
    c_query = log.queries[log.query[click_event]]
    hosts_raw = np.array([_host_and_path(str(u))[0].removeprefix("www.") for u in log.urls])
    c_hostname = hosts_raw[log.click_docs]
    del c_url

    has_history = np.bincount(c_user[c_time < 0], minlength=log.n_users) > 0
    if not has_history.any():
        raise ConfigError(f"no user of {path} has a click before {study_start}")
    keep = has_history[c_user]
    new_user = np.cumsum(has_history) - 1
    c_user, c_time = new_user[c_user[keep]], c_time[keep]
    c_query, c_hostname = c_query[keep], c_hostname[keep]
    order = np.lexsort((c_time, c_user))
    c_user, c_time, c_query, c_hostname = (
        c_user[order], c_time[order], c_query[order], c_hostname[order]
    )  # fmt: skip
    n_users = int(has_history.sum())

    # One page per (user, host), in user order.
    pair_keys = np.char.add(c_user.astype(str), np.char.add("\t", c_hostname.astype(str)))
    uniq, first_idx, page_of = np.unique(pair_keys, return_index=True, return_inverse=True)
    page_user = c_user[first_idx]
    by_user = np.argsort(page_user, kind="stable")
    renumber = np.empty(uniq.size, dtype=np.int64)
    renumber[by_user] = np.arange(uniq.size)
    page_of = renumber[page_of]
    page_host_name = c_hostname[first_idx][by_user]
    page_user = page_user[by_user]

    # Titles: words of the history-period queries that led to the page.
    title_counts: list[Counter[str]] = [Counter() for _ in range(uniq.size)]
    first_query: list[str] = [""] * uniq.size
    site_query = np.array(
        [is_site_query(str(q), str(h)) for q, h in zip(c_query, c_hostname, strict=True)]
    )
    seen_in_history = np.zeros(uniq.size, dtype=bool)
    seen_in_history[page_of[c_time < 0]] = True  # a title never uses the study's queries
    for p, t, q, typed in zip(
        page_of.tolist(), c_time.tolist(), c_query.tolist(), site_query.tolist(), strict=True
    ):
        if typed:  # an address typed as a query is not a title
            continue
        if t < 0:
            title_counts[p].update(tokenize(str(q)))
        elif not first_query[p] and not seen_in_history[p]:
            first_query[p] = str(q)
    names = [site_name(h) for h in page_host_name.tolist()]
    page_words: list[list[str]] = []
    for p in range(uniq.size):
        counts = title_counts[p] if seen_in_history[p] else Counter(tokenize(first_query[p]))
        title = [w for w, _ in counts.most_common() if w != names[p] and w.isascii()]
        page_words.append([names[p], *title[:TITLE_WORDS]])
    words_all = sorted({w for ws in page_words for w in ws} | {
        w for q in c_query.tolist() for w in tokenize(str(q)) if w.isascii()
    })  # fmt: skip
    words_all = sorted({w[:127] for w in words_all})
    index = {w: i for i, w in enumerate(words_all)}
    vocab = Vocabulary.from_words(words_all)
    width = max(len(ws) for ws in page_words)
    words = np.full((uniq.size, width), -1, dtype=np.int32)
    for p, ws in enumerate(page_words):
        ids = list(dict.fromkeys(index[w[:127]] for w in ws))
        words[p, : len(ids)] = ids
    pages = Pages(
        user_offsets=np.concatenate([[0], np.cumsum(np.bincount(page_user, minlength=n_users))]),
        host=np.arange(uniq.size, dtype=np.int64),
        is_root=np.ones(uniq.size, dtype=bool),
        words=words,
        n_url_words=np.ones(uniq.size, dtype=np.int64),
        vocabulary=vocab,
    )

    vtype = np.where(site_query, int(VisitType.TYPED), int(VisitType.LINK)).astype(np.int8)
    past = c_time < 0
    seen_before = np.zeros(c_user.size, dtype=bool)
    first_click = np.full(uniq.size, c_user.size, dtype=np.int64)
    np.minimum.at(first_click, page_of, np.arange(c_user.size))
    seen_before[np.arange(c_user.size) > first_click[page_of]] = True
    f_idx = np.flatnonzero(~past)
    f_idx = f_idx[np.argsort(c_time[f_idx], kind="stable")]  # the study replays in time order
    future_search = seen_before[f_idx]
    typed = _typed_words(c_query[f_idx], page_of[f_idx], words, index)
    return BrowsingWorld(
        name="aol",
        pages=pages,
        history=_stream(page_of[past], c_time[past], vtype[past]),
        bookmark_page=np.zeros(0, dtype=np.int64),
        bookmark_time=np.zeros(0),
        future=_stream(page_of[f_idx], c_time[f_idx], vtype[f_idx]),
        future_search=future_search,
        future_typed=typed,
        stats=browsing_shapes(c_user[past], page_of[past], c_time[past], n_users=n_users),
    )


def _stream(page: np.ndarray, time: np.ndarray, vtype: np.ndarray) -> VisitStream:
    order = np.argsort(time, kind="stable")
    return VisitStream(
        page=page[order].astype(np.int64),
        time=time[order].astype(np.float64),
        visit_type=vtype[order].astype(np.int8),
        from_visit=np.full(order.size, -1, dtype=np.int64),
    )


def _typed_words(
    queries: np.ndarray, pages: np.ndarray, words: np.ndarray, index: dict[str, int]
) -> np.ndarray:
    """int32 ``(F, 3)``: the query's words (at most 3) when the page's words contain them
    all, else ``-1`` in the first column (the user types the site's name)."""
    out = np.full((queries.size, 3), -1, dtype=np.int32)
    for i, (q, p) in enumerate(zip(queries.tolist(), pages.tolist(), strict=True)):
        ids = [index.get(w[:127], -1) for w in tokenize(str(q))][:3]
        have = set(words[p][words[p] >= 0].tolist())
        if ids and all(w in have for w in ids):
            out[i, : len(ids)] = ids
    return out
