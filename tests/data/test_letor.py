"""Reading LETOR datasets (``fedrank.data.letor``): real files, malformed lines, cache, folds.

The real-data tests use ``../shared/data`` (``data_dir`` fixture): MQ2008 (LETOR 4.0 parts),
OHSUMED (LETOR 3.0 fold test sets, CRLF) and the LightGBM lambdarank sample. Expected counts
are the ones ``shared/data/README.md`` lists; spot checks read the text of the files here,
independently of the parser. Every cache lives under ``tmp_path``; nothing is written to the
data folder or to the user's ``~/.cache``.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrank.data.letor import formats
from fedrank.data.letor.cache import LetorCacheWarning, default_cache_dir
from fedrank.data.letor.folds import dataset_layout, load_fold, load_folds
from fedrank.data.letor.formats import read_lightgbm, read_svmlight
from fedrank.data.letor.split import LetorFold, LetorSplit
from fedrank.errors import ConfigError, DataFormatError

# shared/data/README.md, section 1: rows, queries, label 0/1/2 counts per part.
MQ2008_PARTS = {
    1: (2933, 157, (2316, 427, 190)),
    2: (3635, 157, (3080, 385, 170)),
    3: (3062, 157, (2424, 411, 227)),
    4: (2707, 157, (2140, 400, 167)),
    5: (2874, 156, (2319, 378, 177)),
}
# Section 2: rows and queries of every FoldK_test.txt.
OHSUMED_FILES = {1: (3383, 22), 2: (2570, 21), 3: (3076, 21), 4: (3573, 21), 5: (3538, 21)}
# Fold k (1-based): parts of train, vali, test (LETOR 4.0 readme).
FOLD_PARTS = {
    1: ((1, 2, 3), 4, 5),
    2: ((2, 3, 4), 5, 1),
    3: ((3, 4, 5), 1, 2),
    4: ((4, 5, 1), 2, 3),
    5: ((5, 1, 2), 3, 4),
}


def label_counts(split: LetorSplit, n: int) -> tuple[int, ...]:
    return tuple(int(c) for c in np.bincount(split.labels, minlength=n))


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


def make_split(sizes: list[int], n_features: int = 2, name: str = "toy") -> LetorSplit:
    n = sum(sizes)
    return LetorSplit(
        features=np.arange(n * n_features, dtype=np.float32).reshape(n, n_features),
        labels=(np.arange(n) % 3).astype(np.int8),
        query_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=np.array([f"q{i}" for i in range(len(sizes))]),
        name=name,
    )


# ----------------------------------------------------------------------------------------
# Real data
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mq2008(data_dir: Path) -> Path:
    path = data_dir / "MQ2008"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def ohsumed(data_dir: Path) -> Path:
    path = data_dir / "OHSUMED"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def lightgbm_dir(data_dir: Path) -> Path:
    path = data_dir / "lightgbm_lambdarank"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the real-data tests, so that each real file is parsed once."""
    return tmp_path_factory.mktemp("letor-cache")


@pytest.fixture(scope="session")
def mq2008_parts(mq2008: Path, shared_cache: Path) -> dict[int, LetorSplit]:
    return {j: read_svmlight(mq2008 / f"S{j}.txt", cache_dir=shared_cache) for j in range(1, 6)}


@pytest.mark.parametrize("part", sorted(MQ2008_PARTS))
def test_mq2008_part_counts(mq2008_parts: dict[int, LetorSplit], part: int) -> None:
    rows, queries, labels = MQ2008_PARTS[part]
    split = mq2008_parts[part]
    assert (split.n_docs, split.n_queries, split.n_features) == (rows, queries, 46)
    assert label_counts(split, 3) == labels
    assert split.name == f"S{part}.txt"
    assert split.features.dtype == np.float32 and split.features.flags.c_contiguous
    assert split.query_ids.dtype.kind == "U"


