"""The KL-divergence privacy measure of FedPS (paper Sec. 4.1, Table 2).

"we also define a metric to measure the privacy protection capability of models, which is
the Kullback-Leibler divergence between the real user profile and the observed profile on
the server [4]. The larger the KL divergence, the less privacy is disclosed. Since user
interests are mainly reflected in the issued queries and clicked documents, we use the
distribution of all terms in the issued queries and clicked documents as the user profile."

Representation
--------------
Term counts are ``scipy.sparse.csr_matrix`` of shape ``(rows, V)``, one row per user (or
per group / proxy), column ``w`` = how often word id ``w`` occurs; float64 so that weighted
counts (revealed words) add to plain ones. :func:`term_counts` builds them from padded
token-id matrices (0 = padding, 1 = out-of-vocabulary; both are dropped). A single user is a
``(1, V)`` row. Profiles live on the real words ``2 .. V-1``: columns 0 and 1 of any count
matrix given to this module are ignored.

Profiles and divergence
-----------------------
A profile is the additively smoothed term distribution (:func:`term_profile`)::

    p_w = (c_w + alpha) / (N + alpha * V'),   w = 2 .. V-1,   V' = V - 2,   N = sum_w c_w

and the measure of one user is ``KL(real || observed) = sum_w p_w ln(p_w / q_w)`` (natural
log, nats) between the smoothed profile ``p`` of the user's real counts (issued queries +
clicked documents) and the smoothed profile ``q`` of what the server can attribute to the
user; Table 2 reports its mean over users (:func:`mean_kl`).

The smoothing constant ``alpha`` (pseudo-count per word, default :data:`DEFAULT_SMOOTHING`)
makes KL finite when the server's profile misses some of the user's words, and it sets the
scale of every number in Table 2. A word the user has (probability ``p_w``) but the observed
profile lacks contributes about ``p_w ln(p_w (N_obs + alpha V') / alpha)``: smaller ``alpha``
punishes missing words more (KL grows like ``ln(1 / alpha)``), larger ``alpha`` pulls both
profiles to the uniform distribution (KL -> 0 as ``alpha`` grows, since ``alpha V'`` then
dwarfs the real counts). With ``V' = 60,000`` the default ``alpha = 1e-3`` adds 60
pseudo-tokens per profile: less than a typical AOL user's few hundred real tokens. Compare
methods only at the same ``alpha`` and the same vocabulary; absolute values are not
comparable with the paper's, which does not report its smoothing.

Observed profiles (our modeling choice -- the paper does not spell it out)
-------------------------------------------------------------------------
What the server can attribute to one user, for each row of Table 2. "Queries" are the user's
issued queries, "covers" the cover queries generated for them
(:mod:`fedrank.privacy.cover_queries`, Sec. 3.2), "clicks" the words of the documents the user
clicked, "revealed" the words the user's uploaded model updates expose (below).

* **GroupUser** (baseline [52]): users share one identity per group of ``group_size`` (100 in
  the paper); the server logs the group's queries and clicks under that identity. Observed
  for every member = the group's pooled ``queries + clicks``.
* **CoverQuery** (baseline [1, 4]): the server logs each user's real queries together with
  the cover queries (it cannot tell them apart) and the clicks. Observed = ``queries +
  covers + clicks``.
* **FedPSFlat** (Sec. 3.2-3.3): the log never leaves the device. The server (which we treat
  as one party with the search engine) sees (a) the queries the client submits for search
  results, each with its cover queries -- the clicks stay on the device -- and (b) the
  client's uploaded updates. Under upload case 1 of Sec. 3.3.2 the rows of the global word
  embeddings that the update changes reveal the words of the client's training data;
  case 2 reveals only the uploaded frequent words; case 3 reveals nothing. Observed =
  ``queries + covers + revealed``. The caller provides ``revealed`` (e.g. with
  :func:`revealed_words`: the client's training-data counts of the words whose embedding
  row it uploads, i.e. weighted by how often they occur).
* **FedPSProxy** (Sec. 3.4): clients reach the server only through their proxy. Queries go
  out through the proxy without covers ("there is no necessity to upload additional cover
  queries"), so the server sees the proxy's pooled queries; updates are aggregated by the
  proxy, so the server sees the pooled revealed words of the proxy's clients. Observed for
  every client of a proxy = the proxy's pooled ``queries + revealed``.

A reader may disagree with: treating the search engine and the training server as one
adversary (without that FedPSFlat's observed profile would be ``revealed`` only); weighting
revealed words by frequency (an embedding delta's size grows with the word's frequency,
but the server sees deltas, not counts); pooling every client of a proxy (over a training
round every client is sampled once, Sec. 3.2, so over training the proxy's aggregate covers
all its clients; pass zero rows for clients never sampled).

Pooled profiles are not copied per user: an :class:`ObservedProfiles` holds one count row per
*source* (group, proxy or user) and each user's source index, and :func:`profile_kl`
evaluates each user against its source's row. So 118,000 AOL users in groups of 100 cost
1,180 pooled rows, not 118,000 copies of them.

Computation
-----------
:func:`profile_kl` never densifies. With ``A`` the words the user has, ``Z_p = N + alpha V'``
and ``Z_q`` likewise for the observed counts ``d``, exactly::

    KL = ln(Z_q / Z_p) + sum_{w in A} p_w ln((c_w + alpha) / (d_w + alpha))
         + (alpha / Z_p) (sum_{w in A} ln(1 + d_w / alpha) - sum_{w: d_w > 0} ln(1 + d_w / alpha))

(the words outside ``A`` all have ``p_w = alpha / Z_p``), so a user costs ``O(|A| log nnz)``
and a source ``O(nnz)``, where the dense evaluation of the same sum costs ``O(V)`` per user
(``V`` the vocabulary, tens of thousands of words against a few hundred a user has seen).
The dense evaluation in row blocks (:func:`term_profile` + :func:`kl_divergence`) is kept
as the reference the tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import sparse

from fedrank.errors import ConfigError, DataFormatError

__all__ = [
    "DEFAULT_GROUP_SIZE",
    "DEFAULT_SMOOTHING",
    "FIRST_WORD_ID",
    "OOV_ID",
    "PAD_ID",
    "ObservedProfiles",
    "assign_groups",
    "kl_divergence",
    "mean_kl",
    "observed_cover_query",
    "observed_fedps_flat",
    "observed_fedps_proxy",
    "observed_group_user",
    "profile_kl",
    "revealed_words",
    "term_counts",
    "term_profile",
]

#: Token id of padding and of out-of-vocabulary words (the data layer's convention); real
#: words are ``FIRST_WORD_ID .. V-1``.
PAD_ID, OOV_ID = 0, 1
FIRST_WORD_ID = 2

#: Additive smoothing per word (see the module docstring for its effect).
DEFAULT_SMOOTHING = 1e-3

#: Users per group (GroupUser) and per proxy (FedPSProxy) in the paper (Sec. 4.2).
DEFAULT_GROUP_SIZE = 100


# ----------------------------------------------------------------------------- validation


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _smoothing(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ConfigError(f"smoothing must be a positive number, got {value!r}")
    alpha = float(value)
    if not (np.isfinite(alpha) and alpha > 0.0):
        raise ConfigError(
            f"smoothing must be a finite number > 0, got {value!r}: with 0 the KL divergence "
            "is infinite as soon as the observed profile misses one of the user's words; "
            f"use a small pseudo-count such as {DEFAULT_SMOOTHING}"
        )
    return alpha


def _vocab_size(value: object) -> int:
    size = _positive_int("vocab_size", value)
    if size <= FIRST_WORD_ID:
        raise ConfigError(
            f"vocab_size must exceed {FIRST_WORD_ID} (ids 0 and 1 are padding and "
            f"out-of-vocabulary), got {size}"
        )
    return size


def _as_counts(name: str, counts: object, vocab_size: int | None = None) -> sparse.csr_matrix:
    """A canonical float64 CSR copy of a count matrix, columns 0 and 1 zeroed out."""
    if sparse.issparse(counts):
        matrix = sparse.csr_matrix(counts, dtype=np.float64, copy=True)
    elif isinstance(counts, np.ndarray):
        if counts.dtype.kind not in "fiu":
            raise DataFormatError(f"{name} must hold numbers, got dtype {counts.dtype}")
        dense = counts[None, :] if counts.ndim == 1 else counts
        if dense.ndim != 2:
            raise DataFormatError(f"{name} must be 1-D or 2-D, got shape {counts.shape}")
        matrix = sparse.csr_matrix(dense.astype(np.float64))
    else:
        raise DataFormatError(
            f"{name} must be a scipy.sparse matrix (rows = users, columns = word ids) or a "
            f"numpy array, got {type(counts).__name__}"
        )
    if vocab_size is not None and matrix.shape[1] != vocab_size:
        raise DataFormatError(
            f"{name} has {matrix.shape[1]} columns but the vocabulary has {vocab_size} ids"
        )
    if matrix.shape[1] <= FIRST_WORD_ID:
        raise DataFormatError(
            f"{name} has {matrix.shape[1]} columns: a count matrix needs one column per word "
            f"id, and ids 0 and 1 are padding and out-of-vocabulary"
        )
    matrix.sum_duplicates()
    if matrix.nnz and not np.all(np.isfinite(matrix.data)):
        raise DataFormatError(f"{name} contains NaN or infinite counts")
    if matrix.nnz and matrix.data.min() < 0:
        raise DataFormatError(f"{name} contains negative counts; counts must be >= 0")
    matrix.data[matrix.indices < FIRST_WORD_ID] = 0.0
    matrix.eliminate_zeros()
    return matrix


def _same_shape(**matrices: sparse.csr_matrix) -> tuple[int, int]:
    shapes = {name: m.shape for name, m in matrices.items()}
    if len(set(shapes.values())) != 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise DataFormatError(
            f"count matrices must all be (n_users, V) with the same users and vocabulary; "
            f"got {listed}"
        )
    return next(iter(shapes.values()))


def _membership(name: str, ids: object, n_users: int) -> np.ndarray:
    """Dense ``0..n-1`` indices of arbitrary integer group labels (one per user)."""
    labels = np.asarray(ids)
    if labels.dtype.kind not in "iu":
        raise DataFormatError(f"{name} must be integer ids, got dtype {labels.dtype}")
    if labels.shape != (n_users,):
        raise DataFormatError(
            f"{name} must give one id per user: expected shape ({n_users},), got {labels.shape}"
        )
    return np.unique(labels, return_inverse=True)[1].astype(np.int64)


# ----------------------------------------------------------------------------- counting


def term_counts(
    token_ids: np.ndarray,
    vocab_size: int,
    *,
    owner: np.ndarray | None = None,
    n_owners: int | None = None,
) -> sparse.csr_matrix:
    """Term counts of padded token-id rows, as a ``(rows, V)`` float64 CSR matrix.

    Args:
        token_ids: ``(N, L)`` (e.g. queries, documents) or ``(N, ..., L)`` (e.g. cover
            queries ``(Q, m, Lq)``); every token of ``token_ids[n]`` counts for row ``n``.
            Padding (0) and out-of-vocabulary (1) tokens are dropped.
        vocab_size: ``V``; ids must lie in ``[0, V)``.
        owner: optional ``(N,)`` row index in ``[0, n_owners)`` of each item, to sum items
            per user: e.g. the user of every issued query, or of every click (then
            ``token_ids = doc_tokens[clicked_doc_ids]``).
        n_owners: number of output rows when ``owner`` is given.

    Returns ``(N, V)`` without ``owner``, ``(n_owners, V)`` with it.
    """
    size = _vocab_size(vocab_size)
    tokens = np.asarray(token_ids)
    if tokens.dtype.kind not in "iu":
        raise DataFormatError(f"token ids must be integers, got dtype {tokens.dtype}")
    if tokens.ndim < 2:
        raise DataFormatError(
            f"token ids must be a padded matrix (N, L) or (N, ..., L), got shape {tokens.shape}"
        )
    if tokens.size and (tokens.min() < 0 or tokens.max() >= size):
        raise DataFormatError(
            f"token ids must lie in [0, {size}) for vocab_size {size}, got "
            f"{tokens.min()}..{tokens.max()}"
        )
    flat = tokens.reshape(tokens.shape[0], -1)
    if owner is None:
        if n_owners is not None:
            raise ConfigError("n_owners is only meaningful together with owner")
        n_rows = flat.shape[0]
        row_of_item = np.arange(n_rows, dtype=np.int64)
    else:
        n_rows = _positive_int("n_owners", n_owners) if n_owners is not None else None
        if n_rows is None:
            raise ConfigError("owner needs n_owners (the number of users) as well")
        row_of_item = np.asarray(owner)
        if row_of_item.dtype.kind not in "iu" or row_of_item.shape != (flat.shape[0],):
            raise DataFormatError(
                f"owner must be ({flat.shape[0]},) integer row indices, got dtype "
                f"{row_of_item.dtype} and shape {row_of_item.shape}"
            )
        if row_of_item.size and (row_of_item.min() < 0 or row_of_item.max() >= n_rows):
            raise DataFormatError(f"owner indices must lie in [0, {n_rows})")
    keep = flat >= FIRST_WORD_ID
    rows = np.broadcast_to(row_of_item[:, None], flat.shape)[keep]
    matrix = sparse.csr_matrix(
        (np.ones(rows.size, dtype=np.float64), (rows, flat[keep].astype(np.int64))),
        shape=(n_rows, size),
    )
    matrix.sum_duplicates()
    return matrix


def revealed_words(
    train_counts: sparse.spmatrix,
    upload_case: Literal[1, 2, 3],
    *,
    uploaded_words: np.ndarray | None = None,
) -> sparse.csr_matrix:
    """The words a client's uploaded update reveals (Sec. 3.3.2), per user, for the
    FedPS observed profiles.

    Args:
        train_counts: ``(n_users, V)`` counts of the words in each client's training data
            (those whose global-embedding rows its local training changes).
        upload_case: 1 = the complete update is uploaded: every such word is revealed,
            weighted by its count; 2 = only the rows of ``uploaded_words`` (frequent words
            of the document collection) are uploaded: only those are revealed; 3 = global
            embeddings are not uploaded: nothing is revealed (all-zero matrix).
        uploaded_words: the word ids uploaded under case 2 (required then, refused
            otherwise).
    """
    counts = _as_counts("train_counts", train_counts)
    if upload_case not in (1, 2, 3) or isinstance(upload_case, bool):
        raise ConfigError(f"upload_case must be 1, 2 or 3 (FedPS Sec. 3.3.2), got {upload_case!r}")
    if (uploaded_words is not None) != (upload_case == 2):
        raise ConfigError("uploaded_words is required with upload_case 2 and only with it")
    if upload_case == 1:
        return counts
    if upload_case == 3:
        return sparse.csr_matrix(counts.shape, dtype=np.float64)
    words = np.asarray(uploaded_words)
    if words.dtype.kind not in "iu" or words.ndim != 1:
        raise DataFormatError("uploaded_words must be a 1-D array of word ids")
    if words.size and (words.min() < 0 or words.max() >= counts.shape[1]):
        raise DataFormatError(f"uploaded_words must lie in [0, {counts.shape[1]})")
    mask = np.zeros(counts.shape[1], dtype=bool)
    mask[words] = True
    counts.data[~mask[counts.indices]] = 0.0
    counts.eliminate_zeros()
    return counts


def assign_groups(n_users: int, group_size: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_users,)`` group ids: users shuffled by ``rng``, then cut into consecutive groups
    of ``group_size`` (the last group may be smaller) -- the GroupUser groups and the
    FedPSProxy proxies (the same scheme as :meth:`fedrank.aggregators.hierarchy.Topology.build`,
    whose ``proxy_of`` may be passed instead)."""
    n = _positive_int("n_users", n_users)
    size = _positive_int("group_size", group_size)
    groups = np.empty(n, dtype=np.int64)
    groups[rng.permutation(n)] = np.arange(n, dtype=np.int64) // size
    return groups


