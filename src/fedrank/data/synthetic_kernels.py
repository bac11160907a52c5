"""Compiled parts of the synthetic world's generation
(:mod:`fedrank.data.synthetic_history`; numba, imported on first use)."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["page_word_rows", "pitman_yor_steps"]


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
