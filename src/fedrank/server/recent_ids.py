"""The message ids the writer must remember to answer duplicates: those of the last
``max_staleness + 1`` iterations only.

Every message carries a client-chosen id; a resent message (a client that lost the answer)
must be acknowledged, not counted twice. Remembering every id ever stored would grow the
server's memory with every message, forever. It is also unnecessary: a message computed on
model version ``v`` is accepted only while the open iteration serves a version ``<= v +
max_staleness``, and the served version grows by one with every close. So a message stored more than
``max_staleness`` closes ago carries a version the server now refuses as stale (409): it can
never be counted again, whether or not its id is remembered. The window of iterations kept
here is exactly the set in which a resend could still be accepted; older ids stay in the
store (the source of truth) and out of memory. A resend of such an old message is answered
409 ``stale`` instead of 200 ``duplicate``; either way the client drops it.
"""

from __future__ import annotations

from collections.abc import Iterable


class RecentIds:
    """Ids stored in the open iteration and the ``window - 1`` iterations before it.

    Args:
        window: how many iterations to remember (``max_staleness + 1``; >= 1).
        by_iteration: the stored ids of those iterations, oldest first (the open one last).
    """

    def __init__(self, window: int, by_iteration: dict[int, set[str]]) -> None:
        if window < 1:
            raise ValueError(f"the window must hold at least the open iteration, got {window}")
        self.window = window
        self._sets = dict(sorted(by_iteration.items())[-window:])

    # The writer thread adds and opens; request handlers on the event loop read. Readers
    # take a snapshot of the sets (one C call under the GIL) and ``open`` replaces the dict
    # instead of deleting from it, so a reader never iterates a dict that changes size.

    def __contains__(self, message_id: object) -> bool:
        return any(message_id in ids for ids in tuple(self._sets.values()))

    def __len__(self) -> int:
        return sum(len(ids) for ids in tuple(self._sets.values()))

    def isdisjoint(self, ids: set[str]) -> bool:
        """Whether none of ``ids`` is remembered."""
        return all(known.isdisjoint(ids) for known in tuple(self._sets.values()))

    def add(self, iteration: int, ids: Iterable[str]) -> None:
        """Remember ``ids`` as stored in ``iteration`` (opened by :meth:`open`)."""
        self._sets[iteration].update(ids)

    def open(self, iteration: int) -> None:
        """A new iteration opened: forget the ones that fell out of the window."""
        kept = {i: ids for i, ids in self._sets.items() if i > iteration - self.window}
        kept.setdefault(iteration, set())
        self._sets = kept
