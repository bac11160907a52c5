"""The client's offline queue: messages the server could not take yet, kept until a later
``flush()`` delivers them with the same ``message_id``.

One SQLite table in the client's ``state_dir`` (``outbox.sqlite3``). Every change is one
transaction, and a flush removes exactly the messages it delivered (by id) instead of
rewriting the queue, so several ``Client`` objects -- threads or processes -- may share a
``state_dir``: a message queued while another client flushes is never lost
(``tests/client/test_outbox.py`` runs two processes against one queue). A queue left by an
earlier version (``outbox.jsonl``) is taken over on first use. Without a ``state_dir`` the
queue lives in memory for the client's lifetime (never silently dropped).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
);
"""


class Outbox:
    """Messages waiting for the server, in the order they were queued (module docstring).

    Args:
        state_dir: the client's directory; ``None`` keeps the queue in memory.
    """

    def __init__(self, state_dir: Path | None) -> None:
        self.path = None if state_dir is None else Path(state_dir) / "outbox.sqlite3"
        self._lock = threading.Lock()
        self._memory: sqlite3.Connection | None = None
        if self.path is None:
            self._memory = sqlite3.connect(":memory:", check_same_thread=False)
            self._memory.executescript(SCHEMA)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connection() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
        self._adopt_jsonl(self.path.parent / "outbox.jsonl")

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """One transaction: a fresh connection per call for a file (safe across threads and
        processes; SQLite serializes writers), the shared one (under a lock) in memory."""
        if self._memory is not None:
            with self._lock, self._memory:
                yield self._memory
            return
        assert self.path is not None
        db = sqlite3.connect(self.path, timeout=60.0)
        try:
            with db:
                yield db
        finally:
            db.close()

    def _adopt_jsonl(self, old: Path) -> None:
        if not old.exists():
            return
        lines = [line for line in old.read_text().splitlines() if line.strip()]
        self.add_all(json.loads(line) for line in lines)
        old.unlink()

    def add(self, message: dict[str, Any]) -> None:
        """Queue ``message`` (a second copy of the same ``message_id`` is ignored)."""
        self.add_all([message])

    def add_all(self, messages: Iterable[dict[str, Any]]) -> None:
        rows = [(m["message_id"], json.dumps(m)) for m in messages]
        with self._connection() as db:
            db.executemany("INSERT OR IGNORE INTO outbox (message_id, body) VALUES (?, ?)", rows)

    def messages(self) -> list[dict[str, Any]]:
        """Every queued message, oldest first."""
        with self._connection() as db:
            rows = db.execute("SELECT body FROM outbox ORDER BY seq").fetchall()
        return [json.loads(body) for (body,) in rows]

    def remove(self, message_ids: Iterable[str]) -> None:
        """Drop the messages with these ids (delivered, or refused for good)."""
        with self._connection() as db:
            db.executemany("DELETE FROM outbox WHERE message_id = ?", [(m,) for m in message_ids])
