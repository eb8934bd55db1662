"""Per-step cost of masking a label set: our JAX and torch kernels vs Python tries and grammar
engines (torch needed; llguidance and xgrammar with the `bench` extra).

Every method computes the same thing at each step of a decode: the scores [B*K, V] with every
token outside the label grammar at -inf, for B*K rows that each follow labels to their EOS (rows
that finished allow only EOS), advancing by the previous step's token first. Modes: `single`
(one label per row), `subsets` (each prompt allows its own random `subset_size` labels) and
`multi` (up to `multi_labels` distinct labels joined by a separator token; rows emit two). The
Python baselines are a per-row dict trie walked from each row's generated tokens (the published
processor, extended from row 0 to every row) and `transformers`' `PrefixConstrainedLogitsProcessor`
over the same trie (single mode). Ours: the torch `LabelLogitsProcessor`, the JAX mask
(`LabelConstraint.advance_tokens` then `masked_logits`: a packed bitmask applied in one select,
jitted) and the JAX beam step (`candidates` + top-K + advance: what `make_label_decoder` runs).
Grammar engines, on a vocabulary of V distinct 3-byte tokens (so a token sequence has one
spelling): llguidance (a Lark grammar; `LLMatcher` per row, masks filled by its parallel
executor, applied with `llguidance.torch.apply_token_bitmask_inplace`) and xgrammar (an EBNF
grammar; `GrammarMatcher` per row, `apply_token_bitmask_inplace`). Neither expresses "distinct
labels", so in `multi` mode their grammar allows repeats (`mask_agrees` says how often their
mask equals ours).
"""

import dataclasses
import functools
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from decoding.beam_search import _reorder, _select
from decoding.label_index import LabelIndex
from decoding.labels import LabelConstraint

