"""Amazon Reviews 2014 Beauty 5-core: the STATIC cold-start protocol on these SIDs and retrievers,
and TIGER's leave-one-out as the `beauty_item_cf` preset in WORKDIR/loo (`eval.warm_preset`).

Command: `genret pipeline --dataset beauty --workdir runs/beauty` (results/cold_start_*.json,
results/warm.json copied from runs/beauty/loo, results/report.md).
Cold-start retriever alone: `genret train-retriever --workdir runs/beauty --cold-start 0.02`.
Test STATIC Recall@1, seed 0, from an empty work directory: 2.39% at 2%, 2.35% at 5% (sessions 12
and 13, equal to the digit; session 4's code gives the same 2.39% at 2%; its recorded 3.42% /
1.83% run is not reproducible from empty, docs/RESULTS.md). Leave-one-out: `beauty_item_cf`'s.
"""

import dataclasses

from experiments.config import Config


def get_config() -> Config:
    cfg = Config(name="beauty")
    # Retriever: sized so `genret train-retriever --cold-start 0.02` takes <= 20 min on the 2-core
    # reference CPU (docs/BENCHMARKS.md, "Retriever training").
    seqmodel = dataclasses.replace(
        cfg.seqmodel,
        num_layers=2,
        d_model=64,
        num_heads=2,
        mlp_dim=128,
        layout="causal",
        batch_size=128,
        learning_rate=2e-3,
        num_epochs=10,
        eval_every=174,
        eval_users=1000,
    )
    # Tokenizer, chosen on the validation protocol only (train-retriever --split cold-val;
    # eval-cold-start --validation; docs/RESULTS.md, "Tuning"): latent width 32 (default 8),
    # Recall@1 3.04% vs 2.23%; 64 codes per level (default 256), Recall@1 3.94% vs 3.04% (seed 0)
    # and 2.95% vs 1.97% (seed 1). Fewer codes: more cold items share a prefix seen in training.
    rqvae = dataclasses.replace(cfg.rqvae, latent_dim=32, codebook_size=64)
    # Cold-start beam scores, chosen on the validation protocol over three retriever seeds
    # (docs/RESULTS.md, "Session 4: cold-start beam scores"): minus 0.5 x the training log prior
    # of the first two codes, and weight 0.25 on the last two levels' log-probs. Validation STATIC
    # Recall@1, seeds 0/1/2: 3.94/3.21/2.87% plain, 4.49/3.94/3.64% scored.
    # The content prior in STATIC's cold-start beams (method `static_content`), chosen on the
    # 2% validation protocol, retriever seed 0 (docs/RESULTS.md, "The content prior in STATIC's
    # beams"): weight 4 at temperature 0.1, Recall@1 / Recall@10 / NDCG@10 5.78 / 24.30 / 13.56
    # against STATIC's 3.98 / 21.57 / 11.18 and the content neighbour's 5.56 / 22.25 / 12.79.
    # Since session 29 the content neighbour and its prior read the TF-IDF rows themselves, not
    # their SVD (rules C3, C4; docs/RESULTS.md, "The content neighbour on TF-IDF rows"): the
    # neighbour 6.33 / 23.49 / 13.73, the prior re-chosen for their cosines at weight 16,
    # temperature 0.1: 6.46 / 23.45 / 13.73 (three users above the neighbour's Recall@1).
    # Leave-one-out: the `beauty_item_cf` preset in WORKDIR/loo (its own collaborative SIDs, an
    # item-level retriever, four seeds; docs/RESULTS.md, lead tables). One work directory holds
    # one tokenizer, and these 64-code text SIDs are the cold-start ones.
    ev = dataclasses.replace(
        cfg.eval,
        cold_prior_weight=0.5,
        cold_level_weights=(1.0, 1.0, 0.25, 0.25),
        cold_content_weight=16.0,
        cold_content_temperature=0.1,
        cold_content_vectors="tfidf",
        warm_preset="beauty_item_cf",
    )
    return dataclasses.replace(
        cfg,
        data=dataclasses.replace(cfg.data, dataset="beauty"),
        seqmodel=seqmodel,
        rqvae=rqvae,
        eval=ev,
    )
