"""Parallel text: line-aligned files, per split a stem (``<root>/<stem>.<lang>[.gz]``, Multi30k's
layout), a pattern with ``{lang}`` (``corpus/train-{lang}.txt``) or two files ``[source,
target]`` (these two relative to the working directory, else to ``root``); subword
tokenisation and length-bucketed batches. Tokenizers: NFKC (optionally lower case), Metaspace +
punctuation (decoding restores plain text for sacreBLEU), BPE (Sennrich et al. 2016) or WordPiece
trained on the training split (one for both sides with ``shared_vocab``), or a Hugging Face
tokenizer (``tokenizer_from=hf:…``, :mod:`attnflow.data.hf_tokenizers`), saved with the run. An HF
data set's splits (``hf_dataset``) may stand in for the files: a column of dicts keyed by
language (``translation_field``, WMT's ``translation``), else the columns named by the languages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from torch.utils.data import DataLoader

from attnflow.data.base import BOS, EOS, PAD, SplitDataModule, collate_seq2seq, eval_sampler
from attnflow.data.buckets import BucketBatchSampler, trainer_epoch
from attnflow.data.errors import DataError, DataFileNotFoundError, missing_data, numbered_lines
from attnflow.data.examples import example_indices
from attnflow.data.hf_datasets import DEFAULT_SPLITS, hf_source, translation_pairs
from attnflow.data.hf_tokenizers import check_target, load_hf_tokenizer
from attnflow.data.resumable import ResumableDataLoader
from attnflow.config.registry import DATA, ConfigError, NonNegativeInt, PositiveInt, Range
from attnflow.io.text import atomic_path

UNK = 3
OWNER = "data 'parallel'"
NO_TEST = f"{OWNER}: data.test is null, so there is no test split; run with test=false"
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
ROLES = tuple(zip(("pad", "bos", "eos", "unk"), SPECIALS))  # an HF tokenizer's tokens at ids 0–3


def split_files(root: Path, spec: Any, langs: Sequence[str], split: str) -> List[Path]:
    """(source file, target file) of a split's ``spec`` (module docstring)."""
    if spec is None:
        raise DataFileNotFoundError(f"data 'parallel': data.{split} is null; name its files")
    if isinstance(spec, (list, tuple)):
        named = list(spec)
    elif "{lang}" in spec:
        named = [spec.format(lang=lang) for lang in langs]
    else:
        return [find_file(root, spec, lang, split) for lang in langs]
    found = []
    for name in named:  # as given (the working directory), else under data.root
        path = next((p for p in (Path(name), root / name) if p.is_file()), None)
        if path is None:
            raise missing_data(OWNER, f"data.{split} names {name}, which is not a file (nor "
                                      f"{root / name})")
        found.append(path)
    return found


def check_split(split: str, spec: Any, root: str) -> None:
    """A split is a stem or ``{lang}`` pattern (a string), or two files; a stem needs ``root``."""
    pair = isinstance(spec, (list, tuple)) and len(spec) == 2 and all(isinstance(p, str) for p in spec)
    if not (pair or isinstance(spec, str) and spec):
        raise ConfigError(f"data 'parallel': data.{split}={spec!r} must be a file stem, a pattern "
                          f"with {{lang}}, or two files [source, target]")
    if not root and not pair and "{lang}" not in spec:
        raise ConfigError(f"data 'parallel': data.{split}={spec} is a file stem under data.root; "
                          f"set data.root (Multi30k: ${{paths.data_dir}}/multi30k)")


def find_file(root: Path, stem: str, lang: str, split: str) -> Path:
    for name in (f"{stem}.{lang}", f"{stem}.{lang}.gz"):
        if (root / name).is_file():
            return root / name
    raise missing_data(OWNER, f"missing file {root / f'{stem}.{lang}'}[.gz] (data.{split}={stem} "
                              f"under data.root={root}: line-aligned <data.root>/<stem>.<lang>[.gz])")


