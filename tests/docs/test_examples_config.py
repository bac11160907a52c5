"""The example configurations in ``examples/`` work: each loads with the project's own
loader (:func:`fedrank.server.config.load_config`) and starts a real ``fedrank serve`` on
loopback (tests/server/serverkit.py); the quick start steps its model within seconds of an
update, and the rounds / privacy / secure-aggregation files refuse a device that is not
enrolled. The admin token comes from the environment variable the files name."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrank.errors import ConfigError
from fedrank.server.config import load_config
from tests.server.serverkit import admin, live_server, status, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOKEN = "example-admin-token-0123456789"
ENV = "FEDRANK_ADMIN_TOKEN"


@pytest.fixture(autouse=True)
def _admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, TOKEN)


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.toml")) == [
        "server-rounds-dp.toml",
        "server-secagg.toml",
        "server.toml",
    ]


@pytest.mark.parametrize("name", ["server.toml", "server-rounds-dp.toml", "server-secagg.toml"])
def test_examples_load_with_the_token_from_the_environment(name: str) -> None:
    config = load_config(EXAMPLES / name)
    assert config.server.admin_token == TOKEN
    assert Path(config.server.store).parts[0] == "fedrank-data"  # the git-ignored data dir


def test_a_missing_token_variable_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV)
    with pytest.raises(ConfigError, match=f"environment variable {ENV} is not set; set it"):
        load_config(EXAMPLES / "server.toml")


def test_a_token_in_the_file_and_in_the_environment_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text(f'[server]\nadmin_token = "{TOKEN}"\nadmin_token_env = "{ENV}"\n')
    with pytest.raises(ConfigError, match="both admin_token and admin_token_env"):
        load_config(path)


def test_quick_start_steps_the_model(tmp_path: Path) -> None:
    """A first user's server: one update, and the 10-second iteration closes by itself."""
    text = (EXAMPLES / "server.toml").read_text()
    with live_server(tmp_path, text) as live:
        assert live.config.iteration.seconds == 10.0 and not live.config.identity_required
        first = live.version()
        update = {"message_id": "example-1", "model_version": first,
                  "payload": {"gradient": [0.5] * 22, "n": 2}}  # fmt: skip
        assert live.client.post("/v1/updates", json=update).status_code == 202
        wait_until(lambda: live.version() > first, timeout=30.0, what="the iteration to close")
        assert status(live.client)["model_version"] == first + 1
        # The admin token is the environment's: the admin endpoints answer to it.
        assert admin(live.client, "close", TOKEN).status_code == 409  # nothing to close
        assert admin(live.client, "close", "wrong-token-of-many-chars").status_code == 401


@pytest.mark.parametrize(
    ("name", "privacy", "secagg"),
    [("server-rounds-dp.toml", True, False), ("server-secagg.toml", False, True)],
)
def test_protected_examples_start_and_refuse_unenrolled_devices(
    tmp_path: Path, name: str, privacy: bool, secagg: bool
) -> None:
    text = (EXAMPLES / name).read_text()
    with live_server(tmp_path, text) as live:
        config = live.config
        assert config.workload == "fedavg" and config.rounds.enabled
        assert config.identity_required
        assert (config.privacy.enabled, config.secagg.enabled) == (privacy, secagg)
        assert status(live.client)["model_version"] == 0
        # A request that no enrolled device signed is refused.
        unsigned = live.client.post("/v1/checkin", json={"client_id": "stranger"}, auth=None)
        assert unsigned.status_code == 401, unsigned.text
