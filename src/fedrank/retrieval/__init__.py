"""First-stage retrieval: BM25 over the document pool and the candidate documents of each
query, from which the ranking samples of the personalized search model are built (FedPS
Sec. 4.1)."""
