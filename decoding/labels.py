"""The label-set constraint: labels, EOS, separators and no-repeat rules as on-device range checks.

Output grammar: label EOS (single-label), or label (SEP label)* EOS with at most `max_labels`
labels, all distinct (multi-label). Labels are numbered in trie order (`LabelIndex`), so every node
covers a contiguous range [lo, hi) of label ids, and a token is allowed only where it leads to a
range that still holds an available label: allowed for this row (its subset) and not yet emitted.
Hence every allowed prefix can still be completed, and EOS is allowed exactly where a node ends an
available label. Each row's state holds the ids of the labels it emitted ([..., M], M =
max_labels), so "emitted labels under a node" is a count over M entries, and no bitset of all
labels is copied when beams are reordered.
"""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, UInt32

from decoding.beam_search import _FMIN
from decoding.constraints import Candidates, Constraint, Level, _iota
from decoding.label_index import LabelIndex, refuse_empty_rows, subset_words
from decoding.topk import top_k

_MAX_UNBOUNDED = 4096  # labels an unbounded multi-label row may track (its state is [.., M])


class LabelState(NamedTuple):
    """Per-row decoding state; leaves [B, K] (and [B, K, M] for `emitted`)."""

    node: Int[Array, "B K"]  # current trie node; 0 = root (also while inside a separator)
    sep_pos: Int[Array, "B K"]  # separator tokens emitted so far (0: not inside a separator)
    count: Int[Array, "B K"]  # labels completed
    emitted: Int[Array, "B K M"]  # their trie ids, -1 padding
    done: Bool[Array, "B K"]  # EOS emitted, or the row left the grammar (then `ok` is False)
    ok: Bool[Array, "B K"]  # False once a row took a token outside the grammar


class _Slots(NamedTuple):
    """Candidate continuations without log-probs: token, validity and what choosing it does."""

    tokens: Int[Array, "B K C"]
    valid: Bool[Array, "B K C"]
    node: Int[Array, "B K C"]  # next node
    sep_pos: Int[Array, "B K C"]  # next separator position
    label: Int[Array, "B K C"]  # trie id of the label this token completes, -1 if none
    finish: Bool[Array, "B K C"]  # EOS (or padding after it)


@dataclasses.dataclass(frozen=True)
class Subset:
    """Per-row allowed labels: bitsets in trie order and what the kernel derives from them."""

    words: Any  # uint32 [B, words]: bit l of row b set when label l is allowed
    rank: Any  # int32 [B, words]: allowed labels before each word
    total: Any  # int32 [B]: allowed labels
    root_count: Any  # int32 [B, V]: allowed labels under the root's child through each token
    root_words: Any  # uint32 [B, ceil(V / 32)]: root_count > 0, packed (`_pack`)


jax.tree_util.register_dataclass(
    Subset, data_fields=["words", "rank", "total", "root_count", "root_words"], meta_fields=[]
)