# ----------------------------------------------------------------------------- observed


@dataclass(frozen=True)
class ObservedProfiles:
    """What the server can attribute to each user: one count row per *source* and the
    source of every user (a pooled group/proxy row is shared by its members, not copied).

    Attributes:
        counts: ``(n_sources, V)`` float64 CSR term counts the server holds per source.
        source: ``(n_users,)`` row of ``counts`` the server attributes to each user.
    """

    counts: sparse.csr_matrix
    source: np.ndarray

    def __post_init__(self) -> None:
        if not sparse.issparse(self.counts) or self.counts.ndim != 2:
            raise DataFormatError("ObservedProfiles.counts must be a 2-D scipy.sparse matrix")
        src = np.asarray(self.source)
        if src.dtype.kind not in "iu" or src.ndim != 1:
            raise DataFormatError("ObservedProfiles.source must be a 1-D integer array")
        if src.size and (src.min() < 0 or src.max() >= self.counts.shape[0]):
            raise DataFormatError(
                f"ObservedProfiles.source must index the {self.counts.shape[0]} count rows"
            )

    @property
    def n_users(self) -> int:
        return int(np.asarray(self.source).size)

    @property
    def vocab_size(self) -> int:
        return int(self.counts.shape[1])

    def user_counts(self) -> sparse.csr_matrix:
        """The ``(n_users, V)`` observed count matrix, one (possibly repeated) row per user.
        Pooled rows are copied per member: memory grows with ``group size x pooled nnz``."""
        return sparse.csr_matrix(self.counts[np.asarray(self.source)])


