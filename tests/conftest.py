"""Shared fixtures: where the real datasets live; and the Hypothesis profile.

Tests read real data from ``../shared/data`` relative to the repository root, or from the
directory in ``FEDRANK_DATA_DIR``. Tests that need it are skipped, with the reason, only when
that directory does not exist; when it exists, a skipped test fails the run (no silent
skips: a file missing from the data directory is an error, not a pass).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

import numpy as np
import pytest
from hypothesis import settings

from fedrank.experiments.executors import set_worker_environment

# Property tests draw the same examples on every run (a test run is reproducible, and CI
# cannot go red on a draw no one can replay); HYPOTHESIS_PROFILE=explore draws fresh ones.
# No per-example deadline: a timing limit is a benchmark's job, and on a loaded machine
# (four workers on two cores) Hypothesis's 200 ms default fails correct code.
settings.register_profile("default", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Four test workers share two cores: OpenMP threads (LightGBM's) that spin while they wait
# would spin against the other workers, as in a pool (fedrank.experiments.executors: 44 s
# instead of 7.6 s for two GBDT runs side by side). Set before any test imports LightGBM;
# inherited by the CLI processes tests start.
set_worker_environment()

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """The real-data directory (``FEDRANK_DATA_DIR`` or ``<repo>/../shared/data``)."""
    override = os.environ.get("FEDRANK_DATA_DIR")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "data"


#: The modules that take longest, longest first (seconds per module in a suite run,
#: ``--durations=0``, 2026-11-29), collected first: the pytest-xdist workers take modules in
#: collection order (``--dist loadfile``), and a long module taken last runs alone at the
#: end; longest first keeps the whole run short.
LONGEST_FIRST: tuple[str, ...] = (
    "tests/experiments/fedps/test_clients.py",
    "tests/experiments/fedps/test_fedps_dp.py",
    "tests/experiments/fedps/test_fedps.py",
    "tests/conformance/test_aggregator_conformance.py",
    "tests/experiments/fedps/test_fedps_reproduce.py",
    "tests/cli/test_cli_edges.py",
    "tests/report/test_report.py",
    "tests/examples/test_examples.py",
    "tests/browser/test_dashboard_browser.py",
    "tests/experiments/frecency/test_frecency_study_acceptance.py",
    "tests/server/test_server_secagg.py",
    "tests/server/test_server_durability.py",
    "tests/cli/test_cli_frecency.py",
    "tests/cli/test_cli_foltr.py",
    "tests/cli/test_cli_foltr_reproduce.py",
    "tests/experiments/test_executors.py",
    "tests/experiments/fedps/test_fedps_continuous.py",
    "tests/server/test_server_fuzz.py",
    "tests/experiments/foltr/test_foltr.py",
    "tests/experiments/fedps/test_fedps_attacks.py",
    "tests/baselines/test_ranking_svm.py",
    "tests/experiments/frecency/test_frecency_study.py",
    "tests/experiments/foltr/test_foltr_acceptance.py",
    "tests/cli/test_cli_privacy.py",
    "tests/server/test_server_schemathesis.py",
    "tests/server/test_server_seeds.py",
    "tests/server/test_server_privacy.py",
    "tests/server/test_server_recovery.py",
    "tests/docs/test_docs_site.py",
    "tests/server/test_dashboard.py",
)


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Longest modules first (:data:`LONGEST_FIRST`), everything else in its usual order."""
    missing = [m for m in LONGEST_FIRST if not (REPO_ROOT / m).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names missing modules: {missing}")
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        module = item.path.relative_to(REPO_ROOT).as_posix()
        return rank.get(module, len(rank))

    items.sort(key=key)  # stable: tests keep their order within a module


#: A small study: it compiles every numba kernel of the simulators
#: (``fedrank.simulation.frecency.kernels``, ``fedrank.data.synthetic_kernels``) into their
#: on-disk caches.
_KERNEL_WARMUP = (
    "from fedrank.experiments.frecency.study import FrecencyStudyConfig, run_study; "
    "run_study(FrecencyStudyConfig(n_users=60, iterations=2, seed=1))"
)
#: The warm-up process and the file its errors go to.
_WARMUP = pytest.StashKey[tuple[subprocess.Popen, IO[str]]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """With pytest-xdist workers, the controller compiles the simulators' numba kernels
    once, in a background process, while the workers start on the longest modules (which
    do not use them): on a fresh checkout every worker reaching a kernel first would
    compile it itself (about 18 s of compiling, up to four times over on two cores)."""
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    # a file, not a pipe: a pipe left unread until the end could fill and block
    errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed at session finish)
    process = subprocess.Popen(
        [sys.executable, "-c", _KERNEL_WARMUP], stdout=subprocess.DEVNULL, stderr=errors
    )
    config.stash[_WARMUP] = (process, errors)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The kernel warm-up's failure is reported (the tests compile what they need anyway);
    with the real data present, any skipped test fails the run (reported with -rs)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    warmup = session.config.stash.get(_WARMUP, None)
    if warmup is not None:
        process, errors = warmup
        if process.wait() != 0 and reporter is not None:
            errors.seek(0)
            reporter.write_line(
                f"the numba kernel warm-up (tests/conftest.py) failed with exit code "
                f"{process.returncode}: {errors.read().strip()[-2000:]}",
                red=True,
            )
        errors.close()
    if reporter is None or not shared_data_dir().is_dir() or exitstatus != 0:
        return
    skipped = len(reporter.stats.get("skipped", []))
    if skipped:
        reporter.write_line(
            f"{skipped} test(s) skipped although the data directory {shared_data_dir()} "
            "exists: failing the run (see the skip reasons above)",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"real data directory {path} is absent (set FEDRANK_DATA_DIR to use another)")
    return path


@pytest.fixture(scope="session")
def aol_log(data_dir: Path) -> Path:
    """The shared 1,000-user AOL click sample (FedPS's data)."""
    path = data_dir / "AOL" / "aol_top1000_users_clicks.tsv.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent: the AOL sample is needed")
    return path


