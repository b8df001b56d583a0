"""Hugging Face tokenizers for the data modules that otherwise build their own vocabulary
(documents, translation): ``data.tokenizer_from=hf:<dir|hub id>``, a folder (found as
:func:`~attnflow.models.bert_hf.checkpoint_dir` finds checkpoints) with a ``tokenizer.json`` of any
model (WordPiece, BPE, Unigram, WordLevel), or BERT's ``vocab.txt``. A family's batches and
models take its special tokens at ids 0, 1, …, so those come first: the folder's own where
``special_tokens_map.json`` or ``tokenizer_config.json`` names them (``pad_token``, ``bos_token``
or ``cls_token``, …), else added; the other tokens follow in their order. The vocabulary size is
the tokenizer's (with the tokens added).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from attnflow.config.registry import ConfigError
from attnflow.data.errors import DataError
from attnflow.models import bert_hf

# a role -> the keys of HF's tokenizer configs that name its token, in preference order
ROLES = {"pad": ("pad_token",), "unk": ("unk_token",), "bos": ("bos_token", "cls_token"),
         "eos": ("eos_token", "sep_token")}
_DICT_VOCAB = ("WordPiece", "BPE", "WordLevel")  # models whose vocab is {token: id}


def bert_text_rules(folder: Path, at: str) -> tuple:
    """(normaliser, pre-tokeniser) of BERT as ``tokenizer_config.json`` says (lower case, accents)."""
    conf = folder / "tokenizer_config.json"
    conf = bert_hf.read_json(conf, at) if conf.is_file() else {}
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=conf.get("tokenize_chinese_chars", True),
        strip_accents=conf.get("strip_accents"), lowercase=conf.get("do_lower_case", True))
    return normalizer, pre_tokenizers.BertPreTokenizer()


def folder_tokenizer(folder: Path, at: str) -> Tokenizer:
    """The folder's ``tokenizer.json`` as saved; else a BERT WordPiece of its ``vocab.txt``."""
    if (folder / "tokenizer.json").is_file():
        try:
            return Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as err:  # noqa: BLE001 — the tokenizers library's parse errors: one line
            raise DataError(f"{at}: cannot read {folder / 'tokenizer.json'}: {err}") from None
    if not (folder / "vocab.txt").is_file():
        raise ConfigError(f"{at}: {folder} holds neither tokenizer.json nor vocab.txt")
    tokens = bert_hf.vocabulary(folder, at)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]",
                                     continuing_subword_prefix="##"))
    tok.normalizer, tok.pre_tokenizer = bert_text_rules(folder, at)
    tok.decoder = decoders.WordPiece()
    return tok


def named_specials(folder: Path, at: str) -> Dict[str, str]:
    """{role: token} that ``special_tokens_map.json``, else ``tokenizer_config.json``, names."""
    named: Dict[str, str] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        conf = bert_hf.read_json(folder / name, at) if (folder / name).is_file() else {}
        for role, keys in ROLES.items():
            values = [conf.get(k) for k in keys]
            values = [v.get("content") if isinstance(v, dict) else v for v in values]
            token = next((v for v in values if isinstance(v, str) and v), None)
            if token and role not in named:
                named[role] = token
    return named


def _set_model_vocab(model: dict, ids: Dict[str, int]) -> None:
    """The model's vocabulary as ``ids`` (every token of it; a token new to a Unigram model gets
    a score below all others, so that it is not chosen over them)."""
    if model.get("type") in _DICT_VOCAB:
        model["vocab"] = ids
    elif model.get("type") == "Unigram":
        scores = {piece: score for piece, score in model["vocab"]}
        low = min(scores.values(), default=0.0) - 10.0
        unk = _model_unk(model)
        model["vocab"] = [[t, scores.get(t, low)] for t in sorted(ids, key=ids.get)]
        model["unk_id"] = ids[unk] if unk is not None else None
    else:
        raise DataError(f"a {model.get('type')} tokenizer model: attnflow reorders WordPiece, BPE, "
                        f"Unigram and WordLevel ones")


def specials_first(tok: Tokenizer, first: Sequence[str]) -> Tokenizer:
    """``tok`` with the tokens ``first`` at ids 0, 1, … (those it lacks added as special tokens)
    and its other tokens after them in their order; it splits text as before. Its post-processor,
    padding and truncation are dropped (they name ids; the data modules add their own)."""
    data = json.loads(tok.to_str())
    full = tok.get_vocab(with_added_tokens=True)
    for token in first:
        if token not in full:
            full[token] = max(full.values(), default=-1) + 1
            data["added_tokens"].append({"id": full[token], "content": token, "single_word": False,
                                         "lstrip": False, "rstrip": False, "normalized": False,
                                         "special": True})
    heads = [full[t] for t in first]
    new = {old: i for i, old in enumerate(heads + sorted(set(full.values()) - set(heads)))}
    _set_model_vocab(data["model"], {t: new[i] for t, i in full.items()})
    for added in data["added_tokens"]:
        added["id"] = new[added["id"]]
    data["post_processor"] = data["padding"] = data["truncation"] = None
    out = Tokenizer.from_str(json.dumps(data))
    assert [out.token_to_id(t) for t in first] == list(range(len(first))), "specials not first"
    return out


def check_target(target: Optional[str], at: str) -> Optional[str]:
    """``tokenizer_from`` of a data module that reads only HF tokenizers: null or ``hf:…``."""
    if target and not bert_hf.is_hf(target):
        raise ConfigError(f"{at}={target}: give hf:<folder or Hub id> (a Hugging Face tokenizer); "
                          f"this data builds its own vocabulary otherwise")
    return target or None


def load_hf_tokenizer(target: str, roles: Sequence[Tuple[str, str]], at: str) -> Tokenizer:
    """The tokenizer of ``hf:<dir|hub id>`` with ``roles`` ((role, attnflow's token) in id order:
    ``[("pad", "<pad>"), ("unk", "<unk>")]``) first, each the folder's own token for the role
    where it names one (the model's unknown token for ``unk``), else attnflow's, added."""
    check_target(target, at)
    folder = bert_hf.checkpoint_dir(target, at)
    tok = folder_tokenizer(folder, at)
    named = named_specials(folder, at)
    unk = _model_unk(json.loads(tok.to_str())["model"])  # (what the model gives: at the unk id)
    named.update({"unk": unk} if unk else {})
    first: List[str] = []
    for role, own in roles:  # a token named for two roles (GPT-2's bos = eos) serves the first
        first.append(named[role] if named.get(role) and named[role] not in first else own)
    try:
        return specials_first(tok, first)
    except DataError as err:
        raise DataError(f"{at}: {folder}: {err}") from None


def _model_unk(model: dict):
    """The token a tokenizer model gives for what it cannot split, or None."""
    if model.get("type") == "Unigram" and model.get("unk_id") is not None:
        return model["vocab"][model["unk_id"]][0]
    return model.get("unk_token")
