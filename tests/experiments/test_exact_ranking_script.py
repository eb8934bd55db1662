"""docs/scripts/exact_ranking.py: its exact top 10 against a brute-force scoring of every item."""

import dataclasses
import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from seqmodel.config import SeqModelConfig
from seqmodel.item_model import ItemDecoder
from seqmodel.tokens import TokenSpace, encode_history, sid_tokens
from tests.seqmodel.conftest import random_unique_sids

SCRIPT = Path(__file__).parents[2] / "docs" / "scripts" / "exact_ranking.py"
L, V = 3, 8


def _script():
    spec = importlib.util.spec_from_file_location("exact_ranking", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exact_top10_is_the_brute_force_ranking_of_every_item():
    cfg = SeqModelConfig(
        arch="item", num_layers=1, d_model=16, num_heads=2, mlp_dim=32, max_history=4, dropout=0.0
    )
    cfg = dataclasses.replace(cfg, item_embed_buckets=5)
    space = TokenSpace(num_levels=L, codebook_size=V)
    model = nnx.jit(lambda: ItemDecoder(cfg, space, rngs=nnx.Rngs(0)))()
    # Scale the heads up so that the log-probs differ enough to rank apart.
    model.head[...] = model.head[...] * 50
    sids = random_unique_sids(60, L, V, 4)  # 60 of 512 SIDs: levels 1 and 2 have few children
    tok = sid_tokens(sids, V)
    hist = jnp.asarray(np.stack([encode_history(tok, np.array(h), 4) for h in ([3, 1], [7])]))
    joint, renorm = (np.asarray(x) for x in _script().exact_scorer(model, sids)(hist))
    lp0, s = model.prefill(hist)
    for b in range(2):
        want_joint, want_renorm = np.zeros(len(sids)), np.zeros(len(sids))
        for i, sid in enumerate(sids):
            lp, state = np.asarray(lp0[b]), s[b][None, None]
            for level in range(L):
                if level:
                    out, state = model.step(jnp.asarray([[sid[level - 1]]]), level, state)
                    lp = np.asarray(out[0, 0])
                # The codes that follow this prefix in some item.
                real = np.unique(sids[(sids[:, :level] == sid[:level]).all(1), level])
                want_joint[i] += lp[sid[level]]
                want_renorm[i] += lp[sid[level]] - np.log(np.exp(lp[real]).sum())
        np.testing.assert_array_equal(joint[b], np.argsort(-want_joint, kind="stable")[:10])
        np.testing.assert_array_equal(renorm[b], np.argsort(-want_renorm, kind="stable")[:10])
    assert not np.array_equal(joint, renorm)  # the renormalisation reorders here
