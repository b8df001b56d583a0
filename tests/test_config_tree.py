"""The Hydra config tree: every experiment composes and runs a step; one override swaps blocks."""

from __future__ import annotations

import json
import re

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from attnflow.blocks.scorers.additive import AdditiveScorer
from attnflow.blocks.scorers.dot import DotScorer
from attnflow.config.registry import DATA, MODELS, SCORERS, TASKS
from attnflow.training.validate import resolve_config
from attnflow.training.run import train
from support import CONF, DATA_DIR, FAST, ROOT, compose_cfg, experiments


def test_there_are_experiments():
    assert {"reverse_bahdanau", "reverse_multihead"} <= set(experiments())


# Document experiments (IMDB): a few documents, short sentences, instead of the reverse-data sizes.
DOCUMENT_FAST = ["data.limit_train=64", "data.limit_val=32", "data.batch_size=16",
                 "data.max_sentences=4", "data.max_words=12", "trainer.accelerator=cpu",
                 "trainer.max_epochs=1", "callbacks.progress_bar=none", "task.renderings=1"]


# Translation experiments (Multi30k): a few pairs, a small vocabulary, short decoding.
PARALLEL_FAST = ["data.max_pairs=64", "data.vocab_size=300", "data.batch_size=8",
                 "data.max_decode_len=8", "task.beam_size=2", "trainer.accelerator=cpu",
                 "trainer.max_epochs=1", "callbacks.progress_bar=none", "callbacks.attention_maps.examples=2"]


# Graph experiments (Planetoid, generated graphs): one full-graph or one mini-batch step.
GRAPH_FAST = ["trainer.accelerator=cpu", "callbacks.progress_bar=none"]


# BERT pretraining (IMDB texts): a few documents, a small vocabulary and model.
PRETRAINING_FAST = ["data.limit_train=64", "data.limit_val=32", "data.batch_size=16",
                    "data.vocab_size=300", "data.max_len=32", "model.d_model=32", "model.ffn_dim=64",
                    "model.layers=1", "trainer.accelerator=cpu", "callbacks.progress_bar=none"]


# Every run: nothing recorded or drawn that the test does not read (metrics.json is the run's own).
CHEAP = ["trainer.enable_model_summary=false", "callbacks.attention_maps.examples=0", "logger=none"]

# Generated data (the reversal, the shapes): a batch of each split is all one step reads.
GENERATED_FAST = [*FAST, "data.train_size=32", "data.val_size=16", "data.test_size=16",
                  "data.batch_size=16"]

# Translation models at a width a step on a CPU takes little time with: each keeps its layers,
# heads (48: divisible by 2, 3, 4 and 8) and blocks.
NARROW = {"transformer": ["model.d_model=48", "model.ffn_dim=96"],
          "seq2seq": ["model.embed_dim=32", "model.encoder.hidden_dim=32",
                      "model.decoder.embed_dim=32", "model.decoder.hidden_dim=32"]}


def _chosen(experiment: str, group: str) -> str:
    """The block name (``data.name``, ``model.name``) that ``experiment`` gets from its option of
    ``group``, read from the files of conf/ (the experiment's, those it extends, the option's)
    rather than composed: the test composes each experiment once, and checks this against it."""
    def option(path, key):
        defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
        for entry in defaults:
            if isinstance(entry, dict) and key in entry:
                return entry[key]
        parents = [e for e in defaults if isinstance(e, str) and e != "_self_"]
        return option(path.parent / f"{parents[0]}.yaml", key) if parents else None

    picked = option(CONF / "experiment" / f"{experiment}.yaml", f"override /{group}")
    picked = picked or option(CONF / "train.yaml", group)
    node = yaml.safe_load((CONF / group / f"{picked}.yaml").read_text())
    while "name" not in node:  # an option that extends another (transformer_base: transformer)
        parent = next(e for e in node["defaults"] if isinstance(e, str) and e != "_self_")
        node = yaml.safe_load((CONF / group / f"{parent}.yaml").read_text())
    return node["name"]


@pytest.fixture(scope="module")
def imdb_sample(tmp_path_factory):
    """A data folder whose imdb/ holds every 100th review of IMDB's files (both classes, every
    rating): the runs read 64 reviews, and the full files cost seconds to read each time."""
    import gzip

    root = tmp_path_factory.mktemp("data")
    (root / "imdb").mkdir()
    for source in sorted((DATA_DIR / "imdb").glob("*.jsonl.gz")):
        with gzip.open(source, "rt", encoding="utf-8", newline="\n") as f:
            sample = [line for i, line in enumerate(f) if i % 100 == 0]
        with gzip.open(root / "imdb" / source.name, "wt", encoding="utf-8", newline="\n") as f:
            f.writelines(sample)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("experiment", experiments())
