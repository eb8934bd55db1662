"""Decoder-only retrievers over SIDs (one position per SID token with KV-cache decoding, or one per
item with a GRU head over the levels): models, training, checkpoints.

Training and loading (`train_and_evaluate`, `load_retriever`, `retrieval_fn`) live in
`seqmodel.train`, imported on use so that reading a config does not load the data pipeline.
"""

from seqmodel.config import SeqModelConfig
from seqmodel.item_model import ItemDecoder
from seqmodel.model import Decoder, KVCache
from seqmodel.tokens import TokenSpace, encode_histories, sid_tokens

__all__ = [
    "Decoder",
    "ItemDecoder",
    "KVCache",
    "SeqModelConfig",
    "TokenSpace",
    "encode_histories",
    "sid_tokens",
]