METHODS = (
    "python_trie",
    "prefix_fn",
    "torch_processor",
    "torch_processor_inplace",
    "jax_mask",
    "jax_mask_donated",
    "jax_beam_step",
    "llguidance",
    "xgrammar",
)
MODES = ("single", "subsets", "multi")
BASELINES = ("python_trie", "prefix_fn")
ENGINES = ("llguidance", "llguidance_mask_only", "xgrammar")
EOS = 0  # token 0 is EOS; label tokens are 1 .. V-1


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelBenchConfig:
    """One run: every label-set size and mode with every method, interleaved step by step."""

    num_labels: tuple[int, ...] = (1_000, 100_000)
    vocab: int = 50_000
    batch: int = 32
    beam: int = 4
    max_len: int = 8  # tokens per label: uniform in 1 .. max_len
    prompt_len: int = 8
    reps: int = 5
    seed: int = 0
    methods: tuple[str, ...] = METHODS
    modes: tuple[str, ...] = ("single",)
    steps: tuple[int, ...] = ()  # steps to time (empty: every step of the decode)
    subset_size: int = 1_000  # labels each prompt allows in `subsets` mode
    multi_labels: int = 3  # max_labels in `multi` mode
    # xgrammar compiles a grammar per prompt ahead of time; larger ones are skipped (a grammar of
    # 100,000 labels had not compiled after 15 minutes on a shared 2-core CPU).
    xgrammar_max_labels: int = 20_000
    # torch's intra-op threads; 0: every core, as XLA's CPU client uses for the JAX methods.
    torch_threads: int = 0


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
    the row's allowed tokens in a -inf mask (here for every row, not row 0 only). With `allowed`
    ([prompts, labels] bool) each prompt walks a trie of its own labels; with a `separator`, up
    to `max_labels` distinct labels (a child is closed when every label under it was emitted)."""

    def __init__(
        self,
        labels: list[list[int]],
        eos: int,
        prompt_len: int,
        *,
        allowed: np.ndarray | None = None,
        separator: tuple[int, ...] = (),
        max_labels: int = 1,
    ):
        import torch

        self.torch, self.eos, self.prompt_len = torch, eos, prompt_len
        self.sep, self.max_labels = tuple(separator), max_labels
        subsets = [range(len(labels))] if allowed is None else [np.flatnonzero(a) for a in allowed]
        self.tries = [self._build([labels[i] for i in ids]) for ids in subsets]
        self.totals = [len(ids) for ids in subsets]
        self.trie = self.tries[0]

    def _build(self, labels) -> dict:
        trie: dict = {}
        for label in labels:
            node = trie
            for t in label:
                node = node.setdefault(t, {})
            node[self.eos] = {}
        return trie

    def allowed(self, row: int, generated: list[int], rows: int) -> list[int]:
        """The allowed next tokens of a row (of `rows`) that generated `generated`."""
        prompt = row * len(self.tries) // rows
        trie = self.tries[prompt]
        if not self.sep:
            node = trie
            for t in generated:
                if t == self.eos:  # finished: only EOS (padding) stays allowed
                    return [self.eos]
                node = node[t]
            return list(node.keys())
        node, prefix, emitted, sep_pos = trie, [], [], 0
        for t in generated:
            if t == self.eos:
                return [self.eos]
            if sep_pos:
                sep_pos = (sep_pos + 1) % len(self.sep)
            elif t == self.sep[0] and self.eos in node:
                emitted.append(tuple(prefix))
                node, prefix, sep_pos = trie, [], 1 % len(self.sep)
            else:
                node = node[t]
                prefix.append(t)
        if sep_pos:
            return [self.sep[sep_pos]]
        out = [t for t in node if t != self.eos and not self._used_up(node[t], prefix, t, emitted)]
        if self.eos in node and tuple(prefix) not in emitted:
            out.append(self.eos)
            more = len(emitted) + 1 < self.max_labels
            if more and self.totals[prompt] - len(emitted) > 1:
                out.append(self.sep[0])
        return out

    def _used_up(self, child: dict, prefix: list[int], t: int, emitted: list[tuple]) -> bool:
        """Every label under `child` (through token t after `prefix`) was emitted."""
        p = (*prefix, t)
        under = [e for e in emitted if e[: len(p)] == p]
        return bool(under) and _count_labels(child, len(under) + 1, self.eos) <= len(under)

    def __call__(self, input_ids, scores):
        mask = self.torch.full_like(scores, float("-inf"))
        R = input_ids.shape[0]
        for row in range(R):
            mask[row, self.allowed(row, input_ids[row, self.prompt_len :].tolist(), R)] = 0
        return scores + mask


def _count_labels(node: dict, limit: int, eos: int) -> int:
    """Labels under a dict-trie node, counted up to `limit`."""
    n, stack = 0, [node]
    while stack and n < limit:
        x = stack.pop()
        n += eos in x
        stack.extend(v for k, v in x.items() if k != eos)
    return n


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


def _paths(labels, choices: list[np.ndarray], K: int, steps: int, sep, per_row: int, rng):
    """Generated tokens [B*K, steps]: per row `per_row` distinct labels of its prompt's
    `choices`, joined by `sep`, then EOS, then EOS padding."""
    out = np.full((len(choices) * K, steps), EOS, np.int64)
    for r in range(len(out)):
        picks = rng.choice(choices[r // K], per_row, replace=False)
        toks = [t for i, p in enumerate(picks) for t in (*(sep if i else ()), *labels[p])]
        toks = toks[:steps]
        out[r, : len(toks)] = toks
    return out


def _median_ms(fn: Callable[..., object], reps: int, setup: Callable | None = None) -> float:
    """Median ms of `fn(setup())` (setup untimed: fresh copies of what `fn` changes in place)."""
    fn(setup() if setup else None)  # warm-up (compilation for the jitted methods)
    ms = []
    for _ in range(reps):
        arg = setup() if setup else None
        t = time.perf_counter()
        jax.block_until_ready(fn(arg))
        ms.append((time.perf_counter() - t) * 1e3)
    return float(np.median(ms))


def _jax_mask_step(c: LabelConstraint, state, prev, scores):
    """Advance by the previous tokens (none at step 0), then mask the scores."""
    if prev is not None:
        state = c.advance_tokens(state, prev)
    return state, c.masked_logits(state, scores)


def _jax_beam_step(level: int, K: int, c: LabelConstraint, state, lp):
    """One beam-search step without the model: sparse candidates, top-K, reorder, advance
    (narrow children slots unless a row sits at a wider node, as `make_label_decoder` does)."""

    def pick(width):
        cand = c.candidates(level, state, lp, width=width, root_top=K)
        return _select(jnp.zeros(lp.shape[:2]), cand, K)

    parent, token, aux, scores = c.by_width(state, pick)
    return c.advance(level, _reorder(state, parent), token, aux), scores


@dataclasses.dataclass(frozen=True)
class _Case:
    """One mode's grammar: labels, per-prompt subsets, separator, and the rows' tokens."""

    mode: str
    labels: list
    allowed: np.ndarray | None  # bool [B, N] or None
    separator: tuple[int, ...]
    max_labels: int
    gen: np.ndarray  # [B*K, T]


def run_label_bench(cfg: LabelBenchConfig, progress: Callable[[str], None] | None = None) -> dict:
    """Median ms per step for every method, per label-set size and mode."""
    import torch

    torch.set_num_threads(cfg.torch_threads or os.cpu_count() or 1)
    B, K, V = cfg.batch, cfg.beam, cfg.vocab
    R = B * K
    rng = np.random.default_rng(cfg.seed)
    prompt = rng.integers(1, V, (R, cfg.prompt_len))
    scores = torch.as_tensor(rng.normal(size=(R, V)).astype(np.float32))
    scores_jax = jnp.asarray(scores.numpy().reshape(B, K, V))
    out = {"config": dataclasses.asdict(cfg), "sizes": {}}
    engines = _Engines(cfg, progress)
    for n in cfg.num_labels:
        labels = random_labels(n, V, cfg.max_len, cfg.seed + n)
        t0 = time.perf_counter()
        index = LabelIndex.build(labels, vocab_size=V)
        build_s = time.perf_counter() - t0
        size = out["sizes"][str(n)] = {
            "build_s": build_s,
            "nodes": index.num_nodes,
            "width": index.capacity.width,
            "narrow_width": index.capacity.narrow_width,
            "root_branching": int(np.asarray(index.row_ptr)[1]),
            "modes": {},
        }
        for mode in cfg.modes:
            case = _case(cfg, mode, labels, rng)
            size["modes"][mode] = _run_case(
                cfg, case, index, engines, prompt, scores, scores_jax, progress
            )
    out["skipped"] = engines.skipped
    return out


def _case(cfg: LabelBenchConfig, mode: str, labels, rng) -> _Case:
    B, K, N = cfg.batch, cfg.beam, len(labels)
    T = (max(cfg.steps) + 1) if cfg.steps else 0
    allowed, sep, max_labels, per_row = None, (), 1, 1
    choices = [np.arange(N)] * B
    if mode == "subsets":
        allowed = np.zeros((B, N), bool)
        for b in range(B):
            allowed[b, rng.choice(N, min(cfg.subset_size, N), replace=False)] = True
        choices = [np.flatnonzero(a) for a in allowed]
    elif mode == "multi":
        used = np.zeros(cfg.vocab, bool)
        used[[t for label in labels for t in label]] = True
        used[EOS] = True
        sep, max_labels, per_row = (int(np.argmin(used)),), cfg.multi_labels, 2
        if used.all():
            raise ValueError("multi mode needs a token that no label uses (the separator)")
    longest = per_row * cfg.max_len + (per_row - 1) * len(sep) + 1
    gen = _paths(labels, choices, K, max(T, longest), sep, per_row, rng)
    if not cfg.steps:
        gen = gen[:, : int((gen != EOS).sum(1).max()) + 1]
    return _Case(mode, labels, allowed, sep, max_labels, gen)


def _run_case(cfg, case, index, engines, prompt, scores, scores_jax, progress) -> dict:
    import torch

    steps = list(cfg.steps) or list(range(case.gen.shape[1]))
    T = max(steps) + 1
    ids = [torch.as_tensor(np.concatenate([prompt, case.gen[:, :t]], axis=1)) for t in range(T)]
    c = LabelConstraint.build(
        index, eos_id=EOS, separator=case.separator, max_labels=case.max_labels
    )
    if case.allowed is not None:
        c = c.restrict(case.allowed)
    c = jax.device_put(c)
    fns = _methods(cfg, case, index, c, ids, scores, scores_jax)
    fns.update(engines.methods(case, scores, T))
    per_step = {m: {} for m in fns}
    agrees = {m: {} for m in fns if m in ENGINES}
    for t in steps:
        if progress:
            progress(f"{len(case.labels)} labels, {case.mode}: step {t}")
        want = engines.reference(c, case, t) if agrees else None
        # Methods interleaved within each step, so a noisy spell hits them all alike.
        for m, (fn, setup, mask) in fns.items():
            per_step[m][str(t)] = _median_ms(
                functools.partial(fn, t), cfg.reps, setup and functools.partial(setup, t)
            )
            if m in agrees:
                agrees[m][str(t)] = float((mask(t) == want).all(-1).mean())
    rows = {}
    for m, ms in per_step.items():
        row = rows[m] = {"per_step_ms": ms}
        if m in agrees:
            row["mask_agrees"] = agrees[m]
        for ref in ("llguidance", *BASELINES):
            if ref in per_step and m != ref:
                row[f"x_vs_{ref}"] = {t: per_step[ref][t] / v for t, v in ms.items()}
    return {
        "rows": len(case.gen),
        "separator": list(case.separator),
        "max_labels": case.max_labels,
        "methods": rows,
    }


def _torch_method(case, index, ids, scores, T: int, *, inplace: bool) -> tuple:
    """The transformers processor's step (in place: on a fresh copy of the scores, untimed, as
    the donated JAX mask gets)."""
    import torch

    from decoding.hf import LabelLogitsProcessor

    tp = LabelLogitsProcessor(
        index,
        eos_token_id=EOS,
        separator=case.separator,
        max_labels=case.max_labels,
        allowed=case.allowed,
        inplace=inplace,
    )
    snaps = []  # the processor's memory after step t-1, restored before each timed call
    for t in range(T):
        snaps.append((tp._ids, tp._layers, tp._back, tp._start))
        tp(ids[t], scores.clone())

    def torch_step(t, x):
        tp._ids, tp._layers, tp._back, tp._start = snaps[t]
        with torch.inference_mode():
            return tp(ids[t], scores if x is None else x)

    return torch_step, (lambda t: scores.clone()) if inplace else None, None


def _methods(cfg, case, index, c, ids, scores, scores_jax) -> dict[str, tuple]:
    """Per method (fn(step, arg), setup(step) or None, None): that step's masked scores."""
    B, K, T, gen = cfg.batch, cfg.beam, len(ids), case.gen
    fns: dict[str, tuple] = {}
    if "python_trie" in cfg.methods:
        proc = PythonTrieProcessor(
            case.labels,
            EOS,
            cfg.prompt_len,
            allowed=case.allowed,
            separator=case.separator,
            max_labels=case.max_labels,
        )
        fns["python_trie"] = (lambda t, _: proc(ids[t], scores), None, None)
    if "prefix_fn" in cfg.methods and case.mode == "single":
        pfn = prefix_fn_processor(case.labels, EOS, cfg.prompt_len, K)
        fns["prefix_fn"] = (lambda t, _: pfn(ids[t], scores), None, None)
    for name in ("torch_processor", "torch_processor_inplace"):
        if name in cfg.methods:
            fns[name] = _torch_method(case, index, ids, scores, T, inplace=name.endswith("inplace"))
    if {"jax_mask", "jax_mask_donated", "jax_beam_step"} & set(cfg.methods):
        state0 = jax.tree.map(
            lambda x: jnp.broadcast_to(x[:, None], (B, K, *x.shape[1:])), c.init_state(B)
        )
        states = [state0]
        adv = jax.jit(LabelConstraint.advance_tokens)
        prev = [None] + [jnp.asarray(gen[:, t - 1].reshape(B, K), jnp.int32) for t in range(1, T)]
        for t in range(1, T):
            states.append(adv(c, states[-1], prev[t]))
        lp = jax.nn.log_softmax(scores_jax, axis=-1)
    if "jax_mask" in cfg.methods:
        mask_step = jax.jit(_jax_mask_step)
        fns["jax_mask"] = (
            lambda t, _: mask_step(c, states[t - 1] if t else state0, prev[t], scores_jax),
            None,
            None,
        )
    if "jax_mask_donated" in cfg.methods:
        # The scores donated: XLA writes the masked scores into their buffer (as the engines
        # apply their masks in place), so no [B, K, V] output is allocated.
        mask_donated = jax.jit(_jax_mask_step, donate_argnums=3)
        fns["jax_mask_donated"] = (
            lambda t, x: mask_donated(c, states[t - 1] if t else state0, prev[t], x),
            lambda t: jax.block_until_ready(jnp.copy(scores_jax)),
            None,
        )
    if "jax_beam_step" in cfg.methods:
        beam_steps = [jax.jit(functools.partial(_jax_beam_step, t, K)) for t in range(T)]
        # Step 0 searches from one root per row (as the decoder does): [B, 1] -> K beams.
        root_state = jax.tree.map(lambda x: x[:, :1], state0)
        fns["jax_beam_step"] = (
            lambda t, _: (
                beam_steps[t](c, states[t], lp) if t else beam_steps[0](c, root_state, lp[:, :1])
            ),
            None,
            None,
        )
    return fns


