"""BERT's corpus and tokenizer (Devlin et al. 2019): documents from ``.jsonl``/``.txt`` files, and
a WordPiece tokenizer with the special tokens at ids 0–4 (trained here, or an HF checkpoint's
vocabulary in that order: :mod:`attnflow.models.bert_hf`), saved with the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from tokenizers import Tokenizer, decoders, models, processors, trainers

from attnflow.data.base import random_subset
from attnflow.data.documents import clean, split_sentences
from attnflow.data.parallel import new_tokenizer
from attnflow.data.hf_datasets import HFSplit
from attnflow.data.tables import read_table, source, table_format
from attnflow.data.errors import DataError, numbered_lines
from attnflow.data.hf_tokenizers import bert_text_rules
from attnflow.io.checkpoints import CheckpointError, find_checkpoint, read_checkpoint
from attnflow.io.text import atomic_path
from attnflow.models import bert_hf

OWNER = "data 'bert_pretraining'"
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = list(bert_hf.SPECIALS)
TOKENIZER_FILE = "wordpiece.json"


def read_documents(path: Path | HFSplit, text_field: str = "text", documents: str = "line",
                   limit: int = 0, seed: int = 0) -> List[str]:
    """Raw document texts of a corpus file (see the module docstring) or an HF split's
    ``text_field``; ``limit``: a seeded random subset of N documents (0 = all). Empty documents
    are dropped; a file with none is an error."""
    path = source(path)
    if isinstance(path, HFSplit) or table_format(path):
        texts = [t for t, _ in read_table(path, text_field, None, owner=OWNER)]
    elif path.name.endswith((".txt", ".txt.gz")):
        lines = [line for _, line in numbered_lines(path, OWNER)]
        if documents == "line":
            texts = lines
        else:  # paragraphs: runs of non-blank lines, each line break kept as a sentence break
            texts, current = [], []
            for line in lines + [""]:
                if line.strip():
                    current.append(line)
                elif current:
                    texts.append("\n".join(current))
                    current = []
    else:
        raise DataError(f"{OWNER}: {path}: unknown corpus format; use .txt, .jsonl, .csv, .tsv "
                        f"(optionally .gz) or .parquet files")
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise DataError(f"{OWNER}: {path} holds no documents (empty or blank)")
    return random_subset(texts, limit, seed)


def sentences_of(text: str) -> List[str]:
    """The sentences of a document after markup removal (documents.py's cleaner and splitter)."""
    return split_sentences(clean(text))


def train_wordpiece(texts: Sequence[str], vocab_size: int, lowercase: bool = True):
    """A WordPiece tokenizer (Schuster & Nakajima 2012) trained on ``texts``, BERT's specials at
    ids 0–4; not bit-reproducible (HF breaks ties in hash order), hence saved with the run."""
    tok = new_tokenizer("wordpiece", lowercase)  # NFKC (+ lower case), Metaspace + punctuation
    tok.model = models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##")
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False))
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, f"special token {s} should have id {i}"
    return tok


