"""Bad input, as a new user gives it: every case exits non-zero with one line on stderr that names
the argument, file, line or artifact, no traceback, and leaves the work directory as it was."""

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from data.prepared import load_prepared
from experiments import cli
from tests.data.conftest import INTERACTIONS, make_raw_dir, write_truncated_gzip

TINY = ["--config", "tiny"]


def _snapshot(root: Path) -> dict:
    """Every file under root with its size and modification time (empty if root is absent); a
    symlink as itself (it may point nowhere, or at itself)."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def prepared_tiny(tmp_path_factory) -> Path:
    """A work directory with the tiny synthetic dataset prepared (config.json, raw/, prepared/)."""
    w = tmp_path_factory.mktemp("prepared") / "w"
    assert cli.main(["prepare", *TINY, "--workdir", str(w)]) == 0
    return w


def _fresh(tmp_path: Path, _src: Path) -> Path:
    return tmp_path / "w"


def _prepared(tmp_path: Path, src: Path) -> Path:
    w = tmp_path / "w"
    shutil.copytree(src, w)
    return w


def _file(tmp_path: Path, _src: Path) -> Path:
    w = tmp_path / "w"
    w.write_text("not a directory\n")
    return w


def _bad_sids(tmp_path: Path, src: Path) -> Path:
    """Prepared, with a tokenizer directory whose sids.npy was cut short."""
    w = _prepared(tmp_path, src)
    (w / "tokenizer").mkdir()
    with open(w / "tokenizer" / "sids.npy", "wb") as f:
        np.save(f, np.zeros((300, 4), np.int32))
    data = (w / "tokenizer" / "sids.npy").read_bytes()
    (w / "tokenizer" / "sids.npy").write_bytes(data[: len(data) // 2])
    (w / "tokenizer" / "asins.txt").write_text("".join(f"A{i}\n" for i in range(300)))
    return w


def _tokenizer(w: Path, asins: list[str]) -> None:
    """A tokenizer directory with distinct SIDs for `asins`."""
    (w / "tokenizer").mkdir()
    n = len(asins)
    codes = np.zeros((n, 3), np.int32)
    sids = np.concatenate([codes, np.arange(n, dtype=np.int32)[:, None]], 1)
    with open(w / "tokenizer" / "sids.npy", "wb") as f:
        np.save(f, sids)
    (w / "tokenizer" / "asins.txt").write_text("".join(f"{a}\n" for a in asins))


def _catalog(w: Path) -> list[str]:
    return [str(a) for a in load_prepared(w / "prepared").catalog.asins]


def _wrong_asins(tmp_path: Path, src: Path) -> Path:
    """Prepared, with SIDs for other items (asins.txt does not list the catalog's items)."""
    w = _prepared(tmp_path, src)
    _tokenizer(w, [f"OTHER{i}" for i in range(len(_catalog(w)))])
    return w


def _bad_config(tmp_path: Path, src: Path) -> Path:
    w = _prepared(tmp_path, src)
    (w / "config.json").write_text('{"seqmodel": {"num_layers": 2')
    return w


def _mistyped_config(tmp_path: Path, src: Path) -> Path:
    """Prepared, with a hand-edited config.json whose five_core is the string "no"."""
    import json

    w = _prepared(tmp_path, src)
    cfg = json.loads((w / "config.json").read_text())
    cfg["data"]["five_core"] = "no"
    (w / "config.json").write_text(json.dumps(cfg))
    return w


def _config_without_group(tmp_path: Path, src: Path) -> Path:
    """Prepared, with a hand-edited config.json that lost its whole rqvae group."""
    import json

    w = _prepared(tmp_path, src)
    cfg = json.loads((w / "config.json").read_text())
    del cfg["rqvae"]
    (w / "config.json").write_text(json.dumps(cfg))
    return w


def _config_is_dir(tmp_path: Path, src: Path) -> Path:
    w = _prepared(tmp_path, src)
    (w / "config.json").unlink()
    (w / "config.json").mkdir()
    return w


def _bad_retriever(tmp_path: Path, src: Path) -> Path:
    """Prepared and tokenized, with a retriever directory whose description is garbage."""
    w = _prepared(tmp_path, src)
    _tokenizer(w, _catalog(w))
    (w / "retriever_loo" / "checkpoints").mkdir(parents=True)
    (w / "retriever_loo" / "retriever.json").write_text("{oops")
    return w


def _results_garbage(tmp_path: Path, src: Path) -> Path:
    """Prepared, with a results/warm.json cut off after its first byte."""
    w = _prepared(tmp_path, src)
    (w / "results").mkdir()
    (w / "results" / "warm.json").write_text("{")
    return w


def _ledger(text: str):
    """Prepared, with a stages.json holding `text`."""

    def make(tmp_path: Path, src: Path) -> Path:
        w = _prepared(tmp_path, src)
        (w / "stages.json").write_text(text)
        return w

    return make


def _mistyped_retriever(tmp_path: Path, src: Path) -> Path:
    """Prepared and tokenized, with a retriever.json whose num_levels is the string "four"."""
    import json

    w = _prepared(tmp_path, src)
    _tokenizer(w, _catalog(w))
    (w / "retriever_loo" / "checkpoints").mkdir(parents=True)
    seq = json.loads((w / "config.json").read_text())["seqmodel"]
    info = {"seqmodel": seq, "num_levels": "four", "codebook_size": 8}
    (w / "retriever_loo" / "retriever.json").write_text(json.dumps(info))
    return w


def _halved_records(tmp_path: Path, src: Path) -> Path:
    """Prepared, with every array_record file of the prepared dataset cut in half."""
    w = _prepared(tmp_path, src)
    for f in (w / "prepared").rglob("*array_record*"):
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2])
    return w