def _token_bytes(t: int) -> bytes:
    """Token t's spelling for the grammar engines: 3 bytes of 54 letters (54^3 >= 151,936), so
    every token is distinct and a token sequence has exactly one spelling. The fastest-changing
    digit comes first, so that the continuations of a prefix rarely share a first byte (llguidance
    then forces that byte, which no whole token spells)."""
    a = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz01"
    return bytes([a[t % 54], a[t // 54 % 54], a[t // 2916 % 54]])


class _Engines:
    """llguidance and xgrammar on the same labels (skipped, with the reason, if not installed)."""

    def __init__(self, cfg: LabelBenchConfig, progress):
        self.cfg, self.progress, self.skipped = cfg, progress, {}
        self.vocab = [b"<eos>"] + [_token_bytes(t) for t in range(1, cfg.vocab)]
        self._tok, self._info = {}, {}
        if cfg.vocab > 54**3:
            for m in ENGINES:
                self.skipped[m] = "vocab over 157,464 tokens (3-byte spellings)"
        for m, module in (("llguidance", "llguidance.torch"), ("xgrammar", "xgrammar")):
            if m in cfg.methods and m not in self.skipped:
                try:
                    __import__(module)
                except ImportError as e:
                    self.skipped[m] = f"not installed ({e}); pip install -e '.[bench]'"

    def _active(self, m: str) -> bool:
        return m in self.cfg.methods and m not in self.skipped

    def _grammars(self, case: _Case) -> list[list[int]]:
        """Per prompt, the label ids of its grammar (one shared list without subsets)."""
        N = len(case.labels)
        if case.allowed is None:
            return [list(range(N))]
        return [np.flatnonzero(a).tolist() for a in case.allowed]

    def _spell(self, case: _Case, ids: list[int]) -> tuple[list[str], str]:
        alts = ['"' + b"".join(map(_token_bytes, case.labels[i])).decode() + '"' for i in ids]
        sep = '"' + b"".join(map(_token_bytes, case.separator)).decode() + '"'
        return alts, sep

    def methods(self, case: _Case, scores, T: int) -> dict[str, tuple]:
        fns = {}
        if self._active("llguidance"):
            # Also the mask alone, without applying it to the scores: its lower bound.
            fns["llguidance"], fns["llguidance_mask_only"] = self._llguidance(case, scores, T)
        if self._active("xgrammar"):
            largest = max(len(ids) for ids in self._grammars(case))
            if largest <= self.cfg.xgrammar_max_labels:
                fns["xgrammar"] = self._xgrammar(case, scores, T)
            else:
                self.skipped[f"xgrammar/{len(case.labels)}/{case.mode}"] = (
                    f"a grammar of {largest:,} labels, over xgrammar_max_labels"
                )
        return fns

    def reference(self, c: LabelConstraint, case: _Case, t: int) -> np.ndarray:
        """Our packed mask at step t as int32 [R, W] (what the engines fill)."""
        B, K = self.cfg.batch, self.cfg.beam
        state = jax.tree.map(
            lambda x: jnp.broadcast_to(x[:, None], (B, K, *x.shape[1:])), c.init_state(B)
        )
        adv = jax.jit(LabelConstraint.advance_tokens)
        for j in range(t):
            state = adv(c, state, jnp.asarray(case.gen[:, j].reshape(B, K), jnp.int32))
        words = np.asarray(jax.jit(LabelConstraint.allowed_bitmask)(c, state))
        return words.reshape(B * K, -1).view(np.int32)

    def _rows_prompt(self, R: int, G: int) -> list[int]:
        return [r * G // R for r in range(R)]

    def _llguidance(self, case: _Case, scores, T: int) -> tuple:
        import llguidance
        import llguidance.torch as lgt

        if "tok" not in self._tok:
            vocab = self.vocab
            token_id = {v: i for i, v in enumerate(vocab)}

            class _Tokenizer:
                eos_token_id, bos_token_id, tokens, special_token_ids = EOS, None, vocab, [EOS]

                def __call__(self, s):
                    # Whole 3-byte tokens only: a partial one (a forced prefix that llguidance
                    # tokenizes) has no token of its own, so it forces none.
                    b = s if isinstance(s, bytes) else s.encode()
                    return [token_id[b[i : i + 3]] for i in range(0, len(b) - 2, 3)]

            self._tok["tok"] = llguidance.LLTokenizer(
                llguidance.TokenizerWrapper(_Tokenizer()),
                n_vocab=len(vocab),
                eos_token=EOS,
                slices=[],
            )
            self._tok["exec"] = llguidance.LLExecutor()
        tok, executor = self._tok["tok"], self._tok["exec"]
        grammars = []
        t0 = time.perf_counter()
        for ids in self._grammars(case):
            alts, sep = self._spell(case, ids)
            if case.separator:
                # No "distinct" in a grammar: up to max_labels labels, repeats allowed.
                start = " | ".join(
                    " SEP ".join(["LABEL"] * k) for k in range(1, case.max_labels + 1)
                )
                g = f"start: {start}\nLABEL: {' | '.join(alts)}\nSEP: {sep}\n"
            else:
                g = f"start: LABEL\nLABEL: {' | '.join(alts)}\n"
            grammars.append(g)
        R = len(case.gen)
        prompts = self._rows_prompt(R, len(grammars))
        # The defaults refuse a lexer over 100,000 alternatives; ours bound nothing.
        limits = llguidance.LLParserLimits(
            initial_lexer_fuel=10**10,
            step_lexer_fuel=10**9,
            max_lexer_states=10**7,
            max_grammar_size=10**8,
        )
        base = [llguidance.LLMatcher(tok, g, log_level=0, limits=limits) for g in grammars]
        for m in base:
            if m.is_error():
                raise ValueError(f"llguidance grammar: {m.get_error()}")
        snaps = [[base[p].deep_copy() for p in prompts]]
        for t in range(1, T):
            row = [m.deep_copy() for m in snaps[-1]]
            for r, m in enumerate(row):
                m.consume_token(int(case.gen[r, t - 1]))
            snaps.append(row)
        if self.progress:
            self.progress(
                f"llguidance: {len(grammars)} grammars in {time.perf_counter() - t0:.1f} s"
            )
        bitmask = lgt.allocate_token_bitmask(R, len(self.vocab))

        def setup(t):
            return [m.deep_copy() for m in snaps[t - 1 if t else 0]], scores.clone()

        def step(t, arg):
            matchers, logits = arg
            if t:
                lgt.consume_token_par(
                    executor, [(m, int(case.gen[r, t - 1])) for r, m in enumerate(matchers)]
                )
            lgt.fill_next_token_bitmask_par(
                executor, [(m, r) for r, m in enumerate(matchers)], bitmask
            )
            if logits is not None:
                lgt.apply_token_bitmask_inplace(logits, bitmask)
            return logits

        def mask(t):
            step(t, setup(t))
            return bitmask.numpy().copy()

        def fill_only(t, arg):
            step(t, (arg[0], None))

        return (step, setup, mask), (fill_only, setup, mask)

    def _xgrammar(self, case: _Case, scores, T: int) -> tuple:
        import torch
        import xgrammar as xgr

        if "info" not in self._info:
            info = xgr.TokenizerInfo(
                self.vocab,
                vocab_type=xgr.VocabType.RAW,
                vocab_size=len(self.vocab),
                stop_token_ids=[EOS],
            )
            self._info["info"] = info
            self._info["compiler"] = xgr.GrammarCompiler(info, max_threads=2)
        compiler = self._info["compiler"]
        t0 = time.perf_counter()
        compiled = []
        for ids in self._grammars(case):
            alts, sep = self._spell(case, ids)
            rules = f"label ::= {' | '.join(alts)}\n"
            if case.separator:
                start = " | ".join(
                    " sep ".join(["label"] * k) for k in range(1, case.max_labels + 1)
                )
                rules += f"sep ::= {sep}\n"
            else:
                start = "label"
            compiled.append(compiler.compile_grammar(f"root ::= {start}\n{rules}"))
        if self.progress:
            self.progress(f"xgrammar: {len(compiled)} grammars in {time.perf_counter() - t0:.1f} s")
        R = len(case.gen)
        prompts = self._rows_prompt(R, len(compiled))
        snaps = [[xgr.GrammarMatcher(compiled[p]) for p in prompts]]
        for t in range(1, T):
            row = [m.fork() for m in snaps[-1]]
            for r, m in enumerate(row):
                if not m.is_terminated():
                    m.accept_token(int(case.gen[r, t - 1]))
            snaps.append(row)
        bitmask = xgr.allocate_token_bitmask(R, len(self.vocab))
        # After its stop token a matcher has no mask: the grammar's padding (EOS only) instead.
        eos_only = torch.zeros_like(bitmask[0])
        eos_only[EOS // 32] = 1 << (EOS % 32)

        def setup(t):
            return [m.fork() for m in snaps[t - 1 if t else 0]], scores.clone()

        def step(t, arg):
            matchers, logits = arg
            for r, m in enumerate(matchers):
                if t and not m.is_terminated():
                    m.accept_token(int(case.gen[r, t - 1]))
                if m.is_terminated():
                    bitmask[r] = eos_only
                else:
                    m.fill_next_token_bitmask(bitmask, r)
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            return logits

        def mask(t):
            step(t, setup(t))
            return bitmask.numpy().copy()

        return step, setup, mask


def markdown_table(result: dict, command: str) -> str:
    """One row per (label count, mode, method): ms per timed step, and x vs llguidance."""
    cfg = result["config"]
    lines = [
        f"`{command}` (batch {cfg['batch']} x beam {cfg['beam']} = "
        f"{cfg['batch'] * cfg['beam']} rows, V = {cfg['vocab']:,}, labels of 1-{cfg['max_len']} "
        f"tokens; median of {cfg['reps']} reps after a warm-up, per step)",
        "",
    ]
    for n, size in result["sizes"].items():
        for mode, res in size["modes"].items():
            steps = list(next(iter(res["methods"].values()))["per_step_ms"])
            if len(lines) == 2:
                head = " | ".join(f"step {t} ms" for t in steps[:4])
                lines += [
                    f"| labels | mode | method | {head} | ms/step (mean) | llguidance time / ours "
                    "(per step) | mask = ours |",
                    "|---" * (7 + len(steps[:4])) + "|",
                ]
            for m, row in res["methods"].items():
                ms = row["per_step_ms"]
                vs = row.get("x_vs_llguidance")
                x = " ".join(f"{vs[t]:.2f}" for t in steps[:4] if t in vs) if vs else "-"
                agree = row.get("mask_agrees")
                a = " ".join(f"{agree[t]:.2f}" for t in steps[:4] if t in agree) if agree else "-"
                cells = " | ".join(f"{ms[t]:.2f}" if t in ms else "-" for t in steps[:4])
                mean = float(np.mean(list(ms.values())))
                lines.append(f"| {int(n):,} | {mode} | {m} | {cells} | {mean:.2f} | {x} | {a} |")
    for m, why in result.get("skipped", {}).items():
        lines.append(f"\n{m}: skipped, {why}")
    return "\n".join(lines) + "\n"