def hf_tokenizer(target: str, at: str):
    """The WordPiece tokenizer of the HF checkpoint ``hf:…``, its vocabulary in attnflow's order
    (:func:`~attnflow.models.bert_hf.specials_first`): ``tokenizer.json``'s normaliser and
    pre-tokeniser, else BERT's with lower-casing and accents as ``tokenizer_config.json`` says."""
    folder = bert_hf.checkpoint_dir(target, at)
    tokens = bert_hf.vocabulary(folder, at)
    vocab = {tokens[old]: new for new, old in enumerate(bert_hf.specials_first(tokens, f"{at}: {folder}"))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    if (folder / "tokenizer.json").is_file():
        saved = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.normalizer, tok.pre_tokenizer = saved.normalizer, saved.pre_tokenizer
    else:
        tok.normalizer, tok.pre_tokenizer = bert_text_rules(folder, at)
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(SPECIALS)
    return tok


def load_tokenizer(source: str, owner: str):
    """The WordPiece tokenizer saved by the pretraining run ``source`` (a run directory or a
    checkpoint file): ``<run>/tokenizer/wordpiece.json``, else the checkpoint's artifacts; or an
    HF checkpoint's (``hf:…``, :func:`hf_tokenizer`)."""
    where = f"{owner}: tokenizer_from={source}"
    if bert_hf.is_hf(source):
        return hf_tokenizer(source, where)
    path = Path(source)
    tok = run_tokenizer(path) if path.is_dir() else None
    if tok is None:
        try:
            ckpt_path, run_dir = find_checkpoint(path)
            text = (read_checkpoint(ckpt_path).get("attnflow_artifacts") or {}).get("tokenizer")
        except CheckpointError as err:
            raise DataError(f"{where}: {err}") from None
        if not isinstance(text, str) or not text:
            raise DataError(f"{where}: {ckpt_path} carries no tokenizer (a checkpoint of a "
                            f"bert_pretraining run does) and {run_dir / 'tokenizer' / TOKENIZER_FILE} "
                            f"is missing")
        tok = Tokenizer.from_str(text)
    check_specials(tok, where)
    return tok


def bert_tokenizer(run_dir, tokenizer_from: Optional[str], owner: str,
                   training_texts: Callable[[], Sequence[str]], vocab_size: int, lowercase: bool):
    """This run's saved tokenizer (resume), else ``tokenizer_from``'s (a run or ``hf:…``), else
    a WordPiece trained on ``training_texts()``; saved with the run."""
    tok = run_tokenizer(run_dir) if run_dir else None
    if tok is None and tokenizer_from:
        tok = load_tokenizer(tokenizer_from, owner)
    elif tok is None:
        tok = train_wordpiece(training_texts(), vocab_size, lowercase)
    if run_dir:
        save_tokenizer(tok, run_dir)
    return tok


class WordPieceData:
    """What a data module reading text with BERT's WordPiece shares: its tokenizer
    (:func:`bert_tokenizer` of ``run_dir``, ``tokenizer_from``, ``vocab``, ``lowercase`` and
    :meth:`training_texts`), saved with the run; inputs of at most ``max_len`` positions; for a
    labelled one (:meth:`class_list`) the model's and task's sizes and classes, and its splits
    (``rows`` from ``read``, encoded by ``_encode``)."""

    length_field = "max_len"  # (counts [CLS] and [SEP]: every position of an input)

    tokenizer = None

    def training_texts(self) -> List[str]:
        raise NotImplementedError

    def class_list(self) -> list:
        """The classes, read from the files (labelled data)."""
        raise NotImplementedError

    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions a model is given, and why (``{at}``: the data config's path)."""
        return fields["max_len"], f"{{at}}max_len={fields['max_len']}"

    def model_context(self) -> dict:
        classes = self.class_list()
        self.prepare_tokenizer()
        return {"vocab_size": self.tokenizer.get_vocab_size(), "pad_id": PAD,
                "num_classes": len(classes)}

    def label_names(self) -> Optional[List[str]]:
        return [str(v) for v in self.class_list()]

    def task_context(self) -> dict:
        names = self.label_names()
        return {"num_classes": len(names), "class_names": names}

    def setup(self, stage: Optional[str] = None) -> None:
        """Every split's rows read (``read``) and encoded (``_encode``) once."""
        self.read()
        self.prepare_tokenizer()
        for split, rows in self.rows.items():
            if split not in self.splits:
                self.splits[split] = self._encode(split, rows)

    def prepare_tokenizer(self) -> None:
        if self.tokenizer is None:
            self.tokenizer = bert_tokenizer(self.run_dir, self.tokenizer_from, self.owner,
                                            self.training_texts, self.vocab, self.lowercase)

    def save_artifacts(self, run_dir) -> Path:
        self.prepare_tokenizer()
        return save_tokenizer(self.tokenizer, run_dir)


def check_specials(tok, where: str) -> None:
    """BERT's special tokens at the ids the model was trained with (:data:`SPECIALS`)."""
    wrong = [f"{s} (id {tok.token_to_id(s)})" for i, s in enumerate(SPECIALS) if tok.token_to_id(s) != i]
    if wrong:
        raise DataError(f"{where}: not a BERT WordPiece tokenizer: expected "
                        f"{', '.join(f'{s}={i}' for i, s in enumerate(SPECIALS))}; got {', '.join(wrong)}")


def run_tokenizer(run_dir, artifacts: Optional[dict] = None, owner: Optional[str] = None):
    """The tokenizer saved with a run (``tokenizer/wordpiece.json``), else the one its checkpoint's
    ``artifacts`` carry; without either None, or with ``owner`` an error naming it."""
    saved = Path(run_dir) / "tokenizer" / TOKENIZER_FILE
    if saved.is_file():
        return Tokenizer.from_file(str(saved))
    if (artifacts or {}).get("tokenizer"):
        return Tokenizer.from_str(artifacts["tokenizer"])
    if owner:
        raise ValueError(f"{owner}: the run has no tokenizer ({saved} is missing and its "
                         f"checkpoint carries none)")
    return None


def save_tokenizer(tokenizer, run_dir) -> Path:
    """``<run_dir>/tokenizer/wordpiece.json``, written atomically (every DDP rank writes it)."""
    path = Path(run_dir) / "tokenizer" / TOKENIZER_FILE
    with atomic_path(path) as tmp:
        tokenizer.save(str(tmp))
    return path


def save_hf_tokenizer(tokenizer, folder: Path, max_len: int) -> None:
    """``tokenizer.json`` (with BERT's ``[CLS] A [SEP] B [SEP]`` template), ``vocab.txt`` and
    ``tokenizer_config.json`` in ``folder``: what transformers' ``AutoTokenizer`` reads, encoding
    as the run does (after the data modules' markup removal, which it does not do)."""
    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)])
    tok.save(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab()
    (folder / "vocab.txt").write_text("\n".join(sorted(vocab, key=vocab.get)) + "\n", encoding="utf-8")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
              **{f"{s.strip('[]').lower()}_token": s for s in SPECIALS},
              "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
