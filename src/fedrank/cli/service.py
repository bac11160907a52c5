"""``fedrank serve``: run the federation server."""

from __future__ import annotations

import logging
from pathlib import Path

import click


@click.command("serve")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="server.toml (see fedrank.server.config for every key); flags override it.",
)
@click.option("--workload", type=click.Choice(["frecency", "foltr-es", "fedavg"]), default=None)
@click.option("--store", default=None, help="Directory of the durable store.")
@click.option("--host", default=None, help="Default 127.0.0.1.")
@click.option("--port", type=int, default=None, help="Default 8000.")
@click.option(
    "--iteration-seconds",
    "seconds",
    type=float,
    default=None,
    help="Close an iteration every S seconds (the paper: 1800).",
)
@click.option(
    "--iteration-min-updates",
    "min_updates",
    type=int,
    default=None,
    help="Never apply an aggregate of fewer than N updates.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning"]),
    default="info",
    show_default=True,
)
def serve(config_path: Path | None, log_level: str, **overrides: object) -> None:
    """Run the federation server (HTTP on uvicorn) until interrupted."""
    import uvicorn

    from fedrank.server.app import create_app
    from fedrank.server.config import load_config

    config = load_config(config_path, **overrides)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    click.echo(
        f"fedrank server: workload {config.workload}, store {config.server.store}, "
        f"http://{config.server.host}:{config.server.port}"
    )
    uvicorn.run(
        create_app(config),
        host=config.server.host,
        port=config.server.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
    )