def new_tokenizer(kind: str, lowercase: bool):
    """An untrained HF tokenizer: NFKC (+ lower case), Metaspace + punctuation, BPE or WordPiece."""
    norm = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.decoder = decoders.Metaspace()
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="<unk>", continuing_subword_prefix="##"))
        # strip the continuation prefix, glue the pieces, turn ▁ back into spaces
        tok.decoder = decoders.Sequence([decoders.Replace("##", ""), decoders.Fuse(),
                                         decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}; use 'bpe' or 'wordpiece'")
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(),
                                                 pre_tokenizers.Punctuation()])
    return tok


def train_tokenizer(kind: str, texts: Sequence[str], vocab_size: int, lowercase: bool = False):
    tok = new_tokenizer(kind, lowercase)
    cls = trainers.BpeTrainer if kind == "bpe" else trainers.WordPieceTrainer
    tok.train_from_iterator(texts, cls(vocab_size=vocab_size, special_tokens=SPECIALS,
                                       show_progress=False))
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, f"special token {s} should have id {i}"
    return tok


def load_tokenizer(path: Path):
    return Tokenizer.from_file(str(path))


def collate(pairs: Sequence[tuple]) -> Dict[str, torch.Tensor]:
    """(line index, source ids, target ids) triples -> a padded batch; ``idx`` the lines."""
    batch = collate_seq2seq([s for _, s, _ in pairs], [t for _, _, t in pairs])
    batch["idx"] = torch.tensor([j for j, _, _ in pairs])
    return batch