def test_every_experiment_runs_one_step(experiment, tmp_path, request):
    data_name = _chosen(experiment, "data")
    documents = data_name == "documents"
    pretraining = data_name in ("bert_pretraining", "text_classification", "multitask")  # BERT on IMDB texts
    if (documents or pretraining) and not (DATA_DIR / "imdb").is_dir():
        pytest.skip(f"IMDB data not found at {DATA_DIR / 'imdb'} (set ATTNFLOW_DATA_DIR)")
    if data_name == "parallel" and not (DATA_DIR / "multi30k").is_dir():
        pytest.skip(f"Multi30k not found at {DATA_DIR / 'multi30k'} (set ATTNFLOW_DATA_DIR)")
    graph = data_name in ("planetoid", "synthetic_graph", "graph")  # graph attention (GAT) experiments
    fast = PARALLEL_FAST if data_name == "parallel" else GENERATED_FAST
    fast = DOCUMENT_FAST if documents else fast
    fast = GRAPH_FAST if graph else PRETRAINING_FAST if pretraining else fast
    if data_name == "multitask":  # the tasks' shared data fields are under data.common
        fast = [f.replace("data.", "data.common.", 1) for f in fast]
    if data_name == "parallel":
        fast = [*fast, *NARROW[_chosen(experiment, "model")]]
    if documents or pretraining:
        fast = [*fast, f"paths.data_dir={request.getfixturevalue('imdb_sample')}"]
    if data_name == "graph":  # the user's files: a ring of 8 nodes, two classes
        (tmp_path / "nodes.csv").write_text("id,label,f\n" + "".join(f"{i},{i % 2},{i}\n" for i in range(8)))
        (tmp_path / "edges.csv").write_text("source,target\n" + "".join(f"{i},{(i + 1) % 8}\n" for i in range(8)))
        fast = [*fast, f"data.nodes={tmp_path / 'nodes.csv'}", f"data.edges={tmp_path / 'edges.csv'}"]
    cfg = compose_cfg([f"experiment={experiment}", *fast, *CHEAP, "trainer.fast_dev_run=true"])
    assert cfg.data.name == data_name  # (what _chosen read)
    if data_name == "parallel":
        assert cfg.model.name == _chosen(experiment, "model")
    if data_name == "planetoid":
        raw = DATA_DIR / "planetoid" / cfg.data.dataset / "raw"
        if not raw.is_dir():
            pytest.skip(f"Planetoid raw files not found at {raw} (set ATTNFLOW_DATA_DIR)")
    summary = train(cfg, tmp_path)
    assert summary["global_step"] == 1
    saved = json.loads((tmp_path / "metrics.json").read_text())
    expected = {"val/loss", "val/acc", "val/f1"} if documents else {"val/loss", "val/seq_acc", "test/seq_acc"}
    if data_name == "parallel":
        expected |= {"val/bleu", "val/wer", "test/bleu", "test/wer"}
    if graph:
        expected = {"val/loss", "val/acc", "test/acc"}
    if data_name == "bert_pretraining":
        expected = {"val/loss", "val/mlm_loss", "val/nsp_loss", "val/mlm_acc", "val/nsp_acc"}
    if data_name == "text_classification":
        expected = {"val/loss", "val/acc", "val/f1"}
    if data_name == "synthetic_ner":  # BERT token classification on the generated NER set
        expected = {"val/loss", "val/acc", "val/f1", "val/precision", "val/recall", "test/f1"}
    if data_name == "multitask":  # each task's metrics under its name, and the weighted loss
        expected = {"val/loss"} | {f"val/{t}/{m}" for t in cfg.data.tasks for m in ("loss", "acc", "f1")}
    assert expected <= set(saved["metrics"])
    assert (tmp_path / "config.yaml").is_file()


def _decoder_scorer(cfg):
    model = MODELS.build(cfg.model, src_vocab=10, tgt_vocab=10, pad_id=0)
    return model.decoder.attention.scorer


def test_default_scorer_is_additive_and_one_override_swaps_it():
    assert isinstance(_decoder_scorer(compose_cfg()), AdditiveScorer)
    assert isinstance(_decoder_scorer(compose_cfg(["scorer=dot"])), DotScorer)


def test_every_registered_scorer_has_a_group_option():
    assert set(SCORERS.names()) <= set(OPTIONS["scorer"])


OPTIONS = {g: sorted(p.stem for p in (CONF / g).glob("*.yaml")) for g in ("scorer",)}


def _one_training_step(cfg):
    """What a run's first step does, without a Trainer: the config resolved and validated, the
    data, model and task built as attnflow-train builds them, the loss of the first training
    batch and its gradients; the keys the task logged."""
    resolved = resolve_config(cfg)
    dm = DATA.build(resolved["data"], path="data")
    model = MODELS.build(resolved["model"], path="model", **dm.model_context())
    task = TASKS.build(resolved["task"], model, path="task", **dm.task_context())
    dm.setup("fit")
    logged = {}
    task.log = lambda key, value, **kw: logged.__setitem__(key, value)
    loss = task.step(next(iter(dm.train_dataloader())), "train")
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    return model, logged


