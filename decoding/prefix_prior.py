"""Per-row priors over an item set's prefixes, added to any constraint's beam scores.

A beam search ranks prefixes level by level, so a prior over whole items p(item | row) enters it
as its chain of conditionals: entering prefix node n adds weight * log p(n | parent(n)) to the
beam's score, where p(n) is the prior mass of the items under n. Summed over the levels, a
finished beam gets weight * log p(item | row): the ranking of a product of the model's scores and
the prior, while every level prunes by the prior mass still reachable under each prefix.

Cold-start use: the prior is the content neighbour's softmax over the cold items, per user
(the cold-start evaluation), so STATIC's beams see the item text the retriever never trained on.

`PrefixTable` numbers the prefixes (root 0, then every distinct prefix of length 1 .. L); its
dense child table [P, V] suits item sets of a few thousand SIDs, such as a cold-start set.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jaxtyping import Array, Float, Int, PyTree

from decoding.constraints import Candidates, Constraint, Level
from decoding.static_index import ArrayInput


@dataclasses.dataclass(frozen=True)
class PrefixTable:
    """The prefix trie of N distinct SIDs: node ids, child table and each item's node per level."""

    child: np.ndarray  # int32 [P, V]: node -> child node by code, -1 where no SID continues
    parent: np.ndarray  # int32 [P]: parent node (-1 for the root, node 0)
    item_nodes: np.ndarray  # int32 [N, L]: node of each SID's prefix of length l + 1

    @property
    def num_nodes(self) -> int:
        return self.child.shape[0]

    def check_vocab(self, vocab_size: int) -> None:
        """Raises ValueError unless the table was built for `vocab_size` codes (a constraint's)."""
        if self.child.shape[1] != vocab_size:
            raise ValueError(
                f"prefix table: built for V={self.child.shape[1]}, the constraint has "
                f"V={vocab_size}"
            )

    @functools.cached_property
    def _incidence(self) -> sp.csr_matrix:
        """[N, P] with a 1 where node n is the root or a prefix of item i."""
        N, L = self.item_nodes.shape
        cols = np.concatenate([np.zeros((N, 1), np.int64), self.item_nodes], axis=1).reshape(-1)
        rows = np.repeat(np.arange(N), L + 1)
        return sp.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(N, self.num_nodes))

    @classmethod
    def build(cls, sids: ArrayInput, vocab_size: int) -> "PrefixTable":
        """From distinct SIDs [N, L] with codes in [0, vocab_size). Raises ValueError otherwise."""
        S = np.asarray(sids, np.int64)
        if S.ndim != 2 or S.shape[0] == 0 or S.shape[1] == 0:
            raise ValueError(f"prefix table: expected a non-empty [N, L] array, got {S.shape}")
        if S.min() < 0 or S.max() >= vocab_size:
            raise ValueError(f"prefix table: codes must lie in [0, {vocab_size})")
        N, L = S.shape
        if len(np.unique(S, axis=0)) != N:
            raise ValueError("prefix table: SIDs must be distinct")
        item_nodes = np.zeros((N, L), np.int64)
        parents = [np.full(1, -1, np.int64)]
        codes = [np.zeros(1, np.int64)]
        prev = np.zeros(N, np.int64)  # every SID starts at the root
        next_id = 1
        for level in range(L):
            # A prefix of length l + 1 is (its parent node, its last code); number them in order.
            key = prev * vocab_size + S[:, level]
            uniq, inverse = np.unique(key, return_inverse=True)
            parents.append(uniq // vocab_size)
            codes.append(uniq % vocab_size)
            prev = next_id + inverse.reshape(-1)
            item_nodes[:, level] = prev
            next_id += len(uniq)
        parent = np.concatenate(parents)
        code = np.concatenate(codes)
        child = np.full((next_id, vocab_size), -1, np.int64)
        child[parent[1:], code[1:]] = np.arange(1, next_id)
        return cls(child.astype(np.int32), parent.astype(np.int32), item_nodes.astype(np.int32))

    def conditional_log_prior(
        self, log_prior: Float[np.ndarray, "B N"], *, floor: float = -1e4
    ) -> Float[np.ndarray, "B P"]:
        """log p(node | parent) per row from log p(item) [B, N] (rows need not be normalised;
        the root gets 0). No value goes below `floor` (a node whose mass underflows gets it,
        never -inf), so a floor above about -745 also clamps small conditionals."""
        lp = np.asarray(log_prior, np.float64)
        B, N = lp.shape
        if N != self.item_nodes.shape[0]:
            raise ValueError(f"log_prior: expected {self.item_nodes.shape[0]} items, got {N}")
        # Masses relative to each row's best item keep the sums in range; one sparse product
        # with the item -> node incidence (each item under the root and its L prefixes) sums them.
        p = np.exp(lp - lp.max(axis=1, keepdims=True))
        mass = np.asarray((self._incidence.T @ p.T).T)
        out = np.zeros_like(mass)
        # An empty parent gives -inf - -inf = nan: both become the floor.
        with np.errstate(divide="ignore", invalid="ignore"):
            log_mass = np.log(mass)
            out[:, 1:] = log_mass[:, 1:] - log_mass[:, self.parent[1:]]
        return np.maximum(np.nan_to_num(out, nan=floor, neginf=floor), floor).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class PrefixPrior(Constraint):
    """`inner` with `weight * bias[b, node]` added to every candidate that enters `node`.

    Candidates whose prefix is not in the table are marked invalid. The state is the pair (inner
    state, node id); `bias` rows are the batch's rows (e.g. from `conditional_log_prior`).
    """

    inner: Constraint
    child: Int[Array, "P V"]
    bias: Float[Array, "B P"]
    weight: Float[Array, ""]

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def num_levels(self) -> int:
        return self.inner.num_levels

    @property
    def scan_start(self) -> int:
        return self.inner.scan_start

    @classmethod
    def build(
        cls, inner: Constraint, table: PrefixTable, bias: ArrayInput, weight: float
    ) -> "PrefixPrior":
        b = np.asarray(bias, np.float32)
        if b.ndim != 2 or b.shape[1] != table.num_nodes:
            raise ValueError(f"bias: expected [B, {table.num_nodes}], got {b.shape}")
        table.check_vocab(inner.vocab_size)
        return cls(inner, jnp.asarray(table.child), jnp.asarray(b), jnp.float32(weight))

    def init_state(self, batch_size: int) -> PyTree:
        return (self.inner.init_state(batch_size), jnp.zeros((batch_size,), jnp.int32))

    def candidates(self, level: Level, state: PyTree, log_probs: Float[Array, "B K V"]):
        inner_state, node = state
        cand = self.inner.candidates(level, inner_state, log_probs)
        B, K, C = cand.tokens.shape
        P, V = self.child.shape
        # Node ids stay in [0, P) and tokens in [0, V) for live beams; clipping keeps dead beams'
        # gathers in range (`_select` masks them).
        flat = jnp.clip(node, 0, P - 1)[..., None] * V + jnp.clip(cand.tokens, 0, V - 1)
        child = jnp.take(self.child.reshape(-1), flat, mode="clip")
        bias = jnp.take_along_axis(
            self.bias, jnp.clip(child, 0, P - 1).reshape(B, K * C), axis=1, mode="clip"
        ).reshape(B, K, C)
        ok = cand.valid & (child >= 0)
        return Candidates(cand.tokens, cand.log_probs + self.weight * bias, ok, (cand.aux, child))

    def advance(self, level: Level, state: PyTree, tokens: Int[Array, "B K"], aux: PyTree):
        inner_state, _ = state
        inner_aux, child = aux
        return (self.inner.advance(level, inner_state, tokens, inner_aux), child)


jax.tree_util.register_dataclass(
    PrefixPrior, data_fields=["inner", "child", "bias", "weight"], meta_fields=[]
)
