"""Failures of the world outside the program (a symlink loop, a name too long, a file where a folder
should be, a file that cannot be read, memory or disk that runs out, a beam wider than the catalog
or the memory): one line on stderr naming what happened and the argument or path, never "please
report it", no traceback, the work directory as it was and no temporary folder left behind."""

import builtins
import dataclasses
import errno
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments import cli
from experiments.commands import _common as common
from rqvae.checkpoint import TMP_MARK
from seqmodel.config import SeqModelConfig
from tests.data.conftest import make_raw_dir
from tests.experiments.test_bad_inputs import _snapshot

TINY = ["--config", "tiny"]


@pytest.fixture(scope="module")
def prepared_tiny(tmp_path_factory) -> Path:
    """A work directory with the tiny synthetic dataset prepared."""
    w = tmp_path_factory.mktemp("prepared") / "w"
    assert cli.main(["prepare", *TINY, "--workdir", str(w)]) == 0
    return w


def _fails_in_one_line(argv: list[str], capsys, words: list[str]) -> str:
    """Runs `genret argv`; asserts the one-line contract and that every word is in the line."""
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    err = capsys.readouterr().err
    assert code not in (0, None), err
    assert "Traceback" not in err and "please report" not in err, err
    ours = [line for line in err.splitlines() if line.startswith("genret")]
    assert len(ours) == 1, err
    for word in words:
        assert word in ours[0], (word, ours[0])
    return ours[0]


# ---------------------------------------------------------------------------------------------
# Paths


def _loop(tmp: Path) -> Path:
    (tmp / "loop").symlink_to(tmp / "loop")
    return tmp / "loop"


def _file(tmp: Path) -> Path:
    (tmp / "afile").write_text("not a folder\n")
    return tmp / "afile"


def _long(tmp: Path) -> Path:
    return tmp / ("a" * 300)


# (id, argv with {p} for the made path, maker of the path, words the line must hold)
PATH_CASES = [
    (
        "raw-dir-loop",
        ["prepare", "--dataset", "beauty", "--raw-dir", "{p}", "--workdir", "{tmp}/w"],
        _loop,
        ["--raw-dir", "loop", "symbolic links"],
    ),
    ("workdir-loop", ["train-tokenizer", "--workdir", "{p}/w"], _loop, ["--workdir", "symbolic"]),
    ("workdir-is-loop", ["prepare", *TINY, "--workdir", "{p}"], _loop, ["--workdir", "symbolic"]),
    (
        "raw-dir-too-long",
        ["prepare", "--dataset", "beauty", "--raw-dir", "{p}", "--workdir", "{tmp}/w"],
        _long,
        ["--raw-dir", "too long"],
    ),
    (
        "raw-dir-is-a-file",
        ["prepare", "--dataset", "beauty", "--raw-dir", "{p}", "--workdir", "{tmp}/w"],
        _file,
        ["--raw-dir", "afile", "not a directory"],
    ),
    (
        "workdir-under-a-file",
        ["prepare", *TINY, "--workdir", "{p}/w"],
        _file,
        ["--workdir", "afile/w", "not a directory"],
    ),
    (
        "retriever-loop",
        ["diagnose", "--workdir", "{tmp}/w", "--retriever", "{p}"],
        _loop,
        ["--retriever", "symbolic links"],
    ),
    (
        "bench-out-loop",
        ["bench-membership", "--out", "{p}/x.json"],
        _loop,
        ["--out", "symbolic links"],
    ),
]


@pytest.mark.parametrize(
    ("argv", "make", "words"), [c[1:] for c in PATH_CASES], ids=[c[0] for c in PATH_CASES]
)
def test_a_path_that_the_system_refuses_is_one_line_naming_its_argument(
    argv, make, words, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    p = make(tmp_path)
    argv = [a.format(p=p, tmp=tmp_path) for a in argv]
    before = _snapshot(tmp_path)
    _fails_in_one_line(argv, capsys, words)
    assert _snapshot(tmp_path) == before, "the failed command changed files"


def test_a_raw_file_that_cannot_be_read_names_the_argument_and_the_file(
    tmp_path, capsys, monkeypatch
):
    """Permission denied (simulated: the tests may run as root, whom chmod does not stop)."""
    monkeypatch.chdir(tmp_path)
    raw = make_raw_dir(tmp_path, "Tiny")
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if isinstance(file, str | os.PathLike) and Path(file).parent == raw:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    before = _snapshot(tmp_path)
    argv = ["prepare", "--dataset", "beauty", "--raw-dir", str(raw), "--workdir", "w"]
    line = _fails_in_one_line(argv, capsys, ["--raw-dir", "_Tiny.json: permission denied"])
    assert line.startswith("genret prepare: error:"), line
    assert _snapshot(tmp_path) == before


# ---------------------------------------------------------------------------------------------
# Errors of the outside world that reach the command line inside another exception


def _raising(error: BaseException):
    def run(args):
        raise error

    return run


def _wrapped_enospc(path: Path) -> BaseException:
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path / "out.bin"))
    except OSError as e:
        try:
            raise RuntimeError("the writer thread failed") from e
        except RuntimeError as wrapped:
            return wrapped