def test_mq2008_whole_dataset(mq2008: Path, shared_cache: Path) -> None:
    assert dataset_layout(mq2008) == "parts"
    folds = load_folds(mq2008, cache_dir=shared_cache)
    assert [f.name for f in folds] == [f"MQ2008 Fold{k}" for k in range(1, 6)]
    tests = LetorSplit.concat([f.test for f in folds], name="all")
    assert (tests.n_docs, tests.n_queries) == (15211, 784)
    assert len(set(tests.query_ids)) == 784  # the test sets partition the queries
    assert label_counts(tests, 3) == (12279, 2001, 931)
    for fold in folds:
        ids = [fold.train.query_ids, fold.vali.query_ids, fold.test.query_ids]
        assert sum(a.size for a in ids) == 784
        assert len(set(np.concatenate(ids))) == 784
        assert {fold.train.n_features, fold.vali.n_features, fold.test.n_features} == {46}


@pytest.mark.parametrize("k", sorted(FOLD_PARTS))
def test_mq2008_fold_assembly(
    mq2008: Path, shared_cache: Path, mq2008_parts: dict[int, LetorSplit], k: int
) -> None:
    fold = load_fold(mq2008, k, cache_dir=shared_cache)
    train_parts, vali_part, test_part = FOLD_PARTS[k]
    assert isinstance(fold, LetorFold) and fold.name == f"MQ2008 Fold{k}"
    assert fold.train.name == f"MQ2008 Fold{k} train"
    assert fold.vali.name == f"MQ2008 Fold{k} vali"
    assert fold.test.name == f"MQ2008 Fold{k} test"
    parts = [mq2008_parts[j] for j in train_parts]
    assert np.array_equal(fold.train.query_ids, np.concatenate([p.query_ids for p in parts]))
    assert np.array_equal(fold.train.features, np.concatenate([p.features for p in parts]))
    assert np.array_equal(fold.train.labels, np.concatenate([p.labels for p in parts]))
    assert fold.train.n_docs == sum(MQ2008_PARTS[j][0] for j in train_parts)
    for split, part in ((fold.vali, vali_part), (fold.test, test_part)):
        assert np.array_equal(split.query_ids, mq2008_parts[part].query_ids)
        assert np.array_equal(split.features, mq2008_parts[part].features)
        assert np.array_equal(split.query_offsets, mq2008_parts[part].query_offsets)


def test_mq2008_row_matches_the_text(mq2008: Path, mq2008_parts: dict[int, LetorSplit]) -> None:
    lines = (mq2008 / "S3.txt").read_text().splitlines()
    split = mq2008_parts[3]
    for row in (0, 1234, len(lines) - 1):
        data, _, comment = lines[row].partition("#")
        tokens = data.split()
        assert comment.startswith("docid = GX")
        assert split.labels[row] == int(tokens[0])
        q = int(np.searchsorted(split.query_offsets, row, side="right")) - 1
        assert split.query_of_doc[row] == q
        assert split.query_ids[q] == tokens[1].removeprefix("qid:")
        expected = np.zeros(46, dtype=np.float32)
        for token in tokens[2:]:
            idx, value = token.split(":")
            expected[int(idx) - 1] = np.float32(float(value))
        assert np.array_equal(split.features[row], expected)


def test_ohsumed(ohsumed: Path, shared_cache: Path) -> None:
    assert dataset_layout(ohsumed) == "ohsumed"
    assert b"\r\n" in (ohsumed / "Fold1_test.txt").read_bytes()[:2000]
    files = {
        k: read_svmlight(ohsumed / f"Fold{k}_test.txt", cache_dir=shared_cache) for k in range(1, 6)
    }
    for k, (rows, queries) in OHSUMED_FILES.items():
        assert (files[k].n_docs, files[k].n_queries, files[k].n_features) == (rows, queries, 45)
    folds = load_folds(ohsumed, cache_dir=shared_cache)
    everything = LetorSplit.concat([f.test for f in folds], name="all")
    assert (everything.n_docs, everything.n_queries) == (16140, 106)
    assert label_counts(everything, 3) == (11303, 2585, 2252)
    all_ids = set(everything.query_ids)
    assert len(all_ids) == 106
    for k, fold in enumerate(folds, start=1):
        ids = np.concatenate([fold.train.query_ids, fold.vali.query_ids, fold.test.query_ids])
        assert ids.size == 106 and set(ids) == all_ids
        assert {fold.train.n_features, fold.vali.n_features, fold.test.n_features} == {45}
        # S_j = Fold{(j % 5) + 1}_test.txt, so FoldK tests on FoldK_test.txt.
        assert np.array_equal(fold.test.query_ids, files[k].query_ids)
    # Fold5_test.txt has the bytes of the original Fold1/vali.txt.
    assert np.array_equal(folds[0].vali.query_ids, files[5].query_ids)
    assert np.array_equal(folds[0].vali.features, files[5].features)
    train1 = [files[2], files[3], files[4]]
    assert np.array_equal(folds[0].train.query_ids, np.concatenate([f.query_ids for f in train1]))


