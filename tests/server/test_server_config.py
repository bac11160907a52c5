"""The server's configuration (TOML plus flags, validated in full at start): unknown keys and
sections, wrong types, out-of-range values and bad branches are errors that name the
section and the key; ``fedrank serve`` with a bad configuration exits non-zero with that
message, without serving; a store made for another workload is refused at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedrank.errors import ConfigError, FedrankError
from fedrank.server.config import ServerConfig, load_config
from fedrank.server.process import ServerProcess
from fedrank.server.sections import Branch
from fedrank.server.workloads import make_workload
from tests.cli.clirun import assert_clean_failure, run


def _load(tmp_path: Path, text: str, **overrides: object) -> ServerConfig:
    path = tmp_path / "server.toml"
    path.write_text(text)
    return load_config(path, **overrides)


def test_defaults_match_the_documented_example() -> None:
    config = load_config()
    assert config.workload == "frecency"
    assert config.server.port == 8000 and config.server.host == "127.0.0.1"
    assert config.server.admin_token == "" and config.server.max_staleness == 0
    assert config.iteration.seconds == 1800.0  # the paper's 30 minutes
    assert config.iteration.min_updates == 1 and config.iteration.stable_ticks == 0
    assert (
        config.sections["frecency"].eta_plus == 1.2 and config.sections["frecency"].eta_minus == 0.5
    )
    assert config.sections["foltr_es"].sigma == 0.01 and config.sections["foltr_es"].batch == 4
    assert config.sections["foltr_es"].p == 0.9 and config.sections["foltr_es"].antithetic is True
    assert config.sections["foltr_es"].difference_bound == 0.0
    assert config.rounds.enabled is False and config.rounds.clients_per_round == 100
    assert [b.name for b in config.branches] == ["treatment", "control", "control-no-decay"]
    assert [b.share for b in config.branches] == [0.6, 0.2, 0.2]
    assert load_config(workload="fedavg").branches == (Branch("treatment", 1.0, "trained"),)
    names = [name for name, _, _ in config.metrics]
    assert names == ["chars_typed", "evaluation", "loss", "searches", "selected_rank"]


def test_a_full_file_and_flag_overrides(tmp_path: Path) -> None:
    text = """
