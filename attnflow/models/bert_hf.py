"""Hugging Face BERT checkpoints and attnflow's ``bert``: architecture, tensor names, vocabulary.

A checkpoint is a directory with ``config.json``, the weights (``model.safetensors``, read with
safetensors, or ``pytorch_model.bin``, read weights-only) and the vocabulary (``vocab.txt`` or
``tokenizer.json``); ``hf:<dir>`` names one, ``hf:<id>`` one of the Hub (``huggingface_hub``,
which honours ``HF_HUB_OFFLINE``). Both models compute Devlin et al. 2019's BERT with the same
tensors (``bench/bert.py`` times them against each other).

attnflow keeps BERT's five special tokens at ids 0–4 (``SPECIALS``). An HF vocabulary is read in
that order — the specials first, every other token in its own order — and the token-embedding
rows and the MLM bias move with their tokens, so the model computes the same function of a text.
Export writes the vocabulary in attnflow's order.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from attnflow.config.registry import ConfigError

PREFIX = "hf:"
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
         "vocab.txt", "tokenizer.json", "tokenizer_config.json")
# per encoder layer: HF module -> attnflow module
LAYER = {"attention.self.query": "self_attn.q_proj", "attention.self.key": "self_attn.k_proj",
         "attention.self.value": "self_attn.v_proj",
         "attention.output.dense": "self_attn.aggregator.proj",
         "attention.output.LayerNorm": "norm1", "intermediate.dense": "ffn.linear1",
         "output.dense": "ffn.linear2", "output.LayerNorm": "norm2"}
MODULES = {"embeddings.word_embeddings": "token_embedding",
           "embeddings.position_embeddings": "positional",
           "embeddings.token_type_embeddings": "segment_embedding",
           "embeddings.LayerNorm": "embedding_norm", "pooler.dense": "pooler",
           "cls.predictions.transform.dense": "mlm_transform",
           "cls.predictions.transform.LayerNorm": "mlm_norm",
           "cls.predictions.decoder": "mlm_decoder", "cls.seq_relationship": "nsp",
           "classifier": "classifier"}
TENSORS = {"cls.predictions.bias": "mlm_decoder.bias"}
_HF_LAYER = {v: k for k, v in LAYER.items()}  # attnflow -> HF, for export
_HF_MODULES = {v: k for k, v in MODULES.items()}
# config.json fields whose other values attnflow's bert does not compute
REQUIRED = {"model_type": ("bert",), "position_embedding_type": ("absolute",),
            "hidden_act": ("gelu", "relu"), "is_decoder": (False,), "add_cross_attention": (False,)}


def is_hf(target: Optional[str]) -> bool:
    return isinstance(target, str) and target.startswith(PREFIX)


def checkpoint_dir(target: str, at: str = "model.init_from") -> Path:
    """The local directory of ``hf:<dir>`` or ``hf:<hub id>`` (downloaded unless offline)."""
    name = target[len(PREFIX):]
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists() or name.startswith((".", "/", "~")) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        raise ConfigError(f"{at}={target}: no such directory (an HF checkpoint directory holds "
                          f"config.json, model.safetensors and vocab.txt)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ConfigError(f"{at}={target}: a Hub id needs huggingface_hub (pip install "
                          f"huggingface_hub); or give a local directory") from None
    try:
        return Path(snapshot_download(name, allow_patterns=list(FILES)))
    except Exception as err:  # noqa: BLE001 — offline, unknown id, network: one line
        offline = " (HF_HUB_OFFLINE is set and it is not in the cache)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise ConfigError(f"{at}={target}: not a local directory, and the Hub gave no "
                          f"checkpoint{offline}: {type(err).__name__}: {str(err).splitlines()[0]}") from None


def read_json(path: Path, at: str) -> Dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{at}: {path} is missing (an HF checkpoint directory holds it)") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{at}: cannot read {path}: {err}") from None


def architecture(folder: Path, at: str = "model.init_from") -> Dict[str, Any]:
    """attnflow ``bert`` fields of the checkpoint's ``config.json``; a value attnflow cannot
    compute is refused naming its field."""
    hf = read_json(folder / "config.json", at)
    for field, allowed in REQUIRED.items():
        value = hf.get(field, allowed[0] if field != "model_type" else None)
        if value not in allowed:
            raise ConfigError(f"{at}: {folder / 'config.json'} has {field}={value!r}; attnflow's "
                              f"bert computes {' or '.join(map(repr, allowed))}")
    dropout = hf.get("hidden_dropout_prob", 0.1)
    positions = hf.get("max_position_embeddings", 512)
    return {"d_model": hf["hidden_size"], "layers": hf["num_hidden_layers"],
            "ffn_dim": hf["intermediate_size"], "activation": hf.get("hidden_act", "gelu"),
            "dropout": dropout, "max_len": positions, "type_vocab_size": hf.get("type_vocab_size", 2),
            "norm": "post", "norm_eps": hf.get("layer_norm_eps", 1e-12),
            "init_std": hf.get("initializer_range", 0.02),
            "classifier_dropout": hf.get("classifier_dropout") or dropout,
            "attention": {"name": "multihead", "heads": hf["num_attention_heads"],
                          "dropout": hf.get("attention_probs_dropout_prob", 0.1),
                          "scorer": {"name": "scaled_dot"}, "normalizer": {"name": "softmax"},
                          "aggregator": {"name": "concat_proj"}},
            "positional": {"name": "learned", "max_len": positions}}


def vocabulary(folder: Path, at: str = "model.init_from") -> List[str]:
    """The tokens in the checkpoint's id order (``vocab.txt``, else ``tokenizer.json``)."""
    if (folder / "vocab.txt").is_file():
        return (folder / "vocab.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")
    model = read_json(folder / "tokenizer.json", at).get("model") or {}
    if model.get("type") != "WordPiece":
        raise ConfigError(f"{at}: {folder / 'tokenizer.json'} is a {model.get('type')} tokenizer, "
                          f"not BERT's WordPiece, and there is no vocab.txt")
    vocab = model["vocab"]
    return sorted(vocab, key=vocab.get)


