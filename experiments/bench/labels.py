"""Per-step cost of masking a label set: our JAX and torch kernels vs Python tries (torch needed).

Every method computes the same thing at each step of a decode: the scores [B*K, V] with every
token outside the label grammar at -inf, for B*K rows that each follow one random label to its
EOS (rows that finished allow only EOS). The Python baselines are a per-row dict trie walked from
each row's generated tokens (the published processor, extended from row 0 to every row) and
`transformers`' `PrefixConstrainedLogitsProcessor` with a Python trie behind
`prefix_allowed_tokens_fn`. Ours: the torch `LabelLogitsProcessor`, the JAX dense mask
(`LabelConstraint.advance_tokens` then `masked_logits`, jitted) and the JAX beam step
(`LabelConstraint.candidates` + top-K + advance: what `make_label_decoder` runs, no dense mask).
"""

import dataclasses
import functools
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from decoding.beam_search import _reorder, _select
from decoding.label_index import LabelIndex
from decoding.labels import LabelConstraint

METHODS = ("python_trie", "prefix_fn", "torch_processor", "jax_mask", "jax_beam_step")
BASELINES = ("python_trie", "prefix_fn")
EOS = 0  # token 0 is EOS; label tokens are 1 .. V-1


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelBenchConfig:
    """One run: every label-set size with every method, interleaved step by step."""

    num_labels: tuple[int, ...] = (1_000, 100_000)
    vocab: int = 50_000
    batch: int = 32
    beam: int = 4
    max_len: int = 8  # tokens per label: uniform in 1 .. max_len
    prompt_len: int = 8
    reps: int = 5
    seed: int = 0
    methods: tuple[str, ...] = METHODS


