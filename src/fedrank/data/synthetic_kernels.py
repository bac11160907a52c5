"""Compiled parts of the synthetic world's generation
(:mod:`fedrank.data.synthetic_history`; numba, imported on first use)."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["inverse_cdf", "page_keys", "page_views", "page_word_rows", "pitman_yor_steps"]


@numba.njit(cache=True, nogil=True)
def inverse_cdf(
    u: np.ndarray, first: np.ndarray, last: np.ndarray, cdf: np.ndarray, out: np.ndarray
) -> None:
    """``out = min(searchsorted(cdf, u, "right"), cdf.size - 1)``: for every ``u`` in bin
    ``b = floor(u * first.size)`` the search's answer is in ``first[b]..last[b]``, one
    value where no ``cdf`` value splits the bin; else a binary search between them
    (:class:`~fedrank.data.synthetic_history._InverseCdf`)."""
    top = cdf.size - 1
    for i in range(u.size):
        x = u[i]
        b = np.int64(x * first.size)
        lo = np.int64(first[b])
        hi = np.int64(last[b])
        while lo < hi:  # the first index in lo..hi with cdf > x (hi when none below it)
            mid = (lo + hi) // 2
            if cdf[mid] > x:
                hi = mid
            else:
                lo = mid + 1
        out[i] = min(lo, top)


@numba.njit(cache=True, nogil=True)
def page_keys(
    visit_key: np.ndarray, more_keys: np.ndarray, n_rows: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, ascending, of ``visit_key`` and ``more_keys`` (all in ``[0, n_rows
    * width)``), and every visit's index among them: ``np.unique`` of both, then
    ``np.searchsorted`` of ``visit_key``, without sorting (a key is a row ``key // width``
    and a column ``key % width``: an index is the keys of the rows before, from their
    counts, and of the row's columns before)."""
    present = np.zeros(n_rows * width, np.bool_)
    for key in visit_key:
        present[key] = True
    for key in more_keys:
        present[key] = True
    row_start = np.empty(n_rows, np.int64)
    n = 0
    for row in range(n_rows):
        row_start[row] = n
        for key in range(row * width, (row + 1) * width):
            n += present[key]
    keys = np.empty(n, np.int64)
    at = 0
    for key in range(n_rows * width):
        if present[key]:
            keys[at] = key
            at += 1
    index = np.empty(visit_key.size, np.int64)
    for i in range(visit_key.size):
        row = visit_key[i] // width
        before = row_start[row]
        for key in range(row * width, visit_key[i]):
            before += present[key]
        index[i] = before
    return keys, index