def _identity(counts: sparse.csr_matrix) -> ObservedProfiles:
    return ObservedProfiles(counts, np.arange(counts.shape[0], dtype=np.int64))


def _pooled(
    counts: sparse.csr_matrix,
    name: str,
    ids: np.ndarray | None,
    size: int,
    rng: np.random.Generator | None,
) -> ObservedProfiles:
    n_users = counts.shape[0]
    if ids is None:
        if rng is None:
            raise ConfigError(
                f"give either {name} (one id per user) or rng to build groups of {size} "
                "users with a seeded permutation"
            )
        ids = assign_groups(n_users, size, rng)
    elif rng is not None:
        raise ConfigError(f"give either {name} or rng, not both: rng only builds {name}")
    member_of = _membership(name, ids, n_users)
    n_pools = int(member_of.max()) + 1 if n_users else 0
    membership = sparse.csr_matrix(
        (np.ones(n_users), (member_of, np.arange(n_users))), shape=(n_pools, n_users)
    )
    pooled = sparse.csr_matrix(membership @ counts)
    pooled.sum_duplicates()
    return ObservedProfiles(pooled, member_of)


def observed_group_user(
    query_counts: sparse.spmatrix,
    click_counts: sparse.spmatrix,
    *,
    groups: np.ndarray | None = None,
    group_size: int = DEFAULT_GROUP_SIZE,
    rng: np.random.Generator | None = None,
) -> ObservedProfiles:
    """GroupUser [52]: every user's observed profile is their group's pooled log (issued
    queries + clicked documents of all members, under one group identity).

    Args:
        query_counts: ``(n_users, V)`` term counts of each user's issued queries.
        click_counts: ``(n_users, V)`` term counts of each user's clicked documents.
        groups: ``(n_users,)`` integer group id of every user (any labels), or ``None`` to
            build groups of ``group_size`` with :func:`assign_groups` and ``rng``.
    """
    queries = _as_counts("query_counts", query_counts)
    clicks = _as_counts("click_counts", click_counts)
    _same_shape(query_counts=queries, click_counts=clicks)
    size = _positive_int("group_size", group_size)
    return _pooled(sparse.csr_matrix(queries + clicks), "groups", groups, size, rng)


