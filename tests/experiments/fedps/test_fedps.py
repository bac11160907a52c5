"""FedPS end to end on a small real slice of the AOL log: every mode runs, what leaves a
client, what the server can reach, stragglers, determinism."""

from __future__ import annotations

import ast
import gc
import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from fedrank.cli import main
from fedrank.core.message import Message, MessageBatch
from fedrank.errors import ConfigError
from fedrank.estimators.local_sgd import FedPSClient, UploadPolicy, UserWorkspace
from fedrank.experiments.fedps import central
from fedrank.experiments.fedps import run as fedps_module
from fedrank.experiments.fedps import server as fedps_server
from fedrank.experiments.fedps.data import FedPSData
from fedrank.experiments.fedps.run import FedPSResult, run_fedps, run_seeds
from fedrank.experiments.fedps.server import FedPSServer
from fedrank.experiments.fedps.settings import MODES, RULE_MODES, FedPSSettings
from fedrank.experiments.fedps.training import Evaluator, stream_seeds
from fedrank.models.peps.layers import PersonalEmbeddings
from fedrank.models.peps.ranker import GLOBAL_EMBEDDING, PEPSRanker
from fedrank.privacy import kl_settings
from fedrank.retrieval.candidates import RankingSamples, UserData

FAST = {
    "rounds": 2,
    "clients_per_step": 4,
    "clients_per_proxy_step": 2,
    "n_topics": 5,
    "clients_per_proxy": 4,
    "proxies_per_group": 2,
    "warmup_rounds": 0,  # the click-feature warm-up has its own tests
}


