"""The run layout: every artifact of a work directory named once, and the split a retriever is
trained on (with the one rule for cold-start fractions)."""

import dataclasses
from pathlib import Path

from data.errors import ArgumentError, ArtifactError
from data.splits import check_fraction
from rqvae.sids import ASINS_FILE, SIDS_FILE
from seqmodel import files as retriever_files
from seqmodel.draft_files import DRAFT_FILE

SPLIT_KINDS = ("cold", "cold-val", "loo")


@dataclasses.dataclass(frozen=True)
class Split:
    """Which split a retriever trains on: cold (test protocol), cold-val (tuning), loo (TIGER).

    `seed` (loo only): a further leave-one-out retriever trained with this `seqmodel.seed`, one
    member of the pipeline's ensemble (`eval.warm_ensemble_seeds`)."""

    kind: str
    fraction: float | None = None
    seed: int | None = None

    def __post_init__(self):
        if self.kind not in SPLIT_KINDS:
            kinds = ", ".join(SPLIT_KINDS)
            raise ArgumentError(f"--split: expected one of {kinds}, got {self.kind!r}")
        if self.seed is not None and self.kind != "loo":
            raise ArgumentError(f"a retriever seed names a leave-one-out member, not {self.kind}")
        if self.kind == "loo":
            if self.fraction is not None:
                raise ArgumentError("--cold-start: not used with --split loo")
        elif self.fraction is None:
            raise ArgumentError(f"--cold-start: required with --split {self.kind}")
        else:
            object.__setattr__(self, "fraction", check_fraction(self.fraction))

    @property
    def name(self) -> str:
        """The directory suffix: cold_0.02, coldval_0.02, loo or loo_seed1."""
        if self.kind == "loo":
            return "loo" if self.seed is None else f"loo_seed{self.seed}"
        return f"{'coldval' if self.validation else 'cold'}_{self.fraction:g}"

    @property
    def validation(self) -> bool:
        return self.kind == "cold-val"

    def retriever_config(self, seq):
        """The SeqModelConfig this split's retriever trains with: `seq`, with a member's seed."""
        return seq if self.seed is None else dataclasses.replace(seq, seed=self.seed)

    def train_draft_command(self, root: Path, name: str = "") -> str:
        """The command that trains a draft head on this split's retriever in `root`."""
        split = (
            "--split loo"
            if self.kind == "loo"
            else f"--split {self.kind} --cold-start {self.fraction:g}"
        )
        named = f" --name {name}" if name else ""
        return f"genret train-draft --workdir {root} {split}{named}"

    def train_parallel_command(self, root: Path) -> str:
        """The command that trains this cold-start split's parallel-codes retriever in `root`."""
        return self.train_command(root) + " --parallel"

    def train_command(self, root: Path) -> str:
        """The command that trains this split's retriever in `root`."""
        if self.seed is not None:  # only the pipeline trains the ensemble's members
            return f"genret pipeline --workdir {root}"
        if self.kind == "loo":
            return f"genret train-retriever --workdir {root} --split loo"
        val = "--split cold-val " if self.validation else ""
        return f"genret train-retriever --workdir {root} {val}--cold-start {self.fraction:g}"