@DATA.register("parallel")
class ParallelDataModule(SplitDataModule):
    """Line-aligned parallel text (module docstring): training pairs over ``max_src_len`` or
    ``max_tgt_len`` subwords are dropped, evaluation sources cut; ``max_decode_len`` 0:
    max_tgt_len + 2; ``max_pairs``: the first N pairs of each split (0: all); ``tokenizer_from``
    (``hf:<dir|hub id>``: ``tokenizer``, ``vocab_size`` and ``lowercase`` unread) and
    ``hf_dataset`` (the splits of ``hf_splits`` in place of the files) as the module docstring says."""

    source_fields = ("root", "train", "hf_dataset")

    run_fixed = ("src_lang", "tgt_lang", "shared_vocab")  # the model's direction and vocabularies

    interface = "seq2seq"  # sequence pairs: seq2seq/transformer models, seq2seq/translation tasks

    def __init__(self, *, root: str = "", src_lang: str = "de", tgt_lang: str = "en",
                 train: Any = "train", val: Any = "val", test: Any = "test_2016_flickr",
                 tokenizer: Literal["bpe", "wordpiece"] = "bpe",
                 vocab_size: Annotated[int, Range(ge=5, what="the 4 special tokens and more")] = 8000,
                 shared_vocab: bool = False, lowercase: bool = False,
                 max_src_len: PositiveInt = 100, max_tgt_len: PositiveInt = 100,
                 max_decode_len: NonNegativeInt = 0, batch_size: PositiveInt = 64,
                 max_pairs: NonNegativeInt = 0, num_workers: NonNegativeInt = 0, seed: int = 1234,
                 tokenizer_from: Optional[str] = None, hf_dataset: Optional[str] = None,
                 hf_config: Optional[str] = None, hf_splits: List[Optional[str]] = DEFAULT_SPLITS,
                 translation_field: str = "translation"):
        super().__init__()
        self.hf = hf_source(hf_dataset, hf_config, hf_splits, OWNER)
        for split, spec in (("train", train), ("val", val), ("test", test)):
            if (spec is not None or split != "test") and self.hf is None:
                check_split(split, spec, root)
        if src_lang == tgt_lang:
            raise ConfigError(f"data 'parallel': data.src_lang and data.tgt_lang are both "
                              f"{src_lang!r} (at 'data.tgt_lang'): a translation needs two languages")
        self.root, self.src_lang, self.tgt_lang = Path(root), src_lang, tgt_lang
        self.stems = {"train": train, "val": val, "test": test}
        self.kind, self.vocab, self.shared, self.lowercase = tokenizer, vocab_size, shared_vocab, lowercase
        self.max_src_len, self.max_tgt_len = max_src_len, max_tgt_len
        self.max_decode_len = max_decode_len or max_tgt_len + 2
        self.batch_size, self.max_pairs, self.num_workers, self.seed = batch_size, max_pairs, num_workers, seed
        self.tokenizer_from = check_target(tokenizer_from, f"{OWNER}: tokenizer_from")
        self.translation_field = translation_field
        self.run_dir: Optional[Path] = None
        self.src_tok = self.tgt_tok = None
        self.text: Dict[str, tuple] = {}  # split -> (source lines, target lines)
        self.splits: Dict[str, list] = {}  # split -> [(line, src ids, tgt ids)]

    def tokenizer_files(self, folder: Path) -> Dict[str, Path]:
        if self.shared:
            return {"src": folder / "shared.json", "tgt": folder / "shared.json"}
        return {"src": folder / f"{self.src_lang}.json", "tgt": folder / f"{self.tgt_lang}.json"}

    def load_tokenizers(self, folder, artifacts: Optional[dict] = None) -> None:
        """The run's tokenizers: the files in ``folder``, else the checkpoint's ``artifacts``."""
        files = self.tokenizer_files(Path(folder))
        missing = [str(p) for p in files.values() if not p.is_file()]
        if not missing:
            self.src_tok, self.tgt_tok = load_tokenizer(files["src"]), load_tokenizer(files["tgt"])
            return
        saved = (artifacts or {}).get("tokenizers")
        if not (isinstance(saved, dict) and all(isinstance(saved.get(k), str) for k in ("src", "tgt"))):
            raise FileNotFoundError(f"data 'parallel': no tokenizer file {', '.join(missing)}, and "
                                    f"the checkpoint carries no tokenizers (attnflow_artifacts)")
        self.src_tok = Tokenizer.from_str(saved["src"])
        self.tgt_tok = self.src_tok if self.shared else Tokenizer.from_str(saved["tgt"])

    def artifacts(self) -> dict:
        """The tokenizers as JSON text (stored in every checkpoint)."""
        self.prepare_tokenizers()
        return {"tokenizers": {"src": self.src_tok.to_str(), "tgt": self.tgt_tok.to_str()}}

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """The run's tokenizers and ``split`` only (attnflow-eval)."""
        self.load_tokenizers(Path(run_dir) / "tokenizer", artifacts)
        self.splits = {s: [] for s in ("train", "val", "test")}  # setup() reads none of them
        self.splits[split] = self._encode(split)

    def split_text(self, split: str) -> tuple:
        """(source lines, target lines) of a split as read (after ``max_pairs``), cached."""
        if split not in self.text:
            src, tgt = self.read_split(split) if self.hf is None else self.read_hf_split(split)
            if self.max_pairs:
                src, tgt = src[: self.max_pairs], tgt[: self.max_pairs]
            self.text[split] = (src, tgt)
        return self.text[split]

    def read_split(self, split: str) -> tuple:
        """(source lines, target lines) of a split's two files, checked line-aligned."""
        files = split_files(self.root, self.stems[split], (self.src_lang, self.tgt_lang), split)
        src, tgt = ([line for _, line in numbered_lines(f, "data 'parallel'")] for f in files)
        for f, lines in zip(files, (src, tgt)):
            if not any(line.strip() for line in lines):  # else a run trains on nothing, exit 0
                raise DataError(f"data 'parallel': {f} is empty ({len(lines)} lines, none with "
                                f"text); the {split} split needs one sentence per line")
        if len(src) != len(tgt):
            raise DataError(f"data 'parallel': {files[0]} has {len(src)} lines but {files[1]} "
                            f"has {len(tgt)}; files must be line-aligned")
        return src, tgt

    def read_hf_split(self, split: str) -> tuple:
        """(source texts, target texts) of the HF data set's split (:func:`translation_pairs`)."""
        source = self.hf.split(split)
        if source is None:
            raise DataError(self.missing_test())
        pairs = translation_pairs(source, self.translation_field, (self.src_lang, self.tgt_lang))
        for lang, texts in zip((self.src_lang, self.tgt_lang), pairs):
            if not any(t.strip() for t in texts):
                raise DataError(f"{OWNER}: {source} has no {lang} text ({len(texts)} rows)")
        return pairs

    def prepare_tokenizers(self) -> None:
        """Load the run's tokenizers if saved, else train them on the training split (and save)."""
        if self.src_tok is not None:
            return
        folder = self.run_dir / "tokenizer" if self.run_dir else None
        if folder and all(p.is_file() for p in self.tokenizer_files(folder).values()):
            return self.load_tokenizers(folder)
        src, tgt = self.split_text("train")
        self.split_text("val")  # a bad file fails now, not after training (test: missing_test)
        if self.tokenizer_from:  # both sides: the one tokenizer, ⟨pad⟩ ⟨bos⟩ ⟨eos⟩ ⟨unk⟩ first
            self.src_tok = self.tgt_tok = load_hf_tokenizer(self.tokenizer_from, ROLES,
                                                            f"{OWNER}: tokenizer_from")
        elif self.shared:
            self.src_tok = self.tgt_tok = train_tokenizer(self.kind, src + tgt, self.vocab, self.lowercase)
        else:
            self.src_tok = train_tokenizer(self.kind, src, self.vocab, self.lowercase)
            self.tgt_tok = train_tokenizer(self.kind, tgt, self.vocab, self.lowercase)
        if folder:
            folder.mkdir(parents=True, exist_ok=True)
            files = self.tokenizer_files(folder)
            for tok, path in ((self.src_tok, files["src"]), (self.tgt_tok, files["tgt"])):
                with atomic_path(path) as tmp:
                    tok.save(str(tmp))

    @classmethod
    def one_vocabulary(cls, fields: Mapping[str, Any]) -> bool:
        """Whether source and target share one vocabulary, as tied embeddings need."""
        return bool(fields["shared_vocab"])

    @classmethod
    def longest_source_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions an encoder is given, and why (``{at}``: the data config's path)."""
        return fields["max_src_len"], f"{{at}}max_src_len={fields['max_src_len']}"

    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Tuple[int, str]:
        """The most positions a sequence model is given, and why."""
        src, tgt = fields["max_src_len"], fields["max_tgt_len"]
        decode = fields["max_decode_len"] or tgt + 2
        why = (f"{{at}}max_src_len={src}, {{at}}max_tgt_len={tgt} (+ ⟨bos⟩), outputs decoded to "
               f"{decode} ({{at}}max_decode_len)")
        return max(src, tgt + 1, decode), why

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        return {"src_vocab": fields["vocab_size"], "tgt_vocab": fields["vocab_size"], "pad_id": PAD}

    def model_context(self) -> dict:
        self.prepare_tokenizers()
        return {"src_vocab": self.src_tok.get_vocab_size(), "tgt_vocab": self.tgt_tok.get_vocab_size(),
                "pad_id": PAD}

    def task_context(self) -> dict:
        self.prepare_tokenizers()
        tgt_itos = [self.tgt_tok.id_to_token(i) for i in range(self.tgt_tok.get_vocab_size())]
        src_itos = [self.src_tok.id_to_token(i) for i in range(self.src_tok.get_vocab_size())]
        return {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "max_decode_len": self.max_decode_len,
                "itos": tgt_itos, "src_itos": src_itos, "detokenize": self.detokenize,
                "references": self.references}

    def encode_source(self, lines: Sequence[str]) -> List[List[int]]:
        self.prepare_tokenizers()
        return [e.ids[: self.max_src_len] for e in self.src_tok.encode_batch(list(lines))]

    def detokenize(self, ids: Sequence[int]) -> str:
        """Target ids (specials skipped, cut at the first ⟨eos⟩) -> plain text."""
        ids = list(ids)
        if EOS in ids:
            ids = ids[: ids.index(EOS)]
        return self.tgt_tok.decode([i for i in ids if i >= len(SPECIALS) or i == UNK],
                                   skip_special_tokens=False).strip()

    def references(self, split: str, idx: Sequence[int]) -> List[str]:
        """The untokenised target lines of a split by line number."""
        tgt = self.split_text(split)[1]
        return [tgt[i] for i in idx]

    def _encode(self, split: str) -> list:
        """[(line, source ids, target ids)]: training pairs too long or empty dropped, every
        evaluation pair kept, its source cut."""
        src, tgt = self.split_text(split)
        pairs = enumerate(zip((e.ids for e in self.src_tok.encode_batch(src)),
                              (e.ids for e in self.tgt_tok.encode_batch(tgt))))
        if split != "train":
            return [(i, s[: self.max_src_len], t) for i, (s, t) in pairs]
        out = [(i, s, t) for i, (s, t) in pairs
               if 0 < len(s) <= self.max_src_len and 0 < len(t) <= self.max_tgt_len]
        if not out:
            raise DataError(f"data 'parallel': no training pair of data.{split}={self.stems[split]} "
                            f"fits max_src_len={self.max_src_len} and max_tgt_len={self.max_tgt_len} "
                            f"subwords; raise them")
        return out

    def setup(self, stage: Optional[str] = None) -> None:
        """The tokenizers, the training and validation pairs; the test pairs when tested (a run
        with test=false reads no test file)."""
        self.prepare_tokenizers()
        for split in ("train", "val", "test") if stage == "test" else ("train", "val"):
            self.encoded(split)

    def encoded(self, split: str) -> list:
        """The pairs of a split (:meth:`_encode`), encoded once."""
        self.prepare_tokenizers()
        if split not in self.splits:
            self.splits[split] = self._encode(split)
        return self.splits[split]

    def missing_test(self) -> Optional[str]:
        """No test split (``data.test=null``, or no such split of the HF data set): why; else its
        files are read and checked now."""
        if self.hf is not None:
            test = self.hf.split("test")
            if test is None or not test.exists():
                why = "data.hf_splits names none" if test is None else f"{test} is absent"
                return f"{OWNER}: no test split ({why}); run with test=false"
        elif self.stems["test"] is None:
            return NO_TEST
        self.split_text("test")
        return None

    @classmethod
    def check_files(cls, fields: Mapping[str, Any], test: bool = True) -> None:
        """Every file of the splits a run reads is there (nothing read): before a sweep's first job."""
        if fields["hf_dataset"]:
            return
        if test and fields["test"] is None:
            raise ConfigError(NO_TEST)
        langs = (fields["src_lang"], fields["tgt_lang"])
        for split in ("train", "val", "test") if test else ("train", "val"):
            split_files(Path(fields["root"]), fields[split], langs, split)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        data = self.encoded(split)
        sizes = [len(s) + len(t) / 1000 for _, s, t in data]
        if not shuffle and eval_sampler(data) is not None:  # DDP evaluation: each pair once, on
            # one rank (Lightning's sampler would repeat pairs to even out the ranks)
            view = [data[i] for i in sorted(range(len(data)), key=sizes.__getitem__)]
            return DataLoader(view, batch_size=self.batch_size, sampler=eval_sampler(view),
                              collate_fn=collate, num_workers=self.num_workers)
        sampler = BucketBatchSampler(sizes, self.batch_size, shuffle, self.seed, epoch=trainer_epoch(self))
        return (ResumableDataLoader if shuffle else DataLoader)(
            data, batch_sampler=sampler, collate_fn=collate, num_workers=self.num_workers)

    def text_batch(self, lines: Sequence[str]) -> Dict[str, torch.Tensor]:
        """``source<TAB>reference`` lines as a batch: the source cut as evaluation cuts it, the
        reference the target (attention compared teacher-forced on it)."""
        pairs = [line.split("\t", 1) for line in lines]
        for n, pair in enumerate(pairs, 1):
            if len(pair) != 2 or not pair[0].strip() or not pair[1].strip():
                raise DataError(f"text {n}: give 'source<TAB>reference' (the attention is "
                                f"taken teacher-forced on the reference)")
        self.prepare_tokenizers()
        src = self.encode_source([s for s, _ in pairs])
        tgt = [e.ids for e in self.tgt_tok.encode_batch([t for _, t in pairs])]
        return collate([(i, s, t) for i, (s, t) in enumerate(zip(src, tgt))])

    def example_batch(self, n: int, split: str = "val",
                      ids: Optional[Sequence[int]] = None) -> Dict[str, torch.Tensor]:
        """The first ``n`` pairs of a split (or ``ids``), as a batch (attention heat maps)."""
        pairs = self.encoded(split)
        return collate([pairs[i] for i in example_indices(len(pairs), n, ids)])
