"""Category classification data: items' text and category paths from a meta file, the item split,
and the word-piece vocabulary (whole words, byte fallback) the classifier LM reads and writes."""

import dataclasses
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from data import rawio
from data.amazon import meta_record
from data.errors import InputError

PATH_JOIN = " > "  # "Skin Care > Face > Cleansers"
# Special ids follow the 256 byte ids; words come after them.
PAD, PROMPT_END, EOS, LABEL_SEP = 256, 257, 258, 259
_FIRST_WORD = 260
_PIECE_RE = re.compile(r"\s?\w+|\s?[^\w\s]+|\s+")


@dataclasses.dataclass(frozen=True)
class Item:
    asin: str
    text: str  # "title brand"
    paths: tuple[str, ...]  # category paths as joined labels; the single-label target first


@dataclasses.dataclass(frozen=True)
class Catalog:
    """Items that have a text and at least one category path, and what reading them dropped."""

    items: list[Item]
    root: str  # the top-level category stripped from every path ("" when none was shared)
    report: dict


def read_items(path: str | os.PathLike, *, skip_bad_lines: bool = False) -> Catalog:
    """Items of an Amazon-2014-style meta file (one dict literal per line).

    The text is the title, then the brand when present (never the categories). Each path loses
    the top-level category when every item has a path under the same one (Beauty; "Toys & Games"
    on Toys), except a path that is that category alone. The single-label target, listed first,
    is the deepest path, the first one in file order among equally deep ones.
    """
    path = Path(path)
    bad = rawio.BadLines(path, skip_bad_lines)
    raw: list[tuple[str, str, list[tuple[str, ...]]]] = []
    lines = no_text = no_paths = 0
    for lineno, line in enumerate(rawio.read_lines(path), start=1):
        line = line.strip()
        if not line:
            continue
        lines += 1
        try:
            d = meta_record(line)
        except ValueError as e:
            bad(lineno, str(e))
            continue
        text = " ".join(
            d[k].strip() for k in ("title", "brand") if isinstance(d.get(k), str) and d[k].strip()
        )
        cats = d.get("categories")
        paths = [
            tuple(str(c).strip() for c in p)
            for p in (cats if isinstance(cats, list | tuple) else [])
            if isinstance(p, list | tuple) and p and all(str(c).strip() for c in p)
        ]
        no_text += not text
        no_paths += not paths
        if text and paths:
            raw.append((d["asin"], text, list(dict.fromkeys(paths))))
    if not raw:
        raise InputError(f"{path}: no item has both a title and a category path")
    shared = set.intersection(*({p[0] for p in paths} for _, _, paths in raw))
    root = min(shared) if len(shared) == 1 else ""
    items = []
    for asin, text, paths in raw:
        paths = [p[1:] if p[0] == root and len(p) > 1 else p for p in paths]
        paths = list(dict.fromkeys(paths))  # stripping can merge "R > A" with "A"
        first = max(range(len(paths)), key=lambda i: (len(paths[i]), -i))
        ordered = [paths[first]] + paths[:first] + paths[first + 1 :]
        items.append(Item(asin, text, tuple(PATH_JOIN.join(p) for p in ordered)))
    report = {
        "meta_lines": lines,
        "bad_meta_lines": bad.count,
        "items": len(items),
        "skipped_no_text": no_text,
        "skipped_no_categories": no_paths,
        "stripped_root": root,
        "multi_path_items": sum(len(it.paths) > 1 for it in items),
    }
    return Catalog(items, root, report)


def split_items(n: int, *, test: float, val: float, seed: int) -> dict[str, np.ndarray]:
    """Disjoint train/val/test item indices from a seeded permutation (val is carved from train)."""
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, round(n * test))
    n_val = round((n - n_test) * val)
    return {
        "test": np.sort(order[:n_test]),
        "val": np.sort(order[n_test : n_test + n_val]),
        "train": np.sort(order[n_test + n_val :]),
    }


class WordPieces:
    """Whole-word pieces (" Care", "Skin", ">") for the frequent ones, UTF-8 bytes for the rest.

    Ids: 0-255 bytes, then PAD, PROMPT_END, EOS, LABEL_SEP, then the words. A text splits into
    pieces by one regex and each piece is a word id or its bytes, so decode(encode(t)) == t.
    """

    def __init__(self, words: Sequence[str]):
        self.words = list(words)
        self._ids = {w: _FIRST_WORD + i for i, w in enumerate(self.words)}

    @classmethod
    def fit(cls, texts: Sequence[str], labels: Sequence[str], *, max_words: int) -> "WordPieces":
        """The `max_words` most frequent pieces (seen twice or more) of `texts`; every piece of
        `labels` is kept, so the labels are short token sequences."""
        label_pieces = dict.fromkeys(p for t in labels for p in _PIECE_RE.findall(t))
        counts = Counter(p for t in texts for p in _PIECE_RE.findall(t))
        room = max(max_words - len(label_pieces), 0)
        frequent = sorted(
            (p for p, c in counts.items() if c >= 2 and p not in label_pieces),
            key=lambda p: (-counts[p], p),
        )[:room]
        return cls(sorted(label_pieces) + frequent)

    @property
    def vocab_size(self) -> int:
        return _FIRST_WORD + len(self.words)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in _PIECE_RE.findall(text):
            i = self._ids.get(piece)
            out.extend([i] if i is not None else piece.encode("utf-8"))
        return out

    def decode(self, ids: Sequence[int]) -> str:
        buf = bytearray()
        for i in ids:
            i = int(i)
            if i < 256:
                buf.append(i)
            elif i >= _FIRST_WORD:
                buf.extend(self.words[i - _FIRST_WORD].encode("utf-8"))
        return buf.decode("utf-8", errors="replace")


def encode_prompts(vocab: WordPieces, texts: Sequence[str], length: int) -> np.ndarray:
    """int32 [N, length]: each text's first length - 1 tokens, PROMPT_END, left-padded."""
    out = np.full((len(texts), length), PAD, np.int32)
    for r, t in enumerate(texts):
        ids = vocab.encode(t)[: length - 1] + [PROMPT_END]
        out[r, length - len(ids) :] = ids
    return out


def encode_targets(
    label_ids: Sequence[Sequence[int]], item_labels: Sequence[Sequence[int]], length: int
) -> tuple[np.ndarray, np.ndarray]:
    """int32 [N, length] "label SEP label ... EOS" (right-padded with PAD), and how many labels
    each row kept: whole labels only, as many as fit before EOS."""
    out = np.full((len(item_labels), length), PAD, np.int32)
    kept = np.zeros(len(item_labels), np.int32)
    for r, labels in enumerate(item_labels):
        seq: list[int] = []
        for j in labels:
            nxt = seq + ([LABEL_SEP] if seq else []) + list(label_ids[j])
            if len(nxt) + 1 > length:
                break
            seq, kept[r] = nxt, kept[r] + 1
        seq.append(EOS)
        out[r, : len(seq)] = seq
    return out, kept
