"""The pages in the users' history, as the URL bar and the searches read them (Mozilla
paper, Sec. 4): the *listable* pages (visited or bookmarked: ``moz_places`` rows the
history query may return, and the pages a synthetic user may want), each user's among
them, and Firefox's origins (``moz_origins``: the hosts with a listable page or a
bookmark). :class:`ListedPages` keeps them in step with a
:class:`~fedrank.simulation.frecency.history_store.VisitStore` by reading only the pages it
changed.
"""

from __future__ import annotations

import numpy as np

from fedrank.data.browsing import Pages
from fedrank.simulation.frecency.history_store import VisitStore

__all__ = ["ListedPages"]


class ListedPages:
    """The listable pages of ``store`` and the hosts they make known (module docstring);
    ``pages``: the users' pages (owners, hosts)."""

    def __init__(self, store: VisitStore, pages: Pages) -> None:
        self.store = store
        self.pages = pages
        self._version = -1
        self._listable = np.zeros(pages.n_pages, dtype=bool)
        self._listed: tuple[np.ndarray, np.ndarray] | None = None
        self._host_bookmarked = np.zeros(int(pages.host.max(initial=-1)) + 1, dtype=bool)
        self._host_known = np.zeros_like(self._host_bookmarked)

    def listable(self) -> np.ndarray:
        """bool ``(N,)``: pages the URL bar may show (visited or bookmarked); read-only."""
        self.sync()
        view = self._listable.view()
        view.flags.writeable = False
        return view

    def listed(self) -> tuple[np.ndarray, np.ndarray]:
        """The listable pages (ascending) and, per user, where theirs start in them (size
        ``U + 1``)."""
        self.sync()
        if self._listed is None:
            listed = np.flatnonzero(self._listable)
            self._listed = (listed, np.searchsorted(listed, self.pages.user_offsets))
        return self._listed

    def of(self, users: np.ndarray) -> np.ndarray:
        """The listable pages of ``users`` (distinct, ascending), ascending: pages the users
        will only discover later have nothing to score yet."""
        listed, start = self.listed()
        first = start[users]
        count = start[users + 1] - first
        at = np.arange(int(count.sum()), dtype=np.int64)
        at += np.repeat(first - (np.cumsum(count) - count), count)
        return listed[at]

    def host_bookmarked(self) -> np.ndarray:
        """bool ``(H,)``: the hosts holding a bookmark (a copy)."""
        self.sync()
        return self._host_bookmarked.copy()

    def host_known(self) -> np.ndarray:
        """bool ``(H,)``: Firefox's origins, the hosts with a listable page or a bookmark
        (a new array)."""
        self.sync()
        return self._host_known | self._host_bookmarked

    def sync(self) -> None:
        """Bring the listable pages and the hosts up to the store's changes (call it before
        threads read them at once)."""
        store = self.store
        if self._version == store.version:
            return
        changed = store.changed_since(self._version)
        if changed is None:
            changed = np.arange(store.n_pages)
        listable = (store.visit_count[changed] > 0) | store.bookmarked[changed]
        was = self._listable[changed]
        became = changed[listable & ~was]  # ascending, as changed is
        if (was & ~listable).any():  # (pages only become listable: never here)
            self._listed = None
        elif self._listed is not None and became.size:  # they join the listed pages
            listed, start = self._listed
            self._listed = (
                np.insert(listed, np.searchsorted(listed, became), became),
                start + np.searchsorted(became, self.pages.user_offsets),
            )
        self._listable[changed] = listable
        # (pages only become listable and bookmarked: hosts only become known)
        self._host_bookmarked[self.pages.host[changed[store.bookmarked[changed]]]] = True
        self._host_known[self.pages.host[changed[listable]]] = True
        self._version = store.version