def test_lightgbm_sample(lightgbm_dir: Path, shared_cache: Path) -> None:
    assert dataset_layout(lightgbm_dir) == "lightgbm"
    train = read_lightgbm(lightgbm_dir / "rank.train", cache_dir=shared_cache)
    test = read_lightgbm(lightgbm_dir / "rank.test", cache_dir=shared_cache)
    assert (train.n_docs, train.n_queries) == (3005, 201)
    assert (test.n_docs, test.n_queries) == (768, 50)
    assert label_counts(train, 5) == (645, 1211, 858, 222, 69)
    assert label_counts(test, 5) == (206, 256, 252, 44, 10)
    sizes = np.loadtxt(lightgbm_dir / "rank.train.query", dtype=np.int64)
    assert np.array_equal(train.query_sizes, sizes)
    assert list(train.query_ids[:3]) == ["0", "1", "2"] and train.query_ids[-1] == "200"
    used = np.flatnonzero(np.any(train.features != 0, axis=0))
    assert used.size <= 218 and train.n_features <= 300

    fold = load_fold(lightgbm_dir, 1, cache_dir=shared_cache)
    assert fold.vali is None and fold.name == "lightgbm_lambdarank Fold1"
    width = max(train.n_features, test.n_features)
    assert fold.train.n_features == fold.test.n_features == width
    assert np.array_equal(fold.train.features[:, : train.n_features], train.features)
    assert np.array_equal(fold.test.features[:, : test.n_features], test.features)
    assert [f.name for f in load_folds(lightgbm_dir, cache_dir=shared_cache)] == [fold.name]
    with pytest.raises(ConfigError, match="single train/test split"):
        load_fold(lightgbm_dir, 2, cache_dir=shared_cache)


