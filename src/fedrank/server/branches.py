"""The study's branches (``[[branches]]``, docs/service.md): which branch a client is in, a
stable function of its own random enrollment id (never of anything identifying), and what
each branch is served (the trained model, or the defaults)."""

from __future__ import annotations

import hashlib

from fedrank.server.sections import Branch

#: Enrollment ids whose branch is remembered before the memo starts afresh.
MEMO_SIZE = 100_000


def branch_of(enrollment_id: str | None, shares: list[tuple[str, float]]) -> str:
    """The study branch of a client: a stable function of its own random enrollment id
    (never of anything identifying); clients without one are in the first branch."""
    if not enrollment_id:
        return shares[0][0]
    digest = hashlib.blake2b(enrollment_id.encode("utf-8"), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2.0**64
    cumulative = 0.0
    for name, share in shares:
        cumulative += share
        if u < cumulative:
            return name
    return shares[-1][0]


class Branches:
    """The configured branches (the configuration has at least one served the trained
    model)."""

    def __init__(self, branches: tuple[Branch, ...]) -> None:
        self.shares = [(b.name, b.share) for b in branches]
        self._by_name = {b.name: b for b in branches}
        #: Where clients without an enrollment id are, and where a proxy's aggregate and a
        #: secure round's sum are counted.
        self.first = branches[0].name
        #: The branch a proxy's forwarded batch belongs to (it forwards updates).
        self.trained = next(b.name for b in branches if b.served == "trained")
        self._memo: dict[str | None, str] = {}

    def of(self, enrollment_id: str | None) -> str:
        """:func:`branch_of`, memoized: the hash is the costly part of a batch message."""
        branch = self._memo.get(enrollment_id)
        if branch is None:
            if len(self._memo) > MEMO_SIZE:
                self._memo.clear()
            branch = self._memo[enrollment_id] = branch_of(enrollment_id, self.shares)
        return branch

    def __getitem__(self, name: str) -> Branch:
        return self._by_name[name]

    def served(self, name: str) -> str:
        """``trained`` or ``defaults``: what branch ``name`` is served."""
        return self._by_name[name].served
