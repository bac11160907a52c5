"""The KL-divergence privacy measure (FedPS Sec. 4.1, Table 2) and the observed profiles of
GroupUser, CoverQuery, FedPSFlat and FedPSProxy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import sparse

from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy.profile_kl import (
    ObservedProfiles,
    assign_groups,
    kl_divergence,
    mean_kl,
    observed_cover_query,
    observed_fedps_flat,
    observed_fedps_proxy,
    observed_group_user,
    profile_kl,
    revealed_words,
    term_counts,
    term_profile,
)


def random_counts(
    rng: np.random.Generator, n: int, v: int, per_row: int, empty_rows: int = 0
) -> sparse.csr_matrix:
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(2, v, size=rows.size)
    data = rng.integers(1, 6, size=rows.size).astype(np.float64)
    data[rows < empty_rows] = 0.0
    m = sparse.csr_matrix((data, (rows, cols)), shape=(n, v))
    m.eliminate_zeros()
    return m


def dense_kl(real: sparse.spmatrix, observed: sparse.spmatrix, alpha: float) -> np.ndarray:
    """The reference: dense smoothed profiles, then sum p ln(p / q)."""
    v = real.shape[1]
    return np.asarray(kl_divergence(term_profile(real, v, alpha), term_profile(observed, v, alpha)))


def population(
    rng: np.random.Generator, n_users: int, words_each: int, v: int
) -> tuple[sparse.csr_matrix, sparse.csr_matrix]:
    """Users with distinct vocabularies: user u's queries and clicks use only their own block
    of ``words_each`` word ids."""
    assert 2 + n_users * words_each <= v
    own = 2 + np.arange(n_users)[:, None] * words_each + np.arange(words_each)[None, :]
    q_tok = np.take_along_axis(own, rng.integers(0, words_each, (n_users, 30)), axis=1)
    c_tok = np.take_along_axis(own, rng.integers(0, words_each, (n_users, 60)), axis=1)
    return term_counts(q_tok, v), term_counts(c_tok, v)


# -- term counts and profiles ------------------------------------------------------------


def test_term_counts_drop_padding_and_oov_and_sum_per_owner() -> None:
    tokens = np.array([[5, 1, 5, 0], [2, 3, 0, 0], [4, 0, 0, 0]], dtype=np.int32)
    counts = term_counts(tokens, 6)
    assert counts.shape == (3, 6) and counts.dtype == np.float64
    np.testing.assert_array_equal(
        counts.toarray(), [[0, 0, 0, 0, 0, 2], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 0]]
    )
    per_user = term_counts(tokens, 6, owner=np.array([1, 0, 1]), n_owners=3)
    np.testing.assert_array_equal(
        per_user.toarray(), [[0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 2], [0, 0, 0, 0, 0, 0]]
    )
    covers = np.stack([tokens, tokens], axis=1)  # (Q, m, Lq): both covers count for row q
    np.testing.assert_array_equal(term_counts(covers, 6).toarray(), 2 * counts.toarray())


def test_term_counts_refuses_bad_input() -> None:
    with pytest.raises(DataFormatError, match="integers"):
        term_counts(np.array([[2.0, 3.0]]), 6)
    with pytest.raises(DataFormatError, match=r"lie in \[0, 6\)"):
        term_counts(np.array([[2, 6]]), 6)
    with pytest.raises(DataFormatError, match="padded matrix"):
        term_counts(np.array([2, 3]), 6)
    with pytest.raises(ConfigError, match="n_owners"):
        term_counts(np.array([[2, 3]]), 6, owner=np.array([0]))
    with pytest.raises(DataFormatError, match=r"owner indices must lie in \[0, 2\)"):
        term_counts(np.array([[2, 3]]), 6, owner=np.array([2]), n_owners=2)


def test_term_profile_is_smoothed_over_real_words_only() -> None:
    counts = np.array([0, 3, 1, 0, 0, 0], dtype=np.float64)  # an OOV count is ignored
    p = term_profile(counts, 6, smoothing=0.5)
    assert p.shape == (6,)
    np.testing.assert_allclose(p, [0, 0, 1.5 / 3, 0.5 / 3, 0.5 / 3, 0.5 / 3])
    many = term_profile(sparse.csr_matrix(np.array([[0, 0, 4, 0, 0, 0], [0, 0, 0, 0, 0, 0]])), 6)
    assert many.shape == (2, 6)
    np.testing.assert_allclose(many.sum(axis=1), 1.0)
    np.testing.assert_allclose(many[1, 2:], 0.25)  # no counts: uniform over real words
    # more smoothing pulls the profile towards uniform and the divergence towards 0
    real = np.array([0, 0, 9, 1, 0, 0], dtype=np.float64)
    seen = np.array([0, 0, 0, 1, 9, 0], dtype=np.float64)
    kls = [profile_kl(real, seen, smoothing=a)[0] for a in (1e-4, 1e-2, 1.0, 1e3)]
    assert all(a > b for a, b in zip(kls, kls[1:], strict=False)) and kls[-1] < 1e-4


def test_smoothing_must_be_positive() -> None:
    counts = np.array([0, 0, 1, 1], dtype=np.float64)
    for bad in (0.0, -1.0, float("nan"), True):
        with pytest.raises(ConfigError, match="smoothing"):
            profile_kl(counts, counts, smoothing=bad)
    with pytest.raises(ConfigError, match="smoothing"):
        term_profile(counts, 4, smoothing=0.0)


# -- the divergence ----------------------------------------------------------------------


def test_kl_of_identical_profiles_is_zero() -> None:
    rng = np.random.default_rng(0)
    real = random_counts(rng, 50, 1000, 20, empty_rows=3)
    np.testing.assert_array_equal(profile_kl(real, real), 0.0)
    assert mean_kl(real, real) == 0.0
    p = term_profile(real, 1000)
    np.testing.assert_allclose(kl_divergence(p, p), 0.0, atol=1e-15)
    assert kl_divergence(p[0], p[0]) == pytest.approx(0.0, abs=1e-15)


def test_dense_kl_divergence_conventions_and_checks() -> None:
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    assert kl_divergence(p, q) == pytest.approx(np.log(2.0))
    assert kl_divergence(q, p) == float("inf")  # q has mass where p has none
    np.testing.assert_allclose(kl_divergence(np.stack([p, q]), q), [np.log(2.0), 0.0])
    with pytest.raises(DataFormatError, match="probability vectors"):
        kl_divergence(np.array([1.0, 1.0]), np.array([0.5, 0.5]))
    with pytest.raises(DataFormatError, match="same V"):
        kl_divergence(p, q[:2])


def test_sparse_kl_equals_the_dense_reference() -> None:
    rng = np.random.default_rng(1)
    real = random_counts(rng, 40, 500, 15, empty_rows=2)
    observed = sparse.csr_matrix(real + random_counts(rng, 40, 500, 60))
    observed = sparse.diags((np.arange(40) != 5).astype(float)) @ observed
    observed = sparse.csr_matrix(observed)  # the server sees nothing of user 5
    assert observed[5].nnz == 0 and real[0].nnz == 0
    for alpha in (1e-4, 1e-2, 1.0):
        np.testing.assert_allclose(
            profile_kl(real, observed, smoothing=alpha),
            dense_kl(real, observed, alpha),
            rtol=1e-10,
            atol=1e-12,
        )
    # dense inputs are accepted and give the same values
    np.testing.assert_allclose(
        profile_kl(real.toarray(), observed.toarray()), profile_kl(real, observed)
    )


@given(
    st.integers(1, 6),
    st.integers(3, 30),
    st.floats(1e-5, 10.0),
    st.integers(0, 2**32 - 1),
)
def test_kl_is_non_negative_and_matches_dense(n: int, v: int, alpha: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    real = sparse.csr_matrix(rng.integers(0, 3, (n, v)) * (rng.random((n, v)) < 0.4))
    observed = sparse.csr_matrix(rng.integers(0, 50, (n, v)) * (rng.random((n, v)) < 0.3))
    kl = profile_kl(real, observed, smoothing=alpha)
    assert kl.shape == (n,) and np.all(kl >= 0.0) and np.all(np.isfinite(kl))
    np.testing.assert_allclose(kl, dense_kl(real, observed, alpha), rtol=1e-9, atol=1e-12)


def test_profile_kl_refuses_mismatched_users_or_vocabularies() -> None:
    real = sparse.csr_matrix((3, 10))
    with pytest.raises(DataFormatError, match="same users"):
        profile_kl(real, sparse.csr_matrix((4, 10)))
    with pytest.raises(DataFormatError, match="same users"):
        profile_kl(real, sparse.csr_matrix((3, 11)))
    with pytest.raises(DataFormatError, match="negative"):
        profile_kl(real, sparse.csr_matrix(-np.ones((3, 10))))
    with pytest.raises(DataFormatError, match="scipy.sparse"):
        profile_kl([[0, 0, 1]], real)  # type: ignore[arg-type]
    with pytest.raises(DataFormatError, match="no users"):
        mean_kl(sparse.csr_matrix((0, 10)), sparse.csr_matrix((0, 10)))


def test_1000_users_by_60000_words() -> None:
    """At the sample's scale the sparse path agrees with the dense definition (its speed,
    under a second, is measured by ``python benchmarks/bench_kl.py``)."""
    rng = np.random.default_rng(2)
    real = random_counts(rng, 1000, 60_000, 200)
    observed = ObservedProfiles(
        sparse.csr_matrix(random_counts(rng, 10, 60_000, 20_000)),
        np.repeat(np.arange(10), 100),
    )
    kl = profile_kl(real, observed)
    assert kl.shape == (1000,) and np.all(np.isfinite(kl))
    sample = np.arange(0, 1000, 97)
    np.testing.assert_allclose(
        kl[sample],
        dense_kl(real[sample], observed.user_counts()[sample], 1e-3),
        rtol=1e-9,
    )


# -- observed profiles -------------------------------------------------------------------


def test_assign_groups_is_a_seeded_shuffle_cut_into_groups() -> None:
    groups = assign_groups(250, 100, np.random.default_rng(3))
    np.testing.assert_array_equal(np.bincount(groups), [100, 100, 50])
    np.testing.assert_array_equal(groups, assign_groups(250, 100, np.random.default_rng(3)))
    assert not np.array_equal(groups, np.arange(250) // 100)
    with pytest.raises(ConfigError, match="group_size"):
        assign_groups(10, 0, np.random.default_rng(0))


def test_group_user_pools_queries_and_clicks_of_the_group() -> None:
    rng = np.random.default_rng(4)
    queries = random_counts(rng, 6, 40, 3)
    clicks = random_counts(rng, 6, 40, 5)
    groups = np.array([7, 3, 7, 3, 3, 9])  # any labels
    obs = observed_group_user(queries, clicks, groups=groups)
    assert obs.counts.shape == (3, 40) and obs.n_users == 6
    log = (queries + clicks).toarray()
    per_user = obs.user_counts().toarray()
    for u in range(6):
        np.testing.assert_allclose(per_user[u], log[groups == groups[u]].sum(axis=0))
    # a matrix per user and the pooled form give the same divergences
    np.testing.assert_allclose(
        profile_kl(queries + clicks, obs), profile_kl(queries + clicks, obs.user_counts())
    )


def test_larger_groups_disclose_less() -> None:
    rng = np.random.default_rng(5)
    queries, clicks = population(rng, 400, 25, 12_000)
    real = queries + clicks
    means = [
        mean_kl(real, observed_group_user(queries, clicks, group_size=g, rng=rng))
        for g in (1, 5, 20, 100, 400)
    ]
    assert means[0] == 0.0  # alone in a group: the server holds the raw log
    assert all(a < b for a, b in zip(means, means[1:], strict=False)), means


def test_cover_queries_increase_kl_over_the_raw_log() -> None:
    rng = np.random.default_rng(6)
    queries, clicks = population(rng, 200, 25, 12_000)
    real = queries + clicks
    raw = mean_kl(real, observed_cover_query(queries, queries * 0, clicks))
    assert raw == 0.0
    means = []
    for m in (1, 2, 4):
        cover_tokens = rng.integers(2, 12_000, (200, 30 * m))  # covers on other words
        covers = term_counts(cover_tokens, 12_000)
        means.append(mean_kl(real, observed_cover_query(queries, covers, clicks)))
    assert 0.0 < means[0] < means[1] < means[2]


def test_fedps_flat_sees_queries_covers_and_revealed_words_but_no_clicks() -> None:
    rng = np.random.default_rng(7)
    queries, clicks = population(rng, 50, 20, 2000)
    covers = random_counts(rng, 50, 2000, 10)
    revealed = revealed_words(clicks, 1)
    obs = observed_fedps_flat(queries, covers, revealed)
    np.testing.assert_allclose(obs.user_counts().toarray(), (queries + covers + clicks).toarray())
    # case 3: nothing of the update is revealed; clicks stay hidden, divergence grows
    case3 = observed_fedps_flat(queries, covers, revealed_words(clicks, 3))
    np.testing.assert_allclose(case3.user_counts().toarray(), (queries + covers).toarray())
    real = queries + clicks
    assert mean_kl(real, case3) > mean_kl(real, obs)


def test_revealed_words_by_upload_case() -> None:
    train = sparse.csr_matrix(np.array([[0, 0, 2, 1, 0], [0, 0, 0, 3, 4]], dtype=np.float64))
    np.testing.assert_array_equal(revealed_words(train, 1).toarray(), train.toarray())
    np.testing.assert_array_equal(
        revealed_words(train, 2, uploaded_words=np.array([3])).toarray(),
        [[0, 0, 0, 1, 0], [0, 0, 0, 3, 0]],
    )
    assert revealed_words(train, 3).nnz == 0 and revealed_words(train, 3).shape == (2, 5)
    with pytest.raises(ConfigError, match="uploaded_words"):
        revealed_words(train, 2)
    with pytest.raises(ConfigError, match="upload_case"):
        revealed_words(train, 4)  # type: ignore[arg-type]


def test_fedps_proxy_pools_real_queries_and_revealed_words_of_the_proxy() -> None:
    rng = np.random.default_rng(8)
    queries, clicks = population(rng, 30, 10, 1000)
    revealed = revealed_words(clicks, 1)
    proxies = np.arange(30) // 10
    obs = observed_fedps_proxy(queries, revealed, proxies=proxies)
    assert obs.counts.shape == (3, 1000)
    pooled = (queries + revealed).toarray()
    for u in (0, 15, 29):
        np.testing.assert_allclose(
            obs.user_counts()[u].toarray()[0], pooled[proxies == proxies[u]].sum(axis=0)
        )


def test_a_user_alone_in_a_group_or_proxy_is_observed_as_without_pooling() -> None:
    rng = np.random.default_rng(9)
    queries, clicks = population(rng, 20, 10, 500)
    revealed = revealed_words(clicks, 1)
    alone = np.arange(20)
    no_covers = queries * 0
    group = observed_group_user(queries, clicks, groups=alone)
    raw_log = observed_cover_query(queries, no_covers, clicks)
    np.testing.assert_array_equal(group.user_counts().toarray(), raw_log.user_counts().toarray())
    proxy = observed_fedps_proxy(queries, revealed, proxies=alone)
    flat = observed_fedps_flat(queries, no_covers, revealed)
    np.testing.assert_array_equal(proxy.user_counts().toarray(), flat.user_counts().toarray())
    real = queries + clicks
    np.testing.assert_array_equal(profile_kl(real, proxy), profile_kl(real, flat))
    # built with rng and proxy_size 1 it is the same
    by_rng = observed_fedps_proxy(queries, revealed, proxy_size=1, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(profile_kl(real, by_rng), profile_kl(real, flat))


def test_observed_profiles_refuse_inconsistent_inputs() -> None:
    q = sparse.csr_matrix((4, 20))
    with pytest.raises(DataFormatError, match="same users and vocabulary"):
        observed_cover_query(q, sparse.csr_matrix((4, 21)), q)
    with pytest.raises(ConfigError, match="either groups"):
        observed_group_user(q, q)
    with pytest.raises(ConfigError, match="not both"):
        observed_group_user(q, q, groups=np.zeros(4, dtype=int), rng=np.random.default_rng(0))
    with pytest.raises(DataFormatError, match=r"expected shape \(4,\)"):
        observed_fedps_proxy(q, q, proxies=np.zeros(3, dtype=int))
    with pytest.raises(DataFormatError, match="integer ids"):
        observed_fedps_proxy(q, q, proxies=np.zeros(4))
    with pytest.raises(DataFormatError, match="index"):
        ObservedProfiles(sparse.csr_matrix((2, 20)), np.array([0, 2]))
