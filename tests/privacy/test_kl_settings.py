"""fedrank.privacy.kl_settings: the KL measure of FedPS (Sec. 4.1, Table 2) under each
modelling choice, and the order of the methods against the paper's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import sparse

from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy import profile_kl as kl
from fedrank.privacy.kl_settings import (
    CURRENT_SETTING,
    PAPER_SETTING,
    PAPER_TABLE2_AOL,
    KLSetting,
    ProfileCounts,
    default_grid,
    kl_grid,
    observed_profiles,
    order_sensitivity,
    reversals,
)

V = 30
N = 4


def block(rows: dict[int, dict[int, float]]) -> sparse.csr_matrix:
    m = sparse.lil_matrix((N, V))
    for u, words in rows.items():
        for w, c in words.items():
            m[u, w] = c
    return m.tocsr()


def population(received: np.ndarray | None = None) -> ProfileCounts:
    """User u queries word 2 + u, clicks a document with 10 + u; trains on its query and
    clicked document, plus a negative document with word 20 + u (seen 3 times)."""
    queries = block({u: {2 + u: 2.0} for u in range(N)})
    clicks = block({u: {10 + u: 1.0} for u in range(N)})
    covers = block({u: {25 + u % 4: 1.0} for u in range(N)})
    train_pos = block({u: {2 + u: 2.0, 10 + u: 1.0} for u in range(N)})
    train_all = block({u: {2 + u: 2.0, 10 + u: 1.0, 20 + u: 3.0} for u in range(N)})
    return ProfileCounts(
        queries=queries,
        clicks=clicks,
        covers=covers,
        train_all=train_all,
        train_positive=train_pos,
        received=np.ones(N, dtype=bool) if received is None else received,
    )


GROUPS = np.array([0, 0, 1, 1])


def mean(counts: ProfileCounts, observed: object, setting: KLSetting = PAPER_SETTING) -> float:
    return kl.mean_kl(counts.real, observed, smoothing=setting.smoothing)


def one(method: str, counts: ProfileCounts, setting: KLSetting, **kw: object) -> float:
    return kl_grid(method, counts, settings=[setting], **kw)[setting.key()]  # type: ignore[arg-type]


def test_setting_keys_and_grid() -> None:
    assert PAPER_SETTING.key() == "server|1e-03|counts|negatives"
    assert CURRENT_SETTING.key() == "engine+server|1e-03|counts|negatives"
    assert KLSetting("server", 1e-4, "presence", False).key() == "server|1e-04|presence|positives"
    grid = default_grid()
    assert len(grid) == 24 and len({s.key() for s in grid}) == 24
    assert grid[0] == PAPER_SETTING and CURRENT_SETTING in grid


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"observer": "engine"}, "observer"),
        ({"observer": "server", "revealed_weighting": "log"}, "revealed_weighting"),
        ({"observer": "server", "negatives": 1}, "negatives"),
        ({"observer": "server", "negatives": "yes"}, "negatives"),
        ({"observer": "server", "smoothing": 0.0}, "smoothing"),
        ({"observer": "server", "smoothing": -1e-3}, "smoothing"),
    ],
)
def test_bad_settings(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KLSetting(**kwargs)  # type: ignore[arg-type]


def test_profile_counts_validation() -> None:
    c = population()
    with pytest.raises(DataFormatError, match="shape"):
        ProfileCounts(c.queries, c.clicks[:3], None, c.train_all, c.train_positive, c.received)
    with pytest.raises(DataFormatError, match="received"):
        ProfileCounts(c.queries, c.clicks, None, c.train_all, c.train_positive, np.ones(3, bool))
    with pytest.raises(DataFormatError, match="received"):
        ProfileCounts(c.queries, c.clicks, None, c.train_all, c.train_positive, np.ones(N))


def test_central_groupuser_coverquery() -> None:
    c = population()
    assert one("central", c, PAPER_SETTING) == 0.0
    group = kl.observed_group_user(c.queries, c.clicks, groups=GROUPS)
    cover = kl.observed_cover_query(c.queries, c.covers, c.clicks)
    for setting in (PAPER_SETTING, CURRENT_SETTING):  # the log reaches the trainer either way
        assert one("groupuser", c, setting, groups=GROUPS) == pytest.approx(mean(c, group))
        assert one("coverquery", c, setting) == pytest.approx(mean(c, cover))
    assert mean(c, group) > 0 and mean(c, cover) > 0


def test_flat_observers() -> None:
    c = population()
    server = one("flat", c, PAPER_SETTING)
    engine = one("flat", c, CURRENT_SETTING)
    assert server == pytest.approx(mean(c, c.train_all))  # only the revealed words
    expected = kl.observed_fedps_flat(c.queries, c.covers, c.train_all)
    assert engine == pytest.approx(mean(c, expected))
    # Revealed words already hold every real word; the search requests add only the
    # query counts again and the covers, which move the profile away from the real one.
    assert engine != server


def test_proxy_observers_pool_per_proxy() -> None:
    c = population()
    server = one("proxy", c, PAPER_SETTING, proxies=GROUPS)
    engine = one("proxy", c, CURRENT_SETTING, proxies=GROUPS)
    revealed = kl.observed_fedps_proxy(sparse.csr_matrix((N, V)), c.train_all, proxies=GROUPS)
    pooled = kl.observed_fedps_proxy(c.queries, c.train_all, proxies=GROUPS)
    assert server == pytest.approx(mean(c, revealed))
    assert engine == pytest.approx(mean(c, pooled))
    # pooling with another user hides more than the user's own revealed words
    assert server > one("flat", c, PAPER_SETTING)


def test_unreceived_clients_reveal_nothing() -> None:
    received = np.array([True, False, True, True])
    c = population(received)
    observed = observed_profiles("flat", c, PAPER_SETTING)
    assert observed[1].nnz == 0 and observed[0].nnz == c.train_all[0].nnz
    per_user = kl.profile_kl(c.real, observed)
    empty = kl.profile_kl(c.real[1], sparse.csr_matrix((1, V)))
    assert per_user[1] == pytest.approx(empty[0])
    assert per_user[1] > per_user[0]


def test_weighting_negatives_and_upload_cases() -> None:
    c = population()
    presence = observed_profiles("flat", c, KLSetting("server", revealed_weighting="presence"))
    assert set(presence.data.tolist()) == {1.0} and presence.nnz == c.train_all.nnz
    positives = observed_profiles("flat", c, KLSetting("server", negatives=False))
    assert (positives != c.train_positive).nnz == 0
    nothing = observed_profiles("flat", c, PAPER_SETTING, upload_case=3)
    assert nothing.nnz == 0
    some = observed_profiles(
        "flat", c, PAPER_SETTING, upload_case=2, uploaded_words=np.array([2, 3, 20])
    )
    assert sorted(set(some.indices.tolist())) == [2, 3, 20]
    # Without the negatives' words the revealed profile equals the real one: KL 0.
    assert one("flat", c, KLSetting("server", negatives=False)) == pytest.approx(0.0, abs=1e-12)


def test_missing_inputs_are_refused() -> None:
    c = population()
    bare = ProfileCounts(c.queries, c.clicks, None, c.train_all, c.train_positive, c.received)
    with pytest.raises(ConfigError, match="groups"):
        one("groupuser", c, PAPER_SETTING)
    with pytest.raises(ConfigError, match="proxies"):
        one("proxy", c, PAPER_SETTING)
    with pytest.raises(ConfigError, match="cover counts"):
        one("coverquery", bare, PAPER_SETTING)
    with pytest.raises(ConfigError, match="cover counts"):
        one("flat", bare, CURRENT_SETTING)
    assert one("flat", bare, PAPER_SETTING) >= 0.0  # the training server needs no covers
    with pytest.raises(ConfigError, match="unknown method"):
        one("fedsgd", c, PAPER_SETTING)


def test_grid_equals_settings_one_by_one_and_smoothing_scales() -> None:
    c = population()
    grid = kl_grid("proxy", c, proxies=GROUPS)
    assert list(grid) == [s.key() for s in default_grid()]
    for s in default_grid():
        assert grid[s.key()] == pytest.approx(one("proxy", c, s, proxies=GROUPS))
    values = [grid[KLSetting("server", a).key()] for a in (1e-4, 1e-3, 1e-2)]
    assert values[0] > values[1] > values[2] > 0  # missing words weigh more at small alpha


def test_reversals() -> None:
    same = {"flat": 7.0, "proxy": 5.5, "coverquery": 5.0, "groupuser": 2.0}
    assert reversals(same) == []
    swapped = {**same, "flat": 5.2}
    assert reversals(swapped) == [("flat", "proxy")]
    assert reversals({"flat": 1.0, "groupuser": 2.0}) == [("flat", "groupuser")]


@given(st.permutations(["flat", "proxy", "coverquery", "groupuser"]))
def test_reversals_count_discordant_pairs(order: list[str]) -> None:
    values = {m: float(4 - i) for i, m in enumerate(order)}
    discordant = sum(
        (PAPER_TABLE2_AOL[a] - PAPER_TABLE2_AOL[b]) * (values[a] - values[b]) < 0
        for a, b in itertools.combinations(values, 2)
    )
    assert len(reversals(values)) == discordant


def test_order_sensitivity() -> None:
    grids = {
        "groupuser": {"s1": 2.0, "s2": 3.0},
        "flat": {"s1": 7.0, "s2": 1.0},
        "proxy": {"s1": 5.0, "s2": 4.0},
    }
    rows = order_sensitivity(grids)
    assert [r["setting"] for r in rows] == ["s1", "s2"]
    assert rows[0]["order"] == ["flat", "proxy", "groupuser"] and rows[0]["count"] == 0
    assert rows[1]["order"] == ["proxy", "groupuser", "flat"]
    assert rows[1]["reversals"] == [("flat", "proxy"), ("flat", "groupuser")]
    assert rows[1]["count"] == 2
    with pytest.raises(DataFormatError, match="same settings"):
        order_sensitivity({"flat": {"s1": 1.0}, "proxy": {"s2": 1.0}})
    with pytest.raises(DataFormatError, match="at least one"):
        order_sensitivity({})


# -- further cases: query words outside the training data, pooled rows, exact counts ------


def no_query_training(received: np.ndarray | None = None) -> ProfileCounts:
    """Like :func:`population`, but the clients train on their clicked and negative
    documents only: their query words never reach the training server."""
    base = population(received)
    train_pos = block({u: {10 + u: 1.0} for u in range(N)})
    train_all = block({u: {10 + u: 1.0, 20 + u: 3.0} for u in range(N)})
    return ProfileCounts(
        base.queries, base.clicks, base.covers, train_all, train_pos, base.received
    )


def test_server_misses_query_words_the_engine_sees() -> None:
    c = no_query_training()
    server = observed_profiles("flat", c, PAPER_SETTING)
    engine = observed_profiles("flat", c, CURRENT_SETTING)
    assert isinstance(engine, kl.ObservedProfiles)
    # the training server holds no query word; the engine holds them with their counts
    assert server[:, 2 : 2 + N].nnz == 0
    np.testing.assert_array_equal(engine.user_counts()[:, 2 : 2 + N].toarray(), 2 * np.eye(N))
    per_server = kl.profile_kl(c.real, server)
    per_engine = kl.profile_kl(c.real, engine)
    assert np.all(per_server > per_engine + 1.0)  # 2 of 3 real tokens missing: ln(1/alpha) scale


def test_proxy_rows_pool_exactly_the_members_revealed_words() -> None:
    received = np.array([True, True, False, True])
    c = population(received)
    server = observed_profiles("proxy", c, PAPER_SETTING, proxies=GROUPS)
    engine = observed_profiles("proxy", c, CURRENT_SETTING, proxies=GROUPS)
    assert isinstance(server, kl.ObservedProfiles) and isinstance(engine, kl.ObservedProfiles)
    np.testing.assert_array_equal(server.source, GROUPS)
    train = c.train_all.toarray()
    # proxy 0 = users 0 and 1; proxy 1 = user 3 only, user 2's update never arrived
    np.testing.assert_array_equal(server.counts.toarray(), [train[0] + train[1], train[3]])
    queries = c.queries.toarray()
    np.testing.assert_array_equal(
        engine.counts.toarray(),
        [train[0] + train[1] + queries[0] + queries[1], train[3] + queries[2] + queries[3]],
    )


def test_weighting_and_upload_case_2_exact_counts() -> None:
    c = population()
    presence = observed_profiles("flat", c, KLSetting("server", revealed_weighting="presence"))
    np.testing.assert_array_equal(presence.toarray(), (c.train_all.toarray() > 0).astype(float))
    # presence flattens the 3x-weighted negative word: KL differs from the counts reading
    assert one("flat", c, KLSetting("server", revealed_weighting="presence")) != pytest.approx(
        one("flat", c, PAPER_SETTING)
    )
    words = np.array([2, 3, 20])
    some = observed_profiles("flat", c, PAPER_SETTING, upload_case=2, uploaded_words=words)
    expected = np.zeros((N, V))
    expected[:, words] = c.train_all.toarray()[:, words]
    np.testing.assert_array_equal(some.toarray(), expected)
    with pytest.raises(ConfigError, match="uploaded_words"):
        observed_profiles("flat", c, PAPER_SETTING, upload_case=2)


def test_missing_input_messages_name_what_is_needed() -> None:
    c = population()
    with pytest.raises(ConfigError, match=r"'groupuser' needs groups; none was given"):
        observed_profiles("groupuser", c, PAPER_SETTING)
    with pytest.raises(ConfigError, match=r"'proxy' needs proxies"):
        observed_profiles("proxy", c, CURRENT_SETTING)
    with pytest.raises(ConfigError, match="central, groupuser, coverquery, flat, proxy"):
        observed_profiles("Flat", c, PAPER_SETTING)


def unseen_user_kl(real: np.ndarray, alpha: float) -> float:
    """KL of a real count row against an observed profile with no counts (uniform)."""
    p = real[2:] + alpha
    p = p / p.sum()
    return float(np.sum(p * np.log(p * p.size)))


def test_unreceived_user_kl_matches_hand_value_and_falls_with_smoothing() -> None:
    c = population(np.array([True, False, True, True]))
    real = c.real.toarray()[1]
    values = []
    for alpha in (1e-4, 1e-3, 1e-2):
        setting = KLSetting("server", alpha)
        per_user = kl.profile_kl(
            c.real, observed_profiles("flat", c, setting), smoothing=setting.smoothing
        )
        assert per_user[1] == pytest.approx(unseen_user_kl(real, alpha), rel=1e-9)
        values.append(per_user[1])
    assert values[0] > values[1] > values[2]
    # as alpha -> 0 the KL tends to ln(V') - H(real) = ln 28 - H(2/3, 1/3) ~ 2.696 nats
    limit = np.log(V - 2) - (2 / 3 * np.log(3 / 2) + 1 / 3 * np.log(3))
    assert values[1] == pytest.approx(2.6237, abs=1e-4) and values[0] < limit


def test_reversals_ignore_methods_the_paper_lacks() -> None:
    values = {"central": 100.0, "flat": 1.0, "proxy": 2.0, "coverquery": 3.0}
    assert reversals(values) == [("flat", "proxy"), ("flat", "coverquery"), ("proxy", "coverquery")]
    assert reversals({"flat": 1.0, "proxy": 1.0}) == []  # ties are not reversals
    custom = {"a": 2.0, "b": 1.0}
    assert reversals({"a": 0.0, "b": 5.0}, paper=custom) == [("a", "b")]


def test_order_sensitivity_keeps_methods_outside_the_paper_in_the_order() -> None:
    grids = {"central": {"k": 0.0}, "flat": {"k": 3.0}, "groupuser": {"k": 4.0}}
    (row,) = order_sensitivity(grids)
    assert row == {
        "setting": "k",
        "order": ["groupuser", "flat", "central"],
        "reversals": [("flat", "groupuser")],
        "count": 1,
    }


def test_order_sensitivity_refuses_extra_keys_in_a_later_method() -> None:
    with pytest.raises(DataFormatError, match="same settings"):
        order_sensitivity({"flat": {"s1": 1.0}, "proxy": {"s1": 2.0, "s2": 3.0}})