def observed_cover_query(
    query_counts: sparse.spmatrix,
    cover_counts: sparse.spmatrix,
    click_counts: sparse.spmatrix,
) -> ObservedProfiles:
    """CoverQuery [1, 4]: the server logs each user's real queries mixed with their cover
    queries (indistinguishable to it) and the clicked documents: ``queries + covers +
    clicks``, per user. ``cover_counts`` is e.g. ``term_counts(covers, V, owner=user_of_query,
    n_owners=n_users)`` with ``covers`` from :meth:`CoverQueryGenerator.generate`."""
    queries = _as_counts("query_counts", query_counts)
    covers = _as_counts("cover_counts", cover_counts)
    clicks = _as_counts("click_counts", click_counts)
    _same_shape(query_counts=queries, cover_counts=covers, click_counts=clicks)
    return _identity(sparse.csr_matrix(queries + covers + clicks))


def observed_fedps_flat(
    query_counts: sparse.spmatrix,
    cover_counts: sparse.spmatrix,
    revealed_counts: sparse.spmatrix,
) -> ObservedProfiles:
    """FedPSFlat (Sec. 3.2-3.3): the server sees the client's search requests (real queries
    with their covers; clicks stay on the device) and its uploaded updates' revealed words
    (see :func:`revealed_words`; all zero under upload case 3): ``queries + covers +
    revealed``, per user."""
    queries = _as_counts("query_counts", query_counts)
    covers = _as_counts("cover_counts", cover_counts)
    revealed = _as_counts("revealed_counts", revealed_counts)
    _same_shape(query_counts=queries, cover_counts=covers, revealed_counts=revealed)
    return _identity(sparse.csr_matrix(queries + covers + revealed))