@dataclasses.dataclass(frozen=True)
class LabelConstraint(Constraint):
    """Labels over a `LabelIndex` with EOS, an optional separator and per-row subsets.

    Build with `LabelConstraint.build`, which checks the tokens; `restrict` adds per-row subsets
    (same shapes for any subsets, hence the same compiled program). Implements `Constraint`, so
    `beam_search` runs it with `num_levels = max_steps`.
    """

    index: LabelIndex
    subset: Subset | None
    eos_id: int
    separator: tuple[int, ...]
    max_labels: int  # M: labels per output (1: single-label)
    max_steps: int  # tokens per output, EOS included (static: the decode loop's length)

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    @property
    def num_levels(self) -> int:
        return self.max_steps

    @property
    def scan_start(self) -> int:
        # Single-label rows are at the root only at step 0, so later steps share the narrow form.
        return 1 if self.max_labels == 1 else 0

    @classmethod
    def build(
        cls,
        index: LabelIndex,
        *,
        eos_id: int,
        separator: tuple[int, ...] | list[int] = (),
        max_labels: int | None = 1,
        max_steps: int | None = None,
    ) -> "LabelConstraint":
        """Checks the special tokens against the labels.

        `max_labels` 1 is single-label; k > 1 (or None: up to every label, for small sets) needs
        a `separator` of >= 1 tokens. `max_steps` defaults to the longest output the grammar
        allows, rounded up to a multiple of 8 so that similar label sets share it (a different
        `max_steps` is a different compiled program). ValueError naming the argument.
        """
        V = index.vocab_size
        separator = tuple(int(t) for t in separator)
        for name, toks in (("eos_id", (eos_id,)), ("separator", separator)):
            if any(isinstance(t, bool) or not 0 <= int(t) < V for t in toks):
                raise ValueError(f"{name}: tokens must be in [0, vocab_size={V}), got {toks}")
        if eos_id in separator:
            raise ValueError(f"separator: must not contain eos_id {eos_id}")
        N = int(index.num_labels)
        first = np.asarray(index.first)[:N]
        edge_tokens = np.asarray(index.tokens)[: index.num_nodes - 1]
        if (first == eos_id).any() or (edge_tokens == eos_id).any():
            raise ValueError(f"eos_id: token {eos_id} occurs inside a label")
        if max_labels is None:
            if index.capacity.labels > _MAX_UNBOUNDED:
                raise ValueError(
                    f"max_labels: None tracks every label per row; pass a limit for more than "
                    f"{_MAX_UNBOUNDED} labels"
                )
            max_labels = index.capacity.labels
        if isinstance(max_labels, bool) or not isinstance(max_labels, int) or max_labels < 1:
            raise ValueError(f"max_labels must be an int >= 1 or None, got {max_labels!r}")
        if max_labels > 1 and not separator:
            raise ValueError("separator: multi-label output (max_labels > 1) needs a separator")
        if separator:
            _check_separator(index, separator[0])
        if max_steps is None:
            n = min(max_labels, N)
            longest = n * int(index.max_len) + (n - 1) * len(separator) + 1
            max_steps = -(-longest // 8) * 8
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        return cls(index, None, int(eos_id), separator, int(max_labels), int(max_steps))

    def restrict(
        self, allowed: Bool[np.ndarray, "B N"] | UInt32[Array, "B W"] | UInt32[np.ndarray, "B W"]
    ) -> "LabelConstraint":
        """The same constraint with a label subset per batch row.

        `allowed`: bool [B, num_labels] in the caller's label order (host), or its packed form
        uint32 [B, words] from `label_index.subset_words` (e.g. already on device, or traced).
        A row that allows no label is a ValueError naming it (unless traced: `LabelDecoder`
        checks its `allowed` on the host).
        """
        idx = self.index
        if not (hasattr(allowed, "dtype") and allowed.dtype == jnp.uint32):
            allowed = subset_words(idx, np.asarray(allowed))
        words = jnp.asarray(allowed, jnp.uint32)
        if words.ndim != 2 or words.shape[1] != idx.words:
            raise ValueError(f"allowed: expected packed [B, {idx.words}], got {words.shape}")
        if not isinstance(allowed, jax.core.Tracer):
            refuse_empty_rows(jax.device_get(allowed))
        per_word = jax.lax.population_count(words).astype(jnp.int32)
        rank = jnp.cumsum(per_word, axis=1) - per_word
        total = per_word.sum(axis=1)
        # Counts under each root child, once per request: the root step reads them for all V.
        child = jnp.asarray(idx.root_child)
        B = words.shape[0]
        lo = jnp.broadcast_to(jnp.take(jnp.asarray(idx.lo), child), (B, child.shape[0]))
        hi = jnp.broadcast_to(jnp.take(jnp.asarray(idx.hi), child), (B, child.shape[0]))
        root_count = _count(words, rank, hi) - _count(words, rank, lo)
        root_count = jnp.where(child[None, :] > 0, root_count, 0)
        subset = Subset(words, rank, total, root_count, _pack(root_count > 0))
        return dataclasses.replace(self, subset=subset)

    def init_state(self, batch_size: int) -> LabelState:
        B, M = batch_size, self.max_labels
        zeros = jnp.zeros((B,), jnp.int32)
        return LabelState(
            zeros, zeros, zeros, jnp.full((B, M), -1, jnp.int32), zeros > 0, zeros == 0
        )

    def candidates(
        self,
        level: Level,
        state: LabelState,
        log_probs: Float[Array, "B K V"],
        *,
        width: int | None = None,
        root_top: int | None = None,
    ) -> Candidates:
        """Slots: [V root tokens, when a row may be at the root], EOS, [SEP], padding, then
        `width` children (default: the widest node's; `by_width` picks a narrower one when no
        row needs more).

        `root_top`: only each beam's `root_top` best allowed root tokens (by log-prob, ties to
        the lower token, as the picks break them) instead of all V. A beam search of K beams
        (or greedy, K = 1) over them picks what it picks over all V, since no beam gives more
        than K of the K picks; sampling needs all V."""
        # aux is the slot index; `advance` recomputes what the chosen slot does from the
        # (reordered) state, so no per-slot next-state arrays are built or gathered.
        s = self.slots(state, width=width)
        lp = jnp.take_along_axis(log_probs, s.tokens, axis=-1)
        # Padding after EOS costs nothing, so a finished beam keeps its score.
        lp = jnp.where(s.finish & (s.label < 0), 0.0, lp)
        slot = jnp.broadcast_to(_iota(s.tokens.shape[-1], s.tokens.ndim - 1), s.tokens.shape)
        if not self._root_possible(level):
            return Candidates(s.tokens, lp, s.valid, slot)
        # Step 0 (and any step of multi-label output, where a separator returns to the root)
        # may have rows at the root, whose candidates are all V tokens (slot = token), read as
        # a dense mask as STATIC reads its first levels.
        V = self.vocab_size
        if root_top is not None and root_top < V:
            # Invalid root tokens rank last, valid ones by log-prob floored at the float
            # minimum (as `_select` ranks them), so the cut keeps what a pick over V would.
            allowed = unpack_bitmask(self._root_words(state), V)
            key = jnp.where(allowed, jnp.maximum(log_probs, _FMIN), -jnp.inf)
            top, tok_r = top_k(key, root_top)
            return Candidates(
                jnp.concatenate([tok_r, s.tokens], -1),
                jnp.concatenate([jnp.take_along_axis(log_probs, tok_r, axis=-1), lp], -1),
                jnp.concatenate([top > -jnp.inf, s.valid], -1),
                jnp.concatenate([tok_r, slot + V], -1),  # a root slot is its token, as below
            )
        tok_r = jnp.broadcast_to(_iota(V, state.node.ndim), log_probs.shape)
        return Candidates(
            jnp.concatenate([tok_r, s.tokens], -1),
            jnp.concatenate([log_probs, lp], -1),
            jnp.concatenate([self._root_valid(state), s.valid], -1),
            jnp.concatenate([tok_r, slot + V], -1),
        )

    def advance(
        self, level: Level, state: LabelState, tokens: Int[Array, "B K"], aux: Int[Array, "B K"]
    ) -> LabelState:
        offset = self.vocab_size if self._root_possible(level) else 0
        # Slot layout (see `slots`): root tokens, then the specials, then the children, so a
        # slot means the same whatever children width the candidates were drawn with.
        s = self.slots(state, children=False)
        S = s.tokens.shape[-1]
        j = aux - offset
        k = jnp.clip(j, 0, S - 1)[..., None]

        def pick(x):
            return jnp.take_along_axis(x, k, axis=-1)[..., 0]

        root, special = aux < offset, (j >= 0) & (j < S)
        n = jnp.clip(state.node, 0, self.index.capacity.nodes - 1)
        child = jnp.take(self.index.row_ptr, n) + (j - S) + 1  # edge start + c enters + 1
        child = jnp.where(root, jnp.take(self.index.root_child, tokens, mode="clip"), child)
        return _apply(
            state,
            jnp.where(special, pick(s.node), child),
            jnp.where(special, pick(s.sep_pos), 0),
            jnp.where(special, pick(s.label), -1),
            special & pick(s.finish),
            state.ok,
        )

    def by_width(self, state: LabelState, fn: Any) -> Any:
        """`fn(width)` with the narrow children width unless a live row sits at a node with
        more children (then the widest); one `lax.cond`, both branches of the same shapes."""
        narrow, width = self.index.capacity.narrow_width, self.index.capacity.width
        if narrow >= width:
            return fn(width)
        live, _, _, branch = self._branching(state)
        return jax.lax.cond(
            jnp.any(live & (branch > narrow)), lambda: fn(width), lambda: fn(narrow)
        )

    def _branching(
        self, state: LabelState
    ) -> tuple[Bool[Array, "B K"], Int[Array, "B K"], Int[Array, "B K"], Int[Array, "B K"]]:
        """Which rows are live below the root, their (clipped) nodes, each node's first edge and
        how many children it has."""
        idx = self.index
        n = jnp.clip(state.node, 0, idx.capacity.nodes - 1)
        start = jnp.take(idx.row_ptr, n)
        branch = jnp.take(idx.row_ptr, n + 1) - start
        return ~state.done & (state.sep_pos == 0) & (state.node > 0), n, start, branch

    def _root_possible(self, level: Level) -> bool:
        return self.max_labels > 1 or (isinstance(level, int | np.integer) and level == 0)

    def allowed_tokens(self, state: LabelState) -> Bool[Array, "B K V"]:
        """The dense mask of allowed next tokens (for a sampling loop or a logits processor)."""
        return self.by_width(state, lambda w: self._allowed_tokens(state, w))

    def _allowed_tokens(self, state: LabelState, width: int) -> Bool[Array, "B K V"]:
        s = self.slots(state, width=width)
        B, K = state.node.shape
        mask = self._root_valid(state)
        # Scatter the narrow slots (children, EOS, separator, padding) into the root mask;
        # invalid slots point past V and are dropped (a plain set, several times faster on CPU
        # than a max-scatter of every slot).
        b = jnp.arange(B)[:, None, None]
        k = jnp.arange(K)[None, :, None]
        tok = jnp.where(s.valid, s.tokens, self.vocab_size)
        return mask.at[b, k, tok].set(True, mode="drop")

    def masked_logits(
        self, state: LabelState, logits: Float[Array, "B K V"]
    ) -> Float[Array, "B K V"]:
        """`logits` with every token the grammar forbids at -inf (what a logits processor does)."""
        return apply_bitmask(logits, self.allowed_bitmask(state))

    def allowed_bitmask(self, state: LabelState) -> UInt32[Array, "B K W"]:
        """Allowed next tokens packed 32 to a word: token t is bit t % 32 of word t // 32,
        W = ceil(V / 32) (the layout of llguidance's and xgrammar's token bitmasks).

        Rows at wide nodes are few and their children fewer than rows x width: when some row
        sits at a node wider than the narrow width and all rows' children fit an eighth of that
        padded work, they are checked in one ragged list instead (`_flat_children`)."""
        idx = self.index
        narrow, width = idx.capacity.narrow_width, idx.capacity.width
        B, K = state.node.shape
        cap = B * K * width // 8
        if narrow >= width or cap <= B * K * narrow:
            return self.by_width(state, lambda w: self._bitmask(state, w))
        live, _, _, branch = self._branching(state)
        total = jnp.where(live, branch, 0).sum()
        which = jnp.where(jnp.any(live & (branch > narrow)), jnp.where(total <= cap, 1, 2), 0)

        def flat():
            words = self._bitmask(state, 0, children=False)
            return words | self._flat_children(state, cap)

        return jax.lax.switch(
            which, [lambda: self._bitmask(state, narrow), flat, lambda: self._bitmask(state, width)]
        )

    def _bitmask(
        self, state: LabelState, width: int, *, children: bool = True
    ) -> UInt32[Array, "B K W"]:
        s = self.slots(state, width=width, children=children)
        B, K = state.node.shape
        W = -(-self.vocab_size // 32)
        # A row's valid slots carry distinct tokens, none of them a root token (a root row has
        # no children, EOS or separator; `build` keeps EOS and the separator's first token off
        # the edges where they could meet), so adding their bits is an OR.
        word = jnp.where(s.valid, s.tokens >> 5, W)
        bit = jnp.uint32(1) << (s.tokens & 31).astype(jnp.uint32)
        b = jnp.arange(B)[:, None, None]
        k = jnp.arange(K)[None, :, None]
        return self._root_words(state).at[b, k, word].add(bit, mode="drop")

    def _flat_children(self, state: LabelState, cap: int) -> UInt32[Array, "B K W"]:
        """The allowed children of every row below the root, as packed words, checked in one
        ragged list of `cap` slots (row after row, each row's children in edge order); the
        rows' children must number at most `cap` (`allowed_bitmask` checks)."""
        idx = self.index
        B, K = state.node.shape
        R, V = B * K, self.vocab_size
        Wd = -(-V // 32)
        live, n, start, branch = (x.reshape(R) for x in self._branching(state))
        count = jnp.where(live, branch, 0)
        first = jnp.cumsum(count) - count  # each row's first slot
        # Slot f belongs to the last row starting at or before it: mark each non-empty row's
        # first slot with its row number, then carry the marks forward with a running maximum.
        mark = (
            jnp.full(cap, -1, jnp.int32)
            .at[jnp.where(count > 0, first, cap)]
            .max(jnp.arange(R, dtype=jnp.int32), mode="drop")
        )
        row = jnp.maximum(jax.lax.cummax(mark), 0)
        f = jnp.arange(cap, dtype=jnp.int32)
        j = f - jnp.take(first, row)  # child number within the row
        valid = f < count.sum()
        edge = jnp.take(start, row) + j
        lo = jnp.take(idx.lo, edge + 1, mode="clip")
        # Siblings' ranges tile the parent's (see `_children_free`): a child ends where the next
        # slot's starts, the last where its parent ends.
        more = j + 1 < jnp.take(count, row)
        end = jnp.take(jnp.take(idx.hi, n), row)
        hi = jnp.where(more, jnp.concatenate([lo[1:], lo[-1:]]), end)
        if self.subset is None:
            free = hi - lo
        else:
            # Each row's bitset is its prompt's, read as one bitset of all rows end to end (the
            # ranks restart with every prompt, so the count is the prompt's own).
            w, r = self.subset.words.reshape(1, -1), self.subset.rank.reshape(1, -1)
            base = (row // K) * (self.subset.words.shape[1] * 32)
            at_lo = _count(w, r, (base + lo)[None])[0]
            at_next = jnp.concatenate([at_lo[1:], at_lo[-1:]])
            free = jnp.where(more, at_next, _count(w, r, (base + end)[None])[0]) - at_lo
        e = jnp.take(state.emitted.reshape(R, -1), row, axis=0)  # [cap, M]
        free -= ((e >= lo[:, None]) & (e < hi[:, None])).sum(-1)
        tok = jnp.take(idx.tokens, edge, mode="clip").astype(jnp.int32)
        word = jnp.where(valid & (free > 0), row * Wd + (tok >> 5), R * Wd)
        bit = jnp.uint32(1) << (tok & 31).astype(jnp.uint32)
        out = jnp.zeros(R * Wd, jnp.uint32).at[word].add(bit, mode="drop")
        return out.reshape(B, K, Wd)

    def _root_words(self, state: LabelState) -> UInt32[Array, "B K W"]:
        """`_root_valid` packed, without a [B, K, V] tensor: the per-token counts are packed
        once per request (or per call without subsets), and only the first tokens of emitted
        labels are checked per row."""
        idx = self.index
        at_root = self._at_root(state)[..., None]
        if not self._checks_ranges:
            return jnp.where(at_root, _pack(idx.root_child > 0)[None, None, :], jnp.uint32(0))
        child = idx.root_child
        if self.subset is None:
            count = jnp.where(child > 0, jnp.take(idx.hi, child) - jnp.take(idx.lo, child), 0)
            base = _pack(count > 0)[None, None, :]
            count = count[None, None, :]
        else:
            count = self.subset.root_count[:, None, :]
            base = self.subset.root_words[:, None, :]
        # An emitted label lowers its first token's count; the token closes where that count
        # reaches 0. Equal first tokens are grouped by a sort, so each is cleared once (its
        # bit added once) and the work is M log M per row, not V.
        e = state.emitted
        f = jnp.where(e >= 0, jnp.take(idx.first, jnp.maximum(e, 0)), self.vocab_size)
        f = jnp.sort(f, axis=-1)
        first_of_run = jnp.concatenate(
            [jnp.ones_like(f[..., :1], bool), f[..., 1:] != f[..., :-1]], -1
        )
        M = f.shape[-1]
        pos = jnp.broadcast_to(_iota(M, f.ndim - 1), f.shape)
        # Run lengths: where the next run starts, found as a reversed cumulative minimum.
        start = jnp.where(first_of_run, pos, M)
        nxt = jax.lax.cummin(
            jnp.concatenate([start[..., 1:], jnp.full_like(f[..., :1], M)], -1),
            axis=f.ndim - 1,
            reverse=True,
        )
        used = nxt - pos
        left = jnp.take_along_axis(count, jnp.minimum(f, self.vocab_size - 1), axis=-1) - used
        closes = first_of_run & (f < self.vocab_size) & (left <= 0)
        b = jnp.arange(f.shape[0])[:, None, None]
        k = jnp.arange(f.shape[1])[None, :, None]
        W = base.shape[-1]
        shut = (
            jnp.zeros((*f.shape[:2], W), jnp.uint32)
            .at[b, k, jnp.where(closes, f >> 5, W)]
            .add(jnp.uint32(1) << (f & 31).astype(jnp.uint32), mode="drop")
        )
        return jnp.where(at_root, base & ~shut, jnp.uint32(0))

    def advance_tokens(self, state: LabelState, tokens: Int[Array, "B K"]) -> LabelState:
        """The state after `tokens` chosen by any means; a token outside the grammar ends the row
        with `ok` False."""
        idx = self.index
        s = self.slots(state, children=False)  # EOS, separator, padding
        # A token that goes on: the root's child through it, or a binary search among the
        # node's children (sorted by token), log2(width) gathers instead of width compares.
        n = jnp.clip(state.node, 0, idx.capacity.nodes - 1)
        start, stop = jnp.take(idx.row_ptr, n), jnp.take(idx.row_ptr, n + 1)

        # A loop, not unrolled: XLA's fusion copies each step's `mid` into both bounds of the
        # next, so the unrolled search compiles in time exponential in its steps (minutes at a
        # width of 512).
        def halve(_, bounds):
            lo, hi = bounds
            mid = (lo + hi) // 2
            right = (mid < hi) & (jnp.take(idx.tokens, mid, mode="clip") < tokens)
            return jnp.where(right, mid + 1, lo), jnp.where(right, hi, mid)

        lo, hi = jax.lax.fori_loop(0, idx.capacity.width.bit_length(), halve, (start, stop))
        found = (lo < stop) & (jnp.take(idx.tokens, lo, mode="clip") == tokens)
        root = self._at_root(state)
        child = jnp.where(root, jnp.take(idx.root_child, tokens, mode="clip"), lo + 1)
        goes_on = jnp.where(root, child > 0, found & (state.node > 0))
        goes_on &= ~state.done & (state.sep_pos == 0)
        if self._checks_ranges:
            c_lo = jnp.take(idx.lo, child, mode="clip")[..., None]
            c_hi = jnp.take(idx.hi, child, mode="clip")[..., None]
            goes_on &= self._free(state, c_lo, c_hi)[..., 0] > 0
        hit = s.valid & (s.tokens == tokens[..., None])
        j = jnp.argmax(hit, axis=-1)[..., None]
        ok = hit.any(axis=-1) | goes_on

        def pick(x):
            return jnp.take_along_axis(x, j, axis=-1)[..., 0]

        return _apply(
            state,
            jnp.where(goes_on, child, pick(s.node)),
            jnp.where(goes_on, 0, pick(s.sep_pos)),
            jnp.where(goes_on, -1, pick(s.label)),
            ~goes_on & pick(s.finish) | ~ok,
            state.ok & ok,
        )

    def slots(
        self, state: LabelState, *, children: bool = True, width: int | None = None
    ) -> _Slots:
        """Candidates of every row below the root: EOS, separator, padding, then (if
        `children`) `width` children (default: the widest node's)."""
        idx = self.index
        W = idx.capacity.width if width is None else width
        node, sep_pos, done = state.node, state.sep_pos, state.done
        live = ~done & (sep_pos == 0)
        # Clipping keeps gathers in range for padding states; their slots are invalid anyway.
        n = jnp.clip(node, 0, idx.capacity.nodes - 1)
        start = jnp.take(idx.row_ptr, n)
        stop = jnp.take(idx.row_ptr, n + 1)
        # Children of a non-root node: edges start .. stop - 1, edge e entering node e + 1.
        edge = start[..., None] + _iota(W, node.ndim)
        tok_c = jnp.take(idx.tokens, edge, mode="clip").astype(jnp.int32)
        child = edge + 1
        ok_c = (live & (node > 0))[..., None] & (edge < stop[..., None])
        if self._checks_ranges and children:
            ok_c &= self._children_free(state, n, child, edge + 1 < stop[..., None]) > 0
        # EOS (and the separator) where this node ends a label that is still available.
        own = jnp.take(idx.lo, n)
        ends = live & jnp.take(idx.end, n) & self._label_free(state, own)
        groups = [(self.eos_id, ends, node, 0, own, True)]
        if self.separator:
            sep = jnp.asarray(self.separator, jnp.int32)
            # Open a separator only if another label may follow: under the limit, and one of
            # this row's labels is left once this one is emitted (otherwise EOS is forced).
            more = (state.count + 1 < self.max_labels) & (self._total(state) - state.count > 1)
            opens = ends & more
            inside = ~done & (sep_pos > 0)
            nxt = jnp.where(inside, sep_pos + 1, 1)
            nxt = jnp.where(nxt >= len(self.separator), 0, nxt)
            tok = jnp.take(sep, jnp.clip(sep_pos, 0, len(self.separator) - 1))
            groups.append((tok, opens | inside, 0, nxt, jnp.where(opens, own, -1), False))
        groups.append((self.eos_id, done, node, 0, -1, True))  # padding after EOS
        if children:
            groups.append((tok_c, ok_c, child, 0, -1, False))
        cols = zip(*(_slot_group(g, node.shape) for g in groups), strict=True)
        tok, valid, nxt_node, nxt_sep, label, finish = (jnp.concatenate(c, -1) for c in cols)
        return _Slots(tok, valid, nxt_node, nxt_sep, label, finish)

    def _at_root(self, state: LabelState) -> Bool[Array, "B K"]:
        return ~state.done & (state.sep_pos == 0) & (state.node == 0)

    @property
    def _checks_ranges(self) -> bool:
        # Single-label without subsets: every child's range holds a label, nothing to check.
        return self.max_labels > 1 or self.subset is not None

    def _root_valid(self, state: LabelState) -> Bool[Array, "B K V"]:
        """Token t at the root: it starts a label that is still available for the row."""
        at_root = self._at_root(state)[..., None]
        idx = self.index
        if not self._checks_ranges:
            return at_root & (idx.root_child > 0)[None, None, :]
        if self.subset is None:
            child = idx.root_child
            count = jnp.where(child > 0, jnp.take(idx.hi, child) - jnp.take(idx.lo, child), 0)
            count = count[None, None, :]
        else:
            count = self.subset.root_count[:, None, :]
        # Emitted labels lower their first token's count: a scatter of [B, K, M] ones.
        B, K, M = state.emitted.shape
        e = state.emitted
        used = (
            jnp.zeros((B, K, self.vocab_size), jnp.int32)
            .at[
                jnp.arange(B)[:, None, None],
                jnp.arange(K)[None, :, None],
                jnp.take(idx.first, jnp.maximum(e, 0)),
            ]
            .add((e >= 0).astype(jnp.int32))
        )
        return at_root & (count - used > 0)

    def _free(
        self, state: LabelState, lo: Int[Array, "B K C"], hi: Int[Array, "B K C"]
    ) -> Int[Array, "B K C"]:
        """Available labels in [lo, hi) per slot: allowed ones minus emitted ones."""
        if self.subset is None:
            free = hi - lo
        else:
            w, r = self.subset.words, self.subset.rank
            B = w.shape[0]
            flat = (B, -1)
            free = (_count(w, r, hi.reshape(flat)) - _count(w, r, lo.reshape(flat))).reshape(
                hi.shape
            )
        # Emitted labels are allowed ones (they were available when chosen), so subtract them.
        e = state.emitted[..., None, :]
        inside = (e >= lo[..., None]) & (e < hi[..., None])
        return free - inside.sum(axis=-1)

    def _children_free(
        self,
        state: LabelState,
        n: Int[Array, "B K"],
        child: Int[Array, "B K C"],
        more: Bool[Array, "B K C"],
    ) -> Int[Array, "B K C"]:
        """`_free` of the children `child` of nodes n (consecutive nodes, `more` where a next
        sibling follows). Siblings' label ranges tile their parent's, the last ending at the
        parent's end, so each child's end is its next sibling's start: one count per child
        instead of two (a child past the node's last gets a meaningless number)."""
        idx = self.index
        lo = jnp.take(idx.lo, child, mode="clip")
        end = jnp.take(idx.hi, n)[..., None]  # the last child's end
        hi = jnp.where(more, jnp.concatenate([lo[..., 1:], end], -1), end)
        if self.subset is None:
            free = hi - lo
        else:
            w, r = self.subset.words, self.subset.rank
            B = w.shape[0]
            at_lo = _count(w, r, lo.reshape(B, -1)).reshape(lo.shape)
            at_end = _count(w, r, end.reshape(B, -1)).reshape(end.shape)
            free = jnp.where(more, jnp.concatenate([at_lo[..., 1:], at_end], -1), at_end) - at_lo
        e = state.emitted[..., None, :]
        inside = (e >= lo[..., None]) & (e < hi[..., None])
        return free - inside.sum(axis=-1)

    def _label_free(self, state: LabelState, label: Int[Array, "B K"]) -> Bool[Array, "B K"]:
        free = ~(state.emitted == label[..., None]).any(axis=-1)
        if self.subset is None:
            return free
        B = label.shape[0]
        bit = _bit(self.subset.words, label.reshape(B, -1)).reshape(label.shape)
        return free & bit

    def _total(self, state: LabelState) -> Int[Array, "B K"]:
        if self.subset is None:
            return jnp.broadcast_to(self.index.num_labels, state.count.shape)
        return jnp.broadcast_to(self.subset.total[:, None], state.count.shape)

    def label_ids(self, state: LabelState) -> Int[Array, "B K M"]:
        """Emitted labels as the caller's label indices (-1 padding), in emission order."""
        e = state.emitted
        return jnp.where(e >= 0, jnp.take(self.index.label_order, jnp.maximum(e, 0)), -1)


jax.tree_util.register_dataclass(
    LabelConstraint,
    data_fields=["index", "subset"],
    meta_fields=["eos_id", "separator", "max_labels", "max_steps"],
)


_SLOT_DTYPES = (jnp.int32, bool, jnp.int32, jnp.int32, jnp.int32, bool)


def _slot_group(fields: tuple, shape: tuple[int, ...]) -> list[Array]:
    """One candidate group's six fields as [B, K, C_g]: per-slot arrays [B, K, C_g] as they
    are, per-row arrays [B, K] and scalars as one slot."""
    xs = [jnp.asarray(f, d) for f, d in zip(fields, _SLOT_DTYPES, strict=True)]
    width = max((x.shape[-1] for x in xs if x.ndim == len(shape) + 1), default=1)
    return [
        jnp.broadcast_to(x if x.ndim == len(shape) + 1 else x[..., None], (*shape, width))
        for x in xs
    ]


def _apply(state: LabelState, node, sep_pos, label, finish, ok) -> LabelState:
    """The state after a chosen slot: record its label (if it completes one) at position count."""
    M = state.emitted.shape[-1]
    put = (label >= 0)[..., None] & (_iota(M, label.ndim) == state.count[..., None])
    emitted = jnp.where(put, label[..., None], state.emitted)
    count = state.count + (label >= 0)
    return LabelState(node, sep_pos, count, emitted, state.done | finish, ok)


def _pack(mask: Bool[Array, "*X V"]) -> UInt32[Array, "*X W"]:
    """A bool mask over V tokens as uint32 words, token t at bit t % 32 of word t // 32."""
    V = mask.shape[-1]
    pad = -V % 32
    m = jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)]).reshape(*mask.shape[:-1], -1, 32)
    shift = jax.lax.broadcasted_iota(jnp.uint32, m.shape, m.ndim - 1)
    return (m.astype(jnp.uint32) << shift).sum(-1, dtype=jnp.uint32)


def unpack_bitmask(words: UInt32[Array, "*X W"], vocab_size: int) -> Bool[Array, "*X V"]:
    """The bool mask of packed `words` (see `LabelConstraint.allowed_bitmask`)."""
    shape = (*words.shape, 32)
    shift = jax.lax.broadcasted_iota(jnp.uint32, shape, words.ndim)
    bits = (jnp.broadcast_to(words[..., None], shape) >> shift) & 1
    return bits.reshape(*words.shape[:-1], -1)[..., :vocab_size].astype(bool)


def apply_bitmask(
    logits: Float[Array, "*X V"], words: UInt32[Array, "*X W"]
) -> Float[Array, "*X V"]:
    """`logits` at -inf where the packed mask's bit is 0; the unpacking fuses into the select,
    so no [.., V] mask is written (and with `logits` donated, XLA writes in place)."""
    return jnp.where(unpack_bitmask(words, logits.shape[-1]), logits, -jnp.inf)


def _bit(words: Array, i: Int[Array, "B X"]) -> Bool[Array, "B X"]:
    w = jnp.take_along_axis(words, i >> 5, axis=1, mode="clip")
    return ((w >> (i & 31).astype(jnp.uint32)) & 1).astype(bool)


def _count(words: Array, rank: Array, i: Int[Array, "B X"]) -> Int[Array, "B X"]:
    """Set bits before position i of each row's bitset: rank of its word plus a popcount."""
    w = jnp.take_along_axis(words, i >> 5, axis=1, mode="clip")
    below = w & ((jnp.uint32(1) << (i & 31).astype(jnp.uint32)) - jnp.uint32(1))
    r = jnp.take_along_axis(rank, i >> 5, axis=1, mode="clip")
    return r + jax.lax.population_count(below).astype(jnp.int32)


def _check_separator(index: LabelIndex, first: int) -> None:
    """The separator's first token must not also continue a label that could end there."""
    M = index.num_nodes
    row_ptr = np.asarray(index.row_ptr)[: M + 1]
    tokens = np.asarray(index.tokens)[: M - 1]
    parent = np.searchsorted(row_ptr, np.arange(M - 1), side="right") - 1
    clash = np.flatnonzero(np.asarray(index.end)[parent] & (tokens == first))
    if len(clash):
        label = int(np.asarray(index.label_order)[np.asarray(index.lo)[parent[clash[0]]]])
        raise ValueError(
            f"separator: its first token {first} also continues labels[{label}] into a longer "
            "label (choose a separator whose first token never follows a complete label)"
        )