@pytest.fixture(scope="session")
def firefox_dir(data_dir: Path) -> Path:
    path = data_dir / "firefox"
    if not path.is_dir():
        pytest.skip(f"{path} is absent: the Firefox places.sqlite files are needed")
    return path


@pytest.fixture(scope="session")
def letor_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-session LETOR parse cache (tests never touch the user's ~/.cache)."""
    return tmp_path_factory.mktemp("letor-cache")


@pytest.fixture(scope="session")
def mq2008_dir(data_dir: Path) -> Path:
    path = data_dir / "MQ2008"
    if not path.is_dir():
        pytest.skip(f"{path} is absent: the MQ2008 LETOR files are needed")
    return path


@pytest.fixture(scope="session")
def mq2008_fold1(mq2008_dir: Path, letor_cache: Path):  # noqa: ANN201 (LetorFold)
    from fedrank.data.letor.folds import load_fold

    return load_fold(mq2008_dir, 1, cache_dir=letor_cache)


def synthetic_split(
    rng: np.random.Generator,
    n_queries: int = 30,
    n_features: int = 5,
    max_docs: int = 25,
    name: str = "synthetic",
):  # noqa: ANN201 (LetorSplit)
    """A random LETOR split: labels 0-2 that depend on the first feature, so there is
    something to learn."""
    from fedrank.data.letor.split import LetorSplit

    sizes = rng.integers(1, max_docs + 1, size=n_queries)
    n = int(sizes.sum())
    features = rng.random((n, n_features), dtype=np.float32)
    labels = np.digitize(features[:, 0] + 0.3 * rng.random(n), [0.7, 1.05]).astype(np.int8)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    qids = np.array([str(i) for i in range(n_queries)])
    return LetorSplit(features, labels, offsets, qids, name)