def _raw(kind: str):
    """A fresh work directory beside a raw folder damaged in one way; {raw} in argv names it."""

    def make(tmp_path: Path, _src: Path) -> Path:
        raw = make_raw_dir(tmp_path, "Tiny")
        reviews, meta = raw / "reviews_Tiny_5.json", raw / "meta_Tiny.json"
        if kind == "bad_line":
            reviews.write_text(reviews.read_text() + '{"reviewerID": "x", "asin": \n')
        elif kind == "truncated_gz":
            write_truncated_gzip(reviews.with_suffix(".json.gz"), reviews.read_text())
            reviews.unlink()
        elif kind == "empty":
            reviews.write_text("")
        elif kind == "no_meta":
            meta.unlink()
        elif kind == "bad_meta":
            meta.write_text("{'asin': 'B', 'title': \n" + meta.read_text())
        elif kind == "two_reviews":
            shutil.copy(reviews, raw / "reviews_Other_5.json")
        elif kind == "binary":
            reviews.write_bytes(gzip.compress(b"\xff\xfe\x00garbage" * 50)[:-3])
        return tmp_path / "w"

    return make


def _table(kind: str):
    """A folder with an interactions table damaged in one way."""

    def make(tmp_path: Path, _src: Path) -> Path:
        raw = tmp_path / "raw_Tiny_plain"
        raw.mkdir()
        text = INTERACTIONS
        if kind == "no_column":
            text = text.replace("timestamp", "time")
        elif kind == "bad_time":
            text = text.replace("u1,i2,50,4", "u1,i2,yesterday,4")
        (raw / "interactions.csv").write_text(text)
        return tmp_path / "w"

    return make


