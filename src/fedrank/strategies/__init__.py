"""What every system's server half shares: the :class:`~fedrank.strategies.base.Strategy`
base (aggregator, optimizer chain, constraints, ``server_step``) and the wrappers that
change a strategy's aggregation the same way for every system of vector updates -- central
DP (:mod:`~fedrank.strategies.dp`) and distributed DP emulated in one process
(:mod:`~fedrank.strategies.distributed_dp`). Each system's own strategy lives in its
folder, ``fedrank/systems/<name>/strategy.py``."""