def test_warm_load_does_not_parse(
    mq2008: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cold = load_fold(mq2008, 2, cache_dir=shared_cache)

    def boom(*args: object) -> None:
        raise AssertionError("parsed although the cache holds the file")

    monkeypatch.setattr(formats, "_parse_svmlight", boom)
    warm = load_fold(mq2008, 2, cache_dir=shared_cache)
    for a, b in ((cold.train, warm.train), (cold.vali, warm.vali), (cold.test, warm.test)):
        for field in ("features", "labels", "query_offsets", "query_ids"):
            x, y = getattr(a, field), getattr(b, field)
            assert np.array_equal(x, y) and x.dtype == y.dtype
        assert a.name == b.name


# ----------------------------------------------------------------------------------------
# Format details on small files
# ----------------------------------------------------------------------------------------


def test_small_file_with_comments_blank_lines_and_crlf(tmp_path: Path) -> None:
    text = (
        "# header comment\n"
        "2 qid:7 1:0.5 3:-1.25 # doc a\n"
        "\n"
        "0.0 qid:7\t3:2e-3  1:1\n"
        "1 qid:x9 2:4 # doc c\n"
    )
    lf = read_svmlight(write(tmp_path / "lf.txt", text), cache_dir=None)
    crlf = read_svmlight(write(tmp_path / "crlf.txt", text.replace("\n", "\r\n")), cache_dir=None)
    for split in (lf, crlf):
        assert split.n_features == 3
        assert np.array_equal(
            split.features,
            np.array([[0.5, 0, -1.25], [1, 0, 2e-3], [0, 4, 0]], dtype=np.float32),
        )
        assert split.labels.tolist() == [2, 0, 1]
        assert split.query_offsets.tolist() == [0, 2, 3]
        assert split.query_ids.tolist() == ["7", "x9"]
    wide = read_svmlight(tmp_path / "lf.txt", 10, cache_dir=None)
    assert wide.n_features == 10 and np.array_equal(wide.features[:, :3], lf.features)
    assert not wide.features[:, 3:].any()


def test_rows_without_features(tmp_path: Path) -> None:
    split = read_svmlight(write(tmp_path / "f.txt", "1 qid:1\n0 qid:2\n"), cache_dir=None)
    assert split.features.shape == (2, 0) and split.query_sizes.tolist() == [1, 1]


# ----------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------

GOOD = "1 qid:1 1:0.5 2:0.25\n\n"  # the bad line below is line 3

BAD_LINES = [
    ("0 qid:1 1:0.5 foo", "token 'foo' is not idx:value"),
    ("0 qid:1 1::0.5", "not idx:value"),
    ("0 qid:1 :0.5", "not idx:value"),
    ("0 qid:1 1:", "not idx:value"),
    ("0 qid:1 1:0.5 2:1 1:0.7", "feature id 1 appears twice"),
    ("0 qid:1 0:0.5", "feature id 0 .* not positive"),
    ("0 qid:1 -2:0.5", "feature id -2 .* not positive"),
    ("0 qid:1 a:0.5", "feature id 'a' .* not an integer"),
    ("0 qid:1 1.5:0.5", "not an integer"),
    ("0 qid:1 1:abc", "value 'abc' in token '1:abc' is not a number"),
    ("0 qid:1 1:nan", "value 'nan' .* not finite"),
    ("0 qid:1 1:-inf", "not finite"),
    ("0 qid:1 1:1e39", "float32 range"),
    ("0 qid:1 99999999:1", "larger than"),
    ("0 qid:1 123456789012345678901234:1", "larger than"),
    ("0 1:0.5", "missing qid: the second token is '1:0.5'"),
    ("3", "missing qid: the second token is nothing"),
    ("0 qid: 1:0.5", "empty qid"),
    ("0 qid:1 1:0.5 qid:2", "qid in a feature position"),
    ("-1 qid:1 1:0.5", "label '-1' is not a relevance grade"),
    ("1.5 qid:1 1:0.5", "label '1.5' is not a non-negative integer"),
    ("x qid:1 1:0.5", "label 'x' is not a non-negative integer"),
    ("inf qid:1 1:0.5", "label 'inf'"),
    ("300 qid:1 1:0.5", "0..127"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_malformed_line(tmp_path: Path, line: str, message: str, newline: str) -> None:
    path = write(tmp_path / "bad.txt", (GOOD + line + "\n" + GOOD).replace("\n", newline))
    with pytest.raises(DataFormatError, match=message) as err:
        read_svmlight(path, cache_dir=None)
    assert str(err.value).startswith(f"{path}:3: ")


def test_id_above_n_features(tmp_path: Path) -> None:
    path = write(tmp_path / "f.txt", "0 qid:1 1:1 3:1\n0 qid:1 4:1\n")
    assert read_svmlight(path, cache_dir=None).n_features == 4
    with pytest.raises(DataFormatError, match=r":2: feature id 4 .* exceeds n_features=3"):
        read_svmlight(path, 3, cache_dir=None)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "46"])
def test_bad_n_features(tmp_path: Path, bad: object) -> None:
    path = write(tmp_path / "f.txt", GOOD)
    with pytest.raises(ConfigError, match="n_features"):
        read_svmlight(path, bad, cache_dir=None)  # type: ignore[arg-type]


def test_first_bad_line_is_reported(tmp_path: Path) -> None:
    # A feature error on line 2 comes before a label error on line 3.
    path = write(tmp_path / "f.txt", "0 qid:1 1:1\n0 qid:1 1:x\nbad qid:1 1:1\n")
    with pytest.raises(DataFormatError, match=r"f\.txt:2: value 'x'"):
        read_svmlight(path, cache_dir=None)
    path = write(tmp_path / "g.txt", "0 qid:1 1:1\nbad qid:1 1:1\n0 qid:1 1:x\n")
    with pytest.raises(DataFormatError, match=r"g\.txt:2: label 'bad'"):
        read_svmlight(path, cache_dir=None)


def test_non_contiguous_query(tmp_path: Path) -> None:
    path = write(tmp_path / "f.txt", "0 qid:10 1:1\n0 qid:11 1:1\n\n1 qid:10 1:1\n")
    with pytest.raises(DataFormatError) as err:
        read_svmlight(path, cache_dir=None)
    message = str(err.value)
    assert message.startswith(f"{path}:4: qid '10' reappears")
    assert "first appeared on line 1" in message and "contiguous" in message


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path / "f.txt", "\n# only a comment\n\n")
    with pytest.raises(DataFormatError, match="no data rows"):
        read_svmlight(path, cache_dir=None)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_svmlight(tmp_path / "nope.txt", cache_dir=None)
    write(tmp_path / "rank.train", "0 1:1\n")
    with pytest.raises(FileNotFoundError, match=r"rank\.train\.query"):
        read_lightgbm(tmp_path / "rank.train", cache_dir=None)