def observed_fedps_proxy(
    query_counts: sparse.spmatrix,
    revealed_counts: sparse.spmatrix,
    *,
    proxies: np.ndarray | None = None,
    proxy_size: int = DEFAULT_GROUP_SIZE,
    rng: np.random.Generator | None = None,
) -> ObservedProfiles:
    """FedPSProxy (Sec. 3.4): every client's observed profile is its proxy's pooled real
    queries (sent through the proxy without covers) plus the pooled revealed words of the
    proxy's clients (the proxy uploads only their aggregated update).

    Args:
        query_counts: ``(n_users, V)`` term counts of each user's issued queries.
        revealed_counts: ``(n_users, V)`` words each client's update reveals
            (:func:`revealed_words`); zero rows for clients whose updates never reach the
            server.
        proxies: ``(n_users,)`` proxy id of every user (e.g.
            :attr:`fedrank.aggregators.hierarchy.Topology.proxy_of`), or ``None`` to build
            proxies of ``proxy_size`` with :func:`assign_groups` and ``rng``.
    """
    queries = _as_counts("query_counts", query_counts)
    revealed = _as_counts("revealed_counts", revealed_counts)
    _same_shape(query_counts=queries, revealed_counts=revealed)
    size = _positive_int("proxy_size", proxy_size)
    return _pooled(sparse.csr_matrix(queries + revealed), "proxies", proxies, size, rng)


