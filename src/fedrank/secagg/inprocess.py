"""Run one secure-aggregation session with every client in this process: the message loop
of :mod:`.protocol`, with dropouts at chosen rounds, timing and byte counts per round.

This is the reference driver for tests and the benchmark (``benchmarks/bench_secagg.py``);
a deployment moves the same messages over HTTP instead.
"""

from __future__ import annotations

import secrets as _secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from fedrank.errors import ConfigError
from fedrank.secagg.client import SecAggClient
from fedrank.secagg.messages import AggregationResult
from fedrank.secagg.protocol import SecAggParams
from fedrank.secagg.proxy import MaskedInputProxy
from fedrank.secagg.server import SecAggServer

#: The rounds at which a client can drop out (it sends nothing from that round on).
ROUNDS = ("advertise_keys", "share_keys", "check_shares", "masked_input", "unmasking")

RandBits = Callable[[int], int]

#: Compute time is CPU time of this process, not wall time: on a loaded machine a client's
#: step would otherwise be charged for the time other processes ran.
_clock = time.process_time


@dataclass
class SessionTrace:
    """Costs of a session, per round (keys of :data:`ROUNDS`).

    Times are CPU seconds of this process (:func:`time.process_time`).

    Attributes:
        client_seconds: compute time of each client that sent a message in the round.
        server_seconds: the server's compute time in the round (receiving and closing; for
            ``unmasking``, the reconstruction and mask removal of :meth:`SecAggServer.finish`).
        upload_bytes: payload bytes each client sent in the round.
        download_bytes: payload bytes the server sent each client at the end of the round.
    """

    client_seconds: dict[str, list[float]] = field(default_factory=lambda: _per_round(list))
    server_seconds: dict[str, float] = field(default_factory=lambda: _per_round(float))
    upload_bytes: dict[str, list[int]] = field(default_factory=lambda: _per_round(list))
    download_bytes: dict[str, list[int]] = field(default_factory=lambda: _per_round(list))

    def summary(self) -> dict[str, dict[str, float]]:
        """Per round: mean and max client seconds, server seconds, mean bytes up and down."""
        out = {}
        for name in ROUNDS:
            secs, up, down = (
                self.client_seconds[name],
                self.upload_bytes[name],
                self.download_bytes[name],
            )
            out[name] = {
                "clients": len(secs),
                "client_seconds_mean": float(np.mean(secs)) if secs else 0.0,
                "client_seconds_max": float(np.max(secs)) if secs else 0.0,
                "server_seconds": self.server_seconds[name],
                "upload_bytes_per_client": float(np.mean(up)) if up else 0.0,
                "download_bytes_per_client": float(np.mean(down)) if down else 0.0,
            }
        return out


def _per_round(factory: Callable[[], object]) -> dict:
    return {name: factory() for name in ROUNDS}


