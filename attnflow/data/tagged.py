"""Tagged sentences for token classification: CoNLL-style and JSON-lines readers, the tag list,
and the alignment of word tags to WordPiece ids (Devlin et al. 2019, §4.3, Fig. 4d).

Files: CoNLL style, one ``token<TAB>tag`` per line (or whitespace-separated columns, the tag the
last: CoNLL-2003's ``EU NNP B-NP B-ORG``), a blank line between sentences, ``-DOCSTART-`` lines
skipped; or JSON lines ``{"tokens": [...], "tags": [...]}`` (field names configurable). Either
may be gzipped (``.gz``). A bad line is a :class:`DataError` naming the file and line.

Alignment: a sentence of words w_1 … w_n becomes ``[CLS] p_1 … p_m [SEP]``, the WordPiece pieces
of every word in order (the tokenizer given the words themselves, ``is_pretokenized``). The tag of
word i is the label of its FIRST piece; the other pieces, [CLS], [SEP] and padding get
``IGNORE`` (-100), which the loss and the metrics skip, as in the paper ("we use the
representation of the first sub-token as the input to the token-level classifier"). Pieces past
``max_len - 2`` are cut; a word whose first piece is cut has no label (counted, and logged by the
data module). A word the normaliser leaves empty becomes one ``[UNK]``, so every word keeps a
position.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from attnflow.data.base import class_label, random_subset
from attnflow.data.corpus import CLS, SEP, UNK
from attnflow.data.errors import DataError, numbered_lines
from attnflow.data.hf_datasets import HFSplit
from attnflow.data.pretraining import pad_rows
from attnflow.data.tables import source

IGNORE = -100  # the label of positions without a tag (F.cross_entropy's default ignore_index)
Tagged = Tuple[Tuple[str, ...], Tuple[str, ...]]  # (words, tags), equally long
CONLL_SUFFIXES = (".conll", ".txt", ".tsv", ".iob", ".iob2", ".bio")
JSON_SUFFIXES = (".jsonl", ".json")


def _check_tag(tag: str, known: Optional[set], tags: Optional[tuple], where: str) -> str:
    """``tag`` if it is one of ``tags`` (values, whence), else the :func:`class_label` error."""
    if known is not None and tag not in known:
        class_label(tag, tags, where, "tag")
    return tag


def read_conll(path: Path, owner: str, tags: Optional[tuple] = None) -> List[Tagged]:
    """The sentences of a CoNLL-style file (module docstring); with ``tags`` (values, whence) a
    tag not among them is refused naming the line."""
    known = set(tags[0]) if tags else None
    out, words, labels = [], [], []
    for n, line in numbered_lines(path, owner):
        if not line.strip() or line.startswith("-DOCSTART-"):
            if words:
                out.append((tuple(words), tuple(labels)))
                words, labels = [], []
            continue
        fields = [f.strip() for f in (line.split("\t") if "\t" in line else line.split())]
        if len(fields) < 2 or not fields[0] or not fields[-1]:
            raise DataError(f"{owner}: {path} line {n} has no tag: {line.strip()[:60]!r}; expected "
                            f"token<TAB>tag (or whitespace-separated columns, the tag last)")
        words.append(fields[0])
        labels.append(_check_tag(fields[-1], known, tags, f"{owner}: {path} line {n}"))
    if words:
        out.append((tuple(words), tuple(labels)))
    return out


def _string_list(row: dict, field: str, where: str, what: str) -> List[str]:
    value = row.get(field)
    if field not in row:
        raise DataError(f"{where} has no {what} field '{field}' (fields: {', '.join(row)}); set "
                        f"data.{what}_field")
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DataError(f"{where}: '{field}' must be a list of non-empty strings, got {value!r:.60}")
    return value


def _json_objects(path: Path, owner: str, tokens_field: str, tags_field: str):
    """``(where, object)`` of a JSON-lines file's non-blank lines, ``where`` naming the line."""
    for n, line in numbered_lines(path, owner):
        if not line.strip():
            continue
        where = f"{owner}: {path} line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{where} is not valid JSON: {err}") from None
        if not isinstance(row, dict):
            raise DataError(f"{where} is JSON {type(row).__name__}, not an object with "
                            f"'{tokens_field}' and '{tags_field}' lists")
        yield where, row


def tagged_rows(rows: Iterable[Tuple[str, dict]], tokens_field: str, tags_field: str,
                tags: Optional[tuple] = None) -> List[Tagged]:
    """The sentences of ``(where, {tokens_field: [...], tags_field: [...]})`` rows (an empty list:
    no sentence); with ``tags`` a tag not among them is refused naming ``where``."""
    known = set(tags[0]) if tags else None
    out = []
    for where, row in rows:
        words = _string_list(row, tokens_field, where, "tokens")
        labels = _string_list(row, tags_field, where, "tags")
        if len(words) != len(labels):
            raise DataError(f"{where} has {len(words)} tokens but {len(labels)} tags")
        out.append((tuple(w.strip() for w in words),
                    tuple(_check_tag(t, known, tags, where) for t in labels)))
    return [s for s in out if s[0]]


def read_tagged_jsonl(path: Path, owner: str, tokens_field: str = "tokens",
                      tags_field: str = "tags", tags: Optional[tuple] = None) -> List[Tagged]:
    """The sentences of a JSON-lines file, one ``{tokens_field: [...], tags_field: [...]}`` object
    a line (an empty list: no sentence)."""
    return tagged_rows(_json_objects(path, owner, tokens_field, tags_field), tokens_field,
                       tags_field, tags)