# (id, setup, argv after the command's --workdir, words the one line must hold)
CASES = [
    # Arguments and config values, on a fresh work directory: refused before any work.
    ("fraction-0.7", _fresh, ["train-retriever", "--cold-start", "0.7"], ["--cold-start", "0.7"]),
    ("fraction-0", _fresh, ["train-retriever", "--cold-start", "0"], ["--cold-start"]),
    (
        "loo-with-fraction",
        _fresh,
        ["train-retriever", "--split", "loo", "--cold-start", "0.02"],
        ["--cold-start", "loo"],
    ),
    ("cold-without-fraction", _fresh, ["train-retriever"], ["--cold-start", "required"]),
    ("eval-fraction", _fresh, ["eval-cold-start", "--cold-start", "0.7"], ["--cold-start"]),
    (
        "beam-negative",
        _fresh,
        ["eval-cold-start", "--cold-start", "0.02", "--beam-size", "-3"],
        ["--beam-size"],
    ),
    (
        "batch-zero",
        _fresh,
        ["eval-cold-start", "--cold-start", "0.02", "--batch-size", "0"],
        ["--batch-size"],
    ),
    ("warm-batch-zero", _fresh, ["eval-warm", "--batch-size", "0"], ["--batch-size"]),
    ("diagnose-fraction", _fresh, ["diagnose", "--cold-start", "1.5"], ["--cold-start"]),
    ("diagnose-weights", _fresh, ["diagnose", "--prior-weights", "a,b"], ["--prior-weights"]),
    ("diagnose-beam", _fresh, ["diagnose", "--beam-size", "0"], ["--beam-size"]),
    ("stats-fraction", _fresh, ["data-stats", "--fractions", "0.9"], ["--fractions"]),
    (
        "pipeline-fraction",
        _fresh,
        ["pipeline", *TINY, "--set", "eval.cold_start_fractions=0.02,0.7"],
        ["eval.cold_start_fractions", "0.7"],
    ),
    (
        "codebook-zero",
        _fresh,
        ["train-tokenizer", *TINY, "--set", "rqvae.codebook_size=0"],
        ["rqvae.codebook_size"],
    ),
    (
        "layers-zero",
        _fresh,
        ["train-retriever", "--cold-start", "0.02", "--set", "seqmodel.num_layers=0"],
        ["seqmodel.num_layers"],
    ),
    ("dropout", _fresh, ["pipeline", "--set", "seqmodel.dropout=1.5"], ["seqmodel.dropout"]),
    (
        "harness-layout",
        _fresh,
        ["sasrec", "--set", "sasrec.layout=packed"],
        ["sasrec.layout", "bucketed"],
    ),
    ("unknown-key", _fresh, ["pipeline", "--set", "nosuch.key=1"], ["nosuch.key"]),
    (
        "bad-int",
        _fresh,
        ["pipeline", "--set", "seqmodel.num_layers=abc"],
        ["seqmodel.num_layers", "abc"],
    ),
    (
        "int-too-big",
        _fresh,
        ["train-tokenizer", *TINY, "--set", "rqvae.num_steps=99999999999999999999"],
        ["rqvae.num_steps", "2147483647"],
    ),
    (
        "int-too-small",
        _fresh,
        ["pipeline", *TINY, "--set", "seed=-99999999999"],
        ["seed", "-2147483648"],
    ),
    (
        "empty-list-item",
        _fresh,
        ["pipeline", *TINY, "--set", "eval.cold_start_fractions=0.02,,0.05"],
        ["eval.cold_start_fractions", "empty item 2"],
    ),
    (
        "empty-hidden-dim",
        _fresh,
        ["train-tokenizer", *TINY, "--set", "rqvae.hidden_dims=64,"],
        ["rqvae.hidden_dims", "empty item 2"],
    ),
    ("no-equals", _fresh, ["pipeline", "--set", "seqmodel"], ["--set", "key=value"]),
    ("jobs-zero", _fresh, ["pipeline", "--jobs", "0"], ["--jobs 0"]),
    ("jobs-set-zero", _fresh, ["pipeline", "--set", "jobs=0"], ["jobs=0"]),
    ("bad-bool", _fresh, ["pipeline", "--set", "eval.warm=maybe"], ["eval.warm"]),
    ("bad-preset", _fresh, ["pipeline", "--config", "nosuch"], ["--config", "nosuch"]),
    (
        "dense-levels",
        _fresh,
        ["pipeline", "--set", "decode.dense_levels=9"],
        ["decode.dense_levels"],
    ),
    (
        "level-weights",
        _fresh,
        ["pipeline", "--set", "eval.cold_level_weights=1,1"],
        ["eval.cold_level_weights"],
    ),
    ("embedder", _fresh, ["train-tokenizer", "--set", "rqvae.embedder=bert"], ["rqvae.embedder"]),
    ("dataset-key", _fresh, ["pipeline", "--set", "data.dataset=movielens"], ["data.dataset"]),
    (
        "batch-size-key",
        _fresh,
        ["pipeline", *TINY, "--set", "seqmodel.batch_size=0"],
        ["seqmodel.batch_size"],
    ),
    ("amazon-no-category", _fresh, ["pipeline", "--dataset", "amazon2014"], ["--category"]),
    ("interactions-no-dir", _fresh, ["pipeline", "--dataset", "interactions"], ["--raw-dir"]),
    (
        "synthetic-raw-dir",
        _fresh,
        ["prepare", "--dataset", "synthetic", "--raw-dir", "x"],
        ["--raw-dir"],
    ),
    ("category-not-amazon", _fresh, ["prepare", "--category", "Beauty"], ["--category"]),
    ("argparse-type", _fresh, ["eval-cold-start", "--cold-start", "abc"], ["--cold-start", "abc"]),
    ("argparse-choice", _fresh, ["train-retriever", "--split", "test"], ["--split"]),
    ("argparse-dataset", _fresh, ["pipeline", "--dataset", "movielens"], ["--dataset"]),
    ("bench-items-zero", None, ["bench-constraints", "--num-items", "0"], ["--num-items"]),
    (
        "bench-too-big",
        None,
        ["bench-constraints", "--num-items", "100000000000"],
        ["--num-items", "GiB"],
    ),
    ("bench-method", None, ["bench-constraints", "--methods", "nosuch"], ["--methods"]),
    ("bench-levels", None, ["bench-constraints", "--levels", "0"], ["--levels"]),
    ("bench-dense", None, ["bench-constraints", "--dense-levels", "9"], ["--dense-levels"]),
    ("sweep-too-big", None, ["bench-sweep", "--items", "1e13"], ["--items", "GiB"]),
    (
        "bench-beam-too-big",
        None,
        ["bench-constraints", "--beam", "100000000"],
        ["--beam 100000000", "GiB"],
    ),
    # The work directory is a file.
    ("workdir-file-prepare", _file, ["prepare"], ["--workdir", "is a file"]),
    ("workdir-file-tokenizer", _file, ["train-tokenizer"], ["--workdir", "is a file"]),
    (
        "workdir-file-retriever",
        _file,
        ["train-retriever", "--cold-start", "0.02"],
        ["--workdir", "is a file"],
    ),
    (
        "workdir-file-eval",
        _file,
        ["eval-cold-start", "--cold-start", "0.02"],
        ["--workdir", "is a file"],
    ),
    ("workdir-file-warm", _file, ["eval-warm"], ["--workdir", "is a file"]),
    ("workdir-file-pipeline", _file, ["pipeline"], ["--workdir", "is a file"]),
    # Missing artifacts: named with the command that makes them.
    ("no-prepared-tokenizer", _fresh, ["train-tokenizer"], ["prepared", "genret prepare"]),
    (
        "no-prepared-retriever",
        _fresh,
        ["train-retriever", "--cold-start", "0.02"],
        ["prepared", "genret prepare"],
    ),
    ("no-prepared-eval", _fresh, ["eval-cold-start", "--cold-start", "0.02"], ["genret prepare"]),
    ("no-prepared-warm", _fresh, ["eval-warm"], ["genret prepare"]),
    ("no-prepared-stats", _fresh, ["data-stats"], ["genret prepare"]),
    ("no-prepared-diagnose", _fresh, ["diagnose"], ["genret prepare"]),
    ("no-config-report", _fresh, ["report"], ["config.json"]),
    (
        "no-sids",
        _prepared,
        ["train-retriever", "--cold-start", "0.02"],
        ["sids.npy", "genret train-tokenizer"],
    ),
    ("no-retriever", _prepared, ["eval-warm"], ["genret train-"]),
    # Damaged artifacts.
    ("truncated-sids", _bad_sids, ["train-retriever", "--cold-start", "0.02"], ["tokenizer"]),
    (
        "wrong-asins",
        _wrong_asins,
        ["train-retriever", "--cold-start", "0.02"],
        ["asins.txt", "line 1"],
    ),
    ("bad-config-json", _bad_config, ["train-tokenizer"], ["config.json"]),
    ("mistyped-config-json", _mistyped_config, ["train-tokenizer"], ["config.json", "five_core"]),
    (
        "config-json-without-group",
        _config_without_group,
        ["train-tokenizer"],
        ["config.json", "missing", "rqvae"],
    ),
    ("config-json-is-dir", _config_is_dir, ["train-tokenizer"], ["config.json", "not a file"]),
    # Values that pass a sign check but are not numbers to train with; an empty path.
    (
        "infinite-learning-rate",
        _prepared,
        ["train-retriever", "--cold-start", "0.02", "--set", "seqmodel.learning_rate=inf"],
        ["seqmodel.learning_rate", "finite"],
    ),
    (
        "nan-level-weight",
        _prepared,
        ["eval-cold-start", "--cold-start", "0.02", "--set", "eval.cold_level_weights=1,nan,1,1"],
        ["eval.cold_level_weights", "finite"],
    ),
    ("empty-workdir", None, ["prepare", *TINY, "--workdir", ""], ["--workdir", "empty"]),
    ("bad-retriever-json", _bad_retriever, ["eval-warm"], ["retriever.json"]),
    (
        "mistyped-retriever-json",
        _mistyped_retriever,
        ["eval-warm"],
        ["retriever.json", "num_levels"],
    ),
    ("results-json-garbage", _results_garbage, ["report"], ["warm.json", "genret eval-warm"]),
    ("ledger-garbage", _ledger("[1, 2"), ["pipeline"], ["stages.json", "delete it"]),
    ("ledger-a-list", _ledger("[1, 2]"), ["pipeline"], ["stages.json", "delete it"]),
    ("ledger-entry-a-number", _ledger('{"prepare": 3}'), ["pipeline"], ["stages.json", "prepare"]),
    ("halved-records", _halved_records, ["data-stats"], ["prepared", "genret prepare"]),
    (
        "workdir-unwritable",
        None,
        ["prepare", *TINY, "--workdir", "/proc/genret_no_such_dir"],
        ["--workdir /proc/genret_no_such_dir"],
    ),
    (
        "load-test-url",
        _fresh,
        ["load-test", "--url", "notaurl", "--out", "{tmp}/lt.json"],
        ["--url"],
    ),
    (
        "load-test-url-no-host",
        _fresh,
        ["load-test", "--url", "http://", "--out", "{tmp}/lt.json"],
        ["--url", "host"],
    ),
    (
        "classify-labels",
        _fresh,
        ["classify", "--dataset", "synthetic", "--max-labels", "0"],
        ["--max-labels 0"],
    ),
    (
        "classify-fraction",
        _fresh,
        ["classify", "--dataset", "synthetic", "--test-fraction", "1.5"],
        ["--test-fraction 1.5"],
    ),
    (
        "classify-dropout",
        _fresh,
        ["classify", "--dataset", "synthetic", "--dropout", "nan"],
        ["--dropout nan"],
    ),
    # Raw files: named with the line where known.
    (
        "raw-dir-missing",
        _fresh,
        ["prepare", "--dataset", "beauty", "--raw-dir", "{tmp}/nowhere"],
        ["nowhere"],
    ),
    (
        "raw-bad-line",
        _raw("bad_line"),
        ["prepare", "--dataset", "beauty", "--raw-dir", "{raw}"],
        ["reviews_Tiny_5.json:"],
    ),
    (
        "raw-truncated-gz",
        _raw("truncated_gz"),
        ["prepare", "--dataset", "beauty", "--raw-dir", "{raw}"],
        ["reviews_Tiny_5.json.gz"],
    ),
    (
        "raw-empty",
        _raw("empty"),
        ["prepare", "--dataset", "beauty", "--raw-dir", "{raw}"],
        ["reviews_Tiny_5.json", "empty"],
    ),
    (
        "raw-no-meta",
        _raw("no_meta"),
        ["prepare", "--dataset", "beauty", "--raw-dir", "{raw}"],
        ["meta_"],
    ),
    (
        "raw-bad-meta",
        _raw("bad_meta"),
        ["prepare", "--dataset", "beauty", "--raw-dir", "{raw}", "--set", "data.five_core=false"],
        ["meta_Tiny.json:"],
    ),
    (
        "raw-two-reviews",
        _raw("two_reviews"),
        ["prepare", "--dataset", "beauty", "--raw-dir", "{raw}"],
        ["reviews_"],
    ),
    (
        "raw-binary",
        _raw("binary"),
        ["prepare", "--dataset", "beauty", "--raw-dir", "{raw}"],
        ["reviews_Tiny_5.json"],
    ),
    (
        "category-missing",
        _raw("none"),
        ["prepare", "--dataset", "amazon2014", "--category", "Books", "--raw-dir", "{raw}"],
        ["Books"],
    ),
    (
        "table-no-column",
        _table("no_column"),
        ["prepare", "--dataset", "interactions", "--raw-dir", "{raw}"],
        ["interactions.csv", "timestamp"],
    ),
    (
        "table-bad-time",
        _table("bad_time"),
        ["prepare", "--dataset", "interactions", "--raw-dir", "{raw}"],
        ["interactions.csv:3", "timestamp"],
    ),
]


@pytest.mark.parametrize(
    ("setup", "argv", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_one_line_naming_it_and_changes_nothing(
    setup, argv, words, tmp_path, prepared_tiny, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # so that no stray relative path lands in the repository
    w = setup(tmp_path, prepared_tiny) if setup else None
    raw = tmp_path / "raw_Tiny_plain"
    argv = [a.format(raw=raw, tmp=tmp_path) for a in argv]
    if w is not None:
        argv = [argv[0], "--workdir", str(w), *argv[1:]]
    before = _snapshot(tmp_path)
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None), err
    assert "Traceback" not in err, err
    ours = [line for line in lines if line.startswith("genret")]
    assert len(ours) == 1, err
    for word in words:
        assert word in ours[0], (word, ours[0])
    assert _snapshot(tmp_path) == before, "the failed command changed files"


def test_there_are_at_least_55_cases():
    assert len(CASES) >= 55


def test_a_workdir_that_cannot_be_created_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """Checked up front: no progress bar of generated data before the one line."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    code = cli.main(["prepare", *TINY, "--workdir", "/proc/genret_no_such_dir"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code not in (0, None)
    assert len(lines) == 1 and "--workdir /proc/genret_no_such_dir" in lines[0], lines