def _device_oom(path: Path) -> BaseException:
    import jax.numpy as jnp

    try:
        jnp.zeros((2**44,), jnp.float32).block_until_ready()
    except Exception as e:  # XLA's RESOURCE_EXHAUSTED (a RuntimeError)
        return e
    pytest.skip("this machine allocated 64 TiB")


def _pathlib_loop(path: Path) -> BaseException:
    # What Path.resolve() raises on a loop before Python 3.13.
    return RuntimeError(f"Symlink loop from {os.fspath(path / 'loop')!r}")


OUTSIDE_CASES = [
    ("wrapped-enospc", _wrapped_enospc, ["--workdir", "out.bin", "no space left on device"]),
    ("device-oom", _device_oom, ["out of memory"]),
    ("pathlib-loop", _pathlib_loop, ["--workdir", "symbolic links"]),
]


@pytest.mark.parametrize(
    ("make", "words"), [c[1:] for c in OUTSIDE_CASES], ids=[c[0] for c in OUTSIDE_CASES]
)
def test_an_outside_failure_inside_another_exception_is_an_error_not_a_bug(
    make, words, tmp_path, capsys, monkeypatch
):
    w = tmp_path / "w"
    w.mkdir()
    monkeypatch.setattr("experiments.commands.report.run", _raising(make(w)))
    line = _fails_in_one_line(["report", "--workdir", str(w)], capsys, words)
    assert line.startswith("genret report: error:"), line


def test_a_progress_bar_left_open_does_not_hold_the_start_of_the_line(
    tmp_path, capsys, monkeypatch
):
    from tqdm.auto import tqdm

    def run(args):
        bar = tqdm(total=4, desc="train", file=sys.stderr)
        bar.update(1)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(tmp_path / "x"))

    monkeypatch.setattr("experiments.commands.report.run", run)
    line = _fails_in_one_line(["report", "--workdir", str(tmp_path)], capsys, ["no space left"])
    assert (
        line
        == f"genret report: error: --workdir {tmp_path}: {tmp_path / 'x'}: no space left on device"
    )


# ---------------------------------------------------------------------------------------------
# Beam sizes


def _retriever_description(w: Path) -> None:
    """A leave-one-out retriever's description (no checkpoint: serve refuses before loading)."""
    d = w / "retriever_loo"
    d.mkdir()
    info = {
        "seqmodel": dataclasses.asdict(SeqModelConfig(num_layers=1, d_model=16, num_heads=2)),
        "num_levels": 4,
        "codebook_size": 16,
    }
    (d / "retriever.json").write_text(json.dumps(info))


BEAM_CASES = [
    (
        "cold-1e8",
        ["eval-cold-start", "--cold-start", "0.02", "--beam-size", "100000000"],
        ["--beam-size 100000000", "items"],
    ),
    (
        "cold-1e9",
        ["eval-cold-start", "--cold-start", "0.02", "--beam-size", "1000000000"],
        ["--beam-size 1000000000", "items"],
    ),
    ("diagnose-1e8", ["diagnose", "--beam-size", "100000000"], ["--beam-size", "items"]),
    (
        "warm-config",
        ["eval-warm", "--set", "eval.beam_size=100000000"],
        ["eval.beam_size", "items"],
    ),
    ("serve-1e9", ["serve", "--beam-size", "1000000000"], ["--beam-size", "1000000000"]),
]


@pytest.mark.parametrize(
    ("argv", "words"), [c[1:] for c in BEAM_CASES], ids=[c[0] for c in BEAM_CASES]
)
def test_a_beam_wider_than_the_catalog_is_refused_up_front(
    argv, words, tmp_path, prepared_tiny, capsys
):
    if argv[0] == "serve":
        pytest.importorskip("uvicorn")
    w = tmp_path / "w"
    shutil.copytree(prepared_tiny, w)
    _retriever_description(w)
    before = _snapshot(tmp_path)
    _fails_in_one_line([argv[0], "--workdir", str(w), *argv[1:]], capsys, words)
    assert _snapshot(tmp_path) == before


def test_a_beam_that_memory_cannot_hold_is_refused_up_front(
    tmp_path, prepared_tiny, capsys, monkeypatch
):
    w = tmp_path / "w"
    shutil.copytree(prepared_tiny, w)
    monkeypatch.setattr(common, "available_bytes", lambda: 1 << 20)
    before = _snapshot(tmp_path)
    argv = ["eval-cold-start", "--workdir", str(w), "--cold-start", "0.02", "--beam-size", "20"]
    _fails_in_one_line(argv, capsys, ["--beam-size 20", "--batch-size 64", "1.0 MiB available"])
    assert _snapshot(tmp_path) == before


