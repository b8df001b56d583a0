"""BERT: a Transformer encoder over ⟨CLS⟩ S ⟨SEP⟩ S′ ⟨SEP⟩ with MLM and NSP heads.

Source: Devlin et al. 2019, "BERT: Pre-training of deep bidirectional transformers for language
understanding": §3 and Fig. 2 (input = token + segment + position embeddings), §3.1 (masked LM,
next-sentence prediction), Appendix A.2 (GELU, N(0, 0.02²) initialisation); the MLM output layer
shares the token embeddings (Press & Wolf 2017, as the released BERT code does).

    e_t  = Dropout(LN(E_tok x_t + E_seg s_t + P_t))            (embeddings)
    Z    = TransformerEncoder(e)                              (the ``transformer_encoder`` block,
                                                               the translation encoder; GELU FFN)
    MLM:  logits_t = E_tok LN(GELU(W_t z_t + b_t)) + b_V       (tied decoder, own bias)
    NSP:  logits   = W_y tanh(W_s z₀ + b_s) + b_y              (the pooler on ⟨CLS⟩, then W_y;
                                                               the loss applies the softmax)

Positions: ``positional`` learned (BERT's P, ``max_len`` rows) or sinusoidal are added here,
before the LayerNorm, as BERT does; ``relative`` (Shaw et al. 2018) adds nothing and is handed to
the encoder, whose self-attention layers then carry relative-position terms. The encoder gets
``positional: none`` otherwise, so its own dropout is BERT's embedding dropout.

Fine-tuning (Devlin et al. 2019, §4.1 and Fig. 4): ``head: sequence`` puts a fresh linear layer on
the pooled ⟨CLS⟩ vector, ``classify_logits = W_c Dropout(tanh(W_s z₀ + b_s)) + b_c`` (B, C);
``head: token`` one on every token, ``token_logits = W_c Dropout(z_t) + b_c`` (B, T, C). The MLM and
NSP heads exist for ``head: pretraining`` only. ``head: multitask`` (task ``multitask``) builds one
such classifier per named task of the run on the one encoder (``task_heads``, a sequence or token
head by what the task's data gives); ``classify_logits``/``token_logits`` take the task's name. ``init_from`` (a pretraining run directory or
checkpoint) loads the embeddings, the encoder and the pooler, read with ``weights_only=True``
(:mod:`attnflow.io.checkpoints`), after checking that the checkpoint is a ``bert`` of the same
architecture and vocabulary; ``freeze_encoder`` then trains the new head only.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Literal, Optional

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.attention.multihead import check_model_heads
from attnflow.config.registry import (ATTENTIONS, DATA, ENCODERS, MODELS, POSITIONALS, BlockSpec,
                               ConfigError, PositiveFloat, PositiveInt, Probability)

log = logging.getLogger(__name__)

HEADS = ("pretraining", "sequence", "token", "multitask")
# the model's own modules that a head adds; everything else is the encoder side (embeddings,
# encoder, pooler), which init_from loads and freeze_encoder freezes
HEAD_MODULES = {"pretraining": ("mlm_transform", "mlm_norm", "mlm_decoder", "nsp"),
                "sequence": ("classifier",), "token": ("classifier",), "multitask": ("task_heads",)}
# model fields that fix the shapes or the function of the encoder side: a checkpoint must agree
# on them (dropouts, init_std, max_len and the fine-tuning fields may differ)
ARCHITECTURE = ("d_model", "layers", "ffn_dim", "norm", "activation", "type_vocab_size",
                "attention", "positional")


def _check_positions(max_len: int, positions: Optional[int]) -> None:
    """``model.max_len`` within the positional encoding's ``max_len`` rows (None: no table)."""
    if positions is not None and positions < max_len:
        raise ConfigError(
            f"model 'bert': model.max_len={max_len} is longer than the {positions} learned "
            f"positions (positional.max_len); raise positional.max_len or lower model.max_len")


