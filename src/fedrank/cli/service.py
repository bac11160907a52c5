"""``fedrank serve``: run the federation server."""

from __future__ import annotations

import logging
import signal
import socket
from pathlib import Path

import click

from fedrank.cli._common import FedrankGroup
from fedrank.federation.registry import SYSTEMS
from fedrank.server.sections import IterationSection, ServerSection

#: The defaults ``fedrank serve --help`` shows (those of ``server.toml``).
_SERVER, _ITERATION = ServerSection(), IterationSection()
#: ``--quickstart``: an iteration closes this often (seconds), so a first user sees it step.
QUICKSTART_SECONDS = 10.0


@click.command("serve", short_help="Run the federation server.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="server.toml (see fedrank.server.config for every key); flags override it.",
)
@click.option(
    "--workload",
    type=click.Choice(list(SYSTEMS)),
    default=None,
    show_default="[server] workload, else frecency",
    help="The system the server runs.",
)
@click.option(
    "--store",
    default=None,
    show_default=f"[server] store, else {_SERVER.store}",
    help="Directory of the durable store (git-ignored under fedrank-data/).",
)
@click.option("--host", default=None, show_default=_SERVER.host, help="Address to listen on.")
@click.option(
    "--port", type=int, default=None, show_default=str(_SERVER.port), help="Port to listen on."
)
@click.option(
    "--iteration-seconds",
    "seconds",
    type=float,
    default=None,
    show_default=f"{_ITERATION.seconds:g}, the paper's 30 minutes; --quickstart: "
    f"{QUICKSTART_SECONDS:g}",
    help="Close an iteration every S seconds.",
)
@click.option(
    "--iteration-min-updates",
    "min_updates",
    type=int,
    default=None,
    show_default=str(_ITERATION.min_updates),
    help="Never apply an aggregate of fewer than N updates.",
)
@click.option(
    "--quickstart",
    is_flag=True,
    help=f"A first try: iterations of {QUICKSTART_SECONDS:g} s (unless --iteration-seconds) "
    "and a fresh admin token printed at start, so that you can watch the model step "
    "(GET /v1/status) and drive it (POST /v1/admin/close with the token).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning"]),
    default="info",
    show_default=True,
    help="Server log level.",
)
@click.option(
    "--new-store",
    is_flag=True,
    help="The store's database is gone and you want an empty store: move its identity file "
    "and Parquet audit log to abandoned-<time>/ in the store and start at version 0 "
    "(without it, such a store is refused; see `fedrank store recover`).",
)
@click.option(
    "--port-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the bound port here once listening is set up (with --port 0: a free port).",
)
def serve(
    config_path: Path | None,
    log_level: str,
    new_store: bool,
    port_file: Path | None,
    quickstart: bool,
    **overrides: object,
) -> None:
    """Run the federation server (HTTP on uvicorn) until interrupted; on shutdown, print
    what the store holds. Every key is in server.toml (fedrank.server.config); flags
    override it."""
    import secrets

    import uvicorn

    from fedrank.server.app import create_app
    from fedrank.server.config import load_config
    from fedrank.server.connections import raise_fd_limit, uvicorn_limits
    from fedrank.server.store import abandon, check_directory

    token = None
    if quickstart:
        token = secrets.token_urlsafe(24)
        if overrides.get("seconds") is None:
            overrides["seconds"] = QUICKSTART_SECONDS
        overrides["admin_token"] = token
    config = load_config(config_path, **overrides)
    if new_store:
        moved = abandon(Path(config.server.store))
        if moved is not None:
            click.echo(f"moved the old store's files to {moved}")
    check_directory(Path(config.server.store))  # before binding the port: a clear refusal
    raise_fd_limit(config.server.max_connections)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    # Bound here, so that --port 0 takes a free port without a race and reports it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.server.host, config.server.port))
    port = sock.getsockname()[1]
    click.echo(
        f"fedrank server: workload {config.workload}, store {config.server.store}, "
        f"http://{config.server.host}:{port}"
    )
    if token is not None:
        click.echo(
            f"quickstart: an iteration closes every {config.iteration.seconds:g} s; watch "
            f"http://{config.server.host}:{port}/v1/status; admin token (this run only): {token}"
        )
    if port_file is not None:
        partial = port_file.with_suffix(".partial")
        partial.write_text(str(port))
        partial.replace(port_file)
    app = create_app(config)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            loop="uvloop",
            log_level="warning",
            access_log=False,
            proxy_headers=False,  # nothing uses client addresses; trust no X-Forwarded-*
            timeout_graceful_shutdown=10,
            **uvicorn_limits(config.server),  # header, body and keep-alive timeouts; connections
        )
    )
    # uvicorn shuts down gracefully on SIGINT or SIGTERM, then raises the signal again for
    # the handler it found: these handlers end the command there, after the summary.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        click.echo(_stored(app))


class _Terminated(Exception):
    """SIGTERM, raised again by uvicorn once it has shut down gracefully."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated


def _stored(app: object) -> str:
    """What the store holds once the server has stopped: the open iteration, the model
    version and the updates stored in all (read from the engine the app ran)."""
    service = getattr(app, "service", None)
    engine = getattr(service, "engine", None)
    if engine is None:
        return "stopped before the store was opened"
    snap = engine.snapshot()
    return (
        f"stopped; the store {engine.store.directory} holds model version {snap.version}, "
        f"iteration {snap.iteration} open with {snap.updates_in_iteration} update(s), "
        f"{engine.accepted_total} update(s) stored in all"
    )


@click.group("store", cls=FedrankGroup)
def store() -> None:
    """Look after a server's durable store."""


@store.command("recover", short_help="Rebuild a store from its audit log.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The server.toml the store was served with (workload, model, branches).",
)
@click.option("--store", "store_dir", default=None, help="The store directory.")
def store_recover(config_path: Path | None, store_dir: str | None) -> None:
    """Rebuild a store's lost database, or one restored from an older backup (moved to
    superseded-<time>/), from its Parquet audit log: every closed iteration replayed
    through the server's engine, with the DP noise the server drew (the open iteration's
    messages are lost)."""
    from fedrank.server.config import load_config
    from fedrank.server.recovery import recover_store

    config = load_config(config_path, store=store_dir)
    done = recover_store(config)
    click.echo(
        f"recovered {done['store']}: {done['iterations']} iterations, {done['messages']} "
        f"messages; the model is at version {done['model_version']}"
    )
    if done["superseded"] is not None:
        click.echo(f"the database that was behind the audit log is in {done['superseded']}")