def test_lightgbm_errors(tmp_path: Path) -> None:
    data = write(tmp_path / "r.train", "1 1:0.5 3:1\n0 2:1\n2 1:1\n")
    query = write(tmp_path / "r.train.query", "2\n1\n")
    split = read_lightgbm(data, cache_dir=None)
    assert split.query_offsets.tolist() == [0, 2, 3] and split.query_ids.tolist() == ["0", "1"]
    write(query, "2\r\n2\r\n")
    with pytest.raises(DataFormatError) as err:
        read_lightgbm(data, cache_dir=None)
    assert all(s in str(err.value) for s in (str(data), str(query), "4 rows", "has 3 rows"))
    write(query, "2\n0\n")
    with pytest.raises(DataFormatError, match=r"r\.train\.query:2: '0' is not a positive"):
        read_lightgbm(data, cache_dir=None)
    other = write(tmp_path / "groups.txt", "3\n")
    assert read_lightgbm(data, other, cache_dir=None).n_queries == 1
    with_qid = write(tmp_path / "q.train", "1 qid:1 1:0.5\n")
    with pytest.raises(DataFormatError, match=r"q\.train:1: .*LightGBM-style rows have no qid"):
        read_lightgbm(with_qid, other, cache_dir=None)


def test_layout_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such directory"):
        dataset_layout(tmp_path / "absent")
    with pytest.raises(FileNotFoundError):
        load_fold(tmp_path / "absent", 1, cache_dir=None)
    write(tmp_path / "readme.txt", "hello")
    with pytest.raises(DataFormatError, match=r"S1\.txt\.\.S5\.txt.*None of these files"):
        dataset_layout(tmp_path)
    for j in (1, 2, 3):
        write(tmp_path / f"S{j}.txt", GOOD)
    with pytest.raises(DataFormatError, match=r"parts layout lacks S4\.txt, S5\.txt"):
        load_folds(tmp_path, cache_dir=None)


def write_parts(directory: Path, widths: tuple[int, ...] = (2, 2, 2, 2, 2)) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for j, width in enumerate(widths, start=1):
        write(directory / f"S{j}.txt", f"{j % 3} qid:{j}0 {width}:{j}\n0 qid:{j}1 1:0.5\n")
    return directory


@pytest.mark.parametrize("fold", [0, 6, -1, True, 1.0, "1"])
def test_fold_out_of_range(tmp_path: Path, fold: object) -> None:
    directory = write_parts(tmp_path / "toy")
    with pytest.raises(ConfigError, match="fold"):
        load_fold(directory, fold, cache_dir=None)  # type: ignore[arg-type]


def test_layouts_and_common_width(tmp_path: Path) -> None:
    parts = write_parts(tmp_path / "parts", widths=(2, 7, 3, 2, 2))
    assert dataset_layout(parts) == "parts"
    for fold in load_folds(parts, cache_dir=None):
        assert {fold.train.n_features, fold.vali.n_features, fold.test.n_features} == {7}
    fold3 = load_fold(parts, 3, cache_dir=None)
    assert fold3.train.query_ids.tolist() == ["30", "31", "40", "41", "50", "51"]
    assert fold3.vali.query_ids.tolist() == ["10", "11"]
    assert fold3.test.query_ids.tolist() == ["20", "21"]
    assert fold3.test.features[0].tolist() == [0, 0, 0, 0, 0, 0, 2]  # S2 row: "2 qid:20 7:2"

    folds_dir = tmp_path / "folds"
    for k in range(1, 6):
        (folds_dir / f"Fold{k}").mkdir(parents=True)
        for split in ("train", "vali", "test"):
            write(folds_dir / f"Fold{k}" / f"{split}.txt", f"1 qid:{k}{split} {k}:1\n")
    assert dataset_layout(folds_dir) == "folds"
    fold2 = load_fold(folds_dir, 2, cache_dir=None)
    assert fold2.vali.query_ids.tolist() == ["2vali"] and fold2.test.name == "folds Fold2 test"
    assert fold2.train.n_features == 5  # the largest id over all fifteen files

    ohsumed = tmp_path / "oh"
    ohsumed.mkdir()
    for k in range(1, 6):
        write(ohsumed / f"Fold{k}_test.txt", f"1 qid:{k} 1:1\r\n")
    assert dataset_layout(ohsumed) == "ohsumed"
    fold1 = load_fold(ohsumed, 1, cache_dir=None)
    assert fold1.train.query_ids.tolist() == ["2", "3", "4"]
    assert (fold1.vali.query_ids.tolist(), fold1.test.query_ids.tolist()) == (["5"], ["1"])

    lgb = tmp_path / "lgb"
    lgb.mkdir()
    for split in ("train", "vali", "test"):
        write(lgb / f"rank.{split}", "1 1:1\n0 2:1\n")
        write(lgb / f"rank.{split}.query", "2\n")
    assert load_fold(lgb, 1, cache_dir=None).vali is not None
    (lgb / "rank.vali.query").unlink()
    with pytest.raises(DataFormatError, match=r"rank\.vali\.query"):
        dataset_layout(lgb)


