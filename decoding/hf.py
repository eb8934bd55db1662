"""A `transformers` logits processor over a `LabelIndex` (torch is imported lazily, on first use).

The same grammar as `LabelConstraint` (the checks are shared: `LabelConstraint.build`), on torch
tensors and vectorized over all rows (batch x beams): per step the children of every row as one
ragged list (work in proportion to the real branching), a dense [V] root mask for rows at the
root, one scatter of the allowed scores, and a binary search per row for the chosen token.
"""

import importlib
from typing import Any

import numpy as np
from jaxtyping import Bool

from decoding.label_index import LabelIndex, refuse_empty_rows, subset_words
from decoding.labels import LabelConstraint


def _torch():
    try:
        return importlib.import_module("torch")
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError(
            "decoding.hf needs torch and transformers: pip install 'genret[hf]'"
        ) from e


class LabelLogitsProcessor:
    """Sets every token outside the label grammar to -inf; pass it to `model.generate` in
    `logits_processor=[...]` (greedy, sampling and beam search; sampling's temperature, top-k and
    top-p then act on the allowed tokens only, as `generate` applies warpers after processors).

    A row's state is a function of its generated tokens, so each row continues the last call's
    row with which it shares the longest generated prefix: beam reordering needs no beam indices,
    and assisted or prompt-lookup decoding may go back to re-score drafted tokens. A row may also
    grow by several tokens; those after the first must follow the grammar (else a ValueError
    naming the row). Rows start over at the root when a call does not keep the first call's
    prompts, and once every row has finished (where `generate` stops), so a new `generate` call
    may extend a finished output; call `reset()` before one that extends an unfinished output.
    `allowed`: bool [B, num_labels], per-prompt label subsets, each row holding a label (rows are
    prompt-major, as `generate` expands prompts into beams or samples). `labels()` returns the
    caller's label indices each row has emitted. `device`: where the index tensors live (that of
    the scores). `inplace=True` masks the scores tensor it is given instead of a copy (no new
    [R, V] tensor per step; `generate(output_logits=True)` then returns masked logits too).
    """

    def __init__(
        self,
        index: LabelIndex,
        *,
        eos_token_id: int,
        separator: tuple[int, ...] | list[int] = (),
        max_labels: int | None = 1,
        allowed: Bool[np.ndarray, "B N"] | None = None,
        device: Any = None,
        inplace: bool = False,
    ):
        torch = self._t = _torch()
        self.device = torch.device("cpu") if device is None else torch.device(device)
        spec = LabelConstraint.build(
            index, eos_id=eos_token_id, separator=separator, max_labels=max_labels
        )
        self.eos, self.sep, self.max_labels = spec.eos_id, spec.separator, spec.max_labels
        self.vocab_size = index.vocab_size
        self.inplace = bool(inplace)

        def t(x, dtype=torch.int64):
            return torch.as_tensor(np.asarray(x), device=self.device).to(dtype)

        self.row_ptr, self.tokens = t(index.row_ptr), t(index.tokens)
        self.lo, self.hi, self.end = t(index.lo), t(index.hi), t(index.end, torch.bool)
        self.first, self.root_child = t(index.first), t(index.root_child)
        self.label_order, self.num_labels = t(index.label_order), int(index.num_labels)
        self.sep_t = t(self.sep or (0,))
        # Edges are sorted by (parent, token): one sorted key per edge finds a node's child.
        M = index.num_nodes
        parent = np.searchsorted(np.asarray(index.row_ptr)[: M + 1], np.arange(M - 1), "right") - 1
        tokens = np.asarray(index.tokens)[: M - 1].astype(np.int64)
        self.edge_key = t(parent.astype(np.int64) * self.vocab_size + tokens)
        self.allowed = None  # bool [B, labels] in trie order, and its prefix counts
        if allowed is not None:
            # An empty row would leave -inf everywhere: NaN or a torch error when sampling.
            refuse_empty_rows(subset_words(index, allowed))
            allowed = np.asarray(allowed)
            trie = t(allowed[:, np.asarray(index.label_order)[: self.num_labels]], torch.bool)
            self.allowed = trie
            self.prefix = torch.nn.functional.pad(trie.long().cumsum(1), (1, 0))
        # Labels under the root's child through each token ([V], or [B, V] per prompt), and
        # the tokens that start none, computed once: a root step is then one masked_fill.
        child = self.root_child
        has = child > 0
        if self.allowed is None:
            self.root_count = torch.where(has, self.hi[child] - self.lo[child], 0)
        else:
            count = self.prefix[:, self.hi[child]] - self.prefix[:, self.lo[child]]
            self.root_count = torch.where(has, count, 0)
        self.root_closed = self.root_count <= 0
        # Where few tokens start an allowed label (an eighth of V at most, in every row), the
        # first step starts from -inf and copies those back instead of masking all V: their
        # indices per row of root_closed, padded with each row's first.
        closed = self.root_closed.reshape(-1, self.vocab_size)
        width = int((~closed).sum(1).max())
        self.root_open = None
        if width * 8 <= self.vocab_size:
            order = torch.sort(closed.to(torch.uint8), dim=1, stable=True).indices[:, :width]
            real = torch.arange(width, device=self.device)[None, :] < (~closed).sum(1)[:, None]
            self.root_open = torch.where(real, order, order[:, :1])
        self.reset()

    def reset(self) -> None:
        """Forgets the rows of the last call (the next call starts at the root)."""
        self._ids = None
        self._start = 0
        # layers[j]: states after j generated tokens; back[j] maps layer j's rows to their
        # parents in layer j - 1 (beam back pointers); the last layer is the last call's rows.
        self._layers: list[dict] = []
        self._back: list = []

    def __call__(self, input_ids, scores):
        if scores.shape[-1] != self.vocab_size:
            raise ValueError(
                f"scores: {scores.shape[-1]} tokens, but the label index has vocab_size "
                f"{self.vocab_size}"
            )
        return self._masked(self._follow(input_ids), scores)

    def labels(self):
        """The caller's label indices emitted by each row of the last call, -1 padding [R, M]."""
        e = self._layers[-1]["emitted"]
        return self._t.where(e >= 0, self.label_order[e.clamp(min=0)], -1)

    # State: dict of [R] tensors (node, sep_pos, count, done, ok) and emitted [R, M].
    def _init(self, R: int) -> dict:
        torch = self._t
        z = torch.zeros(R, dtype=torch.int64, device=self.device)
        return {
            "node": z,
            "sep_pos": z.clone(),
            "count": z.clone(),
            "emitted": torch.full((R, self.max_labels), -1, dtype=torch.int64, device=self.device),
            "done": z > 0,
            "ok": z == 0,
        }

    def _follow(self, input_ids) -> dict:
        """This call's states (kept, with the path to them, for the next call)."""
        R, S = input_ids.shape
        prev, start = self._ids, self._start
        # `generate` keeps rows prompt-major and reorders beams within a prompt, so row r keeps
        # its prompt while a generation goes on.
        if (
            prev is None
            or prev.shape[0] != R
            or S < start
            or not bool((input_ids[:, :start] == prev[:, :start]).all())
        ):
            # A new generation: every row starts at the root after its prompt.
            self._start, self._layers, self._back = S, [self._init(R)], [None]
        else:
            self._layers, self._back = self._extend(input_ids[:, start:])
        self._ids = input_ids
        return self._restarted(self._layers[-1])

    def _restarted(self, state: dict) -> dict:
        """Rows that have all finished start over (see `_extend`); `labels()` still reads them."""
        return self._init(len(state["done"])) if bool(state["done"].all()) else state

    def _extend(self, new) -> tuple[list, list]:
        """The layers for generated tokens `new` [R, G]: each row continues the last call's row
        sharing its longest prefix, walked from the deepest layer all rows share."""
        torch = self._t
        R, G = new.shape
        old = self._ids[:, self._start :]
        m = min(G, old.shape[1])
        shared = (new[:, None, :m] == old[None, :, :m]).long().cumprod(-1).sum(-1)  # [R, R]
        if self.allowed is not None:
            # With subsets a state also depends on the prompt: only its own rows are parents.
            batch = self._rows_batch(R)
            shared = torch.where(batch[:, None] == batch[None, :], shared, -1)
        seen, parent = shared.max(1)
        L = int(seen.min())
        # Back pointers lead from the last call's rows to their entries in layer L, which is
        # put in this call's row order; rows that shared more than L tokens are walked again (a
        # state is a function of the tokens).
        row = parent
        for j in range(len(self._layers) - 1, L, -1):
            row = self._back[j][row]
        state, over = {k: v[row] for k, v in self._layers[L].items()}, False
        layers = [*self._layers[:L], state]
        back = [*self._back[:L], self._back[L][row] if L else None]
        for j in range(L, G):
            # Once every row has finished, `generate` stops: the tokens after that are the prompt
            # of a new call (one extending the last output), whose rows start at the root.
            if over:
                state = self._init(R)
            else:
                state, allowed = self._advance(self._restarted(state), new[:, j])
                # A row's first new token was picked under this processor's mask (beam search
                # may keep a forbidden, -inf candidate: that row just ends); later ones never were.
                bad = (~allowed & (j > seen)).nonzero()[:, 0]
                if len(bad):
                    r = int(bad[0])
                    raise ValueError(
                        f"input_ids: row {r} continues the last call by {G - int(seen[r])} "
                        f"tokens, and token {int(new[r, j])} at position {self._start + j} "
                        "(never masked by this processor) is outside the label grammar; if this "
                        "is a new generate() call whose prompt extends an unfinished output, "
                        "call reset() before it"
                    )
                over = bool(state["done"].all())
            layers.append(state)
            back.append(torch.arange(R, device=self.device))
        return layers, back

    def _rows_batch(self, R: int):
        B = self.allowed.shape[0]
        if R % B:
            raise ValueError(f"allowed: {B} rows do not divide the {R} generated rows")
        return self._t.arange(R, device=self.device) // (R // B)

    def _free(self, state: dict, lo, hi, batch, rows):
        """Available labels in [lo, hi) (any shape, rows of the same shape): allowed ones minus
        emitted ones."""
        if self.allowed is None:
            free = hi - lo
        else:
            b = batch[rows]
            free = self.prefix[b, hi] - self.prefix[b, lo]
        e = state["emitted"][rows]
        return free - ((e >= lo[..., None]) & (e < hi[..., None])).sum(-1)

    def _label_free(self, state: dict, label, batch):
        free = ~(state["emitted"] == label[:, None]).any(1)
        if self.allowed is not None:
            free &= self.allowed[batch, label.clamp(max=self.allowed.shape[1] - 1)]
        return free

    def _slots(self, state: dict) -> dict:
        """Per row: its children (a fixed-width slice of edges), whether EOS or the separator
        may come next, and the separator token due."""
        torch = self._t
        R = state["node"].shape[0]
        batch = self._rows_batch(R) if self.allowed is not None else None
        node, sep_pos, done = state["node"], state["sep_pos"], state["done"]
        live = ~done & (sep_pos == 0)
        n = node.clamp(0, len(self.lo) - 1)
        start, stop = self.row_ptr[n], self.row_ptr[n + 1]
        # Children of non-root rows as one ragged list (row, edge): the work follows the real
        # branching, not the widest node's.
        count = torch.where(live & (node > 0), stop - start, 0)
        rows = torch.repeat_interleave(torch.arange(R, device=self.device), count)
        first = torch.cumsum(count, 0) - count
        edge = start[rows] + torch.arange(len(rows), device=self.device) - first[rows]
        if self._checks:
            keep = self._free(state, self.lo[edge + 1], self.hi[edge + 1], batch, rows) > 0
            rows, edge = rows[keep], edge[keep]
        own = self.lo[n]
        ends = live & self.end[n] & self._label_free(state, own, batch)
        out = {"batch": batch, "rows": rows, "edge": edge, "own": own, "ends": ends}
        out["at_root"] = live & (node == 0)
        out["inside"] = ~done & (sep_pos > 0)
        out["opens"] = ends & False
        if self.sep:
            more = (state["count"] + 1 < self.max_labels) & (
                self._total(batch, R) - state["count"] > 1
            )
            out["opens"] = ends & more
        out["sep_tok"] = self.sep_t[sep_pos.clamp(0, len(self.sep_t) - 1)]
        return out

    @property
    def _checks(self) -> bool:
        # Single-label without subsets: every child's range holds a label, nothing to check.
        return self.max_labels > 1 or self.allowed is not None

    def _root_ok(self, state: dict, rows, batch, token):
        """Whether `token` [r] starts a label still available to `rows` [r]."""
        has = self.root_child[token] > 0
        if not self._checks:
            return has
        count = self.root_count[token] if batch is None else self.root_count[batch[rows], token]
        # Emitted labels lower their first token's count.
        e = state["emitted"][rows]
        used = ((self.first[e.clamp(min=0)] == token[:, None]) & (e >= 0)).sum(1)
        return has & (count - used > 0)

    def _root_closed(self, state: dict, rows, batch):
        """Root tokens that emitted labels close for `rows`: (row positions, tokens) where a
        first token's count, less the row's emitted labels starting with it, reaches 0."""
        e = state["emitted"][rows]
        hit = (e >= 0).nonzero()
        if not len(hit):
            return hit[:, 0], hit[:, 0]
        V = self.vocab_size
        key, used = self._t.unique(
            hit[:, 0] * V + self.first[e[hit[:, 0], hit[:, 1]]], return_counts=True
        )
        r, tok = key // V, key % V
        count = self.root_count[tok] if batch is None else self.root_count[batch[rows[r]], tok]
        shut = count - used <= 0
        return r[shut], tok[shut]

    def _masked(self, state: dict, scores):
        """The scores with every token the grammar forbids at -inf (EOS only for finished rows)."""
        torch = self._t
        s = self._slots(state)
        R, V = scores.shape
        closed = self.root_closed
        if bool(s["at_root"].all()):
            # The first step: one masked_fill, the per-prompt mask broadcast over its rows
            # (rows are prompt-major), so no [R, V] mask is built.
            rows, batch = s["at_root"].nonzero()[:, 0], s["batch"]
            B = 1 if batch is None else closed.shape[0]
            if self.root_open is not None:
                idx = self.root_open[:, None, :].expand(B, R // B, -1)
                kept = scores.view(B, R // B, V).gather(2, idx)
                out = scores if self.inplace else torch.empty_like(scores)
                out.fill_(-torch.inf).view(B, R // B, V).scatter_(2, idx, kept)
            else:
                out = scores if self.inplace else scores.clone()
                out.view(B, R // B, V).masked_fill_(closed.view(B, 1, V), -torch.inf)
            if self._checks:
                r, tok = self._root_closed(state, rows, batch)
                out[rows[r], tok] = -torch.inf
            return out
        # Start from -inf and copy the allowed scores: a few per row, all V only at the root.
        # In place, the few are read out before the fill.
        keep = []
        if bool(s["at_root"].any()):
            rows = s["at_root"].nonzero()[:, 0]
            shut = closed if s["batch"] is None else closed[s["batch"][rows]]
            root = scores[rows].masked_fill_(shut, -torch.inf)
            if self._checks:
                r, tok = self._root_closed(state, rows, s["batch"])
                root[r, tok] = -torch.inf
            keep.append((rows, slice(None), root))
        r, tok = s["rows"], self.tokens[s["edge"]]
        keep.append((r, tok, scores[r, tok]))
        r = (s["opens"] | s["inside"]).nonzero()[:, 0]
        keep.append((r, s["sep_tok"][r], scores[r, s["sep_tok"][r]]))
        r = (s["ends"] | state["done"]).nonzero()[:, 0]
        keep.append((r, self.eos, scores[r, self.eos]))
        out = scores.fill_(-torch.inf) if self.inplace else torch.full_like(scores, -torch.inf)
        for r, tok, values in keep:
            out[r, tok] = values
        return out

    def _total(self, batch, R: int):
        if self.allowed is None:
            return self._t.full((R,), self.num_labels, device=self.device)
        return self.prefix[batch, -1]

    def _advance(self, state: dict, token) -> tuple[dict, Any]:
        """The state after `token` per row, and whether the grammar allows it ([R] bool; any
        token after EOS, `generate`'s padding). A token the grammar forbids ends the row."""
        torch = self._t
        s = self._slots(state)
        node, sep_pos, done = state["node"], state["sep_pos"], state["done"]
        # The child through `token`: the root's dense map, or a binary search for the key
        # (node, token) among all edges, which are sorted by (parent, token).
        rows = torch.arange(len(token), device=self.device)
        key = node * self.vocab_size + token
        pos = torch.searchsorted(self.edge_key, key).clamp(max=len(self.edge_key) - 1)
        found = (self.edge_key[pos] == key) & ~done & (sep_pos == 0) & (node > 0)
        if self._checks:
            found &= self._free(state, self.lo[pos + 1], self.hi[pos + 1], s["batch"], rows) > 0
        root_ok = s["at_root"] & self._root_ok(state, rows, s["batch"], token)
        child = torch.where(root_ok, self.root_child[token], pos + 1)
        # EOS and the separator's first token mean "this label ends" only where one may end;
        # elsewhere the separator's first token may be a label's own token (a child).
        is_eos = s["ends"] & (token == self.eos)
        opens = s["opens"] & (token == self.sep_t[0])
        inside = s["inside"] & (token == s["sep_tok"])
        goes_on = found | root_ok
        allowed = goes_on | is_eos | opens | inside | done
        emit = is_eos | opens  # this token completes the node's label
        nxt = torch.where(inside, sep_pos + 1, torch.ones_like(sep_pos))
        nxt = torch.where(nxt >= len(self.sep_t), 0, nxt)
        slot = torch.arange(self.max_labels, device=self.device)[None, :] == state["count"][:, None]
        new = {
            "node": torch.where(goes_on, child, torch.where(opens | inside, 0, node)),
            "sep_pos": torch.where(opens | inside, nxt, 0),
            "emitted": torch.where(emit[:, None] & slot, s["own"][:, None], state["emitted"]),
            "count": state["count"] + emit.long(),
            "ok": state["ok"] & allowed,
        }
        new["done"] = done | is_eos | ~new["ok"]
        return new, allowed