@dataclasses.dataclass(frozen=True)
class RunLayout:
    """Paths of a work directory's artifacts; nothing else spells one."""

    root: Path

    def __post_init__(self):
        root = Path(self.root)
        object.__setattr__(self, "root", root)
        if root.exists() and not root.is_dir():
            raise ArgumentError(f"--workdir {root}: is a file, expected a directory")

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def warm_run(self) -> "RunLayout":
        """The work directory of the leave-one-out part when `eval.warm_preset` is set."""
        return RunLayout(self.root / "loo")

    @property
    def ledger(self) -> Path:
        return self.root / "stages.json"

    @property
    def raw(self) -> Path:
        """Generated raw files (synthetic dataset only)."""
        return self.root / "raw"

    @property
    def prepared(self) -> Path:
        return self.root / "prepared"

    @property
    def embeddings(self) -> Path:
        return self.root / "embeddings"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def sids(self) -> Path:
        return self.tokenizer / SIDS_FILE

    @property
    def asins(self) -> Path:
        return self.tokenizer / ASINS_FILE

    @property
    def tokenizer_metrics(self) -> Path:
        return self.tokenizer / "metrics.json"

    @property
    def code_usage_plot(self) -> Path:
        return self.tokenizer / "code_usage.png"

    def retriever(self, split: Split) -> Path:
        return self.root / f"retriever_{split.name}"

    def teacher(self, split: Split, j: int = 0) -> Path:
        """Teacher `j` of the retriever `split`'s one distils under seqmodel.self_distill (its
        own run)."""
        return self.root / (f"teacher_{split.name}" + (f"_{j}" if j else ""))

    def retriever_model(self, split: Split) -> Path:
        return self.retriever(split) / retriever_files.MODEL_FILE

    def retriever_summary(self, split: Split) -> Path:
        return self.retriever(split) / retriever_files.SUMMARY_FILE

    def retriever_metrics(self, split: Split) -> Path:
        return self.retriever(split) / retriever_files.METRICS_FILE

    def retriever_plot(self, split: Split) -> Path:
        return self.retriever(split) / "loss.png"

    def draft(self, split: Split, name: str = "") -> Path:
        """A draft head trained on `split`'s frozen retriever (`name`: one of several heads)."""
        return self.root / f"draft_{split.name}{'_' + name if name else ''}"

    def draft_model(self, split: Split, name: str = "") -> Path:
        return self.draft(split, name) / DRAFT_FILE

    def draft_summary(self, split: Split, name: str = "") -> Path:
        return self.draft(split, name) / retriever_files.SUMMARY_FILE

    @property
    def results(self) -> Path:
        return self.root / "results"

    def decoder_warm_result(self, decoder: str, name: str = "") -> Path:
        """Leave-one-out results of a draft decoder (beam search's are `warm_result`)."""
        return self.results / f"{_stem(decoder, name)}_warm.json"

    def decoder_cold_start_result(
        self, decoder: str, fraction: float, *, validation: bool = False, name: str = ""
    ) -> Path:
        """Cold-start results of a draft decoder; named so that the report's cold_start_*.json
        (beam search's) never picks them up."""
        prefix = "validation_" if validation else ""
        return self.results / f"{prefix}{_stem(decoder, name)}_cold_start_{fraction:g}.json"

    def decode_bench(self, split: Split, name: str = "") -> Path:
        """`genret bench-decode`'s JSON; its markdown table sits beside it (.md)."""
        return self.results / f"bench_decode_{split.name}{'_' + name if name else ''}.json"

    def cold_start_result(self, fraction: float, *, validation: bool = False) -> Path:
        prefix = "validation_" if validation else ""
        return self.results / f"{prefix}cold_start_{fraction:g}.json"

    def cold_baselines_result(self, fraction: float, *, validation: bool = False) -> Path:
        """The model-free cold-start methods alone (genret eval-baselines)."""
        prefix = "validation_" if validation else ""
        return self.results / f"{prefix}baselines_cold_start_{fraction:g}.json"

    @property
    def warm_result(self) -> Path:
        return self.results / "warm.json"

    @property
    def validation_warm_result(self) -> Path:
        """`genret eval-warm --validation`: every user's second-to-last item (tuning)."""
        return self.results / "validation_warm.json"

    @property
    def sasrec(self) -> Path:
        """The SASRec baseline's checkpoints and training summary."""
        return self.root / "sasrec_loo"

    def sasrec_next_items(self, k: int) -> Path:
        """SASRec's k most probable next items at every training position
        (seqmodel.sasrec_teacher)."""
        return self.sasrec / f"next_items_top{k}.npz"

    @property
    def sasrec_result(self) -> Path:
        return self.results / "sasrec.json"

    @property
    def validation_sasrec_result(self) -> Path:
        """`genret sasrec --validation`: every user's second-to-last item (tuning)."""
        return self.results / "validation_sasrec.json"

    @property
    def parallel(self) -> Path:
        """The parallel-codes retriever's checkpoints, training summary and item codes."""
        return self.root / "parallel_loo"

    @property
    def parallel_codes(self) -> Path:
        """Its items' product-quantization codes, [N, parallel.num_codes] int32."""
        return self.parallel / "pq_codes.npy"

    @property
    def parallel_result(self) -> Path:
        return self.results / "parallel.json"

    @property
    def validation_parallel_result(self) -> Path:
        """`genret parallel --validation`: every user's second-to-last item (tuning)."""
        return self.results / "validation_parallel.json"

    def parallel_cold(self, split: Split) -> Path:
        """The parallel-codes retriever of a cold-start split (eval.cold_parallel): checkpoints,
        training summary and item codes (parallel_cold_0.02, parallel_coldval_0.02)."""
        return self.root / f"parallel_{split.name}"

    def parallel_cold_codes(self, split: Split) -> Path:
        """Its items' product-quantization codes, [N, parallel.num_codes] int32."""
        return self.parallel_cold(split) / "pq_codes.npy"

    def parallel_cold_summary(self, split: Split) -> Path:
        return self.parallel_cold(split) / retriever_files.SUMMARY_FILE

    def diagnose_result(self, fraction: float) -> Path:
        return self.results / f"validation_diagnose_{fraction:g}.json"

    @property
    def report(self) -> Path:
        return self.results / "report.md"

    def require(self, path: Path, command: str) -> Path:
        """`path`, or an ArtifactError naming it and the command that makes it."""
        if not path.exists():
            raise ArtifactError(f"{path} is missing; make it with `{command}`")
        return path


def _stem(decoder: str, name: str) -> str:
    """nezha-static -> nezha_static; a named head's results carry its name."""
    return decoder.replace("-", "_") + (f"_{name}" if name else "")
