"""Beauty, leave-one-out (TIGER's protocol): one parallel-codes retriever (RPG), no ensemble.

Items get 32 x 256 codes by product quantization of their TF-IDF text embeddings (whitened PCA
to 128); a 2 x D128 transformer over item positions predicts the next item's 32 codes in
parallel; the full catalog is ranked by the codes' mean log-probability. No tokenizer, cold
start or SASRec stage. Untuned defaults (the `parallel` section): Beauty test Recall@10 4.07
at seed 0, far under RPG's 8.09 (docs/RESULTS.md).
Command: `genret pipeline --dataset beauty --config beauty_parallel --workdir runs/beauty_parallel`.
"""

import dataclasses

from data.config import DataConfig
from experiments.config import Config


def parallel_only(cfg: Config, *, num_codes: int, eval_every: int) -> Config:
    """`cfg` running the parallel-codes retriever alone, with `num_codes` codes per item and a
    validation every `eval_every` steps (about one epoch)."""
    ev = dataclasses.replace(
        cfg.eval, cold=False, warm=False, warm_preset="", sasrec=False, parallel=True
    )
    parallel = dataclasses.replace(cfg.parallel, num_codes=num_codes, eval_every=eval_every)
    return dataclasses.replace(cfg, eval=ev, parallel=parallel)


def get_config() -> Config:
    cfg = Config(name="beauty_parallel", data=DataConfig(dataset="beauty"))
    return parallel_only(cfg, num_codes=32, eval_every=87)  # 22,363 users / batch 256
