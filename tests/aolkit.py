"""A small hand-written AOL-style click log for tests that need to know every event: two
users, a background period, and after it eight events each (six train, one valid, one
test, by :func:`fedrank.data.aol.split_by_time`'s 6:1:1).

The test event of user 1 ("quokka zoo") clicks ``http://www.quokka.net/zoo``, a document
nobody clicked before, with a word ("quokka") that occurs nowhere earlier: what is fitted on
the past must not know it, yet the search engine retrieves it (with the weather page, whose
background click-through text has "zoo"). User 2's test query ("violin") matches no
document, so its click cannot be retrieved and the event gets no list.
"""

from __future__ import annotations

from pathlib import Path

from fedrank.data.aol import HEADER

FUTURE_URL = "http://www.quokka.net/zoo"
FUTURE_WORD = "quokka"

# (AnonID, query, time, clicked URL)
ROWS: list[tuple[int, str, str, str]] = [
    # background (before 2006-04-05)
    (1, "peabody library", "2006-03-02 10:00:00", "http://www.peabodylibrary.org/"),
    (1, "red sox", "2006-03-03 10:00:00", "http://www.redsox.com/"),
    (1, "boston library", "2006-03-04 10:00:00", "http://www.bostonlibrary.org/"),
    (2, "library hours", "2006-03-05 11:00:00", "http://www.bostonlibrary.org/"),
    (2, "sox tickets", "2006-03-06 11:00:00", "http://www.redsox.com/"),
    (2, "weather boston", "2006-03-07 11:00:00", "http://www.weather.com/boston"),
    (2, "zoo weather", "2006-03-08 11:00:00", "http://www.weather.com/boston"),
    # user 1: six train, one valid, one test
    (1, "red sox", "2006-04-10 10:00:00", "http://www.redsox.com/"),
    (1, "sox schedule", "2006-04-11 10:00:00", "http://www.redsox.com/schedule"),
    (1, "peabody library", "2006-04-12 10:00:00", "http://www.peabodylibrary.org/"),
    (1, "library", "2006-04-13 10:00:00", "http://www.bostonlibrary.org/"),
    (1, "boston weather", "2006-04-14 10:00:00", "http://www.weather.com/boston"),
    (1, "red sox", "2006-04-15 10:00:00", "http://www.redsox.com/"),
    (1, "library hours", "2006-04-20 10:00:00", "http://www.peabodylibrary.org/"),
    (1, "quokka zoo", "2006-05-01 10:00:00", FUTURE_URL),
    # user 2
    (2, "sox tickets", "2006-04-10 11:00:00", "http://www.redsox.com/"),
    (2, "weather", "2006-04-11 11:00:00", "http://www.weather.com/boston"),
    (2, "library hours", "2006-04-12 11:00:00", "http://www.bostonlibrary.org/"),
    (2, "sox schedule", "2006-04-13 11:00:00", "http://www.redsox.com/schedule"),
    (2, "boston library", "2006-04-14 11:00:00", "http://www.bostonlibrary.org/"),
    (2, "red sox", "2006-04-15 11:00:00", "http://www.redsox.com/"),
    (2, "weather boston", "2006-04-20 11:00:00", "http://www.weather.com/boston"),
    (2, "violin", "2006-05-01 11:00:00", "http://www.redsox.com/"),
]


def write_log(path: Path, rows: list[tuple[int, str, str, str]] = ROWS) -> Path:
    """Write ``rows`` as an AOL click log (TSV with the header) to ``path``."""
    lines = ["\t".join(HEADER)] + ["\t".join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_browsing_log(path: Path, n_users: int = 30, seed: int = 0) -> Path:
    """A random AOL-style click log with revisits: ``n_users`` users, March-May 2006, each
    clicking its own Zipf-popular sites (some through their name, some through topic
    queries), for the URL-bar world (``fedrank.data.aol_browsing``)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    topics = ["news", "music", "cars", "recipes", "weather", "tickets", "games", "maps"]
    rows: list[tuple[int, str, str, str]] = []
    for user in range(1, n_users + 1):
        sites = [f"site{user}x{k}" for k in range(12)]
        weights = 1.0 / np.arange(1, 13)
        for _ in range(int(rng.integers(30, 60))):
            k = int(rng.choice(12, p=weights / weights.sum()))
            day = int(rng.integers(0, 92))
            moment = np.datetime64("2006-03-01T00:00:00") + np.timedelta64(
                day * 86400 + int(rng.integers(0, 86400)), "s"
            )
            query = sites[k] if rng.random() < 0.3 else f"{topics[k % 8]} {topics[(k + 3) % 8]}"
            when = str(moment).replace("T", " ")
            rows.append((user, query, when, f"http://www.{sites[k]}.com/"))
    return write_log(path, rows)