[server]
workload = "foltr-es"
port = 9000
admin_token = "a-token-of-16-characters"
[iteration]
seconds = 60
min_updates = 10
stable_ticks = 3
tick_seconds = 0.1
[foltr_es]
ranker = "two-layer"
antithetic = false
batch = 3
p = 1.0
[rounds]
enabled = true
clients_per_round = 7
t_max_seconds = 5
[[branches]]
name = "a"
share = 0.5
[[branches]]
name = "b"
share = 0.5
served = "defaults"
"""
    config = _load(tmp_path, text, port=1234, seconds=0.0, min_updates=None)
    assert config.workload == "foltr-es"
    assert config.server.port == 1234  # the flag wins
    assert config.iteration.seconds == 0.0 and config.iteration.min_updates == 10
    assert isinstance(config.iteration.seconds, float)
    assert (
        config.sections["foltr_es"].ranker == "two-layer" and config.sections["foltr_es"].batch == 3
    )
    assert config.rounds.clients_per_round == 7 and config.rounds.t_max_seconds == 5.0
    assert config.branches[1] == Branch("b", 0.5, "defaults", False)
    view = config.client_view()
    assert "admin_token" not in view and "store" not in view
    assert view["rounds"]["clients_per_round"] == 7 and view["ranker"] == "two-layer"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[servre]\nport = 1\n", "unknown section(s) servre"),
        ("[server]\nprot = 1\n", "unknown key(s) prot in [server]"),
        ("[foltr_es]\nsgima = 0.1\n", "unknown key(s) sgima in [foltr_es]"),
        ("server = 1\n", "[server] must be a table"),
        ('[server]\nport = "80"\n', "[server] port must be an integer"),
        ("[server]\nport = 80.0\n", "[server] port must be an integer"),
        ("[server]\nport = true\n", "[server] port must be an integer"),
        ("[server]\nworkload = 3\n", "[server] workload must be a string"),
        (
            "[iteration]\nseconds = true\n",
            "[iteration] seconds must be a number",
        ),
        (
            "[iteration]\nseconds = nan\n",
            "[iteration] seconds must be finite",
        ),
        (
            "[iteration]\nseconds = inf\n",
            "[iteration] seconds must be finite",
        ),
        ("[foltr_es]\nantithetic = 1\n", "[foltr_es] antithetic must be true or false"),
        ('[server]\nworkload = "ranknet"\n', "[server] workload must be one of"),
        ('[server]\nstore = ""\n', "[server] store must name a directory"),
        ("[server]\nport = 70000\n", "[server] port must be in 0..65535"),
        ("[server]\nport = -1\n", "[server] port must be in 0..65535"),
        ("[server]\nmax_body_bytes = 10\n", "[server] max_body_bytes must be >= 1024"),
        ("[server]\nmax_staleness = -1\n", "[server] max_staleness must be >= 0"),
        (
            "[iteration]\nseconds = -1\n",
            "[iteration] seconds (0: no fixed-time policy) must be >= 0",
        ),
        ("[iteration]\nmin_updates = 0\n", "[iteration] min_updates must be >= 1"),
        ("[iteration]\nstable_ticks = -2\n", "[iteration] stable_ticks must be >= 0"),
        ("[iteration]\ntick_seconds = 0\n", "[iteration] tick_seconds must be > 0"),
        ('[frecency]\nmodel = "new"\n', "[frecency] model must be one of classic, modern"),
        ('[frecency]\nmessage = "bits"\n', "[frecency] message must be one of full, sign"),
        (
            "[frecency]\nsignificance_z = -1\n",
            "[frecency] significance_z must be >= 0 (a finite number)",
        ),
        ("[frecency]\neps = 0\n", "[frecency] eps must be > 0 (a finite number)"),
        ("[frecency]\nmax_change = 0\n", "[frecency] max_change must be > 0 (a finite number)"),
        ("[frecency]\ndecay_rate = 1.5\n", "[frecency] decay_rate must be in (0, 1]"),
        ('[foltr_es]\nranker = "deep"\n', "[foltr_es] ranker must be one of linear, two-layer"),
        ("[foltr_es]\nn_features = 0\n", "[foltr_es] n_features must be >= 1"),
        ("[foltr_es]\nsigma = 0\n", "[foltr_es] sigma must be > 0"),
        ("[foltr_es]\nbatch = 0\n", "[foltr_es] batch must be >= 1"),
        ("[foltr_es]\nbatch = 3\n", "[foltr_es] batch must be even with antithetic"),
        (
            "[foltr_es]\np = 0.05\n",
            "[foltr_es] p (MaxRR at depth 10 has n = 11 values) must be in (1/11, 1]",
        ),
        (
            "[foltr_es]\np = 1.01\n",
            "[foltr_es] p (MaxRR at depth 10 has n = 11 values) must be in (1/11, 1]",
        ),
        (
            "[foltr_es]\ndifference_bound = -0.5\n",
            "[foltr_es] difference_bound (0: off) must be >= 0",
        ),
        (
            "[foltr_es]\nantithetic = false\nbatch = 3\ndifference_bound = 0.5\n",
            "[foltr_es] difference_bound clips the antithetic difference",
        ),
        ("[foltr_es]\nlearning_rate = 0\n", "[foltr_es] learning_rate must be > 0"),
        ("[fedavg]\ndim = 0\n", "[fedavg] dim must be >= 1 (an integer)"),
        ("[fedavg]\nserver_learning_rate = -1\n", "[fedavg] server_learning_rate must be > 0"),
        ('[frecency]\nsetting = "deployed"\n', "[frecency] setting must be one of paper"),
        ('[frecency]\nmodel = "modern"\nsetting = "mozilla-deployed"\n', "tuned classic"),
        ("[rounds]\nclients_per_round = 0\n", "[rounds] clients_per_round must be >= 1"),
        ("[rounds]\nt_max_seconds = 0\n", "[rounds] t_max_seconds must be > 0"),
        ("[rounds]\nenabled = true\n", "[rounds] apply to foltr-es, fedavg, fpdgd"),
        ("branches = []\n", "[[branches]] must be a non-empty array of tables"),
        ('branches = "a"\n', "[[branches]] must be a non-empty array of tables"),
        ("branches = [1]\n", "branch 0 must be a table"),
        ("[[branches]]\nshare = 1.0\n", "branch 0 needs a 'name'"),
        ('[[branches]]\nname = "a"\n', "branch 0 needs a 'share'"),
        (
            '[[branches]]\nname = "a"\nshare = 1.0\ncolour = 1\n',
            "unknown key(s) colour in branch 0",
        ),
        ('[[branches]]\nname = "a"\nshare = "1"\n', "[branches] share must be a number"),
        ('[[branches]]\nname = "a"\nshare = 1.0\ndecay = "no"\n', "[branches] decay must be true"),
        (
            '[[branches]]\nname = "a"\nshare = 0.5\n[[branches]]\nname = "a"\nshare = 0.5\n',
            "branch names must be distinct and non-empty",
        ),
        ('[[branches]]\nname = ""\nshare = 1.0\n', "branch names must be distinct and non-empty"),
        (
            '[[branches]]\nname = "a"\nshare = 0.5\n[[branches]]\nname = "b"\nshare = 0.4\n',
            "branch shares must be >= 0 and sum to 1",
        ),
        (
            '[[branches]]\nname = "a"\nshare = 1.5\n[[branches]]\nname = "b"\nshare = -0.5\n',
            "branch shares must be >= 0 and sum to 1",
        ),
        (
            '[[branches]]\nname = "a"\nshare = 1.0\nserved = "old"\n',
            "branch 'a': served must be trained or defaults",
        ),
        (
            '[[branches]]\nname = "a"\nshare = 1.0\nserved = "defaults"\n',
            "one branch must be served the trained model",
        ),
        ("[server\n", "is not valid TOML"),
    ],
)
def test_invalid_configurations_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert message in str(err.value)


def test_invalid_flags_and_files() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        load_config(colour="red")
    with pytest.raises(ConfigError, match=r"\[server\] port must be an integer"):
        load_config(port="80")
    with pytest.raises(
        ConfigError, match=r"\[iteration\] seconds \(0: no fixed-time policy\) must be >= 0"
    ):
        load_config(seconds=-5.0)
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(Path("/nonexistent/server.toml"))


def test_serve_with_a_bad_config_exits_with_the_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\nport = 70000\n")
    result = run(["serve", "--config", str(bad), "--store", str(tmp_path / "store")])
    assert_clean_failure(result, "[server] port must be in 0..65535")
    assert not (tmp_path / "store").exists()  # nothing was started
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[iteration]\nminutes = 30\n")
    assert_clean_failure(run(["serve", "--config", str(unknown)]), "unknown key(s) minutes")
    flag = run(["serve", "--iteration-min-updates", "0", "--store", str(tmp_path / "s2")])
    assert_clean_failure(flag, "--iteration-min-updates must be >= 1")  # the flag typed
    assert flag.exit_code == 2  # a usage error
    choice = run(["serve", "--workload", "ranknet"])
    assert choice.exit_code != 0 and "ranknet" in choice.output
    missing = run(["serve", "--config", str(tmp_path / "absent.toml")])
    assert missing.exit_code != 0 and "absent.toml" in missing.output


def test_serve_as_a_process_exits_non_zero(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[foltr_es]\np = 2.0\n[server]\nworkload = "foltr-es"\n')
    done = subprocess.run(
        [sys.executable, "-m", "fedrank.cli", "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "[foltr_es] p (MaxRR at depth 10 has n = 11 values) must be in (1/11, 1]" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_store_made_for_another_workload_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with ServerProcess(store, workload="foltr-es", iteration_seconds=0):
        pass
    other = ServerProcess(store, workload="fedavg", iteration_seconds=0)
    with pytest.raises(FedrankError, match="exited with code") as err:
        other.start(timeout=60)
    assert "was created for" in str(err.value)
    # The right workload still starts on it.
    with ServerProcess(store, workload="foltr-es", iteration_seconds=0) as again:
        assert again.process is not None


@pytest.mark.parametrize("token", ["short", " " * 20, " padded-token-of-many-chars "])
def test_weak_admin_tokens_are_refused_at_start(tmp_path: Path, token: str) -> None:
    """Issue 15, F10: a whitespace-only admin token was accepted."""
    with pytest.raises(ConfigError, match="admin_token must have at least 16 characters"):
        _load(tmp_path, f'[server]\nadmin_token = "{token}"\n')


@pytest.mark.parametrize(
    ("proxies", "message"),
    [
        ('[[proxies]]\nname = "p"\ntoken = "short"\n', "at least 16 characters"),
        ('[[proxies]]\nname = "p"\n', "needs a 'token'"),
        ('[[proxies]]\nname = "p"\ntoken = "0123456789abcdef"\nmax_clients = 0\n', "1..1e9"),
        (
            '[[proxies]]\nname = "p"\ntoken = "0123456789abcdef"\n'
            '[[proxies]]\nname = "q"\ntoken = "0123456789abcdef"\n',
            "its own token",
        ),
        ('[[proxies]]\nname = "p"\ntoken = "0123456789abcdef"\nx = 1\n', "unknown key"),
    ],
)
def test_bad_proxies_are_refused_at_start(tmp_path: Path, proxies: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, proxies)


def test_proxy_tokens_never_print() -> None:
    from fedrank.server.sections import Proxy

    assert "secret" not in repr(Proxy("p", "secret-secret-secret", 5))


def test_a_difference_bound_reaches_the_servers_aggregator(tmp_path: Path) -> None:
    config = _load(
        tmp_path, '[server]\nworkload = "foltr-es"\n[foltr_es]\ndifference_bound = 0.5\n'
    )
    assert make_workload(config).strategy.aggregator.difference_bound == 0.5
