"""Real text for the WikiText experiments (Figs. 7, 10; notes/scan_snap.md §2.5).

The PyTorch transformer tutorial's pipeline as arrays: `tokenize`, `build_vocabulary`, `encode`,
`batchify`, then `chunk` (jit-able, the chunk index traced); `load` reads a folder in the
standard WikiText layout. Each step's exact rules: docs/design/scan_snap.md.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import pathlib
import re
from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np

SPLITS = ("train", "valid", "test")
UNK = "<unk>"

# basic_english, in order: lower-case first, then these substitutions, then split on whitespace.
_SUBSTITUTIONS = [
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"'", " '  "),
        (r'"', ""),
        (r"\.", " . "),
        (r"<br \/>", " "),
        (r",", " , "),
        (r"\(", " ( "),
        (r"\)", " ) "),
        (r"!", " ! "),
        (r"\?", " ? "),
        (r";", " "),
        (r":", " "),
        (r"\s+", " "),
    )
]


class TextDataError(FileNotFoundError):
    """The text folder is missing or lacks a split the config asks for."""


def tokenize(line: str) -> list[str]:
    """torchtext's basic_english tokenizer (notes §2.5)."""
    line = line.lower()
    for pattern, replacement in _SUBSTITUTIONS:
        line = pattern.sub(replacement, line)
    return line.split()


def split_files(split: str) -> tuple[str, str]:
    """The file names a split may have: PyTorch's `{split}.txt`, Salesforce's
    `wiki.{split}.tokens`."""
    return f"{split}.txt", f"wiki.{split}.tokens"


def splits_in(path: str | pathlib.Path) -> dict[str, pathlib.Path]:
    """{split: file} for every split the folder holds (empty for a missing folder)."""
    folder = pathlib.Path(path)
    found = {}
    for split in SPLITS:
        for name in split_files(split):
            if (folder / name).is_file():
                found[split] = folder / name
                break
    return found


# Where the data comes from, in the words every missing-data message ends with.
SOURCE = (
    "WikiText-2 (Merity et al. 2016, CC BY-SA) is in the PyTorch examples repository "
    "(word_language_model/data/wikitext-2: train.txt, valid.txt, test.txt) and in Salesforce's "
    "WikiText archives (wiki.train.tokens, ...); set text.path to the folder"
)


def missing_splits_message(path: str | pathlib.Path, splits: Iterable[str]) -> str | None:
    """One sentence saying why `path` cannot give `splits` and where to get them, or None when
    it can."""
    folder = pathlib.Path(path)
    if not folder.is_dir():
        return (
            f"there is no folder {str(path)!r} (relative to {pathlib.Path.cwd()}); a "
            "WikiText folder holds {split}.txt or wiki.{split}.tokens for train, valid, test: "
            + SOURCE
        )
    found = splits_in(folder)
    lacking = [s for s in dict.fromkeys(splits) if s not in found]
    if not lacking:
        return None
    names = " or ".join(split_files(lacking[0]))
    return (
        f"{str(path)!r} has no {lacking[0]} split ({names}); it holds "
        f"{', '.join(f'{s} ({f.name})' for s, f in found.items()) or 'none of them'}: " + SOURCE
    )


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """Token types in id order; id 0 is "<unk>", the id of every type not listed."""

    types: tuple[str, ...]

    @functools.cached_property
    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.types)}

    def __len__(self) -> int:
        return len(self.types)

    def ids(self, tokens: list[str]) -> list[int]:
        index = self.index
        return [index.get(t, 0) for t in tokens]


def build_vocabulary(lines: Iterable[str]) -> Vocabulary:
    """The types of the tokenised lines, most frequent first (ties alphabetical), after <unk>."""
    counts = collections.Counter(t for line in lines for t in tokenize(line))
    counts.pop(UNK, None)
    return Vocabulary((UNK,) + tuple(sorted(counts, key=lambda t: (-counts[t], t))))


def encode(lines: Iterable[str], vocabulary: Vocabulary) -> np.ndarray:
    """One int32 id stream: the ids of every non-empty tokenised line, concatenated (line by
    line into int32 arrays: WikiText-103's 100M ids never sit in a Python list)."""
    index = vocabulary.index
    pieces = [np.fromiter((index.get(t, 0) for t in tokenize(line)), np.int32) for line in lines]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int32)