# ----------------------------------------------------------------------------- divergence


def term_profile(
    counts: sparse.spmatrix | np.ndarray,
    vocab_size: int,
    smoothing: float = DEFAULT_SMOOTHING,
) -> np.ndarray:
    """Dense smoothed term distribution(s): ``p_w = (c_w + alpha) / (N + alpha (V - 2))`` on
    the word ids ``2 .. V-1``, 0 on padding and out-of-vocabulary.

    Args:
        counts: one user's counts (a ``(V,)`` array or ``(1, V)`` matrix) or many users'
            (``(n, V)``, sparse or dense).
        vocab_size: ``V``.
        smoothing: the additive pseudo-count ``alpha > 0`` per word (effect: see the
            module docstring).

    Returns ``(V,)`` for a 1-D input, else ``(n, V)``; every row sums to 1.
    """
    size = _vocab_size(vocab_size)
    alpha = _smoothing(smoothing)
    one_d = isinstance(counts, np.ndarray) and counts.ndim == 1
    matrix = _as_counts("counts", counts, size)
    dense = matrix.toarray()
    dense[:, FIRST_WORD_ID:] += alpha
    dense /= dense.sum(axis=1, keepdims=True)
    return dense[0] if one_d else dense


def kl_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray | float:
    """``KL(p || q) = sum_w p_w ln(p_w / q_w)`` (nats) of probability vectors, row by row.

    ``0 ln(0 / q) = 0``; a word with ``p_w > 0 = q_w`` makes the divergence infinite
    (smooth both profiles with :func:`term_profile` to avoid it). ``p`` and ``q`` are
    ``(V,)`` (returns a float) or ``(n, V)`` (returns ``(n,)``); a ``(V,)`` ``q`` is compared
    with every row of ``p``. Rows must be non-negative and sum to 1 (within 1e-6).
    """
    pa = np.asarray(p, dtype=np.float64)
    qa = np.asarray(q, dtype=np.float64)
    if pa.ndim not in (1, 2) or qa.ndim not in (1, 2) or pa.shape[-1] != qa.shape[-1]:
        raise DataFormatError(
            f"p and q must be (V,) or (n, V) distributions over the same V, got shapes "
            f"{pa.shape} and {qa.shape}"
        )
    if qa.ndim == 2 and qa.shape != pa.shape:
        raise DataFormatError(f"p {pa.shape} and q {qa.shape} must have the same rows")
    for name, arr in (("p", pa), ("q", qa)):
        if not np.all(np.isfinite(arr)) or (arr.size and arr.min() < 0):
            raise DataFormatError(f"{name} must be finite and non-negative")
        if not np.allclose(arr.sum(axis=-1), 1.0, atol=1e-6):
            raise DataFormatError(
                f"{name} must be probability vectors (rows summing to 1); normalize counts "
                "with term_profile"
            )
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(pa > 0, pa * (np.log(pa) - np.log(qa)), 0.0)
    out = np.maximum(terms.sum(axis=-1), 0.0)
    return float(out) if out.ndim == 0 else out


