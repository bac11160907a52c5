"""The service's counters and gauges in the Prometheus text exposition format (version
0.0.4), served at ``GET /metrics``."""

from __future__ import annotations

from collections.abc import Mapping

from fedrank.server.engine import Engine


def prometheus_text(
    engine: Engine,
    rejected: Mapping[str, int],
    requests: Mapping[tuple[str, int], int],
    server_refused: Mapping[tuple[str, str], int],
) -> str:
    """Every metric of ``engine`` (messages accepted, duplicates, group commits and their
    duration histogram, model version, open iteration), the messages ``rejected`` by
    reason, the HTTP ``requests`` counted by endpoint and status, and the refused requests
    that are not updates (``server_refused``, by endpoint and reason)."""
    e, snap = engine, engine.snapshot()
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP fedrank_{name} {help_text}")
        lines.append(f"# TYPE fedrank_{name} {kind}")
        lines.extend(f"fedrank_{name}{labels} {value}" for labels, value in samples)

    metric("updates_accepted_total", "counter", "Messages stored.", [("", e.accepted_total)])
    metric(
        "updates_rejected_total",
        "counter",
        "Messages refused, by reason.",
        [(f'{{reason="{k}"}}', v) for k, v in sorted(rejected.items())],
    )
    metric(
        "requests_refused_total",
        "counter",
        "Refused requests that are not updates (model, checkin, admin), by endpoint and reason.",
        [
            (f'{{endpoint="{endpoint}",reason="{code}"}}', v)
            for (endpoint, code), v in sorted(server_refused.items())
        ],
    )
    metric(
        "updates_duplicate_total",
        "counter",
        "Repeated message ids.",
        [("", e.duplicates_total)],
    )
    metric("commits_total", "counter", "Group commits.", [("", e.commits_total)])
    commits = e.commit_seconds.view()
    buckets = zip(commits.bounds, commits.cumulative, strict=True)
    metric(
        "store_commit_seconds",
        "histogram",
        "Duration of each group commit of updates to the store (its fsync included).",
        [
            *((f'_bucket{{le="{b}"}}', c) for b, c in buckets),
            ('_bucket{le="+Inf"}', commits.count),
            ("_sum", commits.total),
            ("_count", commits.count),
        ],
    )
    metric("model_version", "gauge", "Published model version.", [("", snap.version)])
    metric("iteration", "gauge", "Open iteration.", [("", snap.iteration)])
    metric(
        "updates_in_iteration",
        "gauge",
        "Updates in the open iteration.",
        [("", snap.updates_in_iteration)],
    )
    epsilon = engine.privacy.status(snap.iteration)["epsilon"]
    if epsilon is not None:
        metric(
            "privacy_epsilon",
            "gauge",
            "Each user's epsilon over the closed iterations (see /v1/status privacy).",
            [("", epsilon)],
        )
    metric(
        "requests_total",
        "counter",
        "Requests by endpoint and status.",
        [(f'{{endpoint="{k[0]}",status="{k[1]}"}}', v) for k, v in sorted(requests.items())],
    )
    return "\n".join(lines) + "\n"
