"""``fedrank client``: run one real client against a fedrank server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from fedrank.cli._common import json_option, write_json


@click.command("client", short_help="Run one client: fetch the model, send an update.")
@click.option("--server", "server_url", required=True, help="e.g. http://127.0.0.1:8000")
@click.option(
    "--workload",
    type=click.Choice(["frecency"]),
    default="frecency",
    show_default=True,
    help="What this client computes (a real client exists for frecency).",
)
@click.option(
    "--places",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="The Firefox profile's places.sqlite (read only; nothing of it is sent).",
)
@click.option(
    "--state",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("fedrank-data/client"),
    show_default=True,
    help="Keeps the enrollment id and the offline queue.",
)
@click.option(
    "--privacy-budget",
    type=float,
    default=None,
    help="The user's own epsilon over every round this profile takes part in, kept in "
    '--state (docs/privacy.md, "The user\'s ledger"): the update is sent only if it fits. '
    "Default: no ledger.",
)
@click.option(
    "--privacy-delta",
    type=float,
    default=1e-6,
    show_default=True,
    help="Delta of the user's ledger's (epsilon, delta) budget.",
)
@click.option(
    "--enrollment-token",
    default=None,
    help="The operator's single-use token (`fedrank devices enroll`): this device's key is "
    "made in --state and enrolled with it once; later runs sign with it (docs/devices.md).",
)
@json_option
def client(
    server_url: str,
    workload: str,
    places: Path,
    state_dir: Path,
    privacy_budget: float | None,
    privacy_delta: float,
    enrollment_token: str | None,
    json_path: Path | None,
) -> None:
    """Fetch the model, compute this profile's update on the device, send it (retries,
    offline queue); a client in a control branch sends its metrics only."""
    from fedrank.client import Client
    from fedrank.client.frecency_update import ProfileSearches, frecency_update
    from fedrank.errors import ConfigError
    from fedrank.systems.frecency.client import FrecencyClient

    with (
        _reachable(server_url),
        Client(
            server_url,
            state_dir=state_dir,
            privacy_budget=privacy_budget,
            privacy_delta=privacy_delta,
            enrollment_token=enrollment_token,
        ) as c,
    ):
        flushed = c.flush()
        if flushed:
            click.echo(f"resent {len(flushed)} queued message(s): {[r.status for r in flushed]}")
        model = c.fetch_model()
        half = c.client_half(model)
        if not isinstance(half, FrecencyClient):
            raise ConfigError(f"the server runs the {model.workload} workload, not {workload}")
        section = half.config
        searches = ProfileSearches(places, model=section.model)
        payload, metrics = frecency_update(
            searches, model.params, section, max_n=model.config.get("max_n")
        )
        if model.served != "trained":
            payload = {}  # a control branch reports its metrics only
        accepted = model.config.get("metrics")
        if accepted is not None:  # the server's metric schema: send only what it takes
            dropped = sorted(set(metrics) - set(accepted))
            if dropped:
                click.echo(f"not sent (the server does not accept them): {', '.join(dropped)}")
            metrics = {k: v for k, v in metrics.items() if k in accepted}
        # randomized signs are applied here, on the device: the ledger records their epsilon
        local = half.message_epsilon()
        result = c.send(payload, model.version, metrics, local_epsilon=local)
        click.echo(
            f"branch {model.branch}, model version {model.version}: {searches.n_searches} "
            f"searches from {searches.source}, {int(metrics['searches'])} usable; "
            f"{'update' if payload else 'metrics only'} -> {result.status}"
        )
        report = {
            "branch": model.branch,
            "model_version": model.version,
            "source": searches.source,
            "metrics": metrics,
            "sent": "update" if payload else "metrics",
            "status": result.status,
            "message_id": result.message_id,
        }
        if json_path:
            write_json(report, json_path)
            click.echo(f"wrote {json_path}")


@contextlib.contextmanager
def _reachable(server_url: str) -> Iterator[None]:
    """A server that cannot be reached ends the command in one line, not a traceback."""
    import httpx

    from fedrank.errors import FedrankError

    try:
        yield
    except httpx.TransportError as exc:
        raise FedrankError(f"cannot reach the server at {server_url}: {exc}") from exc