def profile_kl(
    real_counts: sparse.spmatrix | np.ndarray,
    observed: ObservedProfiles | sparse.spmatrix | np.ndarray,
    *,
    smoothing: float = DEFAULT_SMOOTHING,
) -> np.ndarray:
    """Per-user ``KL(real profile || observed profile)`` in nats (Sec. 4.1), ``(n_users,)``.

    Args:
        real_counts: ``(n_users, V)`` counts of each user's issued queries + clicked
            documents (the real profile).
        observed: an :class:`ObservedProfiles` (from the ``observed_*`` functions) or an
            ``(n_users, V)`` count matrix, row ``u`` = what the server attributes to user
            ``u``.
        smoothing: additive pseudo-count ``alpha`` for both profiles.

    Computed sparse (module docstring, "Computation"); exact up to floating-point rounding,
    and values within rounding of 0 are returned as 0.
    """
    alpha = _smoothing(smoothing)
    real = _as_counts("real_counts", real_counts)
    if not isinstance(observed, ObservedProfiles):
        obs_counts = _as_counts("observed counts", observed)
        observed = _identity(obs_counts)
    else:
        obs_counts = _as_counts("observed counts", observed.counts)
    source = np.asarray(observed.source, dtype=np.int64)
    n_users, size = real.shape
    if source.size != n_users or obs_counts.shape[1] != size:
        raise DataFormatError(
            f"real counts are ({n_users}, {size}) but the observed profiles cover "
            f"{source.size} users over {obs_counts.shape[1]} word ids; both must describe "
            "the same users (rows, in the same order) and vocabulary"
        )
    support = size - FIRST_WORD_ID
    z_p = np.asarray(real.sum(axis=1)).ravel() + alpha * support
    z_q_src = np.asarray(obs_counts.sum(axis=1)).ravel() + alpha * support

    # per source: sum over its observed words of ln(1 + d_w / alpha)
    obs_rows = np.repeat(np.arange(obs_counts.shape[0]), np.diff(obs_counts.indptr))
    log_d_src = np.bincount(
        obs_rows, weights=np.log1p(obs_counts.data / alpha), minlength=obs_counts.shape[0]
    )

    # per user word w in A (the user's words): d_w looked up in the user's source row
    user_rows = np.repeat(np.arange(n_users), np.diff(real.indptr))
    obs_keys = obs_rows * np.int64(size) + obs_counts.indices
    keys = source[user_rows] * np.int64(size) + real.indices
    d = np.zeros(keys.size)
    if obs_keys.size:
        pos = np.minimum(np.searchsorted(obs_keys, keys), obs_keys.size - 1)
        found = obs_keys[pos] == keys
        d[found] = obs_counts.data[pos[found]]
    c = real.data
    p_w = (c + alpha) / z_p[user_rows]
    in_a = np.bincount(
        user_rows, weights=p_w * (np.log(c + alpha) - np.log(d + alpha)), minlength=n_users
    )
    log_d_in_a = np.bincount(user_rows, weights=np.log1p(d / alpha), minlength=n_users)

    z_q = z_q_src[source]
    kl = np.log(z_q / z_p) + in_a + (alpha / z_p) * (log_d_in_a - log_d_src[source])
    # Gibbs' inequality: KL >= 0; negative values are rounding of an exact 0
    return np.maximum(kl, 0.0)


def mean_kl(
    real_counts: sparse.spmatrix | np.ndarray,
    observed: ObservedProfiles | sparse.spmatrix | np.ndarray,
    *,
    smoothing: float = DEFAULT_SMOOTHING,
) -> float:
    """Mean over users of :func:`profile_kl`: one cell of Table 2 (nats)."""
    values = profile_kl(real_counts, observed, smoothing=smoothing)
    if values.size == 0:
        raise DataFormatError("no users: the mean KL divergence of zero users is undefined")
    return float(values.mean())
