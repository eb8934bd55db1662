"""Test helpers for label decoding: a byte-level BPE tokenizer trained here, nothing downloaded."""

CATEGORIES = [
    "Beauty",
    "Beauty > Skin Care",
    "Beauty > Skin Care > Face",
    "Beauty > Hair Care",
    "Beauty > Makeup",
    "Toys & Games",
    "Toys & Games > Puzzles",
    "New York",
    "New Jersey",
    "Technology",
    "Technology > AI",
]


def train_tokenizer(texts=CATEGORIES, vocab_size: int = 320):
    """A GPT-2 style byte-level BPE trained on prompts that end in each text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Labels only ever follow a prompt here, so their words are learned with the space.
    corpus = [f"Category: {t}" for t in texts for _ in range(20)]
    tok.train_from_iterator(corpus, trainer)
    return tok
