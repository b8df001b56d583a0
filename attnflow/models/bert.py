"""BERT: a Transformer encoder over ⟨CLS⟩ S ⟨SEP⟩ S′ ⟨SEP⟩ with MLM and NSP heads.

Devlin et al. 2019, §3, Fig. 2, §3.1, App. A.2 (GELU, N(0, 0.02²) init); the MLM decoder is tied
to the token embeddings (Press & Wolf 2017):

    e_t = Dropout(LN(E_tok x_t + E_seg s_t + P_t)),   Z = TransformerEncoder(e)
    MLM:  logits_t = E_tok LN(GELU(W_t z_t + b_t)) + b_V
    NSP:  logits   = W_y tanh(W_s z₀ + b_s) + b_y

Absolute positions are added before the LayerNorm; ``relative`` (Shaw et al. 2018) goes to the
encoder's self-attention. Fine-tuning heads (§4.1, Fig. 4): ``sequence`` W_c Dropout(tanh(W_s z₀
+ b_s)) + b_c, ``token`` W_c Dropout(z_t) + b_c, ``multitask`` one such head per named task.
``init_from`` loads embeddings, encoder and pooler of a pretraining run of the same
architecture, or of a Hugging Face checkpoint (``hf:<dir or hub id>``, :mod:`bert_hf`, which
also sets the architecture); ``freeze_encoder`` then trains the head only.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Literal, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.normalizers.base import Normalized
from attnflow.config.contracts import ModelContract
from attnflow.config.registry import (ATTENTIONS, DATA, ENCODERS, MODELS, POSITIONALS, BlockSpec,
                               ConfigError, PositiveFloat, PositiveInt, Probability)
from attnflow.io.checkpoints import CheckpointError, load_run
from attnflow.io.console import warn_unread
from attnflow.models import bert_hf

log = logging.getLogger(__name__)

# the modules a head adds; the rest (embeddings, encoder, pooler) is what init_from loads
HEAD_MODULES = {"pretraining": ("mlm_transform", "mlm_norm", "mlm_decoder", "nsp"),
                "sequence": ("classifier",), "token": ("classifier",), "multitask": ("task_heads",)}
# fields a checkpoint must share (dropouts, init_std, max_len and the heads may differ)
ARCHITECTURE = ("d_model", "layers", "ffn_dim", "norm", "activation", "type_vocab_size",
                "attention", "positional")


def _fit_input_length(cfg: dict, positions: int, typed: Mapping[str, str]) -> None:
    """The data's input length (its ``length_field``) lowered to a checkpoint's ``positions``
    where the command line did not give it."""
    data = cfg.get("data") or {}
    field = DATA.get(data["name"]).length_field if data.get("name") in DATA else None
    if field is None or f"data.{field}" in typed:
        return
    given = data[field] if data.get(field) is not None else DATA.default(data["name"], field)
    data[field] = min(given, positions)


@MODELS.register("bert")
class BertModel(ModelContract, nn.Module):
    """BERT encoder with pretraining heads (MLM, NSP) or fine-tuning heads.

    Shape: input_ids, segment_ids (B, T) long, attention_mask (B, T) bool (a prefix of real
    tokens) -> hidden (B, T, d), zero at padding.
    """

    interface = None  # per head: interface_of
    head_interfaces = {"pretraining": "pretraining", "sequence": "text_classification",
                       "token": "token_classification", "multitask": "multitask"}
    task_head_kinds = ("sequence", "token")  # the heads that head 'multitask' builds per task
    interfaces = tuple(head_interfaces.values())

    @classmethod
    def interface_of(cls, cfg: dict) -> str:
        return cls.head_interfaces.get(cfg.get("head") or "pretraining")

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """model.max_len covers the data's inputs."""
        if (cfg.get("model") or {}).get("name") == "bert":
            max_len = cfg["model"]["max_len"]
            longest = DATA.get(cfg["data"]["name"]).longest_positions(cfg["data"])
            if longest and longest[0] > max_len:
                given = longest[1].replace("{at}", "data.")
                raise ConfigError(f"model 'bert': {given} gives inputs longer than model.max_len="
                                  f"{max_len}; lower {given.split('=')[0]} or raise model.max_len")

    def __init__(self, vocab_size: int, pad_id: int = 0, num_classes: int = 0,
                 tasks: Optional[Dict[str, tuple]] = None, *,
                 d_model: PositiveInt = 256, layers: PositiveInt = 4,
                 ffn_dim: PositiveInt = 1024, dropout: Probability = 0.1,
                 activation_dropout: Probability = 0.0,
                 max_len: PositiveInt = 512, type_vocab_size: PositiveInt = 2,
                 norm: Literal["post", "pre"] = "post",
                 activation: Literal["relu", "gelu"] = "gelu", init_std: PositiveFloat = 0.02,
                 positional: BlockSpec["positional"] = {"name": "learned"},
                 attention: BlockSpec["attention"] = {"name": "multihead", "heads": 4},
                 head: Literal["pretraining", "sequence", "token", "multitask"] = "pretraining",
                 init_from: Optional[str] = None, freeze_encoder: bool = False,
                 classifier_dropout: Probability = 0.1, norm_eps: PositiveFloat = 1e-5):
        super().__init__()
        kinds = self._head_kinds(head, tasks)
        if head == "pretraining" and type_vocab_size < 2:
            raise ConfigError(f"model 'bert': type_vocab_size={type_vocab_size}: next-sentence "
                              f"prediction needs two segments (A and B)")
        self.pad_id, self.d_model, self.max_len, self.head = pad_id, d_model, max_len, head
        self._architecture = {
            "d_model": d_model, "layers": layers, "ffn_dim": ffn_dim, "norm": norm,
            "activation": activation, "type_vocab_size": type_vocab_size,
            "attention": ATTENTIONS.validate(attention, "model.attention"),
            "positional": POSITIONALS.validate(positional, "model.positional")}
        pos = POSITIONALS.build(positional, d_model, path="positional")
        if pos.max_len is not None and pos.max_len < max_len:
            raise ConfigError(f"model 'bert': model.max_len={max_len} is longer than the "
                              f"{pos.max_len} learned positions (positional.max_len)")
        self.positional = None if pos.relative else pos
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.segment_embedding = nn.Embedding(type_vocab_size, d_model)
        self.embedding_norm = nn.LayerNorm(d_model, norm_eps)
        self.encoder = ENCODERS.build(
            {"name": "transformer_encoder", "d_model": d_model, "layers": layers,
             "ffn_dim": ffn_dim, "dropout": dropout, "activation_dropout": activation_dropout,
             "norm": norm, "activation": activation, "attention": attention, "norm_eps": norm_eps,
             "positional": positional if pos.relative else {"name": "none"}},
            d_model, path="model")
        self.pooler = nn.Linear(d_model, d_model)  # tanh(W_s z₀ + b_s): NSP and sequence heads
        self._build_head(head, vocab_size, num_classes, kinds, tasks, classifier_dropout, norm_eps)
        self._init_weights(init_std)
        if init_from:
            self.load_encoder(init_from)
        if freeze_encoder:
            for name, p in self.named_parameters():
                if name.split(".")[0] not in HEAD_MODULES[head]:
                    p.requires_grad_(False)

    def _build_head(self, head: str, vocab_size: int, num_classes: int, kinds: Dict[str, str],
                    tasks: Optional[Dict[str, tuple]], dropout: float, eps: float) -> None:
        d = self.d_model
        if head == "pretraining":
            # MLM head: transform (dense, GELU, LN), then the tied decoder with its own bias
            self.mlm_transform = nn.Linear(d, d)
            self.mlm_norm = nn.LayerNorm(d, eps)
            self.mlm_decoder = nn.Linear(d, vocab_size)
            self.mlm_decoder.weight = self.token_embedding.weight  # tied: one parameter
            self.nsp = nn.Linear(d, 2)  # NSP: W_y on the pooled vector
            return
        self.classifier_dropout = nn.Dropout(dropout)
        if head == "multitask":  # one classifier per task
            self.head_of_task = kinds  # task -> 'sequence' | 'token'
            self.task_heads = nn.ModuleDict({t: nn.Linear(d, c) for t, (_, c) in tasks.items()})
        else:
            self.classifier = nn.Linear(d, num_classes)

    @classmethod
    def _head_kinds(cls, head: str, tasks: Optional[Dict[str, tuple]]) -> Dict[str, str]:
        """{task: 'sequence' | 'token'} for head 'multitask' (tasks: name -> (interface, C))."""
        if head != "multitask":
            return {}
        by_interface = {i: h for h, i in cls.head_interfaces.items()}
        kinds = {t: by_interface.get(interface) for t, (interface, _) in tasks.items()}
        for t, kind in kinds.items():
            if kind not in cls.task_head_kinds:
                raise ConfigError(f"model 'bert': task '{t}' works on {tasks[t][0]}, which has no "
                                  f"per-task head ({', '.join(cls.task_head_kinds)})")
        return kinds

    def _classifier(self, task: Optional[str]) -> nn.Module:
        return self.classifier if self.head != "multitask" else self.task_heads[task]

    def _init_weights(self, std: float) -> None:
        """N(0, std²) linear and embedding weights, zero biases and padding row (App. A.2)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        with torch.no_grad():
            self.token_embedding.weight[self.pad_id].zero_()

    def embed(self, input_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
        """LN(E_tok x + E_seg s + P) (B, T, d), before the encoder's dropout."""
        if input_ids.shape[1] > self.max_len:
            raise ValueError(f"model 'bert': a batch of length {input_ids.shape[1]} is longer than "
                             f"model.max_len={self.max_len}")
        e = self.token_embedding(input_ids) + self.segment_embedding(segment_ids)
        if self.positional is not None:
            e = self.positional(e)
        return self.embedding_norm(e)

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor,
                attention_mask: torch.Tensor, need_weights: bool = False):
        """hidden (B, T, d); with ``need_weights`` also every layer's weights (B, J, T, T)."""
        mask = attention_mask.bool()
        lengths = mask.sum(-1)
        if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths[:, None]):
            raise ValueError("model 'bert': attention_mask must be True on a prefix of each row")
        out = self.encoder(self.embed(input_ids, segment_ids), lengths, need_weights=need_weights)
        return (out[0], out[2]) if need_weights else out[0]

    def diagnosed_attention(self):
        """Head 'sequence': [("cls", the last layer's self-attention, (0,))], its ⟨CLS⟩ query
        row (query row 0), which the classifier reads through z₀; other heads: [] (Jain &
        Wallace 2019; :mod:`attnflow.compare.jain_wallace`)."""
        attention = self.encoder.layers[-1].self_attn
        if self.head != "sequence" or not isinstance(attention, Normalized):
            return []
        return [("cls", attention, (0,))]

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, V): E_tok LN(GELU(W_t z + b_t)) + b_V (pass the masked positions only)."""
        return self.mlm_decoder(self.mlm_norm(F.gelu(self.mlm_transform(hidden))))

    def pooled(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, d): tanh(W_s z₀ + b_s), z₀ the ⟨CLS⟩ vector (position 0)."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def nsp_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, 2): W_y tanh(W_s z₀ + b_s) + b_y; index 0 = S′ follows S, 1 = S′ is random."""
        return self.nsp(self.pooled(hidden))

    def classify_logits(self, hidden: torch.Tensor, task: Optional[str] = None) -> torch.Tensor:
        """(B, C): W_c Dropout(tanh(W_s z₀ + b_s)) + b_c (§4.1), of ``task`` for multitask."""
        return self._classifier(task)(self.classifier_dropout(self.pooled(hidden)))

    def token_logits(self, hidden: torch.Tensor, task: Optional[str] = None) -> torch.Tensor:
        """(B, T, C): W_c Dropout(z_t) + b_c at every position (§4.3, Fig. 4d)."""
        return self._classifier(task)(self.classifier_dropout(hidden))

    @classmethod
    def complete_config(cls, cfg: dict, typed: Mapping[str, str]) -> None:
        """``model.init_from=hf:…``: the architecture fields from its ``config.json``; a field
        typed on the command line that it replaces gets one warning line."""
        target = cfg["model"].get("init_from")
        if not bert_hf.is_hf(target):
            return
        try:
            folder = bert_hf.checkpoint_dir(target)
        except ConfigError:
            if cfg.get("resume"):  # the run's own checkpoint holds every weight; resume checks
                return  # its architecture against the saved config
            raise
        fields = bert_hf.architecture(folder)
        shared = ("attention", "scorer", "normalizer", "aggregator", "positional")
        for key, shown in typed.items():
            parts = key.split(".")
            if parts[0] in shared or (parts[0] == "model" and len(parts) > 1 and parts[1] in fields):
                warn_unread(shown, f"model.init_from={target} sets the architecture (its config.json)")
        cfg["model"].update(fields)
        _fit_input_length(cfg, fields["max_len"], typed)
        groups = {**{k: fields["attention"][k] for k in shared[1:4]}, "attention": fields["attention"],
                  "positional": fields["positional"]}
        cfg.update({k: v for k, v in groups.items() if k in cfg})  # the shared groups say the same

    def _checkpoint_state(self, target: str) -> tuple:
        """(where, {name: tensor}) of the ``bert`` run or HF checkpoint at ``target`` (weights
        only), after checking its architecture and vocabulary size against this model's."""
        if bert_hf.is_hf(target):
            folder = bert_hf.checkpoint_dir(target)
            where, model_cfg = folder, {"name": "bert", **bert_hf.architecture(folder)}
            tokens = bert_hf.vocabulary(folder)
            state = bert_hf.to_attnflow(bert_hf.read_weights(folder),
                                        bert_hf.specials_first(tokens, f"model.init_from: {folder}"))
        else:
            where, model_cfg, state = self._run_state(target)
        self._check_architecture(where, model_cfg)
        emb = state.get("token_embedding.weight")
        rows = self.token_embedding.num_embeddings
        if emb is not None and emb.shape[0] != rows:
            raise ConfigError(
                f"model.init_from: the checkpoint's vocabulary has {emb.shape[0]} tokens but this "
                f"run's tokenizer gives {rows}: the tokenizer must be the checkpoint's "
                f"(data.tokenizer_from: ${{model.init_from}})")
        return where, state

    @staticmethod
    def _run_state(target: str) -> tuple:
        """(checkpoint, model config, {name: tensor}) of the attnflow ``bert`` run at ``target``."""
        try:
            run = load_run(target)
        except CheckpointError as err:
            raise ConfigError(f"model.init_from: {err}") from None
        where, model_cfg = run.checkpoint, run.config["model"]
        if model_cfg.get("name") != "bert":
            raise ConfigError(
                f"model.init_from: {where} is a checkpoint of model '{model_cfg.get('name')}', "
                f"not of a 'bert' run; give a bert pretraining run (experiment=bert_pretrain_imdb)")
        return where, model_cfg, {k[len("model."):]: v for k, v in run.ckpt["state_dict"].items()
                                  if k.startswith("model.")}

    def _check_architecture(self, where: Any, model_cfg: dict) -> None:
        try:
            theirs = MODELS.validate(model_cfg, "model")
            theirs["attention"] = ATTENTIONS.validate(theirs["attention"], "model.attention")
            theirs["positional"] = POSITIONALS.validate(theirs["positional"], "model.positional")
        except ConfigError as err:
            raise ConfigError(f"model.init_from: the model config of {where} is not a valid bert "
                              f"config: {err}") from None
        diffs = _differences({k: theirs[k] for k in ARCHITECTURE}, self._architecture, "model")
        if diffs:
            raise ConfigError(
                f"model.init_from: {where} has another architecture than this run: "
                + "; ".join(f"{field}: checkpoint {a}, this run {b}" for field, a, b in diffs)
                + " (set these fields as the checkpoint has them)")

    def load_encoder(self, target: str) -> Dict[str, List[str]]:
        """Load the encoder side (and for head 'pretraining' the MLM/NSP heads) of the run at
        ``target``; returns and logs {'loaded', 'new', 'unused'} parameter names."""
        where, state = self._checkpoint_state(target)
        own = self.state_dict()
        head = HEAD_MODULES[self.head]
        # (a pooler HF's token classifiers save without starts anew)
        missing = [k for k in own if k not in state and k.split(".")[0] not in (*head, "pooler")]
        if missing:
            raise ConfigError(f"model.init_from: {where} lacks {len(missing)} encoder weights of "
                              f"this model (e.g. {missing[0]}); a checkpoint of another bert variant?")
        # a classifier is always new; MLM/NSP heads load for pretraining only
        loaded = {k: state[k] for k in own
                  if k in state and (self.head == "pretraining" or k.split(".")[0] not in head)}
        for k, v in loaded.items():
            if tuple(v.shape) != tuple(own[k].shape):
                raise ConfigError(f"model.init_from: {k} is {tuple(v.shape)} in {where} but "
                                  f"{tuple(own[k].shape)} here")
        self.load_state_dict(loaded, strict=False)
        params = {n for n, _ in self.named_parameters(remove_duplicate=False)}
        shared = {v.data_ptr() for v in loaded.values()}  # the tied MLM decoder is the embedding
        report = {"loaded": sorted(loaded),
                  "new": [k for k in own if k not in loaded and k in params],
                  "unused": sorted(k for k in state if k not in loaded
                                   and state[k].data_ptr() not in shared)}
        log.info("model 'bert': loaded %d tensors from %s; new: %s; unused: %s", len(loaded), where,
                 ", ".join(report["new"]) or "none", ", ".join(report["unused"]) or "none")
        return report


def _differences(theirs: Any, ours: Any, path: str) -> List[tuple]:
    """[(field path, checkpoint value, this run's value)] of two validated configs, recursively,
    dropouts and init scales excepted."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        if theirs.get("name") != ours.get("name"):  # another block: its fields differ anyway
            return [(f"{path}.name", theirs.get("name"), ours.get("name"))]
        out = []
        for key in sorted(set(theirs) | set(ours)):
            if "dropout" not in key and key != "init_std":
                out += _differences(theirs.get(key), ours.get(key), f"{path}.{key}")
        return out
    return [] if theirs == ours else [(path, theirs, ours)]