def run_session(
    params: SecAggParams,
    inputs: Mapping[int, np.ndarray],
    *,
    drop_before: Mapping[int, str] | None = None,
    randbits: RandBits = _secrets.randbits,
    progress: Callable[[str, int, int], None] | None = None,
    proxies: Mapping[int, int] | None = None,
) -> tuple[AggregationResult, SessionTrace]:
    """One session of :class:`SecAggClient` objects (one per key of ``inputs``) and a
    :class:`SecAggServer`.

    Args:
        params: the session's parameters.
        inputs: client id -> field vector of length ``params.dimension``.
        drop_before: client id -> the round (one of :data:`ROUNDS`) from which that client
            sends nothing; e.g. ``"unmasking"`` drops it after its masked input was sent.
        randbits: passed to every client (keep the default outside tests).
        progress: called as ``progress(round, done, total)`` after each client's step.
        proxies: client id -> proxy id: those clients' masked inputs reach the server as
            one :class:`~fedrank.secagg.messages.MaskedSum` per proxy
            (:class:`~fedrank.secagg.proxy.MaskedInputProxy`); the others directly.

    Returns:
        The server's result and the costs.

    Raises:
        RoundAbortedError: fewer than ``params.threshold`` clients remain at some round.
    """
    drop_before = dict(drop_before or {})
    bad = {u: r for u, r in drop_before.items() if r not in ROUNDS or u not in inputs}
    if bad:
        raise ConfigError(f"drop_before must map input ids to one of {ROUNDS}, got {bad}")

    def active(u: int, round_name: str) -> bool:
        stop = drop_before.get(u)
        return stop is None or ROUNDS.index(round_name) < ROUNDS.index(stop)

    trace = SessionTrace()
    server = SecAggServer(params)
    clients = {u: SecAggClient(u, params, randbits=randbits) for u in sorted(inputs)}

    def client_step(name: str, ids: list[int], call: Callable[[int], object]) -> list[object]:
        messages = []
        for i, u in enumerate(ids, start=1):
            start = _clock()
            message = call(u)
            trace.client_seconds[name].append(_clock() - start)
            trace.upload_bytes[name].append(message.nbytes())  # type: ignore[attr-defined]
            messages.append(message)
            if progress is not None:
                progress(name, i, len(ids))
        return messages

    def deliver(name: str, receive: Callable[[object], None], messages: list[object]):
        start = _clock()
        for message in messages:
            receive(message)
        trace.server_seconds[name] += _clock() - start

    # Round 0: AdvertiseKeys
    ids = [u for u in clients if active(u, "advertise_keys")]
    sent = client_step("advertise_keys", ids, lambda u: clients[u].advertise_keys())
    deliver("advertise_keys", server.receive_advertise, sent)
    start = _clock()
    directory = server.close_advertise()
    trace.server_seconds["advertise_keys"] += _clock() - start
    trace.download_bytes["advertise_keys"] = [directory.nbytes()] * len(ids)

    # Round 1: ShareKeys
    ids = [u for u in ids if active(u, "share_keys")]
    sent = client_step("share_keys", ids, lambda u: clients[u].share_keys(directory))
    deliver("share_keys", server.receive_share_keys, sent)
    del sent
    start = _clock()
    forwarded = server.close_share_keys()
    trace.server_seconds["share_keys"] += _clock() - start
    trace.download_bytes["share_keys"] = [f.nbytes() for f in forwarded.values()]

    # Round 1b: ShareCheck
    ids = [u for u in ids if active(u, "check_shares")]
    sent = client_step("check_shares", ids, lambda u: clients[u].check_shares(forwarded.pop(u)))
    forwarded.clear()
    deliver("check_shares", server.receive_share_check, sent)
    start = _clock()
    masking = server.close_share_check()
    trace.server_seconds["check_shares"] += _clock() - start
    trace.download_bytes["check_shares"] = [masking.nbytes()] * len(masking.members)

    # Round 2: MaskedInputCollection
    ids = [u for u in ids if active(u, "masked_input") and u in masking.members]
    sent = client_step("masked_input", ids, lambda u: clients[u].masked_input(masking, inputs[u]))
    via = dict(proxies or {})
    relays = {p: MaskedInputProxy(params.dimension) for p in sorted(set(via.values()))}
    direct = []
    for message in sent:
        proxy = via.get(message.sender)  # type: ignore[attr-defined]
        if proxy is None:
            direct.append(message)
        else:
            relays[proxy].receive(message)  # type: ignore[arg-type]
    deliver("masked_input", server.receive_masked_input, direct)
    sums = [relay.forward() for relay in relays.values() if relay.senders]
    deliver("masked_input", server.receive_masked_sum, sums)
    start = _clock()
    request = server.close_masked_input()
    trace.server_seconds["masked_input"] += _clock() - start
    trace.download_bytes["masked_input"] = [request.nbytes()] * len(ids)

    # Round 4: Unmasking
    ids = [u for u in ids if active(u, "unmasking")]
    sent = client_step("unmasking", ids, lambda u: clients[u].unmask(request))
    deliver("unmasking", server.receive_unmasking, sent)
    start = _clock()
    result = server.finish()
    trace.server_seconds["unmasking"] += _clock() - start
    return result, trace