def read_hf_tagged(split: HFSplit, owner: str, tokens_field: str, tags_field: str,
                   tags: Optional[tuple] = None) -> List[Tagged]:
    """The sentences of an HF split's ``tokens_field`` and ``tags_field`` (a ``ClassLabel`` list's
    tags as their names)."""
    rows = split.rows({tokens_field: "tokens_field", tags_field: "tags_field"})
    return tagged_rows(((f"{owner}: {split} {w}", r) for w, r in rows), tokens_field, tags_field, tags)


def read_tagged(path: Path | str | HFSplit, owner: str, tokens_field: str = "tokens",
                tags_field: str = "tags", limit: int = 0, seed: int = 0,
                tags: Optional[tuple] = None) -> List[Tagged]:
    """The sentences of a CoNLL-style or JSON-lines file by its name (``.gz`` allowed), or of an
    HF split; ``limit``: a seeded random subset (0: all). A file without sentences is an error."""
    path = source(path)
    name = str(path).removesuffix(".gz")
    if isinstance(path, HFSplit):
        rows = read_hf_tagged(path, owner, tokens_field, tags_field, tags)
    elif name.endswith(JSON_SUFFIXES):
        rows = read_tagged_jsonl(path, owner, tokens_field, tags_field, tags)
    elif name.endswith(CONLL_SUFFIXES) or not path.is_file():  # (missing: numbered_lines says so)
        rows = read_conll(path, owner, tags)
    else:
        raise DataError(f"{owner}: {path}: unknown format; use CoNLL-style token<TAB>tag lines "
                        f"({', '.join(CONLL_SUFFIXES)}) or JSON lines ({', '.join(JSON_SUFFIXES)}), "
                        f"optionally .gz")
    if not rows:
        raise DataError(f"{owner}: {path} holds no sentences (the file is empty or blank)")
    return random_subset(rows, limit, seed)


def tag_values(sentences: Sequence[Tagged], labels: Optional[Sequence[str]] = None) -> List[str]:
    """The tags, tag i the i-th: ``labels`` as given, else the sentences' tags sorted, ``O`` first."""
    if labels is not None:
        return list(labels)
    seen = {t for _, tags in sentences for t in tags}
    return sorted(seen, key=lambda t: (t != "O", t))


def write_conll(path: Path | str, sentences: Sequence[Tagged]) -> Path:
    """``token<TAB>tag`` lines, a blank line after each sentence (``.gz``: gzipped)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join("".join(f"{w}\t{t}\n" for w, t in zip(words, tags)) + "\n"
                   for words, tags in sentences)
    with (gzip.open(path, "wt", encoding="utf-8") if path.suffix == ".gz"
          else open(path, "w", encoding="utf-8")) as f:
        f.write(text)
    return path


def align_first_pieces(ids: Sequence[int], word_ids: Sequence[Optional[int]], tag_ids: np.ndarray,
                       max_len: int) -> Tuple[np.ndarray, np.ndarray, int]:
    """(``[CLS] pieces [SEP]`` ids, labels: ``tag_ids[i]`` on word i's first piece, ``IGNORE``
    elsewhere; both cut to ``max_len``; how many words lost their first piece to the cut).
    ``ids``/``word_ids`` are one sentence's encoding without special tokens."""
    n_words = len(tag_ids)
    w = np.asarray([-1 if x is None else x for x in word_ids], np.int64)
    ids = np.asarray(ids, np.int64)
    missing = np.setdiff1d(np.arange(n_words), w)
    if len(missing):  # words with no piece at all (only characters the normaliser drops): [UNK]
        at = np.searchsorted(w, missing)
        ids, w = np.insert(ids, at, UNK), np.insert(w, at, missing)
    first = np.ones(len(w), bool)
    first[1:] = w[1:] != w[:-1]
    labels = np.full(len(w), IGNORE, np.int64)
    labels[first] = np.asarray(tag_ids, np.int64)[w[first]]
    keep = max_len - 2
    cut = int(first[keep:].sum())
    ids = np.concatenate(([CLS], ids[:keep], [SEP])).astype(np.int64)
    labels = np.concatenate(([IGNORE], labels[:keep], [IGNORE])).astype(np.int64)
    return ids, labels, cut


def encode_tagged(tokenizer, words: Sequence[Sequence[str]], tag_ids: Sequence[np.ndarray],
                  max_len: int) -> Tuple[List[np.ndarray], List[np.ndarray], List[int]]:
    """Per sentence (ids, labels, words cut) of :func:`align_first_pieces`; the tokenizer runs
    over all sentences at once."""
    enc = tokenizer.encode_batch([list(w) for w in words], is_pretokenized=True,
                                 add_special_tokens=False)
    out = [align_first_pieces(e.ids, e.word_ids, t, max_len) for e, t in zip(enc, tag_ids)]
    return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]


def collate_tagged(items: Sequence[tuple]) -> dict:
    """Pad ``(ids, labels)`` pairs into a batch: ``input_ids``, ``segment_ids`` (zeros),
    ``attention_mask`` and ``labels`` (B, T), ``IGNORE`` past each sentence."""
    ids, real = pad_rows([i for i, _ in items])
    labels, _ = pad_rows([y for _, y in items], IGNORE)
    return {"input_ids": torch.from_numpy(ids), "segment_ids": torch.zeros(ids.shape, dtype=torch.long),
            "attention_mask": torch.from_numpy(real), "labels": torch.from_numpy(labels)}