@MODELS.register("bert")
class BertModel(nn.Module):
    """BERT encoder with pretraining heads (MLM, NSP) and the pooler for fine-tuning heads.

    Args:
        vocab_size: V (context, from the data module).
        pad_id: the padding token id (context).
        d_model: hidden size d (default 256: bert_mini; BERT-base 768).
        layers: N encoder layers (default 4).
        ffn_dim: the FFN's inner size (default 1024 = 4d).
        dropout: on the embeddings and in the residuals (default 0.1).
        activation_dropout: after the FFN's activation (default 0.0).
        max_len: the longest input accepted (default 512); learned positions need
            ``positional.max_len`` (default 512) at least as large.
        type_vocab_size: the number of segment types (default 2: A and B).
        norm: 'post' (BERT) or 'pre' (Xiong et al. 2020) (default 'post').
        activation: the FFN's nonlinearity (default 'gelu', as BERT).
        init_std: σ of the N(0, σ²) initialisation of linear and embedding weights (default 0.02).
        positional: positions (default learned; relative, sinusoidal or none also work).
        attention: the self-attention of every layer (default multihead; the presets set J).
        num_classes: C (context, from labelled data; 0 for pretraining data).
        tasks: the named tasks of a multitask run (context): task → (what its data gives, its
            number of classes); head 'multitask' builds a classifier for each.
        head: 'pretraining' (MLM + NSP), 'sequence' (one label per input, on the pooled ⟨CLS⟩),
            'token' (one label per token) or 'multitask' (one of those per named task)
            (default 'pretraining').
        init_from: a pretraining run directory or ``.ckpt`` whose embeddings, encoder and pooler
            are loaded (default None: random initialisation).
        freeze_encoder: embeddings, encoder and pooler get no gradient; only the head trains.
        classifier_dropout: before the sequence/token classifier (default 0.1, as BERT).
    Shape:
        forward: input_ids, segment_ids (B, T) long, attention_mask (B, T) bool, True at real
        tokens, padding at the end -> hidden (B, T, d), zero at padding. mlm_logits (B, T, V),
        nsp_logits (B, 2), pooled (B, d); classify_logits (B, C), token_logits (B, T, C).
    """

    # what it works on depends on ``head``, so it is given per head (interface_of)
    interface = None
    head_interfaces = {"pretraining": "pretraining", "sequence": "text_classification",
                       "token": "token_classification", "multitask": "multitask"}
    task_head_kinds = ("sequence", "token")  # the heads that head 'multitask' builds per task
    interfaces = tuple(head_interfaces.values())

    @classmethod
    def interface_of(cls, cfg: dict) -> str:
        """What a model of this config works on: its ``head``'s batches."""
        return cls.head_interfaces.get(cfg.get("head") or "pretraining")

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """The attention's heads divide d_model, the positions cover model.max_len and
        model.max_len covers the data's inputs."""
        if (cfg.get("model") or {}).get("name") == "bert":
            model = cfg["model"]
            check_model_heads(model)
            _check_positions(model["max_len"], (model.get("positional") or {}).get("max_len"))
            longest = DATA.ask(cfg["data"], "longest_positions", "data")  # multitask: the tasks'
            if longest and longest[0] > model["max_len"]:
                given = longest[1].replace("{at}", "data.")
                raise ConfigError(
                    f"model 'bert': {given} gives inputs longer than model.max_len="
                    f"{model['max_len']}; lower "
                    f"{given.split('=')[0]} or raise model.max_len (and positional.max_len)")
            if model["head"] == "pretraining" and model["type_vocab_size"] < 2:
                raise ConfigError(f"model 'bert': model.type_vocab_size={model['type_vocab_size']} with "
                                  f"head=pretraining: next-sentence prediction gives two segments "
                                  f"(A and B); use 2 or more")

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
                 classifier_dropout: Probability = 0.1):
        super().__init__()
        kinds = self._head_kinds(head, num_classes, tasks)
        self.pad_id, self.d_model, self.max_len, self.head = pad_id, d_model, max_len, head
        # this run's architecture, to compare with a checkpoint's (init_from)
        self._architecture = {
            "d_model": d_model, "layers": layers, "ffn_dim": ffn_dim, "norm": norm,
            "activation": activation, "type_vocab_size": type_vocab_size,
            "attention": ATTENTIONS.validate(attention, "model.attention"),
            "positional": POSITIONALS.validate(positional, "model.positional")}
        pos = POSITIONALS.build(positional, d_model, path="positional")
        _check_positions(max_len, getattr(pos, "max_len", None))
        # an absolute encoding is added here, before the LayerNorm (BERT); a relative one goes to
        # the encoder, whose attention layers carry it
        self.positional = None if pos.relative else pos
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.segment_embedding = nn.Embedding(type_vocab_size, d_model)
        self.embedding_norm = nn.LayerNorm(d_model)
        self.encoder = ENCODERS.build(
            {"name": "transformer_encoder", "d_model": d_model, "layers": layers,
             "ffn_dim": ffn_dim, "dropout": dropout, "activation_dropout": activation_dropout,
             "norm": norm, "activation": activation, "attention": attention,
             "positional": positional if pos.relative else {"name": "none"}},
            d_model, path="model")
        self.pooler = nn.Linear(d_model, d_model)  # tanh(W_s z₀ + b_s): NSP and sequence heads
        self._build_head(head, vocab_size, num_classes, kinds, tasks, classifier_dropout)
        self._init_weights(init_std)
        if init_from:
            self.load_encoder(init_from)
        if freeze_encoder:
            for name, p in self.named_parameters():
                if name.split(".")[0] not in HEAD_MODULES[head]:
                    p.requires_grad_(False)

    def _build_head(self, head: str, vocab_size: int, num_classes: int, kinds: Dict[str, str],
                    tasks: Optional[Dict[str, tuple]], dropout: float) -> None:
        d = self.d_model
        if head == "pretraining":
            # MLM head: transform (dense, GELU, LN), then the tied decoder with its own bias
            self.mlm_transform = nn.Linear(d, d)
            self.mlm_norm = nn.LayerNorm(d)
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
    def _head_kinds(cls, head: str, num_classes: int,
                    tasks: Optional[Dict[str, tuple]]) -> Dict[str, str]:
        """Check the head against the data; {task: head kind} for head 'multitask' (``tasks``:
        task name → (what its data gives, its number of classes))."""
        if head not in ("pretraining", "multitask") and num_classes < 2:
            raise ConfigError(
                f"model 'bert': model.head={head} needs labelled data (at least 2 classes), but the "
                f"data gives {num_classes} classes; pretraining data goes with model.head=pretraining")
        if head == "pretraining" and num_classes:
            raise ConfigError(
                f"model 'bert': model.head=pretraining (MLM + NSP) on labelled data with "
                f"{num_classes} classes; set model.head=sequence (one label per text) or token")
        if head != "multitask":
            if tasks:
                raise ConfigError(f"model 'bert': named tasks ({', '.join(tasks)}) need "
                                  f"model.head=multitask, got model.head={head}")
            return {}
        if not tasks:
            raise ConfigError("model 'bert': model.head=multitask needs the named tasks of a "
                              "multitask run (task=multitask, data=multitask)")
        by_interface = {i: h for h, i in cls.head_interfaces.items()}
        kinds = {}
        for t, (interface, classes) in tasks.items():
            kinds[t] = by_interface.get(interface)
            if kinds[t] not in cls.task_head_kinds:
                raise ConfigError(
                    f"model 'bert': task '{t}' works on {interface}, for which model.head=multitask "
                    f"has no per-task head (per-task heads: {', '.join(cls.task_head_kinds)})")
            if classes < 2:
                raise ConfigError(f"model 'bert': task '{t}' has {classes} classes; a head needs 2 or more")
        return kinds

    def _classifier(self, task: Optional[str]) -> nn.Module:
        """The sequence/token classifier: the model's one, or task ``task``'s (head 'multitask')."""
        if self.head != "multitask":
            return self.classifier
        if task not in self.task_heads:
            raise KeyError(f"model 'bert': no head for task {task!r}; heads: {', '.join(self.task_heads)}")
        return self.task_heads[task]

    def _init_weights(self, std: float) -> None:
        """N(0, std²) weights and zero biases for every linear and embedding map (Devlin et al.
        2019, App. A.2; the released code's truncated normal differs beyond 2σ only); LayerNorms
        keep (1, 0); the padding row is zero."""
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
        """hidden (B, T, d), zero at padding; with ``need_weights`` (hidden, [N × (B, J, T, T)]),
        every layer's self-attention weights (query rows, key columns; zero at padding keys)."""
        mask = attention_mask.bool()
        lengths = mask.sum(-1)
        if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths[:, None]):
            raise ValueError("model 'bert': attention_mask must be True on a prefix of each row "
                             "(real tokens first, padding at the end)")
        out = self.encoder(self.embed(input_ids, segment_ids), lengths, need_weights=need_weights)
        return (out[0], out[2]) if need_weights else out[0]

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, T, V): E_tok LN(GELU(W_t z + b_t)) + b_V. Pass only the selected positions'
        vectors (hidden[labels != -100], (M, d)) to spare the V-wide product elsewhere."""
        return self.mlm_decoder(self.mlm_norm(F.gelu(self.mlm_transform(hidden))))

    def pooled(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, d): tanh(W_s z₀ + b_s), z₀ the ⟨CLS⟩ vector (position 0)."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def nsp_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, 2): W_y tanh(W_s z₀ + b_s) + b_y; index 0 = S′ follows S, 1 = S′ is random."""
        return self.nsp(self.pooled(hidden))

    def classify_logits(self, hidden: torch.Tensor, task: Optional[str] = None) -> torch.Tensor:
        """(B, C): W_c Dropout(tanh(W_s z₀ + b_s)) + b_c (Devlin et al. 2019, §4.1); head 'sequence'
        (head 'multitask': the classifier of ``task``)."""
        return self._classifier(task)(self.classifier_dropout(self.pooled(hidden)))

    def token_logits(self, hidden: torch.Tensor, task: Optional[str] = None) -> torch.Tensor:
        """(B, T, C): W_c Dropout(z_t) + b_c at every position (§4.3, Fig. 4d); head 'token'
        (head 'multitask': the classifier of ``task``)."""
        return self._classifier(task)(self.classifier_dropout(hidden))

    # -- init_from ---------------------------------------------------------------------------------
    def _checkpoint_state(self, target: str) -> tuple:
        """(where, {name: tensor}) of the ``bert`` run at ``target``, read with
        ``weights_only=True``; a :class:`ConfigError` names what differs from this model: the
        model family, an architecture field, the vocabulary size."""
        from attnflow.io.checkpoints import CheckpointError, load_run

        try:
            run = load_run(target)
        except CheckpointError as err:
            raise ConfigError(f"model.init_from: {err}") from None
        where, model_cfg = run.checkpoint, run.config["model"]
        if model_cfg.get("name") != "bert":
            raise ConfigError(
                f"model.init_from: {where} is a checkpoint of model '{model_cfg.get('name')}', "
                f"not of a 'bert' run; give a bert pretraining run (experiment=bert_pretrain_imdb)")
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
                + " (set these fields as the pretraining run did)")
        state = {k[len("model."):]: v for k, v in run.ckpt["state_dict"].items()
                 if k.startswith("model.")}
        emb = state.get("token_embedding.weight")
        rows = self.token_embedding.num_embeddings
        if emb is not None and emb.shape[0] != rows:
            raise ConfigError(
                f"model.init_from: the checkpoint's vocabulary has {emb.shape[0]} tokens but this "
                f"run's tokenizer gives {rows}: the tokenizer must be the pretraining run's "
                f"(data.tokenizer_from: ${{model.init_from}})")
        return where, state

    def load_encoder(self, target: str) -> Dict[str, List[str]]:
        """Load the embeddings, encoder and pooler (and, for head 'pretraining', the MLM/NSP heads)
        of the ``bert`` run at ``target`` (run directory or checkpoint). Returns {'loaded', 'new',
        'unused'} (parameter names) and logs them once."""
        where, state = self._checkpoint_state(target)
        own = self.state_dict()
        head = HEAD_MODULES[self.head]
        missing = [k for k in own if k not in state and k.split(".")[0] not in head]
        if missing:
            raise ConfigError(f"model.init_from: {where} lacks {len(missing)} encoder weights of "
                              f"this model (e.g. {missing[0]}); a checkpoint of another bert variant?")
        # a classifier is always new (even from a fine-tuned run's); MLM/NSP heads go on
        # pretraining when both have them
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
    """[(field path, checkpoint value, this run's value)] of two validated configs, recursively;
    dropouts and initialisation scales differ freely (they change training, not what the
    weights mean)."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        if theirs.get("name") != ours.get("name"):  # another block: its fields differ anyway
            return [(f"{path}.name", theirs.get("name"), ours.get("name"))]
        out = []
        for key in sorted(set(theirs) | set(ours)):
            if "dropout" not in key and key != "init_std":
                out += _differences(theirs.get(key), ours.get(key), f"{path}.{key}")
        return out
    return [] if theirs == ours else [(path, theirs, ours)]
