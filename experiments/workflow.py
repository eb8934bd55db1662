"""The `genret pipeline` workflow: every stage is the same `genret` command a user would run."""

import dataclasses
import time
from pathlib import Path

from experiments import cli, common, report, stages


def _command(*argv: str):
    def run():
        code = cli.main([str(a) for a in argv])
        if code:
            raise RuntimeError(f"`genret {' '.join(map(str, argv))}` failed (exit {code})")

    return run


def build_stages(cfg, workdir: Path) -> list[stages.Stage]:
    """Tokenizer, per-fraction retrievers and evaluations, leave-one-out, with their keys."""
    W = str(workdir)
    prep = stages.file_digest(common.prepared_dir(workdir))
    sids = common.tokenizer_dir(workdir) / "sids.npy"
    out = [
        stages.Stage(
            "tokenizer",
            (prep, dataclasses.asdict(cfg.rqvae)),
            (sids,),
            _command("train-tokenizer", "--workdir", W),
        )
    ]
    seq = dataclasses.asdict(cfg.seqmodel)
    ev = (dataclasses.asdict(cfg.eval), dataclasses.asdict(cfg.decode))
    # The leave-one-out evaluation does not read the cold-start scoring fields.
    warm_eval = {
        k: v for k, v in ev[0].items() if k not in ("cold_prior_weight", "cold_level_weights")
    }
    results = common.results_dir(workdir)
    for p in cfg.eval.cold_start_fractions:
        rdir = common.retriever_dir(workdir, f"cold_{p:g}")
        out.append(
            stages.Stage(
                f"retriever_cold_{p:g}",
                (seq, p),
                (rdir / "train_summary.json",),
                _command("train-retriever", "--workdir", W, "--cold-start", f"{p:g}"),
                after=("tokenizer",),
            )
        )
        out.append(
            stages.Stage(
                f"eval_cold_{p:g}",
                ev,
                (results / f"cold_start_{p:g}.json",),
                _command("eval-cold-start", "--workdir", W, "--cold-start", f"{p:g}"),
                after=(f"retriever_cold_{p:g}",),
            )
        )
    if cfg.eval.warm:
        rdir = common.retriever_dir(workdir, "loo")
        out.append(
            stages.Stage(
                "retriever_loo",
                (seq,),
                (rdir / "train_summary.json",),
                _command("train-retriever", "--workdir", W, "--split", "loo"),
                after=("tokenizer",),
            )
        )
        out.append(
            stages.Stage(
                "eval_warm",
                (warm_eval, ev[1]),
                (results / "warm.json",),
                _command("eval-warm", "--workdir", W),
                after=("retriever_loo",),
            )
        )
    return out


def run_pipeline(cfg, workdir: Path, raw_dir: Path | None) -> Path:
    """Prepares (self-caching), runs the stages that are out of date, writes the report."""
    # Checked before any stage runs, not when the evaluation stage is reached after training.
    for fraction in cfg.eval.cold_start_fractions:
        common.check_cold_start_fraction(fraction)
    start = time.perf_counter()
    prepare = ["prepare", "--dataset", cfg.data.dataset, "--workdir", str(workdir)]
    if raw_dir is not None:
        prepare += ["--raw-dir", str(raw_dir)]
    print("[prepare] running (reuses the prepared dataset when inputs are unchanged)")
    _command(*prepare)()
    stages.run_stages(build_stages(cfg, workdir), workdir)
    path = report.write_report(common.results_dir(workdir), cfg.data.dataset)
    print(f"[pipeline] done in {time.perf_counter() - start:.1f} s; report: {path}")
    return path