# ----------------------------------------------------------------------------------------
# Cache
# ----------------------------------------------------------------------------------------


def npz_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.npz"))


def assert_same(a: LetorSplit, b: LetorSplit) -> None:
    for field in ("features", "labels", "query_offsets", "query_ids"):
        x, y = getattr(a, field), getattr(b, field)
        assert np.array_equal(x, y) and x.dtype == y.dtype, field


def test_cache_roundtrip_and_invalidation(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = write(tmp_path / "f.txt", "1 qid:a 1:0.5 2:0.25\n0 qid:b 2:1\n")
    first = read_svmlight(path, cache_dir=cache)
    assert len(npz_files(cache)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = read_svmlight(path, cache_dir=cache)
    assert_same(first, second)
    assert not list(cache.glob("*.tmp"))

    write(path, "1 qid:a 1:0.75 2:0.25\n0 qid:b 2:1\n")  # same size, new content
    changed = read_svmlight(path, cache_dir=cache)
    assert changed.features[0, 0] == np.float32(0.75)
    assert len(npz_files(cache)) == 2
    assert read_svmlight(path, 5, cache_dir=cache).n_features == 5  # n_features is in the key
    assert len(npz_files(cache)) == 3


@pytest.mark.parametrize("damage", ["garbage", "truncate", "other entry"])
def test_corrupt_cache_entry_is_reparsed(tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    path = write(tmp_path / "f.txt", "1 qid:a 1:0.5\n0 qid:b 2:1\n")
    expected = read_svmlight(path, cache_dir=cache)
    (entry,) = npz_files(cache)
    if damage == "garbage":
        entry.write_bytes(b"not an npz file")
    elif damage == "truncate":
        entry.write_bytes(entry.read_bytes()[:200])
    else:
        other = write(tmp_path / "g.txt", "2 qid:z 1:9\n")
        read_svmlight(other, cache_dir=tmp_path / "other")
        entry.write_bytes(npz_files(tmp_path / "other")[0].read_bytes())
    with pytest.warns(LetorCacheWarning, match="corrupt or unreadable.*re-parsing"):
        again = read_svmlight(path, cache_dir=cache)
    assert_same(expected, again)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the entry was overwritten with a good one
        assert_same(expected, read_svmlight(path, cache_dir=cache))


def test_corrupt_feature_bytes_are_detected(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = write(tmp_path / "f.txt", "".join(f"1 qid:a {i}:0.5\n" for i in range(1, 60)))
    expected = read_svmlight(path, cache_dir=cache)
    (entry,) = npz_files(cache)
    blob = bytearray(entry.read_bytes())
    marker = blob.find(np.float32(0.5).tobytes())
    blob[marker : marker + 4] = np.float32(7.0).tobytes()  # same size, CRC no longer matches
    entry.write_bytes(bytes(blob))
    with pytest.warns(LetorCacheWarning):
        assert_same(expected, read_svmlight(path, cache_dir=cache))


def test_no_cache_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDRANK_CACHE_DIR", str(tmp_path / "env-cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    directory = write_parts(tmp_path / "toy")
    before = sorted(p for p in tmp_path.rglob("*"))
    read_svmlight(directory / "S1.txt", cache_dir=None)
    load_folds(directory, cache_dir=None)
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_default_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDRANK_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    path = write(tmp_path / "f.txt", GOOD)
    read_svmlight(path)  # the default cache_dir follows the environment
    assert len(npz_files(tmp_path / "c")) == 1
    monkeypatch.setenv("FEDRANK_CACHE_DIR", "")
    assert default_cache_dir() is None
    monkeypatch.delenv("FEDRANK_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "fedrank" / "letor"


def test_unwritable_cache_warns_once(tmp_path: Path) -> None:
    directory = write_parts(tmp_path / "toy")
    not_a_dir = write(tmp_path / "file", "x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folds = load_folds(directory, cache_dir=not_a_dir / "cache")
    assert len(folds) == 5
    cache_warnings = [w for w in caught if issubclass(w.category, LetorCacheWarning)]
    assert len(cache_warnings) == 1 and "cannot write" in str(cache_warnings[0].message)


# ----------------------------------------------------------------------------------------
# LetorSplit
# ----------------------------------------------------------------------------------------


def test_split_accessors() -> None:
    split = make_split([2, 1, 3])
    assert (split.n_queries, split.n_docs, split.n_features) == (3, 6, 2)
    assert split.query_sizes.tolist() == [2, 1, 3] and split.query_sizes.dtype == np.int64
    assert split.query_of_doc.tolist() == [0, 0, 1, 2, 2, 2]
    assert split.query_of_doc.dtype == np.int64
    x, y = split.query(2)
    assert np.shares_memory(x, split.features) and x.shape == (3, 2)
    assert np.array_equal(x, split.features[3:6]) and np.array_equal(y, split.labels[3:6])
    for bad in (3, -1):
        with pytest.raises(IndexError, match="out of range"):
            split.query(bad)


def test_subset_and_concat() -> None:
    split = make_split([2, 1, 3])
    sub = split.subset(np.array([2, 0, 2]), name="picked")
    assert sub.name == "picked" and sub.query_ids.tolist() == ["q2", "q0", "q2"]
    assert sub.query_offsets.tolist() == [0, 3, 5, 8]
    expected_rows = [3, 4, 5, 0, 1, 3, 4, 5]
    assert np.array_equal(sub.features, split.features[expected_rows])
    assert np.array_equal(sub.labels, split.labels[expected_rows])
    assert sub.features.flags.c_contiguous
    assert split.subset([1]).name == "toy subset"
    empty = split.subset([])
    assert (empty.n_queries, empty.n_docs, empty.n_features) == (0, 0, 2)
    for bad in (np.array([True, False, True]), [3], [-1], [[0]], [0.5]):
        with pytest.raises(ConfigError):
            split.subset(bad)  # type: ignore[arg-type]

    other = make_split([1, 1], name="other")
    both = LetorSplit.concat([split, other, empty], name="both")
    assert both.query_offsets.tolist() == [0, 2, 3, 6, 7, 8]
    assert both.query_ids.tolist() == ["q0", "q1", "q2", "q0", "q1"]
    assert np.array_equal(both.features, np.concatenate([split.features, other.features]))
    assert np.array_equal(both.subset([3, 4]).features, other.features)
    with pytest.raises(ConfigError, match="different n_features"):
        LetorSplit.concat([split, make_split([1], n_features=3)], name="x")
    with pytest.raises(ConfigError, match="no splits"):
        LetorSplit.concat([], name="x")


def _replace(split: LetorSplit, **changes: object) -> dict[str, object]:
    fields = {f: getattr(split, f) for f in ("features", "labels", "query_offsets", "query_ids")}
    return {**fields, "name": split.name, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"features": np.zeros((3, 2))}, "float32"),
        ({"features": np.zeros((2, 3), dtype=np.float32).T}, "C-contiguous"),
        ({"features": np.zeros(3, dtype=np.float32)}, "2-D"),
        ({"labels": np.zeros(3, dtype=np.int64)}, "int8"),
        ({"labels": np.zeros(2, dtype=np.int8)}, r"shape \(3,\)"),
        ({"labels": np.array([0, -1, 0], dtype=np.int8)}, ">= 0"),
        ({"query_offsets": np.array([0, 2, 3], dtype=np.int32)}, "int64"),
        ({"query_offsets": np.array([1, 3], dtype=np.int64)}, "start at 0"),
        ({"query_offsets": np.array([0, 2], dtype=np.int64)}, "end at n_docs=3"),
        ({"query_offsets": np.array([0, 2, 2, 3], dtype=np.int64)}, "strictly increasing"),
        ({"query_ids": np.array(["a"])}, r"shape \(2,\)"),
        ({"query_ids": np.array(["a", "b"], dtype=object)}, "unicode"),
        ({"features": [[0.0, 0.0]] * 3}, "numpy array"),
    ],
)
def test_split_validation(changes: dict[str, object], message: str) -> None:
    split = make_split([2, 1])
    with pytest.raises(DataFormatError, match=message):
        LetorSplit(**_replace(split, **changes))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------
# Property: random LETOR files read back to what was written
# ----------------------------------------------------------------------------------------

values32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def letor_files(draw: st.DrawFn) -> dict[str, object]:
    d = draw(st.integers(1, 8))
    n_queries = draw(st.integers(1, 5))
    qids = draw(
        st.lists(
            st.text("abcXYZ0123456789_-", min_size=1, max_size=6),
            min_size=n_queries,
            max_size=n_queries,
            unique=True,
        )
    )
    queries = []
    for _ in range(n_queries):
        docs = []
        for _ in range(draw(st.integers(1, 4))):
            ids = draw(st.lists(st.integers(1, d), unique=True, max_size=d))
            docs.append(
                (
                    draw(st.integers(0, 4)),
                    draw(st.booleans()),  # label written as "2.0"
                    {i: draw(values32) for i in ids},
                    draw(st.none() | st.text("abc =xyz#", max_size=8)),
                    draw(st.booleans()),  # blank line after the row
                )
            )
        queries.append(docs)
    return {
        "qids": qids,
        "queries": queries,
        "newline": draw(st.sampled_from(["\n", "\r\n"])),
        "final_newline": draw(st.booleans()),
    }


def render(spec: dict[str, object], with_qid: bool) -> tuple[str, np.ndarray, np.ndarray]:
    lines, rows, labels = [], [], []
    for qid, docs in zip(spec["qids"], spec["queries"], strict=True):  # type: ignore[call-overload]
        for label, as_float, feats, comment, blank in docs:
            tokens = [f"{label}.0" if as_float else str(label)]
            if with_qid:
                tokens.append(f"qid:{qid}")
            tokens += [f"{i}:{v!r}" for i, v in feats.items()]
            lines.append(" ".join(tokens) + ("" if comment is None else f" #{comment}"))
            if blank:
                lines.append("")
            rows.append(feats)
            labels.append(label)
    width = max((max(f) for f in rows if f), default=0)
    features = np.zeros((len(rows), width), dtype=np.float32)
    for r, feats in enumerate(rows):
        for i, v in feats.items():
            features[r, i - 1] = v
    text = spec["newline"].join(lines) + (spec["newline"] if spec["final_newline"] else "")  # type: ignore[attr-defined]
    return text, features, np.array(labels, dtype=np.int8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(letor_files())
def test_random_files_read_back(spec: dict[str, object]) -> None:
    sizes = [len(docs) for docs in spec["queries"]]  # type: ignore[attr-defined]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        text, features, labels = render(spec, with_qid=True)
        path = tmp_dir / "data.txt"
        path.write_bytes(text.encode())
        for cache in (None, tmp_dir / "cache", tmp_dir / "cache"):  # cold, then warm
            split = read_svmlight(path, cache_dir=cache)
            assert np.array_equal(split.features, features)
            assert np.array_equal(split.labels, labels)
            assert split.query_offsets.tolist() == offsets.tolist()
            assert split.query_ids.tolist() == spec["qids"]

        text, features, labels = render(spec, with_qid=False)
        path.write_bytes(text.encode())
        (tmp_dir / "groups").write_text("".join(f"{s}\n" for s in sizes))
        split = read_lightgbm(path, tmp_dir / "groups", cache_dir=None)
        assert np.array_equal(split.features, features)
        assert np.array_equal(split.labels, labels)
        assert split.query_offsets.tolist() == offsets.tolist()
        assert split.query_ids.tolist() == [str(i) for i in range(len(sizes))]
