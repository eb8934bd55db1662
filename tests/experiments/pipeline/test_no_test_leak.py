"""No test interaction reaches a fitted artifact: with every user's last item (leave-one-out's
test target) changed, the tokenizer's SIDs, the retriever's training rows and the co-occurrence
teacher's targets are unchanged."""

import dataclasses

import numpy as np
import pytest

from data import amazon, splits, synthetic
from data.config import SyntheticConfig
from data.examples import loo_examples
from data.types import Histories
from rqvae import load_sids
from rqvae.pipeline import tokenize_catalog
from seqmodel.cooc_teacher import CoocTeacher
from tests.rqvae.test_pipeline import CFG as TINY_RQVAE

# The tokenizer tests' tiny RQ-VAE, fitted on the warm items with a co-occurrence part.
CFG = dataclasses.replace(TINY_RQVAE, codebook_size=8, fit_on="warm", cf_dim=4)


def _with_new_last_items(ds):
    """ds with every user's last item moved to another item, and the catalog's first-review
    times counted again, as reading such raw files would."""
    h = ds.histories
    items = h.items.copy()
    last = h.offsets[1:] - 1
    items[last] = (items[last] + 1 + np.arange(len(last)) % 7) % len(ds.catalog)
    changed = Histories(items=items, times=h.times, offsets=h.offsets)
    first = splits.first_times(changed, len(ds.catalog))
    catalog = dataclasses.replace(ds.catalog, first_time=first)
    return dataclasses.replace(ds, histories=changed, catalog=catalog)


@pytest.mark.slow
def test_changing_every_last_item_changes_no_fitted_input(tmp_path):
    synthetic.generate(SyntheticConfig(num_items=200, num_users=300, num_categories=5), tmp_path)
    ds = amazon.read_raw_dir(tmp_path)
    ds2 = _with_new_last_items(ds)
    # The change reaches what the catalog says of the newest items, and with it the items the
    # tokenizer would leave out if it ranked them by every review.
    newest = splits.cold_start_items(ds.catalog.first_time, 0.05)
    assert (newest != splits.cold_start_items(ds2.catalog.first_time, 0.05)).any()

    sids = []
    for name, d in (("a", ds), ("b", ds2)):
        tokenize_catalog(
            CFG,
            d.catalog,
            tmp_path / name,
            histories=splits.tokenizer_histories(d, ()),
            cache_dir=None,
            cold_fraction=0.05,
            progress=False,
        )
        sids.append(load_sids(tmp_path / name)[0])
    np.testing.assert_array_equal(sids[0], sids[1])

    a, b = (loo_examples(d, sids[0], codebook_size=8, eval_users=50, seed=0) for d in (ds, ds2))
    for field in ("items", "times", "offsets"):
        np.testing.assert_array_equal(getattr(a.train, field), getattr(b.train, field))
    np.testing.assert_array_equal(a.valid_targets, b.valid_targets)
    ta, tb = (CoocTeacher.build(x.train, sids[0], 4) for x in (a, b))
    np.testing.assert_array_equal(ta.neighbour_codes, tb.neighbour_codes)
    np.testing.assert_array_equal(ta.counts, tb.counts)
