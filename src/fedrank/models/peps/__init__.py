"""The FedPS personalized search model: a compact PEPS ranker (FedPS Sec. 3.3.1, Eq. 1;
PEPS, Yao et al. 2020 [47]) and its K-NRM baseline (Xiong et al. 2017 [46]).

Scoring a candidate document ``d`` for a query ``q`` of one user (FedPS Eq. 1):

    F(q, d) = MLP(F^PW, F^PCW, F^GW, F^GCW, F^PQ, F^r)

* **Word embedding layer.** A *global* embedding matrix ``(V, dim)`` (row 0 = padding, kept
  at zero), initialized from word2vec vectors trained on the document collection and shared
  by all users; and a *personal* matrix per user
  (:class:`~fedrank.models.peps.layers.PersonalEmbeddings`) that holds rows only for the
  words that user has used, initialized from the global vectors of those words and trained
  on that user's log only.
* **Representations.** Personal word vectors ``PW`` and global word vectors ``GW`` of the
  query and document words; contextual vectors ``PCW`` / ``GCW`` from one multi-head
  self-attention layer (shared by the personal and the global channel, and by queries and
  documents) with a residual connection, ``x + MHA(x)``, over the words of the query and,
  separately, of each document.
* **Matching.** K-NRM on each of the four representations (``F^PW``, ``F^PCW``, ``F^GW``,
  ``F^GCW``), each with its own linear layer from the 11 kernel features to a score.
  ``F^PQ`` is the cosine between a personalized query vector (attention-pooled personal
  query word vectors through a linear layer) and the mean global word vector of the
  document. ``F^r`` is a small MLP on the click-history features. A final MLP (one tanh
  hidden layer) combines the six scores.

The **K-NRM baseline** (FedPS Table 3, "KNRM") is ``PEPSConfig(..., personalized=False)``:
global embeddings and one K-NRM on the global word vectors only; the score is its linear
layer's output; no attention, no features, no personal module.

The modules:

* :mod:`fedrank.models.peps.ranker`: :class:`~fedrank.models.peps.ranker.PEPSConfig`,
  :class:`~fedrank.models.peps.ranker.PEPSRanker` (scoring, the personal module, the shared
  state and its flat-parameter vector);
* :mod:`fedrank.models.peps.layers`: the building blocks (personal embeddings, K-NRM kernel
  pooling, self-attention, the click features' encoding);
* :mod:`fedrank.models.peps.batch`: the packed form of a batch the model computes on.
"""
