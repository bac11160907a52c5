"""The input of the PEPS ranker (:mod:`fedrank.models.peps`) in packed form.

A batch arrives as padded word-id tensors (:data:`PAD_ID` = 0 pads): queries ``(Q, Lq)`` and
their candidates' texts ``(Q, C, Ld)``. :class:`PackedBatch` turns them into index
structures over the real words only, so that only real words are embedded, attended and
matched (no work on padding), each distinct candidate text is encoded once, and there is
no Python loop over queries or documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["PAD_ID", "PackedBatch", "shape_of"]

PAD_ID: int = 0


def shape_of(t: torch.Tensor | np.ndarray) -> tuple[int, ...]:
    """The shape of ``t`` as Python ints (for error messages)."""
    return tuple(int(n) for n in t.shape)


def _unique_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(unique, inverse)`` of the rows of an integer matrix ``(N, L)``: the distinct rows
    in lexicographic order and, for every row, its index among them
    (``unique[inverse] == rows``). A stable sort per column, last column first (LSD radix
    order); ``torch.unique(dim=0)`` is slower on short rows."""
    n_rows, length = rows.shape
    order = torch.arange(n_rows, device=rows.device)
    for column in range(length - 1, -1, -1):
        order = order[torch.sort(rows[order, column], stable=True).indices]
    ordered = rows[order]
    starts = torch.ones(n_rows, dtype=torch.bool, device=rows.device)
    if n_rows > 1:
        starts[1:] = (ordered[1:] != ordered[:-1]).any(dim=1)
    inverse = torch.empty_like(order)
    inverse[order] = torch.cumsum(starts, dim=0) - 1
    return ordered[starts], inverse


@dataclass(frozen=True)
class PackedBatch:
    """Index structure of a batch in *packed* form: only real (non-padding) words become
    tokens, so every per-word computation costs what the real text lengths cost (AOL
    queries and URL titles average ~3 words, padded to 12). Candidate texts are
    deduplicated first: each distinct document is encoded once.

    Tokens are numbered queries first (``0 .. n_query_tokens - 1``, row-major over
    ``(Q, Lq)``), then the words of the distinct documents (row-major over ``(U, Ld)``).

    Attributes:
        ids: ``(n_tokens,)`` word id of every token.
        n_query_tokens: how many of the tokens are query words.
        query_of_token: ``(n_query_tokens,)`` query of each query token.
        unique_docs: ``(U, Ld)`` the distinct candidate texts.
        doc_index: ``(Q, C)`` row of ``unique_docs`` holding candidate ``(q, c)``.
        doc_of_token: ``(n_tokens - n_query_tokens,)`` distinct document of each document
            token.
        attending, attended: ``(A,)`` token pairs of the same text (self-attention edges,
            each token with itself included): ``attending`` attends to ``attended``.
        pair_query, pair_doc: ``(P,)`` the K-NRM pairs: a query token and a document
            token of one of the query's candidates (token numbers).
        pair_slot: ``(P,)`` the pair's (query word, candidate) slot, ``t * C + c`` for
            query token ``t`` and candidate ``c`` of its query.
        slot_cell: ``(n_query_tokens * C,)`` the (query, candidate) cell ``q * C + c`` of
            every slot.
        shape: ``(Q, C)``.
    """

    ids: torch.Tensor
    n_query_tokens: int
    query_of_token: torch.Tensor
    unique_docs: torch.Tensor
    doc_index: torch.Tensor
    doc_of_token: torch.Tensor
    attending: torch.Tensor
    attended: torch.Tensor
    pair_query: torch.Tensor
    pair_doc: torch.Tensor
    pair_slot: torch.Tensor
    slot_cell: torch.Tensor
    shape: tuple[int, int]

    @classmethod
    def build(cls, query: torch.Tensor, docs: torch.Tensor) -> PackedBatch:
        """Pack ``query`` ``(Q, Lq)`` and ``docs`` ``(Q, C, Ld)`` (int64 ids, 0 = padding)."""
        n_queries, query_len = query.shape
        _, width, doc_len = docs.shape
        unique_docs, doc_index = _unique_rows(docs.reshape(n_queries * width, doc_len))
        doc_index = doc_index.reshape(n_queries, width)
        query_words = query != PAD_ID
        doc_words = unique_docs != PAD_ID
        query_pos = query_words.reshape(-1).nonzero().squeeze(1)
        doc_pos = doc_words.reshape(-1).nonzero().squeeze(1)
        n_query_tokens = int(query_pos.shape[0])
        ids = torch.cat([query.reshape(-1)[query_pos], unique_docs.reshape(-1)[doc_pos]])
        query_token = torch.zeros(query.numel(), dtype=torch.int64, device=query.device)
        query_token[query_pos] = torch.arange(n_query_tokens, device=query.device)
        doc_token = torch.zeros(unique_docs.numel(), dtype=torch.int64, device=query.device)
        doc_token[doc_pos] = torch.arange(
            n_query_tokens, n_query_tokens + doc_pos.shape[0], device=query.device
        )

        def text_pairs(words: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, ...]:
            edge = (words[:, :, None] & words[:, None, :]).nonzero()  # (A, 3): text, i, j
            row = edge[:, 0] * words.shape[1]
            return token[row + edge[:, 1]], token[row + edge[:, 2]]

        q_from, q_to = text_pairs(query_words, query_token)
        d_from, d_to = text_pairs(doc_words, doc_token)
        candidate_words = doc_words.index_select(0, doc_index.reshape(-1))
        pairs = (
            query_words[:, None, :, None] & candidate_words.reshape(n_queries, width, 1, doc_len)
        ).nonzero()  # (P, 4): q, c, i, j
        cell = pairs[:, 0] * width + pairs[:, 1]
        pair_query = query_token[pairs[:, 0] * query_len + pairs[:, 2]]
        query_of_token = torch.div(query_pos, query_len, rounding_mode="floor")
        candidates = torch.arange(width, device=query.device)
        return cls(
            ids=ids,
            n_query_tokens=n_query_tokens,
            query_of_token=query_of_token,
            unique_docs=unique_docs,
            doc_index=doc_index,
            doc_of_token=torch.div(doc_pos, doc_len, rounding_mode="floor"),
            attending=torch.cat([q_from, d_from]),
            attended=torch.cat([q_to, d_to]),
            pair_query=pair_query,
            pair_doc=doc_token[doc_index.reshape(-1)[cell] * doc_len + pairs[:, 3]],
            pair_slot=pair_query * width + pairs[:, 1],
            slot_cell=(query_of_token[:, None] * width + candidates).reshape(-1),
            shape=(n_queries, width),
        )
