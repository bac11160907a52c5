"""The URL-bar world built from the AOL click log (``fedrank.data.aol_browsing``): a
hand-written log whose every page, visit and search is known, and the real shared sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.data.aol_browsing import aol_world, is_site_query, site_name
from fedrank.data.browsing import browsing_shapes
from fedrank.errors import ConfigError
from fedrank.models.frecency.history import VisitType
from tests.aolkit import write_log

# A study start on 2006-04-01: user 1 has history from March, user 2 too.
START = np.datetime64("2006-04-01T00:00:00")
ROWS = [
    (1, "ebay", "2006-03-02 10:00:00", "http://www.ebay.com/"),
    (1, "red sox tickets", "2006-03-03 10:00:00", "http://www.redsox.com/"),
    (1, "red sox", "2006-03-04 10:00:00", "http://www.redsox.com/"),
    (1, "ebay", "2006-04-02 10:00:00", "http://www.ebay.com/"),  # revisit: a search
    (1, "sox schedule", "2006-04-03 10:00:00", "http://www.redsox.com/"),  # search, site name
    (1, "quokka zoo", "2006-04-04 10:00:00", "http://www.quokka.net/zoo"),  # new host
    (2, "www.bbc.co.uk", "2006-03-05 11:00:00", "http://news.bbc.co.uk/"),
    (2, "world news", "2006-04-05 11:00:00", "http://news.bbc.co.uk/"),  # search, site name
    (3, "only later", "2006-04-06 12:00:00", "http://www.later.com/"),  # no history: dropped
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    path = write_log(tmp_path_factory.mktemp("aolw") / "log.tsv", ROWS)
    return aol_world(path, study_start=START)


def test_site_names_and_typed_queries() -> None:
    assert site_name("www.peabodylibrary.org") == "peabodylibrary"
    assert site_name("news.bbc.co.uk") == "bbc"
    assert site_name("ebay.com") == "ebay"
    assert is_site_query("ebay", "www.ebay.com")
    assert is_site_query("www.ebay.com", "ebay.com")
    assert is_site_query("http://ebay.com/", "www.ebay.com")
    assert not is_site_query("cheap ebay stuff", "www.ebay.com")
    assert is_site_query("www.bbc.co.uk", "news.bbc.co.uk")


def test_pages_are_the_users_hosts_with_query_words_as_titles(world) -> None:  # noqa: ANN001
    pages = world.pages
    assert world.n_users == 2  # user 3 has no click before the study: dropped
    texts = [pages.text(p) for p in range(pages.n_pages)]
    # user 0 (AnonID 1): ebay, quokka (first seen in the study), redsox; user 1: bbc
    assert texts == [
        "ebay | ",  # the query "ebay" is the site's name, not a title word
        "quokka | zoo",  # first clicked in the study: its query's words (the name aside)
        "redsox | red sox tickets",  # history queries, most frequent first
        "bbc | ",  # "www.bbc.co.uk" is an address, not a title
    ]
    assert pages.is_root.all() and list(pages.user_offsets) == [0, 3, 4]


def test_history_visits_and_types(world) -> None:  # noqa: ANN001
    h = world.history
    assert h.n_visits == 4 and (h.time < 0).all()
    # TYPED when the query was the site: "ebay", "red sox" (the name, spaced) and
    # "www.bbc.co.uk"; "red sox tickets" is a search, LINK
    typed = [world.pages.text(int(p)).split(" |")[0] for p in h.page[h.visit_type == 2]]
    assert sorted(typed) == ["bbc", "ebay", "redsox"]
    assert (h.visit_type[h.visit_type != VisitType.TYPED] == VisitType.LINK).all()
    np.testing.assert_allclose(h.time[0], -30 + 10 / 24)  # 2006-03-02 10:00 is 30 days before


def test_future_revisits_are_searches_typed_as_queried(world) -> None:  # noqa: ANN001
    f = world.future
    assert f.n_visits == 4
    assert world.future_search.tolist() == [True, True, False, True]
    vocab = world.pages.vocabulary.words
    typed = [[vocab[w] for w in row if w >= 0] for row in world.future_typed]
    # "ebay": the page's words contain it; "sox schedule": "schedule" is not a word of the
    # page, so the user types the site's name (-1 here); "world news": not the page's words
    assert typed == [["ebay"], [], ["quokka", "zoo"], []]


def test_shapes_of_the_history(world) -> None:  # noqa: ANN001
    s = world.stats
    assert s["users"] == 2 and s["clicks_per_user"] == 2.0  # 3 and 1 clicks
    assert s["once_share"] == pytest.approx(2 / 3)  # ebay once, redsox twice, bbc once


def test_no_history_is_refused(tmp_path: Path) -> None:
    path = write_log(tmp_path / "log.tsv", ROWS)
    with pytest.raises(ConfigError, match="no user"):
        aol_world(path, study_start=np.datetime64("2006-01-01T00:00:00"))


def test_real_log_shapes(aol_log: Path) -> None:
    """The shapes the synthetic world is calibrated on, on the whole log (every click)
    and on the history period of the AOL world (March-April 2006)."""
    import gzip

    with gzip.open(aol_log, "rt") as lines:
        rows = [line.rstrip("\n").split("\t") for line in lines][1:]
    user = np.unique([int(r[0]) for r in rows], return_inverse=True)[1]
    hosts = [r[3].split("/")[2].lower().removeprefix("www.") for r in rows]
    pair = np.unique([f"{u}|{h}" for u, h in zip(user, hosts, strict=True)],
                     return_inverse=True)[1]  # fmt: skip
    t = (np.array([r[2] for r in rows], dtype="datetime64[s]") - START).astype(float) / 86400
    s = browsing_shapes(user, pair, t)
    assert s["clicks_per_user"] == pytest.approx(407.929)
    assert s["hosts_per_user"] == pytest.approx(228.3, abs=0.1)
    assert s["once_share"] == pytest.approx(0.784, abs=0.001)
    assert s["revisit_rate"] == pytest.approx(0.440, abs=0.001)
    assert s["top10_share"] == pytest.approx(0.315, abs=0.001)