@pytest.mark.parametrize("scorer", OPTIONS["scorer"])
def test_every_scorer_trains_a_step_in_the_default_experiment(scorer):
    cfg = compose_cfg([f"scorer={scorer}", *GENERATED_FAST])
    expected = OmegaConf.load(CONF / "scorer" / f"{scorer}.yaml")  # gat_authors: gat + options
    assert OmegaConf.to_container(cfg.model.decoder.attention.scorer) == OmegaConf.to_container(expected)
    model, logged = _one_training_step(cfg)
    assert type(model.decoder.attention.scorer).registry_name == expected.name
    assert "train/loss" in logged


@pytest.mark.parametrize("aggregator", ["mean", "concat", "concat_proj"])
def test_multihead_with_each_aggregator_and_norm(aggregator):
    cfg = compose_cfg(["attention=multihead", f"aggregator={aggregator}", "normalizer=norm",
                       "task.penalty_weight=0.1", *GENERATED_FAST])
    model, logged = _one_training_step(cfg)
    attention = model.decoder.attention
    assert type(attention.aggregator).registry_name == aggregator
    assert type(attention.normalizer).registry_name == "norm"
    assert "train/penalty" in logged  # the penalty weighs the step's loss


def test_penalty_is_logged_when_weighted(tmp_path):
    cfg = compose_cfg(["experiment=reverse_multihead", *GENERATED_FAST, "test=false",
                       "trainer.limit_train_batches=1", "trainer.limit_val_batches=1",
                       "trainer.log_every_n_steps=1",
                       "trainer.enable_model_summary=false", "callbacks.attention_maps.examples=0"])
    train(cfg, tmp_path)
    header = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()[0]
    assert "train/penalty" in header


def _command_lines(text: str, fenced: bool):
    """``attnflow-train`` command lines in ``text``: in fenced code blocks (``fenced``: Markdown),
    else in ``#`` comments (a YAML file's header), a line ending in ``\\`` joined to the next."""
    lines, inside, found = text.splitlines(), False, []
    for i, line in enumerate(lines):
        inside = inside != line.startswith("```") if fenced else True
        body = line if fenced else line.lstrip("#") if line.startswith("#") else ""
        if not inside or not body.strip().startswith("attnflow-train"):
            continue
        for following in lines[i + 1:]:
            if not body.rstrip().endswith("\\"):
                break
            body = body.rstrip()[:-1] + " " + following.lstrip("# ")
        found.append((i + 1, re.sub(r"<[^>]*>", "run", body)))
    return found


def documented_train_commands():
    """Every ``attnflow-train`` command of README.md's code blocks and of conf/experiment/'s header
    comments, as (where, overrides): up to the comment (``#``) or note (``(…``) after it; a value's
    alternatives (``scorer=dot|general``) one command each; a placeholder (``model.init_from=<run>``)
    a path. Sweeps (``-m``, ``hparams_search=``: tests/test_sweeps.py), ``resume=`` (its run's own
    config) and ``--help`` are left out."""
    sources = [(ROOT / "README.md", True), *((p, False) for p in sorted((CONF / "experiment").glob("*.yaml")))]
    commands = []
    for path, fenced in sources:
        for line, body in _command_lines(path.read_text(), fenced):
            words = []
            for word in body.split()[1:]:
                if word.startswith(("#", "(")):
                    break
                words.append(word)
            if any(w.startswith(("-", "hparams_search=", "resume=")) for w in words):
                continue
            variants = [[]]
            for word in words:
                key, _, value = word.partition("=")
                variants = [[*v, f"{key}={option}"] for v in variants for option in value.split("|")]
            commands += [(f"{path.relative_to(ROOT)}:{line}", v) for v in variants]
    return commands


def test_the_documented_train_commands_are_found():
    """The extraction itself: README's and each experiment header's commands are there."""
    found = documented_train_commands()
    where = {w.split(":")[0] for w, _ in found}
    assert "README.md" in where and len([w for w in where if w.startswith("conf/experiment/")]) >= 20
    assert ["experiment=han_imdb", "pooling=mean"] in [o for _, o in found]
    assert ["experiment=mt_luong", "scorer=general"] in [o for _, o in found]


def _longest_per_experiment(commands, most=10):
    """A deterministic selection of ``commands`` (validating one costs 1-2 s, all ~100 of them
    minutes): per experiment (none: the default), the command with the most overrides (the first
    of the longest), and of those the ``most`` longest — the commands whose fields go stale first;
    a bare ``experiment=NAME`` is composed by test_every_experiment_runs_one_step."""
    longest = {}
    for where, overrides in commands:
        experiment = next((o for o in overrides if o.startswith("experiment=")), None)
        if len(overrides) > len(longest.get(experiment, ("", []))[1]):
            longest[experiment] = (where, overrides)
    return sorted(longest.values(), key=lambda c: (-len(c[1]), c[0]))[:most]


@pytest.mark.parametrize("where, overrides", _longest_per_experiment(documented_train_commands()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_the_documented_train_commands_compose_and_validate(where, overrides):
    """A command the README or an experiment's header shows is one that attnflow-train accepts:
    composed as the command line does (Hydra's node says what was typed) and validated (every
    check before the data is read: fields, ranges, the model built on the meta device); nothing
    is read or trained."""
    resolve_config(compose_cfg(overrides, return_hydra_config=True))
