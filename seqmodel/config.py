"""Configuration of the decoder-only retriever and its training."""

import dataclasses
import math

LAYOUTS = ("causal", "sliding", "packed", "bucketed")
# The layouts of the next-item harness (seqmodel.sasrec: SASRec, the parallel-codes retriever):
# one user per row, in random batches (causal) or in batches of users of similar history lengths
# cut to their bucket's width (bucketed; rotary positions make the cut invisible to the model).
HARNESS_LAYOUTS = ("causal", "bucketed")
ARCHS = ("token", "item")
DRAFT_HEADS = ("none", "joint")
DRAFT_CELLS = ("rnn", "gru", "add")
# How an ensemble of retrievers ranks beams (seqmodel.inference.ensemble_decoder).
ENSEMBLE_RULES = ("product", "mixture")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DraftConfig:
    """The NEZHA draft head (self-drafting decoding, WWW 2026): its transition cell, the ablations
    of the paper's Table 4, and its training as an add-on to a frozen retriever (`genret
    train-draft`).

    Ablations: NEZHA-1 `context_state=False`, NEZHA-2 `placeholder_states=False`, NEZHA-3
    `cell="add"`, NEZHA-4 `verify=False` (decoding only: drafted SIDs are not checked).
    """

    cell: str = "rnn"  # s_{l+1} = cell(embed_l(c_l), s_l): rnn (the paper's), gru, add
    context_state: bool = True  # s_1 = the hidden state before the placeholders (else 0)
    placeholder_states: bool = True  # p_l = softmax(W_l (s_l + h_l)) (else W_l s_l)
    verify: bool = True  # drop drafted SIDs that are no item (a hash set) before the top-K
    loss_weight: float = 1.0  # joint training: retriever NLL + loss_weight * draft NLL
    # Add-on training: AdamW on the head (and the placeholder embeddings) only, on every
    # (history, next item) window of the retriever's training split; the retriever is frozen.
    # W_l and embed_l start as the retriever's level-l output kernel and code embeddings, so the
    # first level starts as the retriever's own level-0 distribution (s_1 is what it reads).
    init_from_retriever: bool = True
    batch_size: int = 128
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.0
    num_epochs: int = 2
    max_steps: int = 0  # 0: num_epochs decides
    eval_every: int = 500  # steps between validations (draft Recall@K) and checkpoints
    patience: int = 3
    seed: int = 0

    def __post_init__(self):
        if self.cell not in DRAFT_CELLS:
            raise ValueError(f"seqmodel.draft.cell: {self.cell!r} is not one of {DRAFT_CELLS}")
        if not (self.context_state or self.placeholder_states):
            raise ValueError(
                "seqmodel.draft: context_state and placeholder_states cannot both be false "
                "(the head would see nothing of the user)"
            )
        for name in ("batch_size", "num_epochs", "eval_every", "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"seqmodel.draft.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "max_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"seqmodel.draft.{name} must be >= 0, got {getattr(self, name)}")
        if not self.learning_rate > 0 or not self.loss_weight >= 0 or self.weight_decay < 0:
            raise ValueError(
                "seqmodel.draft: learning_rate must be > 0, loss_weight and weight_decay >= 0"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SeqModelConfig:
    """Transformer shape, example layout and training schedule.

    Defaults are the size chosen on Beauty: a 2% cold-start run took 12 minutes on the shared
    2-core reference CPU (docs/BENCHMARKS.md, "Retriever training").
    """

    # token: one backbone position per SID token, the codes decoded by the backbone with a KV
    # cache (seqmodel.model.Decoder); item: one position per history item, the codes decoded by a
    # GRU head on the backbone's state (seqmodel.item_model.ItemDecoder, L+1 times fewer positions).
    arch: str = "token"
    # arch=item only: > 0 adds to each history item's input a learned embedding from a table of
    # this many rows, indexed by a hash of the item's whole SID (an item-ID embedding without a
    # catalog lookup; hash collisions share a row). 0: the input is the codes' embeddings alone.
    item_embed_buckets: int = 0
    num_layers: int = 2
    d_model: int = 64  # D
    num_heads: int = 2  # H
    mlp_dim: int = 128  # hidden width of the gated MLP
    dropout: float = 0.1
    max_history: int = 20  # items kept per history (the most recent ones)
    # causal: one user per row, loss on items 2..n; sliding: one row per target item; packed: as
    # causal, with several users per row (first-fit; batch_size counts rows, an epoch is as many
    # rows as the users' tokens fill); bucketed: as causal, each batch drawn from users of similar
    # history length and cut to their bucket's width (fewer padded positions, one user per row).
    layout: str = "causal"
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
    # > 0: validation, checkpoint choice and decoding use an exponential moving average of the
    # parameters with this decay per step (seqmodel.state.track_params_ema); 0: the parameters.
    ema_decay: float = 0.0
    # True: each training history's items that share a timestamp are put in a fresh random order
    # every epoch (data.pipeline.shuffle_ties), for data whose order within a tie means nothing.
    # Not with layout packed. Amazon's ties (44-48% of consecutive pairs share a day) are in ASIN
    # order, held-out items included, and on Beauty the shuffle lowers validation Recall@10 by a
    # sixth: the presets leave it off.
    shuffle_ties: bool = False
    # > 0: at every target the loss mixes in, with this weight, a cross-entropy against the
    # co-occurrence teacher (seqmodel.cooc_teacher): the codes of the previous item's
    # `cooc_neighbors` most frequent neighbours in the training histories that share the
    # target's prefix, weighted by their pair counts. 0: the plain log-likelihood.
    cooc_distill: float = 0.0
    # The teacher's neighbours per item: 32 cover 80% of the training transitions; 128 (98%) gave
    # one retriever no better Beauty validation Recall@10 / NDCG@10 (9.51 / 5.30 against 9.53 /
    # 5.32) for a loop of 738 s against 663 s.
    cooc_neighbors: int = 32
    # > 0 (with cooc_distill, layout causal or bucketed, leave-one-out): a trained SASRec (the
    # `sasrec` section, trained first by the pipeline in W/sasrec_loo) is a second teacher
    # beside the co-occurrence one (seqmodel.sasrec_teacher): at every target, the codes of its
    # `sasrec_teacher` most probable next items that share the target's prefix, weighted by
    # their probabilities and scaled to the co-occurrence teacher's total. 0: off.
    sasrec_teacher: int = 0
    # Under sasrec_teacher: SASRec's total weight in each soft target, as a multiple of the
    # co-occurrence teacher's (1: half each). Without sasrec_teacher it has no effect.
    sasrec_teacher_weight: float = 1.0
    # > 0: the retriever is distilled from a trained teacher (self-distillation): at every target
    # the loss mixes in, with this weight, the cross-entropy against the teacher's distribution
    # over that level's codes, teacher-forced on the same inputs (seqmodel.train.teacher_soft_mix).
    # The pipeline first trains the teacher, this config with self_distill=0 and the same seed,
    # in W/teacher_<split> (experiments.pipeline.stages.train_retriever). 0: off. At 0.5 it lifts
    # one retriever's Beauty validation Recall@10 / NDCG@10 from 9.88 / 5.67 to 10.19 / 5.74 (the
    # users outside its holdout): the single presets use it.
    self_distill: float = 0.0
    # Under self_distill: how many teachers, the same config at seeds seed, seed + 1, ...; the
    # student distils the mean of their distributions (an ensemble teacher). Teacher j > 0 trains
    # in W/teacher_<split>_<j>. Without self_distill it has no effect, nor a place in the keys.
    distill_teachers: int = 1
    # arch=item only: > 0 adds, with this weight, -log(1 - p(the item just read)) at every target
    # (unlikelihood on repeats: seqmodel.item_model.target_and_repeat_logits), for data that never
    # repeat an item in a history. 0: off.
    unlikelihood: float = 0.0
    # arch=item only: > 0 adds, with this weight, an in-batch softmax over the batch's target
    # items: the backbone's state before each target scores every target item of the batch by
    # its input vector (the sum of its codes' embeddings), and the loss is -log of its own
    # target's share (seqmodel.train.item_contrast_loss; copies of that item are left out).
    # Decoding is unchanged. 0: off. With item_contrast_logq each score first loses the log of
    # its item's share of the training targets (the in-batch sampling correction, so that the
    # softmax estimates the full one instead of favouring rare items). At 0.25 and 1, with and
    # without the correction, it lowers one retriever's Beauty validation Recall@10 from 9.53 to
    # 8.61-8.94: the presets leave it off.
    item_contrast: float = 0.0
    item_contrast_logq: bool = False
    # arch=item only: > 0 adds, with this weight, a softmax over the training catalog's items:
    # a projection of the backbone's state before each target (the item query) scores every
    # item by its input vector (its codes' embeddings plus its hashed row, as the backbone reads
    # it), and the loss is -log of the target's share (seqmodel.train.item_softmax_loss).
    # Decoding then adds item_softmax_rank times the query's score of each finished beam's item
    # to the beam's joint log-probability, and ranks the beams again (the item-level score of the
    # final code). 0: off. At 0.5 (rank weight 1) it lowers one SASRec-taught retriever's Beauty
    # validation R@5 / N@5 / R@10 / N@10 from 6.83 / 4.67 / 10.23 / 5.76 to 6.22 / 4.17 / 9.67 /
    # 5.29 at 1.7x the training loop: the presets leave it off.
    item_softmax: float = 0.0
    item_softmax_rank: float = 1.0
    # arch=item only: > 0 gives level 1's output one learned vector of this width per trie node
    # (code 0, code 1), added to the shared code vectors through a projection of the head's
    # state (seqmodel.item_model); on 256-code SIDs nearly one vector per item. 0: off. At 32
    # it lowers one retriever's Beauty validation Recall@10 from 9.53 to 9.21: the presets leave
    # it off.
    node_head_dim: int = 0
    # The `sasrec` section only: > 0 trains SASRec with a sampled softmax: each step draws this
    # many distinct items uniformly (shared by the batch's positions), and a position's loss is
    # the cross-entropy over its target and those items, each drawn item's score raised by
    # log(N / this) so that their exp-sum estimates the catalog's (seqmodel.sasrec.sampled_nll).
    # 0: the full softmax. At 2,048 on Beauty a step takes 0.74x the full softmax's time, and
    # SASRec learns less (holdout Recall@10 3.46 against 4.00 after the same 700 steps).
    sampled_negatives: int = 0
    seed: int = 0
    # none: a plain retriever; joint: it also trains the draft head `draft` (its loss added).
    draft_head: str = "none"
    draft: DraftConfig | dict = DraftConfig()  # a dict only as read back from JSON (converted)

    def __post_init__(self):
        if isinstance(self.draft, dict):  # read back from a retriever.json
            object.__setattr__(self, "draft", DraftConfig(**self.draft))
        if self.draft_head not in DRAFT_HEADS:
            raise ValueError(
                f"seqmodel.draft_head: {self.draft_head!r} is not one of {DRAFT_HEADS}"
            )
        if self.layout not in LAYOUTS:
            raise ValueError(f"seqmodel.layout: {self.layout!r} is not one of {LAYOUTS}")
        if self.arch not in ARCHS:
            raise ValueError(f"seqmodel.arch: {self.arch!r} is not one of {ARCHS}")
        if self.arch == "item" and (self.layout == "packed" or self.draft_head != "none"):
            raise ValueError(
                "seqmodel.arch=item takes one user per row (layout causal, sliding or bucketed) "
                "and no draft head (it decodes in its own head)"
            )
        if self.item_embed_buckets < 0 or (self.item_embed_buckets and self.arch != "item"):
            raise ValueError(
                "seqmodel.item_embed_buckets must be >= 0, and > 0 only with seqmodel.arch=item, "
                f"got {self.item_embed_buckets} with arch={self.arch}"
            )
        if self.layout == "packed" and self.draft_head != "none":
            raise ValueError(
                "seqmodel.draft_head=joint needs one user per row (layout causal or sliding), "
                "not layout=packed; train the head afterwards with `genret train-draft`"
            )
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
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"seqmodel.ema_decay must be in [0, 1), got {self.ema_decay}")
        if not 0.0 <= self.cooc_distill <= 1.0 or self.cooc_neighbors < 1:
            raise ValueError(
                "seqmodel.cooc_distill must be in [0, 1] and seqmodel.cooc_neighbors >= 1, got "
                f"{self.cooc_distill} and {self.cooc_neighbors}"
            )
        if self.sasrec_teacher < 0 or (
            self.sasrec_teacher
            and (not self.cooc_distill or self.layout not in ("causal", "bucketed"))
        ):
            raise ValueError(
                "seqmodel.sasrec_teacher must be >= 0, and > 0 only with seqmodel.cooc_distill > 0 "
                f"and layout causal or bucketed, got {self.sasrec_teacher} with cooc_distill="
                f"{self.cooc_distill} and layout={self.layout}"
            )
        if not self.sasrec_teacher_weight > 0 or not math.isfinite(self.sasrec_teacher_weight):
            raise ValueError(
                "seqmodel.sasrec_teacher_weight must be a finite number > 0, got "
                f"{self.sasrec_teacher_weight}"
            )
        if self.sasrec_teacher and self.shuffle_ties:
            raise ValueError(
                "seqmodel.sasrec_teacher reads the histories in their order: not with shuffle_ties"
            )
        if not 0.0 <= self.self_distill <= 1.0:
            raise ValueError(f"seqmodel.self_distill must be in [0, 1], got {self.self_distill}")
        if self.distill_teachers < 1:
            raise ValueError(f"seqmodel.distill_teachers must be >= 1, got {self.distill_teachers}")
        if self.unlikelihood < 0 or (self.unlikelihood and self.arch != "item"):
            raise ValueError(
                "seqmodel.unlikelihood must be >= 0, and > 0 only with seqmodel.arch=item, got "
                f"{self.unlikelihood} with arch={self.arch}"
            )
        if self.item_contrast < 0 or (self.item_contrast and self.arch != "item"):
            raise ValueError(
                "seqmodel.item_contrast must be >= 0, and > 0 only with seqmodel.arch=item, got "
                f"{self.item_contrast} with arch={self.arch}"
            )
        if self.item_contrast_logq and not self.item_contrast:
            raise ValueError("seqmodel.item_contrast_logq needs seqmodel.item_contrast > 0")
        if self.item_contrast and self.unlikelihood:
            raise ValueError("seqmodel.item_contrast and seqmodel.unlikelihood: set one of them")
        if self.item_softmax and self.unlikelihood:
            raise ValueError("seqmodel.item_softmax and seqmodel.unlikelihood: set one of them")
        if self.item_softmax < 0 or (self.item_softmax and self.arch != "item"):
            raise ValueError(
                "seqmodel.item_softmax must be >= 0, and > 0 only with seqmodel.arch=item, got "
                f"{self.item_softmax} with arch={self.arch}"
            )
        if not self.item_softmax_rank >= 0 or not math.isfinite(self.item_softmax_rank):
            raise ValueError(
                "seqmodel.item_softmax_rank must be a finite number >= 0, got "
                f"{self.item_softmax_rank}"
            )
        if self.node_head_dim < 0 or (self.node_head_dim and self.arch != "item"):
            raise ValueError(
                "seqmodel.node_head_dim must be >= 0, and > 0 only with seqmodel.arch=item, got "
                f"{self.node_head_dim} with arch={self.arch}"
            )
        if self.sampled_negatives < 0:
            raise ValueError(
                f"seqmodel.sampled_negatives must be >= 0, got {self.sampled_negatives}"
            )
        for name in ("cooc_distill", "shuffle_ties"):
            if getattr(self, name) and self.layout == "packed":
                raise ValueError(
                    f"seqmodel.{name} takes one user per row (layout causal, sliding or "
                    "bucketed), not layout=packed"
                )


def keyed_fields(cfg: SeqModelConfig) -> dict:
    """`cfg` as a dict for the next-item models' and draft heads' fingerprints: without
    sasrec_teacher or sampled_negatives at its off value, nor sasrec_teacher_weight or the item
    softmax's two fields where they have no effect, which came after their keys."""
    fields = dataclasses.asdict(cfg)
    if not fields["sampled_negatives"]:
        del fields["sampled_negatives"]
    if not fields["sasrec_teacher"]:
        del fields["sasrec_teacher"]
    if fields["sasrec_teacher_weight"] == 1.0 or not cfg.sasrec_teacher:  # no effect
        del fields["sasrec_teacher_weight"]
    if not fields["item_softmax"]:  # off: neither field has an effect
        del fields["item_softmax"], fields["item_softmax_rank"]
    return fields


def identity_fields(cfg: SeqModelConfig) -> dict:
    """`cfg` as a dict for fingerprints and stage keys (data.fingerprint versions them); a field
    added at its off value is left out, so that models trained before it keep their keys."""
    fields = keyed_fields(cfg)
    if not fields["self_distill"]:
        del fields["self_distill"]
    if fields["distill_teachers"] == 1 or not cfg.self_distill:  # one, or none: no effect
        del fields["distill_teachers"]
    return fields


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParallelCodesConfig(SeqModelConfig):
    """The parallel-codes retriever (RPG, KDD 2025; seqmodel.parallel): the transformer and
    schedule fields of SeqModelConfig, plus its long Semantic IDs and output temperature.

    Items get `num_codes` codes of `codebook_size` each by product quantization of their text
    embeddings (rqvae.pq: whitened PCA to `pca_dim`, k-means per subspace, seeded by `seed`).
    """

    num_codes: int = 32  # M, codes per item
    codebook_size: int = 256  # V, centroids per subspace
    pca_dim: int = 128  # whitened PCA width; a multiple of num_codes
    temperature: float = 0.03  # each head's logits: cosine similarity / temperature

    def __post_init__(self):
        try:
            super().__post_init__()
        except ValueError as e:  # the inherited checks name the section this config lives in
            raise ValueError(str(e).replace("seqmodel.", "parallel.")) from None
        if self.num_codes < 1 or self.codebook_size < 2:
            raise ValueError(
                f"parallel.num_codes must be >= 1 and parallel.codebook_size >= 2, got "
                f"{self.num_codes} and {self.codebook_size}"
            )
        if self.pca_dim < self.num_codes or self.pca_dim % self.num_codes:
            raise ValueError(
                f"parallel.pca_dim={self.pca_dim} must be a multiple of "
                f"parallel.num_codes={self.num_codes}"
            )
        if not 0.0 < self.temperature < float("inf"):
            raise ValueError(f"parallel.temperature must be > 0, got {self.temperature}")