def batchify(stream: np.ndarray, batch_size: int) -> np.ndarray:
    """(rows, batch_size): column b is the stream's b-th contiguous stretch of `rows` ids."""
    rows = len(stream) // batch_size
    if rows < 2:
        raise ValueError(
            f"a stream of {len(stream)} ids gives no row pair at batch size {batch_size}."
        )
    return stream[: rows * batch_size].reshape(batch_size, rows).T


def num_chunks(rows: int, bptt: int) -> int:
    """Full chunks of `bptt` rows with a next row for their targets: (rows - 1) // bptt."""
    return (rows - 1) // bptt


def chunk(
    data_RB: jax.typing.ArrayLike, i: jax.typing.ArrayLike, bptt: int
) -> tuple[jax.Array, jax.Array]:
    """(inputs, targets), each (bptt, B): rows [i bptt, (i + 1) bptt) and the next row of each.
    `i` may be traced (a dynamic slice), so a compiled loop walks the chunks on device."""
    start = jnp.asarray(i) * bptt
    rows = jax.lax.dynamic_slice_in_dim(jnp.asarray(data_RB), start, bptt + 1, axis=0)
    return rows[:-1], rows[1:]


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A vocabulary and two batchified id arrays: train (rows, batch_size) and eval (rows,
    eval_batch_size); the splits they come from and the folder."""

    path: str
    train_split: str
    eval_split: str
    vocabulary: Vocabulary
    train: np.ndarray
    eval: np.ndarray
    train_tokens: int  # ids in the split's stream (before batchify drops its tail)
    eval_tokens: int

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def unk_fraction(self, split: str = "eval") -> float:
        data = self.eval if split == "eval" else self.train
        return float((data == 0).mean())


def unigram_cross_entropy(corpus: Corpus) -> float:
    """The evaluation stream's cross-entropy (nats) under the training stream's unigram
    frequencies: the loss of a model that ignores the context. Every evaluation id has a
    training count (types come from the training split; the rest are <unk>, which the training
    split holds too in WikiText); an id it lacks is counted once (add-one for that id only)."""
    counts = np.bincount(corpus.train.reshape(-1), minlength=corpus.vocab_size).astype(float)
    counts = np.maximum(counts, 1.0)
    log_p = np.log(counts / counts.sum())
    return float(-log_p[corpus.eval.reshape(-1)].mean())


def read_lines(file: pathlib.Path) -> list[str]:
    return file.read_text(encoding="utf-8").splitlines()


@functools.lru_cache(maxsize=4)
def _load(
    path: str,
    train_split: str,
    eval_split: str,
    batch_size: int,
    eval_batch_size: int,
    stamp: tuple,
) -> Corpus:
    files = splits_in(path)
    train_lines = read_lines(files[train_split])
    vocabulary = build_vocabulary(train_lines)
    train_stream = encode(train_lines, vocabulary)
    eval_stream = (
        train_stream
        if eval_split == train_split
        else encode(read_lines(files[eval_split]), vocabulary)
    )
    return Corpus(
        str(pathlib.Path(path).resolve()),
        train_split,
        eval_split,
        vocabulary,
        batchify(train_stream, batch_size),
        batchify(eval_stream, eval_batch_size),
        len(train_stream),
        len(eval_stream),
    )


def load(
    path: str | pathlib.Path,
    *,
    train_split: str = "train",
    eval_split: str = "valid",
    batch_size: int = 20,
    eval_batch_size: int = 10,
) -> Corpus:
    """The corpus of a WikiText folder: the vocabulary of `train_split`, both splits batchified.
    Raises `TextDataError` (one sentence) when the folder or a split is missing. Cached per
    process (the same folder, splits, sizes and file times load once)."""
    message = missing_splits_message(path, (train_split, eval_split))
    if message:
        raise TextDataError(message + ".")
    files = splits_in(path)
    stamp = tuple(
        (f.name, f.stat().st_mtime_ns, f.stat().st_size)
        for s, f in files.items()
        if s in (train_split, eval_split)
    )
    return _load(str(path), train_split, eval_split, batch_size, eval_batch_size, stamp)
