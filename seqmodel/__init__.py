"""Decoder-only transformer over SID tokens: model, training, checkpoints, KV-cache decoding.

Training and loading (`train_and_evaluate`, `load_retriever`, `retrieval_fn`) live in
`seqmodel.train`, imported on use so that reading a config does not load the data pipeline.
"""

from seqmodel.config import SeqModelConfig
from seqmodel.model import Decoder, KVCache
from seqmodel.tokens import TokenSpace, encode_histories, sid_tokens

__all__ = ["Decoder", "KVCache", "SeqModelConfig", "TokenSpace", "encode_histories", "sid_tokens"]