def _settings(mode: str, **kw: object) -> FedPSSettings:
    return FedPSSettings(mode=mode, **{**FAST, **kw})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def every_mode(small: FedPSData) -> dict[str, FedPSResult]:
    return {mode: run_fedps(small, _settings(mode, seed=1)) for mode in MODES}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_runs_on_real_users(every_mode: dict[str, FedPSResult], mode: str) -> None:
    result = every_mode[mode]
    out = result.to_json()
    json.dumps(out)  # serializable
    for metric in ("MAP", "MRR", "P@1"):
        assert 0.0 < out[metric] <= 1.0
    assert len(out["kl"]) == len(kl_settings.default_grid())
    assert out["kl_divergence"] == out["kl"][kl_settings.PAPER_SETTING.key()] >= 0.0
    assert (out["kl_divergence"] == 0.0) == (
        mode not in ("flat", "proxy", "coverquery", "groupuser")
    )
    assert result.per_query is not None and result.per_query.shape[1] == 3
    if mode in (*RULE_MODES, "gbdt"):
        assert out["best_round"] == 0 and out["curve"] == []
        return
    # evaluated every quarter round, reported at the best validation MAP
    rounds = np.array([p["round"] for p in out["curve"]])
    assert np.all(np.diff(rounds) > 0) and 0 < rounds[-1] <= 2
    per_round = np.bincount(np.ceil(rounds).astype(int))
    assert per_round.max() <= 4 and per_round[1] >= min(4, out["steps"] // 2)
    if mode != "flat" and mode != "proxy":  # many minibatches: close to every quarter epoch
        assert np.all(np.abs(rounds * 4 - np.round(rounds * 4)) < 0.2)
    best = max(out["curve"], key=lambda p: p["valid_MAP"])
    assert out["best_round"] == best["round"]
    assert best["test_MAP"] == pytest.approx(out["MAP"])


def test_every_mode_ranks_the_same_test_queries(every_mode: dict[str, FedPSResult]) -> None:
    """CoverQuery and GroupUser learn from server-side logs but are scored on the lists
    every other mode uses: the same query events, hence directly comparable."""
    reference = np.sort(every_mode["original"].event_ids)
    assert reference.size > 20
    for mode, result in every_mode.items():
        assert np.array_equal(np.sort(result.event_ids), reference), mode


def test_server_side_logs_rank_exactly_the_shared_lists(small: FedPSData) -> None:
    from fedrank.experiments.fedps.baselines import group_user_logs

    groups = np.arange(len(small.users)) // 4
    rebuilt = fedps_module._rebuild(small, group_user_logs(small.corpus.users, groups))

    def lists(users: list[UserData]) -> dict[int, tuple]:
        out = {}
        for u in users:
            for split in ("train", "valid", "test"):
                s = u.samples(split)
                for i, e in enumerate(s.event_ids.tolist()):
                    out[e] = (split, s.candidates[i][s.mask[i]].tolist(), s.labels[i].sum())
        return out

    assert lists(rebuilt) == lists(list(small.users))


def test_trained_personalized_model_beats_bm25(small: FedPSData) -> None:
    original = run_fedps(small, _settings("original")).metrics["MAP"]
    central = run_fedps(
        small, _settings("central", rounds=2, learning_rate=3e-3, batch_size=16)
    ).metrics["MAP"]
    assert central > original + 0.02


def test_every_outgoing_message_holds_only_the_shared_update(small: FedPSData) -> None:
    """Personal embeddings never leave the client; the global-embedding rows an update
    changes are words of the client's own training data; by default the message carries
    the update and its count, no training loss."""
    settings = _settings("flat", rounds=1, cover_queries=0, straggler_ratio=0.0)
    messages: list[tuple[int, Message]] = []
    run_fedps(small, settings, observer=lambda c, m: messages.append((c, m)))
    assert sorted(c for c, _ in messages) == list(range(len(small.users)))

    model = central._new_model(small, True, 0, _settings("flat"))
    emb = model.global_embedding_slice()
    dim = model.config.dim
    for c, message in messages:
        assert type(message) is Message
        assert message.metrics == {}
        assert message.n == small.users[c].train.n_queries
        assert message.update.dtype == np.float32 and message.update.shape == (model.layout.size,)
        # no personal vector appears in the update
        user = small.users[c]
        personal = PersonalEmbeddings.from_global(user.vocab_ids, small.word_vectors)
        flat = message.update
        for row in personal.weight.detach().numpy()[:50]:
            windows = np.lib.stride_tricks.sliding_window_view(flat, dim)[::dim]
            assert not np.any(np.all(windows == row, axis=1))
        changed = np.flatnonzero(np.any(flat[emb].reshape(-1, dim) != 0, axis=1))
        s = user.train
        words = np.union1d(s.query.ravel(), small.doc_tokens[s.candidates[s.mask]].ravel())
        assert np.isin(changed, words).all()
        assert changed.size > 0
    reported: list[Message] = []
    run_fedps(
        small,
        _settings("flat", rounds=1, cover_queries=0, client_metrics=True),
        observer=lambda c, m: reported.append(m),
    )
    assert reported and all(set(m.metrics) == {"train_loss"} for m in reported)


@pytest.mark.parametrize("case", ["frequent", "frozen"])
def test_upload_cases_restrict_the_global_embedding_rows(small: FedPSData, case: str) -> None:
    settings = _settings("flat", rounds=1, cover_queries=0, upload=case, frequent_words=30)
    messages: list[Message] = []
    run_fedps(small, settings, observer=lambda c, m: messages.append(m))
    model = central._new_model(small, True, 0, _settings("flat"))
    dim = model.config.dim
    allowed = (
        UploadPolicy.most_frequent(
            small.doc_tokens[small.corpus.past_docs], small.vocab_size, 30
        ).frequent_words
        if case == "frequent"
        else np.zeros(0, dtype=np.int64)
    )
    for message in messages:
        rows = message.update[model.global_embedding_slice()].reshape(-1, dim)
        changed = np.flatnonzero(np.any(rows != 0, axis=1))
        assert np.isin(changed, allowed).all()
        # the rest of the model is still trained and uploaded
        assert np.any(message.update[model.global_embedding_slice().stop :] != 0)


@pytest.mark.parametrize("upload", ["all", "frozen"])
def test_central_frozen_keeps_the_word2vec_embeddings(
    small: FedPSData, upload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upload case 3's model trained on the server: the global embeddings stay at word2vec,
    the rest of the model learns; ``all`` trains them."""
    made: list[PEPSRanker] = []
    new_model = central._new_model

    def spy(*args: object) -> PEPSRanker:
        made.append(new_model(*args))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(central, "_new_model", spy)
    settings = _settings("central", rounds=1, upload=upload)
    central.train_central(small, small.users, settings, personalized=True)
    (model,) = made
    initial = new_model(small, True, stream_seeds(settings.seed)["model"], settings)
    kept = torch.equal(model.global_embedding.weight, initial.global_embedding.weight)
    assert kept == (upload == "frozen")
    assert not torch.equal(model.feature_mlp[-1].weight, initial.feature_mlp[-1].weight)


def test_frequent_upload_is_refused_for_models_trained_on_the_server() -> None:
    for mode in ("central", "knrm", "coverquery", "groupuser"):
        with pytest.raises(ConfigError, match="upload frequent"):
            FedPSSettings(mode=mode, upload="frequent")
    FedPSSettings(mode="flat", upload="frequent")  # clients' uploads: accepted


def _reachable(root: object) -> list[object]:
    seen: set[int] = set()
    stack, out = [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or inspect.ismodule(obj) or inspect.isclass(obj):
            continue
        seen.add(id(obj))
        out.append(obj)
        stack.extend(gc.get_referents(obj))
    return out


def test_the_server_cannot_reach_client_data(small: FedPSData) -> None:
    model = central._new_model(small, True, 0, _settings("flat"))
    server = FedPSServer(model.get_flat_parameters())
    clients = [
        FedPSClient(u, small.doc_tokens, small.word_vectors, seed=i)
        for i, u in enumerate(small.users)
    ]
    for i, c in enumerate(clients[:3]):
        message = c.local_update(model, server.broadcast(), _training(), i)
        server.fold(MessageBatch.of_vectors(message.update[None, :], np.array([message.n])))
        server.apply()
    private = (FedPSClient, UserWorkspace, UserData, RankingSamples, PersonalEmbeddings)
    assert not [o for o in _reachable(server) if isinstance(o, private)]
    assert server.version == 3 and server.updates_applied == 3
    # and the server module imports nothing from the client side
    tree = ast.parse(Path(fedps_server.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    forbidden = ("client", "candidates", "aol", "peps", "torch")
    assert not [m for m in imported if any(f in m for f in forbidden)]


def _training():
    from fedrank.estimators.local_sgd import LocalTraining

    return LocalTraining(epochs=1, batch_size=8)


def test_flat_drops_late_updates_proxy_offloads_them(small: FedPSData) -> None:
    kw = {"rounds": 2, "patience": 8, "straggler_ratio": 0.4}
    flat = run_fedps(small, _settings("flat", cover_queries=0, **kw)).communication
    proxy = run_fedps(small, _settings("proxy", **kw)).communication
    sampled = 2 * len(small.users)  # every client once per round
    for c in (flat, proxy):
        assert 0 < c["updates_late"] < sampled and c["late_share"] == c["updates_late"] / sampled
        assert np.isfinite(c["t_max_seconds"])
    assert flat["updates_received"] == sampled - flat["updates_late"]
    assert proxy["updates_received"] == sampled  # late clients offload to their proxy
    assert flat["d_units"] > 0 and proxy["d_units"] == 0
    assert proxy["proxies"] == 3 and proxy["group_servers"] == 2


def test_same_seed_same_result(small: FedPSData, every_mode: dict[str, FedPSResult]) -> None:
    for mode in ("proxy", "central"):
        a = every_mode[mode]  # seed 1, run earlier in this process
        b = run_fedps(small, _settings(mode, seed=1))
        c = run_fedps(small, _settings(mode, seed=6))

        def strip(r: FedPSResult) -> str:
            return json.dumps([{k: v for k, v in p.items() if k != "seconds"} for p in r.curve])

        assert strip(a) == strip(b)
        assert np.array_equal(a.per_query, b.per_query, equal_nan=True)
        assert a.metrics == b.metrics
        assert [p["valid_MAP"] for p in a.curve] != [p["valid_MAP"] for p in c.curve]


def test_run_seeds_summary(small: FedPSData) -> None:
    results = run_seeds(small, _settings("central", rounds=1), [1, 2])
    summary = results.summary()
    per_seed = [r.metrics["MAP"] for r in results.results]
    assert summary["seeds"] == [1, 2] and summary["MAP_per_seed"] == per_seed
    assert summary["MAP_mean"] == pytest.approx(np.mean(per_seed))
    assert summary["MAP_sd"] == pytest.approx(np.std(per_seed, ddof=1)) and summary["MAP_sd"] > 0
    for m in ("MRR", "P@1"):
        assert {f"{m}_mean", f"{m}_sd", f"{m}_per_seed"} <= set(summary)
    events, table = results.aligned()
    assert table.shape == (2, events.size, 3)
    assert np.nanmean(table[0, :, 0]) == pytest.approx(per_seed[0])
    with pytest.raises(ConfigError, match="distinct"):
        run_seeds(small, _settings("central"), [1, 1])


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="mode must be one of"):
        FedPSSettings(mode="fedavg")
    with pytest.raises(ConfigError, match="straggler_ratio"):
        FedPSSettings(mode="flat", straggler_ratio=1.5)
    with pytest.raises(ConfigError, match="multiple of"):
        FedPSSettings(mode="proxy", clients_per_step=15)
    with pytest.raises(ConfigError, match="upload"):
        UploadPolicy("some")  # type: ignore[arg-type]
    assert FedPSSettings(mode="flat").server_learning_rate == 1.0  # Algorithm 1


def test_settings_are_checked_without_the_heavy_imports() -> None:
    """`fedrank fedps run --dask-workers` checks its settings, starts the cluster, and only
    then imports torch and LightGBM (they take seconds the workers use to start): the
    settings module must not import them."""
    code = (
        "import sys; from fedrank.experiments.fedps.settings import FedPSSettings; "
        "FedPSSettings(mode='flat', dp_epsilon=4.0, dp_clip=1.0); "
        "print(sorted(m for m in ('torch', 'lightgbm', 'sklearn') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


def test_cli_refuses_bad_settings_before_starting_a_cluster(
    aol_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_cluster(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cluster was started for a bad command line")

    monkeypatch.setattr("fedrank.experiments.executors.dask_client", no_cluster)
    result = CliRunner().invoke(
        main,
        ["fedps", "run", "--mode", "flat", "--log", str(aol_log), "--dask-workers", "2",
         "--stragglers", "1.5"],
    )  # fmt: skip
    assert result.exit_code != 0
    assert "--stragglers must be in [0, 1)" in result.output


def test_cli_run_with_seeds_writes_json(aol_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["fedps", "run", "--mode", "central", "--log", str(aol_log), "--users", "8",
            "--seed", "1", "--seeds", "1,2", "--rounds", "1", "--warmup-rounds", "1",
            "--json", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    for m in ("MAP", "MRR", "P@1"):
        assert len(data[f"{m}_per_seed"]) == 2
        assert data[f"{m}_mean"] == pytest.approx(np.mean(data[f"{m}_per_seed"]))
    assert [r["settings"]["seed"] for r in data["runs"]] == [1, 2]
    assert "central: MAP" in result.output and "sd MAP" in result.output
    # every run's JSON has its privacy object; FedPS has no mechanism, and the report says so
    assert data["privacy"]["mechanism"] == "none" and data["privacy"]["epsilon"] is None
    assert all(r["privacy"] == data["privacy"] for r in data["runs"])
    report = CliRunner().invoke(main, ["privacy", "report", "--run", str(out)])
    assert report.exit_code == 0 and "fedps: none (mode central)" in report.output


def test_cli_reports_a_missing_log(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["fedps", "run", "--mode", "original", "--log", str(tmp_path / "none.tsv")]
    )
    assert result.exit_code == 1
    assert "does not exist" in result.output


def test_hierarchy_runs_on_the_first_hierarchy_seeds(tmp_path: Path) -> None:
    from fedrank.errors import ConfigError
    from fedrank.experiments.fedps.reproduce_grid import ReproduceConfig, planned_jobs

    def hierarchy(n: int) -> list[str]:
        config = ReproduceConfig(
            log=tmp_path / "log.tsv", out_dir=tmp_path, seeds=(1, 2, 3), hierarchy_seeds=n,
            tables=("hierarchy",),
        )  # fmt: skip
        return sorted(name for name in planned_jobs(config, None) if name.startswith("K100"))

    one, two = hierarchy(1), hierarchy(2)
    assert len(one) == 4 and all(name.endswith("_s1") for name in one)
    assert len(two) == 8 and set(one) < set(two)
    with pytest.raises(ConfigError, match="hierarchy_seeds"):
        ReproduceConfig(log=tmp_path, out_dir=tmp_path, seeds=(1, 2), hierarchy_seeds=3)


def test_hierarchy_runs_at_the_late_shares_asked_for(tmp_path: Path) -> None:
    from fedrank.errors import ConfigError
    from fedrank.experiments.fedps.reproduce_grid import ReproduceConfig, command_line, planned_jobs

    config = ReproduceConfig(
        log=tmp_path / "log.tsv", out_dir=tmp_path, seeds=(1, 2, 3), hierarchy_seeds=3,
        hierarchy_late=(0.1, 0.29), tables=("hierarchy",),
    )  # fmt: skip
    names = sorted(name for name in planned_jobs(config, None) if name.startswith("K100"))
    assert len(names) == 12 and sum("_late29_" in n for n in names) == 6
    jobs = planned_jobs(config, None)
    assert {jobs[n].settings.straggler_ratio for n in names} == {0.1, 0.29}
    assert "--hierarchy-seeds 3 --hierarchy-late 10,29" in command_line(config)
    for bad in ((), (1.0,), (-0.1,)):
        with pytest.raises(ConfigError, match="hierarchy_late"):
            ReproduceConfig(log=tmp_path, out_dir=tmp_path, hierarchy_late=bad)
    result = CliRunner().invoke(
        main, ["fedps", "reproduce", "--tables", "hierarchy", "--hierarchy-late", "ten"]
    )
    assert result.exit_code != 0 and "--hierarchy-late must be comma-separated" in result.output


def _changed_layers(model: object, update: np.ndarray) -> set[str]:
    """The parameter names whose slice of a flat ``update`` is not all zero."""
    return {e.name for e in model.layout.entries if np.any(update[e.slice] != 0)}  # type: ignore[attr-defined]


def test_flat_warmup_trains_the_click_features_first(
    small: FedPSData, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The click-feature warm-up's messages change the feature MLP and the final MLP only
    (no text layer, no word embedding); the full rounds then start from the warm-up's best
    model and change the text layers too; the JSON records the warm-up."""
    n = len(small.users)
    settings = _settings(
        "flat", rounds=1, warmup_rounds=1, cover_queries=0, straggler_ratio=0.0, seed=2
    )
    messages: list[Message] = []
    events: list[tuple[str, np.ndarray]] = []  # broadcasts (server.broadcast) and restarts
    broadcast, restart = FedPSServer.broadcast, FedPSServer.restart_from

    def record_broadcast(self: FedPSServer) -> np.ndarray:
        events.append(("broadcast", broadcast(self)))
        return events[-1][1]

    def record_restart(self: FedPSServer, parameters: np.ndarray) -> None:
        events.append(("restart", np.array(parameters)))
        restart(self, parameters)

    monkeypatch.setattr(FedPSServer, "broadcast", record_broadcast)
    monkeypatch.setattr(FedPSServer, "restart_from", record_restart)
    result = run_fedps(small, settings, observer=lambda c, m: messages.append(m))
    assert len(messages) == 2 * n  # every client once in the warm-up round, once after
    # the full rounds start from the warm-up's best model, one the warm-up broadcast
    kinds = [k for k, _ in events]
    assert kinds.count("restart") == 1
    at = kinds.index("restart")
    best = events[at][1]
    assert any(np.array_equal(p, best) for _, p in events[:at])
    np.testing.assert_array_equal(events[at + 1][1], best)
    model = central._new_model(small, True, 0, settings)
    for m in messages[:n]:
        changed = _changed_layers(model, m.update)
        assert changed and all(c.startswith(("feature_mlp.", "combine.")) for c in changed)
    full = set().union(*(_changed_layers(model, m.update) for m in messages[n:]))
    assert GLOBAL_EMBEDDING in full and any(c.startswith("knrm_") for c in full)
    warm = result.to_json()["warmup"]
    assert warm["curve"] and 0 < warm["best_round"] <= 1
    assert warm["best_valid_MAP"] == max(p["valid_MAP"] for p in warm["curve"])
    assert 0 < warm["test"]["MAP"] <= 1
    none = run_fedps(small, _settings("flat", rounds=1, cover_queries=0, seed=2))
    assert none.to_json()["warmup"] == {}


def test_central_warmup_starts_the_full_model_from_its_best(
    small: FedPSData, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Central training with a warm-up: the full training starts from the warm-up's best
    model (loaded into the model before the full stage's first step), so a run with the
    warm-up differs from one without, and the K-NRM baseline (no feature tower) skips it."""
    kw = {"rounds": 1, "learning_rate": 3e-3, "batch_size": 16, "seed": 3}
    evaluators: list[object] = []
    loaded: list[np.ndarray] = []

    class Recorded(Evaluator):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            evaluators.append(self)

    load = PEPSRanker.set_flat_parameters

    def record_load(self: PEPSRanker, parameters: np.ndarray) -> None:
        loaded.append(np.array(parameters))
        load(self, parameters)

    monkeypatch.setattr(central, "Evaluator", Recorded)
    monkeypatch.setattr(PEPSRanker, "set_flat_parameters", record_load)
    warm = run_fedps(small, _settings("central", warmup_rounds=2, **kw))
    best = evaluators[0].best_parameters  # type: ignore[attr-defined]
    assert best is not None and any(np.array_equal(p, best) for p in loaded)
    monkeypatch.undo()
    cold = run_fedps(small, _settings("central", **kw))
    record = warm.to_json()["warmup"]
    assert record["curve"] and record["best_round"] <= 2
    assert warm.steps > cold.steps
    assert warm.curve[0]["valid_MAP"] != cold.curve[0]["valid_MAP"]
    assert run_fedps(small, _settings("knrm", warmup_rounds=2, rounds=1)).warmup == {}


def test_warmup_settings() -> None:
    assert FedPSSettings(mode="flat").warmup == 8
    assert FedPSSettings(mode="flat", warmup_rounds=0).warmup == 0
    private = {"dp_epsilon": 4.0, "dp_clip": 0.5}
    assert FedPSSettings(mode="flat", **private).warmup == 0  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not in the DP accounting"):
        FedPSSettings(mode="flat", warmup_rounds=2, **private)  # type: ignore[arg-type]
    for bad in (-1, 101):
        with pytest.raises(ConfigError, match="warmup_rounds"):
            FedPSSettings(mode="central", warmup_rounds=bad)