def specials_first(tokens: List[str], where: str) -> List[int]:
    """attnflow's id order as checkpoint ids: ``order[i]`` is the checkpoint id of token i."""
    index = {t: i for i, t in enumerate(tokens)}
    missing = [s for s in SPECIALS if s not in index]
    if missing:
        raise ConfigError(f"{where}: the vocabulary lacks {', '.join(missing)}; BERT's needs "
                          f"{', '.join(SPECIALS)}")
    first = [index[s] for s in SPECIALS]
    rest = sorted(set(range(len(tokens))) - set(first))
    return first + rest


def read_weights(folder: Path, at: str = "model.init_from") -> Dict[str, torch.Tensor]:
    """The checkpoint's tensors, by HF name (``gamma``/``beta`` of old checkpoints renamed)."""
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(read_json(index, at)["weight_map"].values()))
        state = {k: v for s in shards for k, v in load_file(folder / s).items()}
    elif (folder / "model.safetensors").is_file():
        state = load_file(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").is_file():
        try:
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 — a pickle weights-only refuses
            raise ConfigError(f"{at}: {folder / 'pytorch_model.bin'} is not a weights-only "
                              f"file: {str(err).splitlines()[0]}") from None
    else:
        raise ConfigError(f"{at}: {folder} has no model.safetensors or pytorch_model.bin")
    return {re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", k)): v for k, v in state.items()}


def attnflow_name(hf_name: str) -> Optional[str]:
    """The attnflow ``bert`` tensor HF's ``hf_name`` holds (``bert.`` prefix or not); None for
    none (``position_ids`` buffers, another model's head)."""
    name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    if name in TENSORS:
        return TENSORS[name]
    m = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", name)
    if m and m.group(2) in LAYER:
        return f"encoder.layers.{m.group(1)}.{LAYER[m.group(2)]}.{m.group(3)}"
    m = re.fullmatch(r"(.+)\.(weight|bias)", name)
    return f"{MODULES[m.group(1)]}.{m.group(2)}" if m and m.group(1) in MODULES else None


def to_attnflow(state: Dict[str, torch.Tensor], order: List[int]) -> Dict[str, torch.Tensor]:
    """HF tensors under attnflow names, vocabulary rows in attnflow's order (:func:`specials_first`)."""
    out = {}
    for name, tensor in state.items():
        ours = attnflow_name(name)
        if ours in ("token_embedding.weight", "mlm_decoder.weight", "mlm_decoder.bias"):
            tensor = tensor[order]
        if ours is not None:
            out[ours] = tensor
    if "mlm_transform.weight" in out and "token_embedding.weight" in out:  # tied (HF saves it once)
        out.setdefault("mlm_decoder.weight", out["token_embedding.weight"])
    return out


def hf_name(attnflow_name_: str, prefix: str = "bert.") -> Optional[str]:
    """The HF tensor of attnflow's ``bert`` tensor (inverse of :func:`attnflow_name`)."""
    if attnflow_name_ == "mlm_decoder.bias":
        return "cls.predictions.bias"
    m = re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)", attnflow_name_)
    if m:
        layer = _HF_LAYER.get(m.group(2))
        return f"{prefix}encoder.layer.{m.group(1)}.{layer}.{m.group(3)}" if layer else None
    m = re.fullmatch(r"(.+)\.(weight|bias)", attnflow_name_)
    module = _HF_MODULES.get(m.group(1)) if m else None
    if module is None:
        return None
    inside = module.startswith(("embeddings", "pooler", "encoder"))
    return f"{prefix if inside else ''}{module}.{m.group(2)}"


ARCHITECTURES = {"pretraining": "BertForPreTraining", "sequence": "BertForSequenceClassification",
                 "token": "BertForTokenClassification"}


def hf_config(model: Dict[str, Any], vocab_size: int, class_names: List[str]) -> Dict[str, Any]:
    """``config.json`` of a validated attnflow ``bert`` config (attention and positional
    validated too); a setting HF's BERT does not compute is refused naming it."""
    attention, head = model["attention"], model.get("head") or "pretraining"
    unlike = {"model.head": (head, tuple(ARCHITECTURES)), "model.norm": (model["norm"], ("post",)),
              "model.positional.name": (model["positional"]["name"], ("learned",)),
              "model.attention.name": (attention["name"], ("multihead",)),
              "model.attention.scorer.name": (attention["scorer"]["name"], ("scaled_dot",)),
              "model.attention.normalizer": (attention["normalizer"], ({"name": "softmax", "temperature": 1.0},)),
              "model.attention.aggregator.name": (attention["aggregator"]["name"], ("concat_proj",)),
              "model.attention.head_dim": (attention.get("head_dim"), (None, model["d_model"] // attention["heads"])),
              "model.attention.bias": (attention.get("bias", True), (True,)),
              "model.attention.shared_kv": (attention.get("shared_kv", False), (False,))}
    for field, (value, allowed) in unlike.items():
        if value not in allowed:
            raise ConfigError(f"{field}={value}: Hugging Face's BERT has "
                              f"{' or '.join(map(str, allowed))}")
    labels = {str(i): str(c) for i, c in enumerate(class_names)}
    return {"architectures": [ARCHITECTURES[head]], "model_type": "bert", "vocab_size": vocab_size,
            "hidden_size": model["d_model"], "num_hidden_layers": model["layers"],
            "num_attention_heads": attention["heads"], "intermediate_size": model["ffn_dim"],
            "hidden_act": model["activation"], "hidden_dropout_prob": model["dropout"],
            "attention_probs_dropout_prob": attention.get("dropout", 0.0),
            "max_position_embeddings": model["positional"]["max_len"],  # the table's rows
            "type_vocab_size": model["type_vocab_size"],
            "initializer_range": model["init_std"], "layer_norm_eps": model["norm_eps"],
            "pad_token_id": 0, "classifier_dropout": model["classifier_dropout"],
            "tie_word_embeddings": True, "position_embedding_type": "absolute",
            **({"id2label": labels, "label2id": {c: int(i) for i, c in labels.items()}} if labels else {})}


def to_hf(state: Dict[str, torch.Tensor], head: str) -> Dict[str, torch.Tensor]:
    """attnflow ``bert`` tensors under HF's names (``bert.``…, ``cls.``…, ``classifier.``…); the
    tied MLM decoder is HF's word embeddings, saved once; HF's token classifier has no pooler."""
    out = {}
    for name, tensor in state.items():
        theirs = hf_name(name)
        if theirs is None:
            raise ConfigError(f"attnflow's bert tensor {name} has no Hugging Face counterpart")
        if name != "mlm_decoder.weight" and not (head == "token" and name.startswith("pooler.")):
            out[theirs] = tensor.detach().contiguous()
    return out
