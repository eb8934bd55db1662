"""Configuration of the decoder-only retriever and its training."""

import dataclasses

LAYOUTS = ("causal", "sliding")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SeqModelConfig:
    """Transformer shape, example layout and training schedule.

    Defaults are the size chosen on Beauty: a 2% cold-start run took 12 minutes on the shared
    2-core reference CPU (docs/BENCHMARKS.md, "Retriever training").
    """

    num_layers: int = 2
    d_model: int = 64  # D
    num_heads: int = 2  # H
    mlp_dim: int = 128  # hidden width of the gated MLP
    dropout: float = 0.1
    max_history: int = 20  # items kept per history (the most recent ones)
    layout: str = "causal"  # causal: one pass per user, loss on items 2..n; sliding: one target
    batch_size: int = 128
    learning_rate: float = 2e-3
    warmup_steps: int = 100
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    num_epochs: int = 10
    max_steps: int = 0  # 0: num_epochs decides
    eval_every: int = 200  # steps between validations (and checkpoints)
    eval_users: int = 1000  # validation holdout size (users whose last training item is held out)
    eval_beam_size: int = 10  # K for validation Recall@10
    patience: int = 3  # validations without improvement before early stopping
    seed: int = 0

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"seqmodel.layout: {self.layout!r} is not one of {LAYOUTS}")
        if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 2:
            raise ValueError(
                f"seqmodel.d_model={self.d_model} must split into num_heads={self.num_heads} "
                "heads of even width (rotary embeddings rotate pairs)"
            )
        for name in ("num_layers", "max_history", "batch_size", "eval_every", "eval_beam_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"seqmodel.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"seqmodel.dropout must be in [0, 1), got {self.dropout}")