@numba.njit(cache=True, nogil=True)
def page_views(
    views: np.ndarray,
    click_user: np.ndarray,
    click_host: np.ndarray,
    click_time: np.ndarray,
    gap: np.ndarray,
    latest: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The page views of the clicks (``click_user`` ascending): click ``c`` opens
    ``views[c]`` views, the ``k``-th (``k >= 1``) ``gap`` after the one before it (``gap``
    holds one draw per view, in view order; a click's own, ``k = 0``, is not used), none
    after ``latest``. Returns the views' user, host, time and ``k``, in time order within
    every user (ties in view order). The times are those of numpy's running sum over all
    views (``np.cumsum``, float64, one addition after the other) less its value at the
    click, as :func:`~fedrank.data.synthetic_history.generate_world` defines them."""
    n = gap.size
    time = np.empty(n, np.float64)
    k = np.empty(n, np.int64)
    running = 0.0
    i = 0
    for c in range(views.size):
        at_click = 0.0
        for j in range(views[c]):
            if j > 0:
                running += gap[i]
            else:
                at_click = running
            time[i] = min(click_time[c] + (running - at_click), latest)
            k[i] = j
            i += 1
    user = np.empty(n, np.int64)
    host = np.empty(n, np.int64)
    out_time = np.empty(n, np.float64)
    out_k = np.empty(n, np.int64)
    lo_click = 0
    lo = 0
    while lo_click < views.size:  # one user's clicks, then their views by time
        hi_click = lo_click
        hi = lo
        while hi_click < views.size and click_user[hi_click] == click_user[lo_click]:
            hi += views[hi_click]
            hi_click += 1
        entry = np.empty(hi - lo, np.int64)  # each view's click
        at = 0
        for c in range(lo_click, hi_click):
            for _ in range(views[c]):
                entry[at] = c
                at += 1
        order = np.argsort(time[lo:hi], kind="mergesort")
        for q in range(hi - lo):
            v = lo + order[q]
            user[lo + q] = click_user[entry[order[q]]]
            host[lo + q] = click_host[entry[order[q]]]
            out_time[lo + q] = time[v]
            out_k[lo + q] = k[v]
        lo_click = hi_click
        lo = hi
    return user, host, out_time, out_k


@numba.njit(cache=True, nogil=True)
def page_word_rows(
    host_name: np.ndarray,
    n_path: np.ndarray,
    n_title: np.ndarray,
    site: np.ndarray,
    path_words: np.ndarray,
    title_words: np.ndarray,
    n_path_columns: int,
    out: np.ndarray | None,
    n_url: np.ndarray,
) -> int:
    """Every page's words: its host's name, its ``n_path`` path words and ``n_title`` title
    words (taken in order from ``path_words`` and ``title_words``; the first title word is
    the host's name where ``site``), each word once (the first occurrence stays: a
    repeated word adds nothing to matching), -1 after them. Writes the rows into ``out``
    when given and the URL words (host and path) that remain into ``n_url``; returns the
    most words a page keeps (the width ``out`` needs)."""
    row = np.empty(1 + n_path_columns + max(n_title.max(), 1), np.int64)
    most = 0
    at_path = 0
    at_title = 0
    for i in range(host_name.size):
        kept = 0
        urls = 0
        for column in range(1 + n_path[i] + n_title[i]):
            if column == 0:
                word, is_url = host_name[i], True
            elif column <= n_path[i]:
                word, is_url = path_words[at_path], True
                at_path += 1
            else:
                word, is_url = title_words[at_title], False
                if column == 1 + n_path[i] and site[i]:
                    word = host_name[i]
                at_title += 1
            q = 0
            while q < kept and row[q] != word:
                q += 1
            if q == kept:
                row[kept] = word
                kept += 1
                urls += is_url
        n_url[i] = urls
        most = max(most, kept)
        if out is not None:
            for j in range(out.shape[1]):
                out[i, j] = row[j] if j < kept else -1
    return most


@numba.njit(cache=True, nogil=True)
def pitman_yor_steps(
    first_step: int,
    uniforms: np.ndarray,
    n_clicks: np.ndarray,
    offsets: np.ndarray,
    active: np.ndarray,
    n_active: int,
    theta: float,
    discount: float,
    recent_share: float,
    recent_window: int,
    hosts: np.ndarray,
    counts: np.ndarray,
    n_hosts: np.ndarray,
) -> tuple[int, int]:
    """Click steps ``first_step, first_step + 1, ...`` of the Pitman-Yor host draw
    (:func:`fedrank.data.synthetic_history._pitman_yor_hosts`), as many as ``uniforms``
    holds: step ``k`` reads four blocks of one uniform per user still clicking (``n_clicks
    > k``, ascending): new host, recent copy, which click back, discount. ``hosts`` and
    ``counts`` are flat, user ``i``'s click ``k`` (and local host ``k``) at ``offsets[i] +
    k``; ``active[:n_active]`` lists the users still clicking and is kept up to date.
    Returns (the next step, the number of users still clicking)."""
    k = first_step
    at = 0
    while n_active > 0:
        kept = 0
        for j in range(n_active):
            if n_clicks[active[j]] > k:
                active[kept] = active[j]
                kept += 1
        n_active = kept
        if n_active == 0 or at + 4 * n_active > uniforms.size:
            break
        for j in range(n_active):
            i = active[j]
            base = offsets[i]
            new = uniforms[at + j] < theta / (theta + k)
            recent = uniforms[at + n_active + j] < recent_share
            span = min(recent_window, k) if recent else k
            back = np.int64(uniforms[at + 2 * n_active + j] * span)
            chosen = hosts[base + (k - 1 - back if recent else back)]
            n = counts[base + chosen]
            if uniforms[at + 3 * n_active + j] < discount / max(n, 1):
                new = True
            if new:
                chosen = n_hosts[i]
                n_hosts[i] += 1
            hosts[base + k] = chosen
            counts[base + chosen] += 1
        at += 4 * n_active
        k += 1
    return k, n_active