def random_labels(num: int, vocab: int, max_len: int, seed: int) -> list[list[int]]:
    """`num` distinct labels of 1..max_len tokens; tokens log-uniform over 1..V-1 (Zipf, s=1),
    so common tokens start many labels, as words do."""
    rng = np.random.default_rng(seed)
    out: dict[tuple[int, ...], None] = {}
    while len(out) < num:
        n = num - len(out)
        lengths = rng.integers(1, max_len + 1, n + n // 4 + 8)
        toks = np.exp(rng.uniform(0, np.log(vocab - 1), (len(lengths), max_len))).astype(np.int64)
        toks = np.clip(toks, 1, vocab - 1)
        for row, k in zip(toks.tolist(), lengths.tolist(), strict=True):
            out.setdefault(tuple(row[:k]), None)
    return [list(t) for t in list(out)[:num]]


class PythonTrieProcessor:
    """The published style, per row: walk a dict trie from the row's generated tokens, then set
    the row's allowed tokens in a -inf mask (here for every row, not row 0 only)."""

    def __init__(self, labels: list[list[int]], eos: int, prompt_len: int):
        import torch

        self.torch, self.eos, self.prompt_len = torch, eos, prompt_len
        self.trie: dict = {}
        for label in labels:
            node = self.trie
            for t in label:
                node = node.setdefault(t, {})
            node[eos] = {}

    def __call__(self, input_ids, scores):
        mask = self.torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            node = self.trie
            for t in input_ids[row, self.prompt_len :].tolist():
                if t == self.eos:  # finished: only EOS (padding) stays allowed
                    node = {self.eos: {}}
                    break
                node = node[t]
            mask[row, list(node.keys())] = 0
        return scores + mask


def prefix_fn_processor(labels: list[list[int]], eos: int, prompt_len: int, num_beams: int):
    """transformers' PrefixConstrainedLogitsProcessor over a Python trie (the documented way)."""
    from transformers import PrefixConstrainedLogitsProcessor

    trie = PythonTrieProcessor(labels, eos, prompt_len).trie

    def allowed(batch_id: int, sent) -> list[int]:
        node = trie
        for t in sent[prompt_len:].tolist():
            if t == eos:
                return [eos]
            node = node[t]
        return list(node.keys())

    return PrefixConstrainedLogitsProcessor(allowed, num_beams)


def _paths(labels, rows: int, steps: int, rng) -> np.ndarray:
    """Generated tokens [rows, steps]: a random label each, then EOS, then EOS padding."""
    out = np.full((rows, steps), EOS, np.int64)
    for r, i in enumerate(rng.integers(0, len(labels), rows).tolist()):
        out[r, : len(labels[i])] = labels[i]
    return out


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up (compilation for the jitted methods)
    ms = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        ms.append((time.perf_counter() - t) * 1e3)
    return float(np.median(ms))


def _jax_mask_step(c: LabelConstraint, state, prev, scores):
    """Advance by the previous tokens (none at step 0), then mask the scores densely."""
    if prev is not None:
        state = c.advance_tokens(state, prev)
    return state, c.masked_logits(state, scores)


def _jax_beam_step(level: int, K: int, c: LabelConstraint, state, lp):
    """One beam-search step without the model: sparse candidates, top-K, reorder, advance
    (narrow children slots unless a row sits at a wider node, as `make_label_decoder` does)."""

    def pick(width):
        return _select(jnp.zeros(lp.shape[:2]), c.candidates(level, state, lp, width=width), K)

    parent, token, aux, scores = c.by_width(state, pick)
    return c.advance(level, _reorder(state, parent), token, aux), scores


def run_label_bench(cfg: LabelBenchConfig, progress: Callable[[str], None] | None = None) -> dict:
    """Median ms per step (step 0 and the mean over the decode's steps) for every method."""
    import torch

    # One torch thread: on a shared CPU, intra-op threads mostly wait on each other.
    torch.set_num_threads(1)
    B, K, V, T = cfg.batch, cfg.beam, cfg.vocab, cfg.max_len + 1
    R = B * K
    rng = np.random.default_rng(cfg.seed)
    prompt = rng.integers(1, V, (R, cfg.prompt_len))
    scores = torch.as_tensor(rng.normal(size=(R, V)).astype(np.float32))
    scores_jax = jnp.asarray(scores.numpy().reshape(B, K, V))
    out = {"config": dataclasses.asdict(cfg), "sizes": {}}
    for n in cfg.num_labels:
        labels = random_labels(n, V, cfg.max_len, cfg.seed + n)
        t0 = time.perf_counter()
        index = LabelIndex.build(labels, vocab_size=V)
        build_s = time.perf_counter() - t0
        c = jax.device_put(LabelConstraint.build(index, eos_id=EOS, max_steps=T))
        gen = _paths(labels, R, T, rng)
        ids = [torch.as_tensor(np.concatenate([prompt, gen[:, :t]], axis=1)) for t in range(T)]
        fns = _methods(cfg, labels, index, c, ids, gen, scores, scores_jax)
        per_step = {m: [] for m in fns}
        for t in range(T):
            if progress:
                progress(f"{n} labels: step {t}")
            # Methods interleaved within each step, so a noisy spell hits them all alike.
            for m, fn in fns.items():
                per_step[m].append(_median_ms(functools.partial(fn, t), cfg.reps))
        rows = {
            m: {"step0_ms": ms[0], "mean_step_ms": float(np.mean(ms)), "per_step_ms": ms}
            for m, ms in per_step.items()
        }
        for m, row in rows.items():
            for b in BASELINES:
                if b in rows and m not in BASELINES:
                    row[f"speedup_vs_{b}"] = rows[b]["mean_step_ms"] / row["mean_step_ms"]
                    row[f"step0_speedup_vs_{b}"] = rows[b]["step0_ms"] / row["step0_ms"]
        out["sizes"][str(n)] = {
            "build_s": build_s,
            "nodes": index.num_nodes,
            "width": index.capacity.width,
            "narrow_width": index.capacity.narrow_width,
            "root_branching": int(np.asarray(index.row_ptr)[1]),
            "methods": rows,
        }
    return out


def _methods(cfg, labels, index, c, ids, gen, scores, scores_jax) -> dict[str, Callable]:
    """Per method, `fn(step)` computing that step's masked scores (state of step-1 prepared)."""
    import torch

    from decoding.hf import LabelLogitsProcessor

    B, K, T = cfg.batch, cfg.beam, len(ids)
    fns: dict[str, Callable] = {}
    if "python_trie" in cfg.methods:
        proc = PythonTrieProcessor(labels, EOS, cfg.prompt_len)
        fns["python_trie"] = lambda t: proc(ids[t], scores)
    if "prefix_fn" in cfg.methods:
        pfn = prefix_fn_processor(labels, EOS, cfg.prompt_len, K)
        fns["prefix_fn"] = lambda t: pfn(ids[t], scores)
    if "torch_processor" in cfg.methods:
        tp = LabelLogitsProcessor(index, eos_token_id=EOS)
        snaps = []  # the processor's memory after step t-1, restored before each timed call
        for t in range(T):
            snaps.append((tp._ids, tp._layers, tp._back, tp._start))
            tp(ids[t], scores)

        def torch_step(t):
            tp._ids, tp._layers, tp._back, tp._start = snaps[t]
            with torch.inference_mode():
                return tp(ids[t], scores)

        fns["torch_processor"] = torch_step
    if "jax_mask" in cfg.methods or "jax_beam_step" in cfg.methods:
        state0 = jax.tree.map(
            lambda x: jnp.broadcast_to(x[:, None], (B, K, *x.shape[1:])), c.init_state(B)
        )
        states = [state0]
        adv = jax.jit(LabelConstraint.advance_tokens)
        for t in range(1, T):
            states.append(adv(c, states[-1], jnp.asarray(gen[:, t - 1].reshape(B, K), jnp.int32)))
        prev = [None] + [jnp.asarray(gen[:, t - 1].reshape(B, K), jnp.int32) for t in range(1, T)]
        lp = jax.nn.log_softmax(scores_jax, axis=-1)
    if "jax_mask" in cfg.methods:
        mask_step = jax.jit(_jax_mask_step)
        fns["jax_mask"] = lambda t: mask_step(
            c, states[t - 1] if t else state0, prev[t], scores_jax
        )
    if "jax_beam_step" in cfg.methods:
        beam_steps = [jax.jit(functools.partial(_jax_beam_step, t, K)) for t in range(T)]
        # Step 0 searches from one root per row (as the decoder does): [B, 1] -> K beams.
        root_state = jax.tree.map(lambda x: x[:, :1], state0)
        fns["jax_beam_step"] = lambda t: (
            beam_steps[t](c, states[t], lp) if t else beam_steps[0](c, root_state, lp[:, :1])
        )
    return fns


def markdown_table(result: dict, command: str) -> str:
    """One row per (label count, method)."""
    cfg = result["config"]
    lines = [
        f"`{command}` (batch {cfg['batch']} x beam {cfg['beam']} = "
        f"{cfg['batch'] * cfg['beam']} rows, V = {cfg['vocab']:,}, labels of 1-{cfg['max_len']} "
        f"tokens; median of {cfg['reps']} reps after a warm-up, per step)",
        "",
        "| labels | method | step 0 ms | mean ms/step | x vs python trie: mean (step 0) "
        "| x vs prefix_allowed_tokens_fn: mean (step 0) |",
        "|---|---|---|---|---|---|",
    ]
    for n, size in result["sizes"].items():
        for m, row in size["methods"].items():
            vs = [
                f"{row[f'speedup_vs_{b}']:.1f} ({row[f'step0_speedup_vs_{b}']:.1f})"
                if f"speedup_vs_{b}" in row
                else "-"
                for b in BASELINES
            ]
            lines.append(
                f"| {int(n):,} | {m} | {row['step0_ms']:.2f} | {row['mean_step_ms']:.2f} "
                f"| {vs[0]} | {vs[1]} |"
            )
    return "\n".join(lines) + "\n"