def test_the_beam_limit_allows_the_catalog_size(prepared_tiny):
    """The check refuses nothing that decodes: as many beams as items pass."""
    layout = common.RunLayout(prepared_tiny)
    cfg = common.resolve_config(cli.parse(["eval-warm", "--workdir", str(prepared_tiny)]), layout)
    items = json.loads((layout.prepared / "report.json").read_text())["items"]
    common.check_eval_beam_size("--beam-size", items, cfg, layout, batch_size=64)
    with pytest.raises(ValueError, match=f"--beam-size {items + 1}: more beams than the"):
        common.check_eval_beam_size("--beam-size", items + 1, cfg, layout, batch_size=64)


# ---------------------------------------------------------------------------------------------
# A full disk during a checkpoint save


def _disk_full_from_save(monkeypatch, n: int, how: str) -> None:
    """The n-th JSON item orbax writes, and each after it, fails as a full disk fails: an
    OSError (a Python write), or tensorstore's ValueError (an array write)."""
    from orbax.checkpoint._src.handlers import json_checkpoint_handler as jch

    real = jch.JsonCheckpointHandler._save_fn
    calls = []

    async def save_fn(self, x, directory):
        calls.append(directory)
        if len(calls) >= n:
            path = os.fspath(directory / "metadata")
            if how == "oserror":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            raise ValueError(
                f'RESOURCE_EXHAUSTED: Error writing local file "{path}": Failed to write 532 '
                "bytes to file 4: No space left on device [os_error_code='28']"
            )
        return await real(self, x, directory)

    monkeypatch.setattr(jch.JsonCheckpointHandler, "_save_fn", save_fn)


def _errors_logged(caplog) -> list[str]:
    """The log records at ERROR or above (orbax logs a failed write with its traceback)."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _tmp_folders(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if TMP_MARK in p.name]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("every", "how"),
    [(100, "oserror"), (50, "tensorstore")],
    ids=["at-the-last-save", "at-the-next-save"],
)
def test_a_full_disk_during_a_tokenizer_save_is_one_line_and_keeps_the_last_checkpoint(
    every, how, tmp_path, prepared_tiny, capfd, caplog, monkeypatch
):
    from rqvae import checkpoint

    w = tmp_path / "w"
    shutil.copytree(prepared_tiny, w)
    _disk_full_from_save(monkeypatch, 2, how)
    argv = ["train-tokenizer", "--workdir", str(w), "--set", f"rqvae.checkpoint_every={every}"]
    capfd.readouterr()
    code = cli.main(argv)
    err = capfd.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err and _errors_logged(caplog) == [], err
    ours = [line for line in err.splitlines() if line.startswith("genret")]
    ckpts = (w / "tokenizer" / "checkpoints").resolve()
    assert ours == [
        f"genret train-tokenizer: error: no space left on device while saving the checkpoint "
        f"to {ckpts}"
    ], err
    assert _tmp_folders(w) == []
    mngr = checkpoint.manager(ckpts)
    assert checkpoint.latest_step(mngr) == every, "the checkpoint before the failed one is kept"
    assert checkpoint.restore_meta(mngr, every)
    checkpoint.close(mngr)


@pytest.mark.slow
def test_a_full_disk_during_a_retriever_save_is_one_line(
    tmp_path, prepared_tiny, capfd, caplog, monkeypatch
):
    w = tmp_path / "w"
    shutil.copytree(prepared_tiny, w)
    (w / "tokenizer").mkdir()
    n = json.loads((w / "prepared" / "report.json").read_text())["items"]
    flat = np.random.default_rng(0).choice(16**3, size=n, replace=False)
    codes = np.stack([(flat // 16**i) % 16 for i in (2, 1, 0)] + [np.zeros(n, int)], 1)
    np.save(w / "tokenizer" / "sids.npy", codes.astype(np.int32))
    from data.prepared import load_prepared

    asins = [str(a) for a in load_prepared(w / "prepared").catalog.asins]
    (w / "tokenizer" / "asins.txt").write_text("\n".join(asins) + "\n")
    _disk_full_from_save(monkeypatch, 2, "oserror")
    fast = ["seqmodel.max_steps=4", "seqmodel.eval_every=2"]
    argv = ["train-retriever", "--workdir", str(w), "--split", "loo"]
    argv += [x for s in fast for x in ("--set", s)]
    capfd.readouterr()
    code = cli.main(argv)
    err = capfd.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err and _errors_logged(caplog) == [], err
    ours = [line for line in err.splitlines() if line.startswith("genret")]
    ckpts = (w / "retriever_loo" / "checkpoints").resolve()
    assert len(ours) == 1, err
    assert ours[0].endswith(
        f"error: no space left on device while saving the checkpoint to {ckpts}"
    )
    assert _tmp_folders(w) == []
