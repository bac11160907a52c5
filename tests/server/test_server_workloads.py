"""The workloads' payload parsing in-process: every check raises ``PayloadError`` with the
reason a client sees; the binary forms (ES 8/12 bytes via the codec, frecency 2-bit signs)
parse to the same values as their JSON forms; accumulating equals the aggregators' own
arithmetic; and no accepted payload can make the close fail."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrank.core.codec import encode_es_message, pack_signs
from fedrank.core.message import ESMessage, MessageBatch
from fedrank.errors import ConfigError
from fedrank.server.config import ServerConfig, load_config
from fedrank.server.workloads import Workload, make_workload
from fedrank.systems.fedavg.wire import FedAvgWire
from fedrank.systems.foltr_es.wire import FoltrEsWire
from fedrank.systems.frecency.wire import FrecencyWire
from fedrank.systems.wire import MAX_ENTRY, PayloadError


def _config(tmp_path: Path, text: str) -> ServerConfig:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(path)


@pytest.fixture
def frecency_full() -> Workload:
    workload = make_workload(load_config(workload="frecency"))
    assert isinstance(workload.wire, FrecencyWire)
    return workload


@pytest.fixture
def frecency_sign(tmp_path: Path) -> Workload:
    workload = make_workload(_config(tmp_path, '[frecency]\nmessage = "sign"\n'))
    assert isinstance(workload.wire, FrecencyWire)
    return workload


@pytest.fixture
def es() -> Workload:
    workload = make_workload(load_config(workload="foltr-es"))
    assert isinstance(workload.wire, FoltrEsWire)
    return workload


@pytest.fixture
def es_plain(tmp_path: Path) -> Workload:
    text = '[server]\nworkload = "foltr-es"\n[foltr_es]\nantithetic = false\n'
    workload = make_workload(_config(tmp_path, text))
    assert isinstance(workload.wire, FoltrEsWire)
    return workload


@pytest.fixture
def fedavg(tmp_path: Path) -> Workload:
    workload = make_workload(
        _config(tmp_path, '[server]\nworkload = "fedavg"\n[fedavg]\ndim = 4\n')
    )
    assert isinstance(workload.wire, FedAvgWire)
    return workload


def test_dimensions_and_initial_models(
    frecency_full: Workload, es: Workload, fedavg: Workload, tmp_path: Path
) -> None:
    assert frecency_full.dim == 22 == len(frecency_full.parameter_names())
    assert frecency_full.initial_params()[:5].tolist() == [4.0, 14.0, 31.0, 90.0, 100.0]
    assert es.dim == 46 and not es.initial_params().any() and es.parameter_names() is None
    assert fedavg.dim == 4 and not fedavg.initial_params().any()
    modern = make_workload(_config(tmp_path, '[frecency]\nmodel = "modern"\n'))
    assert modern.dim == 5
    two_layer = make_workload(
        _config(tmp_path, '[server]\nworkload = "foltr-es"\n[foltr_es]\nranker = "two-layer"\n')
    )
    assert two_layer.dim > 46


def test_frecency_full_gradients(frecency_full: Workload) -> None:
    parsed = frecency_full.wire.parse({"gradient": list(range(22)), "n": 3})
    assert parsed.vector.tolist() == list(map(float, range(22))) and parsed.weight == 3.0
    assert frecency_full.wire.parse({"gradient": [0.5] * 22}).weight == 1.0  # n defaults to 1
    for payload, reason in [
        ({"gradient": [0.0] * 21}, "gradient must have 22 entries, got 21"),
        ({"gradient": "x"}, "gradient must be a list of 22 numbers"),
        ({"gradient": [0.0] * 21 + [True]}, "gradient entries must be numbers"),
        ({"gradient": [0.0] * 21 + [float("nan")]}, "gradient entries must be finite"),
        ({"gradient": [0.0] * 21 + [float("-inf")]}, "gradient entries must be finite"),
        ({"gradient": [0.0] * 21 + [MAX_ENTRY * 1.01]}, "magnitude <= 1e+100"),
        ({"gradient": [0.0] * 22, "n": 0}, "n must be an integer in 1..100 ([server] max_n)"),
        ({"gradient": [0.0] * 22, "n": 101}, "n must be an integer in 1..100"),
        ({"gradient": [0.0] * 22, "n": 10**9}, "n must be an integer in 1..100"),
        ({"gradient": [0.0] * 22, "n": True}, "n must be an integer in 1..100"),
        ({"gradient": [0.0] * 22, "signs": "AA"}, "unknown payload field(s) ['signs']"),
        ({"n": 1}, "payload lacks ['gradient']"),
    ]:
        with pytest.raises(PayloadError) as err:
            frecency_full.wire.parse(payload)
        assert reason in str(err.value)
    with pytest.raises(PayloadError, match="sign bits"):
        frecency_full.wire.parse_binary(pack_signs(np.ones(22)))


def test_frecency_signs_json_and_binary_agree(frecency_sign: Workload) -> None:
    signs = np.array([1, -1, 0] * 7 + [1], dtype=float)
    raw = pack_signs(signs)
    assert len(raw) == 6
    from_binary = frecency_sign.wire.parse_binary(raw)
    from_json = frecency_sign.wire.parse({"signs": base64.b64encode(raw).decode(), "n": 2})
    np.testing.assert_array_equal(from_binary.vector, signs)
    np.testing.assert_array_equal(from_json.vector, signs)
    assert (from_binary.weight, from_json.weight) == (1.0, 2.0)
    for payload, reason in [
        ({"signs": "@@@@"}, "not valid base64"),
        ({"signs": 3}, "base64 string"),
        ({"signs": base64.b64encode(raw[:5]).decode()}, "22 signs take 6 bytes"),
        ({"gradient": [0.0] * 22}, "unknown payload field(s) ['gradient']"),
        ({}, "payload lacks ['signs']"),
    ]:
        with pytest.raises(PayloadError) as err:
            frecency_sign.wire.parse(payload)
        assert reason in str(err.value)
    with pytest.raises(PayloadError, match="padding bits"):
        frecency_sign.wire.parse_binary(raw[:5] + bytes([raw[5] | 0xF0]))


def test_es_binary_forms_agree_with_json(es: Workload, es_plain: Workload) -> None:
    body = encode_es_message(ESMessage(77, 0.1, 0.7))
    assert len(body) == 12
    parsed = es.wire.parse_binary(body)
    assert parsed.seed == 77
    assert parsed.metric == float(np.float32(0.1)) and parsed.antithetic == float(np.float32(0.7))
    json_form = es.wire.parse({"seed": 77, "metric": parsed.metric, "antithetic_metric": 0.7})
    assert json_form.metric == parsed.metric
    plain = es_plain.wire.parse_binary(encode_es_message(ESMessage(5, 0.25)))
    assert (plain.seed, plain.metric, plain.antithetic) == (5, 0.25, None)
    with pytest.raises(PayloadError, match="an ES message here is 12 bytes, got 8"):
        es.wire.parse_binary(encode_es_message(ESMessage(5, 0.25)))
    with pytest.raises(PayloadError, match="an ES message here is 8 bytes, got 12"):
        es_plain.wire.parse_binary(body)
    nan = b"\x01\x00\x00\x00\x00\x00\xc0\x7f"
    with pytest.raises(PayloadError, match="not finite"):
        es_plain.wire.parse_binary(nan)
    with pytest.raises(PayloadError, match=r"mean MaxRR, in \[0, 1\]"):
        es_plain.wire.parse_binary(encode_es_message(ESMessage(5, 3.0)))
    for payload, reason in [
        ({"seed": 2**32, "metric": 0.5, "antithetic_metric": 0.5}, "seed must be an integer"),
        ({"seed": -1, "metric": 0.5, "antithetic_metric": 0.5}, "seed must be an integer"),
        ({"seed": 1, "metric": "0.5", "antithetic_metric": 0.5}, "metric must be a finite"),
        ({"seed": 1, "metric": float("nan"), "antithetic_metric": 0.5}, "must be a finite"),
        ({"seed": 1, "metric": 0.5}, "payload lacks ['antithetic_metric']"),
        ({"seed": 1, "metric": 0.5, "antithetic_metric": 0.5, "x": 1}, "unknown payload"),
    ]:
        with pytest.raises(PayloadError) as err:
            es.wire.parse(payload)
        assert reason in str(err.value)
    with pytest.raises(PayloadError, match="does not use antithetic variates"):
        es_plain.wire.parse({"seed": 1, "metric": 0.5, "antithetic_metric": 0.5})


def test_fedavg_payloads(fedavg: Workload) -> None:
    parsed = fedavg.wire.parse({"delta": [1, 2.5, -3, 0], "n": 7})
    assert parsed.vector.tolist() == [1.0, 2.5, -3.0, 0.0] and parsed.weight == 7.0
    with pytest.raises(PayloadError, match=r"payload lacks \['n'\]"):
        fedavg.wire.parse({"delta": [0.0] * 4})
    with pytest.raises(PayloadError, match="delta must have 4 entries, got 5"):
        fedavg.wire.parse({"delta": [0.0] * 5, "n": 1})
    with pytest.raises(PayloadError, match="no binary update format"):
        fedavg.wire.parse_binary(b"\x00" * 4)


def test_accumulate_matches_the_aggregators(
    frecency_full: Workload, es: Workload, fedavg: Workload
) -> None:
    rng = np.random.default_rng(1)
    for workload, payloads in [
        (frecency_full, [{"gradient": rng.normal(size=22).tolist(), "n": i + 1} for i in range(6)]),
        (fedavg, [{"delta": rng.normal(size=4).tolist(), "n": i + 1} for i in range(6)]),
        (
            es,
            [{"seed": i, "metric": 0.1 * i, "antithetic_metric": 0.05 * i} for i in range(6)],
        ),
    ]:
        aggregator = workload.strategy.aggregator
        parsed = [workload.wire.parse(p) for p in payloads]
        together = workload.strategy.accumulate(aggregator.zero(), workload.wire.columns(parsed))
        one_by_one = aggregator.zero()
        for p in parsed:
            one_by_one = workload.strategy.accumulate(one_by_one, workload.wire.columns([p]))
        np.testing.assert_allclose(
            aggregator.finalize(together), aggregator.finalize(one_by_one), rtol=1e-12, atol=1e-15
        )
        assert together.count == 6


def test_the_step_goes_the_documented_way(fedavg: Workload, es: Workload) -> None:
    """FedAvg adds eta_s times the mean delta; FOLtR-ES moves along the ES estimate (it
    points uphill of MaxRR, which is maximized)."""
    fa = fedavg.strategy
    deltas = fa.aggregator.accumulate_batch(
        fa.aggregator.zero(),
        MessageBatch.of_vectors(np.array([[1.0, -2.0, 0.5, 0.0]]), np.array([3.0])),
    )
    params = fa.initial_params()
    step = fa.server_step(deltas, params, fa.init(params))
    np.testing.assert_allclose(
        step.step, fedavg.strategy.config.server_learning_rate * step.aggregate
    )
    np.testing.assert_allclose(step.params, params + step.step)
    strategy = es.strategy
    params = strategy.initial_params()
    step, _ = strategy.optimizer.update(np.ones(es.dim), strategy.init(params), params)
    assert np.all(step > 0)


def test_extreme_accepted_payloads_still_close() -> None:
    """The largest accepted entries with the largest weight any configuration allows
    (``max_n = 1e9``): the aggregate and the step stay finite (one such message once made
    every later close of its iteration fail)."""
    frecency_full = make_workload(load_config(workload="frecency", max_n=10**9))
    fedavg = make_workload(load_config(workload="fedavg", max_n=10**9))
    for workload, key in ((fedavg, "delta"), (frecency_full, "gradient")):
        strategy = workload.strategy
        payloads = [
            {key: [MAX_ENTRY] * workload.dim, "n": 10**9},
            {key: [-MAX_ENTRY] * workload.dim, "n": 10**9},
            {key: [MAX_ENTRY] * workload.dim, "n": 10**9},
        ]
        state = workload.strategy.accumulate(
            strategy.aggregator.zero(),
            workload.wire.columns([workload.wire.parse(p) for p in payloads]),
        )
        params = workload.initial_params()
        step = strategy.server_step(state, params, strategy.init(params))
        assert np.all(np.isfinite(step.aggregate)) and np.all(np.isfinite(step.params))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # the workloads are stateless
@given(data=st.data())
def test_the_batch_fast_path_agrees_with_parsing_one_by_one(
    data: st.DataObject,
    frecency_full: Workload,
    fedavg: Workload,
    es: Workload,
) -> None:
    """``parse_batch`` (the batch endpoint's fast path) accepts exactly what ``parse``
    accepts, with the same columns."""
    workload = data.draw(st.sampled_from([frecency_full, fedavg, es]))
    number = st.one_of(
        st.floats(-2.0, 2.0),
        st.integers(-3, 3),
        st.booleans(),
        st.none(),
        st.text(max_size=2),
        st.just(float("nan")),
        st.just(1e200),
    )
    count = st.one_of(st.integers(-1, 5), st.booleans(), st.floats(0, 3))
    if workload is es:
        payload = st.fixed_dictionaries(
            {
                "seed": st.one_of(st.integers(-1, 2**32), number),
                "metric": number,
                "antithetic_metric": number,
            },
            optional={"extra": number},
        )
    else:
        key = "gradient" if workload is frecency_full else "delta"
        vector = st.lists(number, min_size=workload.dim - 1, max_size=workload.dim + 1)
        payload = st.fixed_dictionaries({key: vector, "n": count}, optional={"extra": number})
    payloads = data.draw(st.lists(payload, min_size=1, max_size=4))
    try:
        single = workload.wire.columns([workload.wire.parse(p) for p in payloads])
    except PayloadError:
        with pytest.raises(PayloadError):
            workload.wire.parse_batch(payloads)
        return
    batch = workload.wire.parse_batch(payloads)
    for field in ("vector", "weight", "seed", "metric", "antithetic"):
        a, b = getattr(single, field), getattr(batch, field)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(
                np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            )


def test_the_weight_n_is_bounded_by_the_configuration() -> None:
    """Issue 15, F5: one ``{"gradient": [1.0] * 22, "n": 1e9}`` among 100 honest updates
    flipped 15 of 22 weights. ``n`` is now at most ``[server] max_n`` (the workload's
    default when 0), in single messages and batches."""
    assert make_workload(load_config(workload="frecency")).wire.max_n == 100
    assert make_workload(load_config(workload="fedavg")).wire.max_n == 100_000
    workload = make_workload(load_config(workload="frecency", max_n=5))
    assert workload.wire.parse({"gradient": [1.0] * 22, "n": 5}).weight == 5.0
    with pytest.raises(PayloadError, match=r"1\.\.5 \(\[server\] max_n\)"):
        workload.wire.parse({"gradient": [1.0] * 22, "n": 6})
    with pytest.raises(PayloadError, match=r"n must lie in 1\.\.5"):
        workload.wire.parse_batch(
            [{"gradient": [1.0] * 22, "n": 1}, {"gradient": [1.0] * 22, "n": 6}]
        )
    bound = re.escape("max_n (0: the workload's default) must be in 0..1e9")
    with pytest.raises(ConfigError, match=bound):
        load_config(workload="frecency", max_n=-1)


def _f5_aggregate(tmp_path: Path, frecency: str) -> np.ndarray:
    """The F5 probe at the workload level: 100 honest frecency gradients whose mean points
    along ``+direction`` and one ``-1e6 * direction`` with the largest allowed ``n``,
    parsed as one batch and aggregated by the frecency strategy configured by the
    ``[frecency]`` lines ``frecency`` (on the plain mean, z = 0, so that no gate hides who
    wins)."""
    text = f"[frecency]\nsignificance_z = 0.0\n{frecency}"
    workload = make_workload(_config(tmp_path, text))
    rng = np.random.default_rng(5)
    direction = np.where(rng.random(22) < 0.5, -1.0, 1.0)
    honest = direction + rng.normal(0.0, 1.0, size=(100, 22))
    payloads = [{"gradient": g.tolist(), "n": int(rng.integers(1, 5))} for g in honest]
    payloads.append({"gradient": (-1e6 * direction).tolist(), "n": workload.wire.max_n})
    batch = workload.wire.parse_batch(payloads)
    aggregator = workload.strategy.aggregator
    state = aggregator.accumulate_batch(aggregator.zero(), batch)
    return np.sign(aggregator.finalize(state)) * direction  # +1 where the honest sign won


def test_a_norm_bound_keeps_one_client_from_steering_the_aggregate(tmp_path: Path) -> None:
    """Issue 15, F5: with n bounded but no norm bound one huge gradient still decides every
    weight; with ``[frecency] norm_bound`` (here below the honest norms, about 6.6), fixed
    or adaptive, or with the median, it decides none."""
    assert np.all(_f5_aggregate(tmp_path, "") == -1)  # the attacker wins all 22 weights
    assert np.all(_f5_aggregate(tmp_path, "norm_bound = 5.0\n") == 1)  # the honest win
    adaptive = "norm_bound = 5.0\nnorm_quantile = 0.5\n"
    assert np.all(_f5_aggregate(tmp_path, adaptive) == 1)
    assert np.all(_f5_aggregate(tmp_path, 'aggregator = "median"\n') == 1)
    # FedAvg: the stored payload stays as sent; the aggregator bounds it when folding it in.
    workload = make_workload(_config(tmp_path, '[server]\nworkload = "fedavg"\n'
                                     "[fedavg]\nnorm_bound = 1.0\n"))  # fmt: skip
    batch = workload.wire.parse_batch([{"delta": [3.0, 4.0] + [0.0] * 98, "n": 1}])
    np.testing.assert_array_equal(batch.vector[0, :2], [3.0, 4.0])
    strategy = workload.strategy
    state = strategy.accumulate(strategy.zero(), batch)
    np.testing.assert_allclose(strategy.aggregator.finalize(state)[:2], [0.6, 0.8])


def test_max_update_norm_moved_to_the_workload_section(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"max_update_norm is now norm_bound.*\[frecency\]"):
        _config(tmp_path, "[server]\nmax_update_norm = 5.0\n")
