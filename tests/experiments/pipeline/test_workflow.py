"""genret pipeline on the tiny preset: every artifact and the report; a rerun skips every stage."""

import json
import shutil
import time
from pathlib import Path

import pytest

from data import atomic, prepared
from experiments import cli, config
from tests.experiments.helpers import keyed_layout, wait_for_checkpoint


def _count_calls(monkeypatch, module, name: str, calls: list, only=lambda *a, **k: True):
    real = getattr(module, name)

    def counted(*args, **kwargs):
        if only(*args, **kwargs):
            calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


@pytest.mark.slow
def test_pipeline_end_to_end_then_skips(tmp_path, capsys, monkeypatch):
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    argv += ["--set", "eval.cold_start_fractions=0.05", "--set", "seqmodel.num_epochs=1"]
    calls = []
    _count_calls(monkeypatch, config, "validate", calls)
    _count_calls(monkeypatch, prepared, "load_prepared", calls)
    config_file = tmp_path / "config.json"
    _count_calls(
        monkeypatch, atomic, "write_text", calls, lambda path, _: Path(path) == config_file
    )
    assert cli.main(argv) == 0
    # One run: the config resolved (and validated) once, written once, the dataset loaded once.
    assert sorted(calls) == ["load_prepared", "validate", "write_text"], calls
    results = tmp_path / "results"
    cold = json.loads((results / "cold_start_0.05.json").read_text())
    assert set(cold["methods"]) == {"unconstrained", "random", "content", "static"}
    warm = json.loads((results / "warm.json").read_text())
    assert set(warm["methods"]) == {"unconstrained", "static_all_items", "item_cooccurrence"}
    report = (results / "report.md").read_text()
    assert "Cold-start retrieval" in report and "Leave-one-out" in report
    assert (results / "recall_at_1.png").stat().st_size > 1000
    ledger = json.loads((tmp_path / "stages.json").read_text())
    assert set(ledger) == {
        "tokenizer",
        "retriever_cold_0.05",
        "eval_cold_0.05",
        "retriever_loo",
        "eval_warm",
    }
    capsys.readouterr()
    # Same config: nothing reruns.
    assert cli.main(["pipeline", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("up to date, skipped") == 5, out


def test_bad_fraction_fails_before_any_stage(tmp_path, capsys):
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    assert cli.main([*argv, "--set", "eval.cold_start_fractions=0.02,0.7"]) == 1
    assert "(0, 0.5]" in capsys.readouterr().err
    assert not (tmp_path / "prepared").exists() and not (tmp_path / "stages.json").exists()


def _quality(result: dict) -> dict:
    """Every method's Recall/NDCG (not its timings)."""
    return {
        name: {k: v for k, v in m.items() if k.startswith(("recall@", "ndcg@"))}
        for name, m in result["methods"].items()
    }


@pytest.mark.slow
def test_pipeline_ensemble_of_seeds_without_cold_start(tmp_path, capsys):
    w = str(tmp_path)
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", w, "--config", "tiny"]
    argv += ["--set", "seqmodel.num_epochs=1", "--set", "eval.cold=false"]
    argv += ["--set", "eval.warm_ensemble_seeds=3", "--no-progress"]
    assert cli.main(argv) == 0
    assert "leave-one-out:" not in capsys.readouterr().err  # --no-progress: no evaluation bar
    ledger = json.loads((tmp_path / "stages.json").read_text())
    assert set(ledger) == {"tokenizer", "retriever_loo", "retriever_loo_seed3", "eval_warm"}
    assert not list((tmp_path / "results").glob("cold_start_*.json"))
    member = json.loads((tmp_path / "retriever_loo_seed3" / "retriever.json").read_text())
    main = json.loads((tmp_path / "retriever_loo" / "retriever.json").read_text())
    assert (main["seqmodel"]["seed"], member["seqmodel"]["seed"]) == (0, 3)
    warm = json.loads((tmp_path / "results" / "warm.json").read_text())
    assert [Path(p).name for p in warm["ensemble"]] == ["retriever_loo", "retriever_loo_seed3"]
    # The same ensemble by hand (`eval-warm --ensemble DIR`, no configured seeds): same numbers.
    shutil.copytree(tmp_path / "results", tmp_path / "pipeline_results")
    by_hand = ["--ensemble", str(tmp_path / "retriever_loo_seed3")]
    by_hand += ["--set", "eval.warm_ensemble_seeds="]
    assert cli.main(["eval-warm", "--workdir", w, *by_hand]) == 0
    again = json.loads((tmp_path / "results" / "warm.json").read_text())
    assert _quality(again) == _quality(warm)
    # Alone, the main retriever ranks differently: the member counted.
    assert cli.main(["eval-warm", "--workdir", w]) == 0
    alone = json.loads((tmp_path / "results" / "warm.json").read_text())
    assert "ensemble" not in alone and _quality(alone) != _quality(warm)
    # A missing member: one line naming it and the command that trains it.
    shutil.rmtree(tmp_path / "retriever_loo_seed3")
    capsys.readouterr()
    assert cli.main(["eval-warm", "--workdir", w, "--set", "eval.warm_ensemble_seeds=3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "retriever_loo_seed3" in err[0] and "genret pipeline" in err[0]


@pytest.mark.slow
def test_pipeline_runs_leave_one_out_as_another_preset(tmp_path, capsys):
    w = tmp_path / "w"
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(w), "--config", "tiny"]
    argv += ["--set", "eval.cold_start_fractions=0.05", "--set", "seqmodel.num_epochs=1"]
    argv += ["--set", "eval.warm_preset=tiny", "--no-progress"]
    assert cli.main(argv) == 0
    ledger = json.loads((w / "stages.json").read_text())
    assert set(ledger) == {
        "tokenizer",
        "retriever_cold_0.05",
        "eval_cold_0.05",
        "loo/tokenizer",
        "loo/retriever_loo",
        "loo/eval_warm",
        "eval_warm",
    }
    loo = w / "loo"
    assert not (w / "retriever_loo").exists() and (loo / "retriever_loo").is_dir()
    # The leave-one-out part is the named preset itself (its own epochs, not this run's --set),
    # with leave-one-out only; its tokenizer is its own.
    nested = config.load_json(loo / "config.json")
    assert (nested.name, nested.eval.cold, nested.eval.warm) == ("tiny", False, True)
    assert nested.seqmodel.num_epochs == config.load_preset("tiny").seqmodel.num_epochs
    assert (loo / "tokenizer").is_dir() and not list(loo.glob("retriever_cold*"))
    warm = json.loads((w / "results" / "warm.json").read_text())
    assert warm["run"] == str(loo)
    assert _quality(warm) == _quality(json.loads((loo / "results" / "warm.json").read_text()))
    assert "Leave-one-out" in (w / "results" / "report.md").read_text()
    capsys.readouterr()
    assert cli.main(["pipeline", "--workdir", str(w), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("up to date, skipped") == 7
    # The leave-one-out commands on the outer directory point at the inner one, in one line.
    assert cli.main(["eval-warm", "--workdir", str(w)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--workdir {loo}" in err[0] and "preset tiny" in err[0], err
    # So do those that load its retriever (serving, draft heads), from the inner config alone,
    # with the same line.
    assert cli.main(["train-draft", "--workdir", str(w), "--split", "loo"]) == 1
    err2 = capsys.readouterr().err.strip().splitlines()
    assert len(err2) == 1 and err2[0].split(" error: ")[1] == err[0].split(" error: ")[1], err2
    # The inner directory is an ordinary work directory: its evaluation reproduces the copy.
    assert cli.main(["eval-warm", "--workdir", str(loo)]) == 0
    again = json.loads((loo / "results" / "warm.json").read_text())
    assert _quality(again) == _quality(warm)


@pytest.mark.slow
def test_stages_side_by_side_give_the_numbers_of_one_process(tmp_path, capsys):
    """--jobs 2: the cold-start and the leave-one-out parts (their tokenizers and retrievers)
    run two at a time in processes of their own, with every number of a run made one stage at a
    time in this process."""
    from data.fingerprint import file_digest

    argv = ["pipeline", "--dataset", "synthetic", "--config", "tiny", "--no-progress"]
    argv += ["--set", "eval.cold_start_fractions=0.05", "--set", "seqmodel.num_epochs=1"]
    argv += ["--set", "eval.warm_preset=tiny"]
    apart, one = tmp_path / "apart", tmp_path / "one"
    assert cli.main([*argv, "--workdir", str(apart), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    # The two tokenizers and the two retrievers; the evaluations and the copy of warm.json
    # run alone, in the pipeline's process.
    assert out.count("(in its own process)") == 4, out
    assert config.load_json(apart / "config.json").jobs == 2
    assert cli.main([*argv, "--workdir", str(one)]) == 0
    assert "(in its own process)" not in capsys.readouterr().out
    assert set(json.loads((apart / "stages.json").read_text())) == set(
        json.loads((one / "stages.json").read_text())
    )
    for sub in ("tokenizer/sids.npy", "loo/tokenizer/sids.npy"):
        assert file_digest(apart / sub) == file_digest(one / sub), sub
    for sub in ("retriever_cold_0.05", "loo/retriever_loo"):
        rows = [
            [
                {
                    k: v
                    for k, v in json.loads(line).items()
                    if "second" not in k and "per_s" not in k
                }
                for line in (w / sub / "metrics.jsonl").read_text().splitlines()
            ]
            for w in (apart, one)
        ]
        assert rows[0] == rows[1] and len(rows[0]) > 2, sub
    for name in ("cold_start_0.05.json", "warm.json"):
        a, b = (json.loads((w / "results" / name).read_text()) for w in (apart, one))
        assert _quality(a) == _quality(b), name
    # A rerun with --jobs 2 starts no process.
    assert cli.main(["pipeline", "--workdir", str(apart), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("up to date, skipped") == 7 and "own process" not in out


def test_a_stage_failing_in_its_own_process_is_one_line_naming_it(tmp_path):
    """A stage in a process of its own (the stage worker, started as the pipeline starts it) that
    fails, here for want of a prepared dataset, gives its reason in one line naming the folder;
    one killed by SIGKILL says so."""
    import signal

    from experiments.pipeline.layout import RunLayout
    from experiments.pipeline.stage_worker import StageProcess
    from experiments.pipeline.workflow import build_stages

    cfg = config.load_preset("tiny")
    layout = RunLayout(tmp_path / "w")
    tokenizer = build_stages(cfg, layout, progress=False)[0]
    failed = StageProcess(cfg, layout, tokenizer)
    assert failed.wait() == 1
    lines = failed.error().splitlines()
    assert len(lines) == 1 and str(layout.root) in lines[0], lines
    killed = StageProcess(cfg, layout, tokenizer)
    killed._process.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL
    assert killed.error() == "its process ended by signal 9 (killed: out of memory?)"


def _appears(path: Path, tries: int) -> bool:
    """Whether `path` exists within `tries` checks 10 ms apart (a file another process writes)."""
    for _ in range(tries):
        if path.exists():
            return True
        time.sleep(0.01)
    return False


def test_a_stage_process_is_interrupted_when_the_pipeline_dies(tmp_path):
    """stop_with_parent: a process under it gets SIGINT (KeyboardInterrupt) when its parent is
    killed with SIGKILL, and so stops as Ctrl-C stops a stage."""
    import subprocess
    import sys

    child = (
        "import pathlib, time\n"
        "from experiments.pipeline.stage_worker import stop_with_parent\n"
        "stop_with_parent()\n"
        # 'ready' inside the try: an interrupt landing just after it is written is still caught.
        "try:\n"
        "    pathlib.Path('ready').touch()\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    pathlib.Path('interrupted').touch()\n"
    )
    parent = (
        "import os, pathlib, signal, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "while not pathlib.Path('ready').exists(): time.sleep(0.01)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", parent], cwd=tmp_path, timeout=60)
    assert _appears(tmp_path / "interrupted", tries=3000)


def test_a_stage_process_started_with_sigint_ignored_stops_only_with_the_pipeline(tmp_path):
    """interrupt_handlers: a stage process whose pipeline ignores SIGINT (a background job of a
    shell script) carries on through a Ctrl-C as its pipeline does, and is still interrupted by
    stop_with_parent's SIGINT once the pipeline is killed, or by any SIGINT once its pipeline has
    asked it to stop (SIGTERM); one not ignoring SIGINT stops at once."""
    import os
    import signal
    import subprocess
    import sys

    from experiments.pipeline.stage_worker import interrupt_handlers

    assert interrupt_handlers(False, os.getppid())[0] is signal.default_int_handler
    on_int, on_term = interrupt_handlers(True, os.getppid())
    try:  # its pipeline is alive (caught: an uncaught KeyboardInterrupt would stop pytest)
        on_int(signal.SIGINT, None)
    except KeyboardInterrupt:
        pytest.fail("a Ctrl-C interrupted a stage whose pipeline ignores it")
    with pytest.raises(KeyboardInterrupt):
        interrupt_handlers(True, -1)[0](signal.SIGINT, None)  # its pipeline is gone
    with pytest.raises(KeyboardInterrupt):
        on_term(signal.SIGTERM, None)  # its pipeline asks it to stop
    with pytest.raises(KeyboardInterrupt):  # as cli.keep_interrupts hands it back
        on_int(signal.SIGINT, None)

    child = (
        "import os, pathlib, signal, time\n"
        "from experiments.pipeline.stage_worker import interrupt_handlers, stop_with_parent\n"
        "ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
        "signal.signal(signal.SIGINT, interrupt_handlers(ignored, os.getppid())[0])\n"
        "stop_with_parent()\n"
        "pathlib.Path('pid').write_text(str(os.getpid()))\n"
        "pathlib.Path('ready').touch()\n"
        "try:\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        "    pathlib.Path('interrupted').touch()\n"
    )
    parent = (  # a pipeline that ignores SIGINT; its child inherits that
        "import os, pathlib, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "while not pathlib.Path('go').exists(): time.sleep(0.01)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    pipeline = subprocess.Popen([sys.executable, "-c", parent], cwd=tmp_path)
    assert _appears(tmp_path / "ready", tries=3000)  # after the pid, whole
    os.kill(int((tmp_path / "pid").read_text()), signal.SIGINT)  # a Ctrl-C: carried on
    time.sleep(0.5)
    assert not (tmp_path / "interrupted").exists()
    (tmp_path / "go").touch()  # the pipeline is killed
    pipeline.wait(timeout=60)
    assert _appears(tmp_path / "interrupted", tries=3000)


def test_a_stage_process_ignoring_sigint_stops_when_its_pipeline_asks(tmp_path):
    """A stage worker started with SIGINT ignored (its pipeline a background job) and training,
    asked to stop as the pipeline asks when the stage beside it fails (StageProcess.interrupt),
    stops at once as by a Ctrl-C (exit 130, its checkpoints kept), not after the pipeline's
    300 s wait and a SIGKILL."""
    import dataclasses
    import signal

    from experiments.pipeline import stages
    from experiments.pipeline.layout import RunLayout
    from experiments.pipeline.stage_worker import StageProcess
    from experiments.pipeline.workflow import build_stages

    cfg = config.load_preset("tiny")
    cfg = dataclasses.replace(cfg, rqvae=dataclasses.replace(cfg.rqvae, num_steps=1_000_000))
    layout = RunLayout(tmp_path / "w")
    stages.prepare(cfg, layout, progress=False)
    tokenizer = build_stages(cfg, layout, progress=False)[0]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the worker
    try:
        worker = StageProcess(cfg, layout, tokenizer)
    finally:
        signal.signal(signal.SIGINT, previous)
    checkpoints = layout.tokenizer / "checkpoints"

    def running():
        assert worker.poll() is None, worker.error()

    try:
        wait_for_checkpoint(checkpoints, running)
        start = time.perf_counter()
        worker.interrupt(grace=0.5)
        assert worker.wait(timeout=60) == 130
        assert time.perf_counter() - start < 30
    finally:
        worker.wait(timeout=0.1)  # SIGKILL if still running
    assert any(p.name.isdigit() for p in checkpoints.iterdir())


@pytest.mark.parametrize(
    "sets, key",
    [
        (["eval.warm_ensemble_seeds=0"], "eval.warm_ensemble_seeds"),  # the main retriever's
        (["eval.warm_ensemble_seeds=2,2"], "eval.warm_ensemble_seeds"),
        (["eval.warm_ensemble_seeds=-1"], "eval.warm_ensemble_seeds"),
        (["eval.warm_ensemble_seeds=1", "eval.warm=false"], "eval.warm_ensemble_seeds"),
        (["eval.cold=false", "eval.warm=false"], "eval.cold"),
        (["eval.cold=false", "eval.cold_parallel=true"], "eval.cold_parallel"),
        (["eval.warm_preset=nosuch"], "eval.warm_preset"),
        (["eval.warm_preset=tiny", "eval.warm_ensemble_seeds=1"], "eval.warm_preset"),
        (["eval.warm_preset=tiny", "eval.warm=false"], "eval.warm_preset"),
    ],
)
def test_bad_ensemble_or_empty_pipeline_fails_before_any_stage(tmp_path, capsys, sets, key):
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    for s in sets:
        argv += ["--set", s]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0], err
    assert not (tmp_path / "prepared").exists() and not (tmp_path / "stages.json").exists()


def test_stage_keys_follow_the_prepared_content_key_not_the_files_bytes(tmp_path):
    """Two writes of the same records differ in bytes (the order of each example's serialized
    features): the tokenizer's key, and so every key after it, must not move with them."""
    from experiments.config import load_preset
    from experiments.pipeline.layout import RunLayout
    from experiments.pipeline.workflow import build_stages

    layout = RunLayout(tmp_path)
    (layout.prepared / "tfds").mkdir(parents=True)
    records = layout.prepared / "tfds" / "records"

    def keys(content_key: str, data: bytes) -> tuple:
        atomic.write_json(layout.prepared / prepared.KEY_FILE, {"key": content_key})
        records.write_bytes(data)
        stages = build_stages(load_preset("tiny"), layout, progress=False)
        tokenizer = next(s for s in stages if s.name == "tokenizer")
        return tokenizer.key_parts

    first = keys("k1", b"times,items")
    assert keys("k1", b"items,times") == first
    assert keys("k2", b"items,times") != first


def test_cold_parallel_adds_its_stages_and_enters_only_the_cold_evaluations_keys(tmp_path):
    """Off, no stage key holds the flag (runs made before it keep their keys); on, a
    parallel_cold_<p> stage per fraction, keyed by the parallel section and not by the SIDs, and
    the evaluation of that fraction waits on it."""
    from experiments.pipeline.ledger import stage_keys
    from experiments.pipeline.workflow import build_stages

    layout = keyed_layout(tmp_path)
    cfg = config.apply_overrides(config.load_preset("tiny"), ["eval.parallel=true"])
    off = build_stages(cfg, layout, progress=False)
    for st in off:
        assert "cold_parallel" not in json.dumps(st.key_parts, default=str), st.name
    on_cfg = config.apply_overrides(cfg, ["eval.cold_parallel=true"])
    on = build_stages(on_cfg, layout, progress=False)
    fractions = cfg.eval.cold_start_fractions
    added = {f"parallel_cold_{p:g}" for p in fractions}
    assert {s.name for s in on} == {s.name for s in off} | added
    after, keys_on = stage_keys(on)
    _, keys_off = stage_keys(off)
    changed = {n for n in keys_off if keys_on[n] != keys_off[n]}
    assert changed == {f"eval_cold_{p:g}" for p in fractions}
    for p in fractions:
        assert after[f"eval_cold_{p:g}"] == (f"retriever_cold_{p:g}", f"parallel_cold_{p:g}")
        assert after[f"parallel_cold_{p:g}"] == ()

    def keys(*sets):
        return stage_keys(build_stages(config.apply_overrides(on_cfg, list(sets)), layout))[1]

    other = keys("parallel.temperature=0.05")
    assert {n for n in keys_on if other[n] != keys_on[n]} == added | {
        f"eval_cold_{p:g}" for p in fractions
    } | {"parallel"}
    other = keys("rqvae.num_steps=7")  # the SIDs move, the codes do not
    assert all(other[n] == keys_on[n] for n in added)


@pytest.mark.slow
def test_pipeline_with_cold_parallel_writes_it_into_the_cold_start_results(tmp_path, capsys):
    from tests.experiments.commands.test_parallel import FAST

    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    argv += ["--set", "eval.cold_start_fractions=0.05", "--set", "seqmodel.max_steps=6"]
    argv += ["--set", "eval.warm=false", "--set", "eval.cold_parallel=true", "--no-progress"]
    assert cli.main([*argv, *FAST]) == 0
    ledger = json.loads((tmp_path / "stages.json").read_text())
    assert set(ledger) == {
        "tokenizer",
        "retriever_cold_0.05",
        "parallel_cold_0.05",
        "eval_cold_0.05",
    }
    cold = json.loads((tmp_path / "results" / "cold_start_0.05.json").read_text())
    assert set(cold["methods"]) == {"unconstrained", "random", "content", "static", "parallel"}
    m = cold["methods"]["parallel"]
    assert all(0 <= m[f"recall@{k}"] <= 1 for k in (1, 5, 10)) and m["cold_rate"] == 1.0
    assert "| parallel |" in (tmp_path / "results" / "report.md").read_text()
    capsys.readouterr()
    assert cli.main(["pipeline", "--workdir", str(tmp_path), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("up to date, skipped") == 4


def test_content_profile_enters_only_the_cold_evaluations_keys_and_only_when_set(tmp_path):
    """At their defaults the profile's fields are in no stage key (work directories evaluated
    before them keep their keys); set, they change the cold-start evaluations' keys only."""
    from experiments.pipeline.ledger import stage_keys
    from experiments.pipeline.workflow import build_stages

    layout = keyed_layout(tmp_path)
    cfg = config.load_preset("tiny")
    stages = build_stages(cfg, layout, progress=False)
    for st in stages:
        assert "cold_content_recent" not in json.dumps(st.key_parts, default=str), st.name
        assert "cold_content_decay" not in json.dumps(st.key_parts, default=str), st.name
    _, base = stage_keys(stages)
    for override in ("eval.cold_content_recent=20", "eval.cold_content_decay=0.85"):
        on = build_stages(config.apply_overrides(cfg, [override]), layout, progress=False)
        _, keys = stage_keys(on)
        changed = {n for n in base if keys[n] != base[n]}
        assert changed == {f"eval_cold_{p:g}" for p in cfg.eval.cold_start_fractions}, override
