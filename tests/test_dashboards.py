"""Attention dashboards of every task family in W&B (offline) and TensorBoard: HAN's word and
sentence weights (images of one size + the HTML rendering), self-attention, GAT's neighbourhood
heat maps and the embedding picture with its class legend; validation examples across labels."""

from __future__ import annotations

import gzip
import json
import re

import pytest
import torch
from PIL import Image
from pytorch_lightning.loggers import TensorBoardLogger

from attnflow.data.documents import DocumentDataModule
from attnflow.data.examples import spread_over_labels
from attnflow.data.synthetic_graph import SyntheticGraphDataModule
from attnflow.config.registry import DATA, MODELS, TASKS
from attnflow.training.validate import resolve_config
from attnflow.training.run import train
from attnflow.viz.panels import log_panels, markdown_table
from support import compose_cfg
from test_loggers import _wandb_log, _wandb_run, wandb_env  # noqa: F401 (wandb_env: a fixture)

# A GPU run keeps its full-batch graph on the GPU: the examples' helper takes labels of any device
# (the "cuda" case runs where a GPU is, e.g. on bench/gpu_check.sh's machine).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))]

QUIET = ["trainer.accelerator=cpu", "callbacks.progress_bar=none", "trainer.max_epochs=1",
         "trainer.enable_model_summary=false", "trainer.num_sanity_val_steps=0"]


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # small RNN/scatter steps on a busy 2-core machine
    yield
    torch.set_num_threads(before)


# a tiny corpus sorted by label, as the IMDB dev file is
NEGATIVE = ["Bad film. Awful acting and a boring plot.", "Terrible. I hated it. Worst film ever.",
            "Boring and bad. The plot was awful.", "A waste of time. Bad, bad, bad."]
POSITIVE = ["Great film. I loved the acting.", "Wonderful! A moving and brilliant plot.",
            "Loved it. Great acting, great story.", "Brilliant film. Wonderful and moving."]


def _documents(path):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for label, texts in ((0, NEGATIVE), (1, POSITIVE)):
            for t in texts:
                f.write(json.dumps({"text": t, "label": label}) + "\n")
    return path


def _tiny_docs(tmp_path, *overrides):
    docs = _documents(tmp_path / "docs.jsonl.gz")
    return [f"data.train_path={docs}", f"data.val_path={docs}", f"data.test_path={tmp_path}/none",
            "data.min_freq=1", "data.batch_size=4", "model.embed_dim=8", *overrides]


def _tensorboard(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next((run_dir / "tensorboard").glob("version_*"))),
                           size_guidance={"images": 0})
    acc.Reload()
    return acc


def _overlay_sizes(run_dir):
    """The (width, height) of every TensorBoard image of a one-epoch run whose validation drew
    two attention overlays, after checking those are its only image tags, one step each: the
    epoch's under ``val/attention/<i>``, the best checkpoint's after training under ``best/…``."""
    acc = _tensorboard(run_dir)
    tags = sorted(acc.Tags()["images"])
    assert tags == ["best/val/attention/0", "best/val/attention/1", "val/attention/0", "val/attention/1"], tags
    assert all(len(acc.Images(t)) == 1 for t in tags)
    return {(e.width, e.height) for t in tags for e in acc.Images(t)}


# -- examples across labels ------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_examples_are_taken_round_robin_over_labels(device):
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 2], device=device)
    pick = spread_over_labels(labels, 5)
    assert pick.tolist() == [0, 4, 6, 1, 5] and pick.device == labels.device
    assert spread_over_labels(labels, 0).numel() == 0
    assert sorted(spread_over_labels(labels, 100).tolist()) == list(range(7))  # each once


def test_document_examples_come_from_both_labels_of_a_sorted_file(tmp_path):
    path = _documents(tmp_path / "docs.jsonl.gz")
    dm = DocumentDataModule(train_path=str(path), val_path=str(path), min_freq=1)
    assert dm.example_batch(4)["labels"].tolist() == [0, 1, 0, 1]  # the file: 4 × 0, then 4 × 1


def test_graph_examples_are_validation_nodes_of_different_classes():
    dm = SyntheticGraphDataModule(num_nodes=80, num_classes=4, seed=3)
    data = dm.full_graph()
    batch = dm.example_batch(4)
    nodes = batch["nodes"]
    assert batch["graph"] is data and len(nodes) == 4
    assert bool(data.val_mask[nodes].all())
    assert sorted(data.y[nodes].tolist()) == sorted(set(data.y[data.val_mask].tolist()))[:4]


# -- documents ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_han_run_logs_word_and_sentence_weights_to_wandb_and_tensorboard(tmp_path, wandb_env):
    cfg = compose_cfg(["experiment=han_imdb", *_tiny_docs(tmp_path), "model.word_encoder.hidden_dim=4",
                       "model.sentence_encoder.hidden_dim=4", "pooling.dim=4", *QUIET,
                       "logger=[wandb,tensorboard]", "task.renderings=1",
                       "callbacks.attention_maps.examples=2"])
    train(cfg, tmp_path / "run")
    assert len(_overlay_sizes(tmp_path / "run")) == 1
    # one rendering per validation of the fit, the best checkpoint's apart
    assert sorted(p.name for p in (tmp_path / "run" / "renderings").iterdir()) == ["best.html", "val_epoch0.html"]
    run = _wandb_run(tmp_path / "run")
    log = _wandb_log(run)
    # captions name the true class: the examples alternate between the two labels
    captions = re.findall(rb"true ([01]) \xc2\xb7 predicted", log)
    assert set(captions) == {b"0", b"1"}, captions
    assert "· blue: word α × √(sentence α); red: sentence α".encode() in log  # what it shows
    images = list((run / "files" / "media" / "images" / "val" / "attention").glob("*.png"))
    assert {p.name.split("_")[0] for p in images} == {"0", "1"}
    assert len({Image.open(p).size for p in images}) == 1
    html = list((run / "files" / "media" / "html").rglob("attention_html*.html"))
    assert html, "no W&B HTML panel"
    text = html[0].read_text()
    # word weights in blue, sentence weights in red, the documents' words in it
    assert "rgba(30,90,220" in text and "rgba(220,30,30" in text and "loved" in text and "boring" in text
    files = sorted(p.name for p in (tmp_path / "run" / "attention").glob("*.png"))
    assert files == ["val_document_0.png", "val_document_1.png"]


def test_self_attentive_dashboard_has_word_weights_and_html(tmp_path):
    cfg = resolve_config(compose_cfg(["experiment=self_attentive_imdb", *_tiny_docs(tmp_path)]))
    dm = DATA.build(cfg["data"], path="data")
    task = TASKS.build(cfg["task"], MODELS.build(cfg["model"], path="model", **dm.model_context()),
                       path="task", **dm.task_context())
    panels = task.dashboard(dm.example_batch(2))
    assert [p["key"] for p in panels] == ["val/attention/0", "val/attention/1", "val/attention_html"]
    assert panels[0]["image"].shape == panels[1]["image"].shape == (600, 1200, 3)
    assert "rgba(30,90,220" in panels[2]["html"]
    assert panels[0]["caption"].endswith(f"· blue: word α (mean over {task.model.hops} hops)")


# -- graphs ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_gat_run_logs_neighbourhood_maps_and_embedding_each_validation(tmp_path, wandb_env):
    cfg = compose_cfg(["experiment=gat_synthetic", "data.num_nodes=80", *QUIET,
                       "callbacks.attention_maps.every_n_epochs=1", "logger=[wandb,tensorboard]",
                       "test=false"])
    train(cfg, tmp_path / "run")
    data = SyntheticGraphDataModule(num_nodes=80, seed=1234).full_graph()  # the run's graph
    acc = _tensorboard(tmp_path / "run")
    node_tags = [t for t in acc.Tags()["images"] if t.startswith("val/attention/node_")]
    nodes = [int(t.rsplit("_", 1)[1]) for t in node_tags]
    assert len(nodes) == 4 and bool(data.val_mask[nodes].all())
    assert len(set(data.y[nodes].tolist())) == 4  # one node of each of the 4 classes
    # the epoch's validation under val/…, the best checkpoint's under best/…: one step each, one size
    best = [f"best/{t}" for t in node_tags]
    assert all(len(acc.Images(t)) == 1 for t in [*node_tags, *best, "graph/embedding", "best/graph/embedding",
                                                 "last/graph/embedding"])  # (the last weights')
    assert len({(e.width, e.height) for t in [*node_tags, *best] for e in acc.Images(t)}) == 1
    run = _wandb_run(tmp_path / "run")
    media = run / "files" / "media" / "images"
    assert {p.name.rsplit("_", 2)[0] for p in (media / "val" / "attention").glob("*.png")} == {
        f"node_{n}" for n in nodes}
    assert list((media / "graph").glob("embedding_*.png"))
    log = _wandb_log(run)  # captions: what each picture shows and when it was drawn
    for n in nodes:
        assert re.search(rf"node {n} \(class \d, predicted class \d\): α of its \d+ neighbours per "
                         rf"layer and head · epoch 0, step \d+".encode(), log), n
    # the last layer's α of its one head (out_heads=1): no mean over heads
    assert "every node's output vector (PCA, 2-D) by true class; edges by α (layer 2 of 2)".encode() in log
    assert re.search(rb"by true class; [^\x00]* \xc2\xb7 end of training, step \d+, last weights", log)
    files = sorted(p.name for p in (tmp_path / "run" / "attention").glob("*.png"))
    assert files == sorted(["graph_embedding.png", *(f"val_node_{n}.png" for n in nodes)])


def test_neighbourhoods_gather_each_nodes_incoming_alpha():
    from attnflow.viz.graph import neighbourhoods

    # edges j -> t; two layers with 2 and 1 heads
    ei = torch.tensor([[0, 1, 2, 3, 2], [2, 2, 2, 2, 0]])
    a1 = torch.tensor([[.1, .2], [.2, .3], [.3, .4], [.4, .1], [1., 1.]])
    a2 = torch.tensor([[.5], [.1], [.2], [.2], [1.]])
    (nbrs, alphas), = neighbourhoods([(ei, a1), (ei, a2)], torch.tensor([2]))
    assert nbrs.tolist() == [0, 1, 2, 3]
    assert torch.equal(alphas[0], a1[:4]) and torch.equal(alphas[1], a2[:4])
    (nbrs, alphas), = neighbourhoods([(ei, a1), (ei, a2)], torch.tensor([2]), max_neighbours=2)
    # mean α over layers and heads: 0 -> .3, 1 -> .2, 2 -> .3, 3 -> .2 (ties: the first)
    assert nbrs.tolist() == [0, 2] and torch.equal(alphas[1], a2[[0, 2]])


def test_embedding_picture_has_a_class_legend():
    from attnflow.viz.graph import embedding_figure

    fig = embedding_figure(torch.randn(30, 5), torch.arange(30) % 3, torch.tensor([[0, 1], [1, 2]]),
                           torch.tensor([0.5, 1.0]), class_names=["a", "b", "c"])
    legend = fig.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["a", "b", "c"]
    assert tuple(fig.get_size_inches() * fig.dpi) == (700, 700)
    fig.canvas.draw()
    box, page = legend.get_window_extent(), fig.bbox
    assert not box.overlaps(fig.axes[0].get_window_extent())  # beside the points, not over them
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1


def test_alpha_labels_name_layer_and_heads():
    from attnflow.viz.figures import alpha_label

    assert alpha_label(1) == "α"  # a block's one attention (RNNsearch)
    assert alpha_label(4) == "α (mean over 4 heads)"
    assert alpha_label(8, (3, 3)) == "α (layer 3 of 3, mean over 8 heads)"
    assert alpha_label(1, (2, 2)) == "α (layer 2 of 2)"
    assert alpha_label(8, (2, 6), head=5) == "α (layer 2 of 6, head 5 of 8)"


def test_transformer_heat_map_names_the_layer_and_the_heads_it_averages(monkeypatch):
    """The weights are the last decoder layer's, averaged over its heads: title, colour bar and
    caption say so (the heads counted from the weights, the layer from the decoder)."""
    import attnflow.tasks.seq2seq as seq2seq  # (the translation task's dashboard draws there)
    from support import BOS, EOS, PAD, pair_batch

    torch.manual_seed(0)
    model = MODELS.build({"name": "transformer", "d_model": 16, "ffn_dim": 32, "encoder_layers": 1,
                          "decoder_layers": 2, "attention": {"name": "multihead", "heads": 4}},
                         src_vocab=12, tgt_vocab=12, pad_id=PAD, path="model")
    task = TASKS.build({"name": "translation"}, model, pad_id=PAD, bos_id=BOS, eos_id=EOS,
                       max_decode_len=6, itos=[str(i) for i in range(12)], path="task")
    drawn, panel = [], seq2seq.image_panel
    monkeypatch.setattr(seq2seq, "image_panel", lambda key, fig, **kw: drawn.append(fig) or panel(key, fig, **kw))
    panels = [p for p in task.dashboard(pair_batch()) if p["kind"] == "image"]
    what = "α (layer 2 of 2, mean over 4 heads)"
    assert [p["caption"] for p in panels] == [
        f"validation example {i}: {what} of each output word over the source" for i in range(2)]
    heat, bar = drawn[0].axes
    assert heat.get_title() == f"validation example 0: {what}" and bar.get_ylabel() == what


# -- translation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
def test_translation_table_shows_sources_as_text(kind):
    from attnflow.data.parallel import train_tokenizer
    from attnflow.tasks.translation import TranslationTask

    lines = ["Ein Mann schläft auf einer Bank.", "Zwei Hunde spielen im Schnee, und ein Kind lacht."] * 20
    tok = train_tokenizer(kind, lines, 60)  # small: words come in several subwords
    itos = [tok.id_to_token(i) for i in range(tok.get_vocab_size())]
    task = TranslationTask(torch.nn.Linear(1, 1), 0, 1, 2, 10, itos, itos)
    ids = tok.encode(lines[1]).ids
    assert len(ids) > len(lines[1].split())
    assert task.source_text([1, *ids, 2, 0, 0]) == lines[1]


# -- BERT ----------------------------------------------------------------------------------------------
BERT_TINY = ["model.d_model=16", "model.layers=2", "model.ffn_dim=32", "attention.heads=2",
             "data.vocab_size=200", "data.batch_size=4"]


def _bert_texts(tmp_path):
    docs = _documents(tmp_path / "texts.jsonl.gz")
    return [f"data.train_path={docs}", f"data.val_path={docs}", "data.test_path="]


def _pairs_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"{t} {t}\n" for t in NEGATIVE + POSITIVE))
    return [f"data.train_path={path}", f"data.val_path={path}", "data.max_len=24"]


@pytest.mark.slow
def test_bert_run_logs_cls_attention_and_a_prediction_table(tmp_path, wandb_env):
    cfg = compose_cfg(["experiment=bert_imdb", *_bert_texts(tmp_path), *BERT_TINY, *QUIET,
                       "logger=[wandb,tensorboard]", "callbacks.attention_maps.examples=2"])
    train(cfg, tmp_path / "run")
    acc = _tensorboard(tmp_path / "run")
    tags = sorted(acc.Tags()["images"])
    assert tags == ["best/val/attention/0", "best/val/attention/1", "val/attention/0", "val/attention/1"], tags
    assert {(e.width, e.height) for t in tags for e in acc.Images(t)} == {(1200, 600)}
    assert any(t.startswith("val/predictions") for t in acc.Tags()["tensors"])  # the table as text
    run = _wandb_run(tmp_path / "run")
    _wandb_log(run)
    table = json.loads(next((run / "files" / "media" / "table").rglob("predictions*.table.json")).read_text())
    assert table["columns"] == ["text", "label", "predicted", "probability"] and len(table["data"]) == 2
    # the examples are spread over the labels; their text is the review as read (lower-cased)
    assert {row[1] for row in table["data"]} == {"0", "1"}
    assert {row[0] for row in table["data"]} <= {t.lower() for t in NEGATIVE + POSITIVE}
    assert all(row[2] in ("0", "1") and 0.5 <= row[3] <= 1 for row in table["data"])
    files = sorted(p.name for p in (tmp_path / "run" / "attention").glob("*.png"))
    assert files == ["val_text_0.png", "val_text_1.png"]


def _bert_task(overrides):
    cfg = resolve_config(compose_cfg(overrides))
    dm = DATA.build(cfg["data"], path="data")
    model = MODELS.build(cfg["model"], path="model", **dm.model_context())
    return dm, model, TASKS.build(cfg["task"], model, path="task", **dm.task_context())


@pytest.mark.slow
def test_bert_dashboards_show_the_models_own_predictions(tmp_path):
    torch.manual_seed(0)
    dm, model, task = _bert_task(["experiment=bert_imdb", *_bert_texts(tmp_path), *BERT_TINY])
    batch = dm.example_batch(3)
    n = batch["attention_mask"].sum(-1).tolist()
    tokens = [[dm.tokenizer.id_to_token(i) for i in row[:k]] for row, k in zip(batch["input_ids"].tolist(), n)]
    panels = task.dashboard(batch, tokens)
    assert [p["key"] for p in panels] == ["val/attention/0", "val/attention/1", "val/attention/2",
                                          "val/predictions"]
    assert all(p["image"].shape == (600, 1200, 3) for p in panels[:3])
    model.eval()
    with torch.no_grad():
        probs = torch.softmax(model.classify_logits(model(
            batch["input_ids"], batch["segment_ids"], batch["attention_mask"])), -1)
    names = dm.task_context()["class_names"]
    rows = panels[-1]["rows"]
    assert [r[1] for r in rows] == [names[y] for y in batch["labels"].tolist()]
    assert [r[2] for r in rows] == [names[k] for k in probs.argmax(-1).tolist()]
    assert [r[3] for r in rows] == pytest.approx(probs.max(-1).values.tolist(), abs=1e-4)
    assert panels[0]["caption"].startswith(f"true {rows[0][1]} · predicted {rows[0][2]}")

    dm, model, task = _bert_task(["experiment=bert_pretrain_imdb", *_pairs_corpus(tmp_path), *BERT_TINY])
    batch = dm.example_batch(2)
    panels = task.dashboard(batch)
    assert [p["key"] for p in panels] == ["val/attention/0", "val/attention/1", "val/masked_lm"]
    assert all(p["image"].shape == (600, 1200, 3) for p in panels[:2])
    model.eval()
    with torch.no_grad():
        hidden = model(batch["input_ids"], batch["segment_ids"], batch["attention_mask"])
        nsp = model.nsp_logits(hidden).argmax(-1).tolist()
    itos = [dm.tokenizer.id_to_token(i) for i in range(dm.tokenizer.get_vocab_size())]
    for b, row in enumerate(panels[-1]["rows"]):
        where = (batch["mlm_labels"][b] != -100).nonzero().flatten()
        with torch.no_grad():
            guess = model.mlm_logits(hidden[b, where]).argmax(-1).tolist()
        originals = batch["mlm_labels"][b, where].tolist()
        assert row[1].split(" ") == [f"{itos[o]}→{itos[g]}" for o, g in zip(originals, guess)]
        assert row[2:] == [("next", "random")[int(batch["nsp_labels"][b])], ("next", "random")[nsp[b]]]
        assert row[0].startswith("[CLS]") and "[SEP]" in row[0]


def test_token_classification_dashboard_shows_each_sentences_attention_and_its_tags():
    """Per sentence a token × token picture of the last layer (its colour bar naming the mean over
    the heads) titled with the predicted tags, and a table of the words with the true tags and
    the model's own predictions at each word's first piece."""
    torch.manual_seed(0)
    dm, model, task = _bert_task(["experiment=bert_tokens", "data.train_size=24", "data.val_size=6",
                                  "data.test_size=0", "test=false", "model.layers=1"])
    batch = dm.example_batch(2)
    n = batch["attention_mask"].sum(-1).tolist()
    tokens = [[dm.tokenizer.id_to_token(i) for i in row[:k]] for row, k in zip(batch["input_ids"].tolist(), n)]
    panels = task.dashboard(batch, tokens)
    assert [p["key"] for p in panels] == ["val/attention/0", "val/attention/1", "val/predictions"]
    model.eval()
    with torch.no_grad():
        pred = model.token_logits(model(batch["input_ids"], batch["segment_ids"],
                                        batch["attention_mask"])).argmax(-1)
    names, first = dm.task_context()["class_names"], batch["labels"] != -100
    for i, row in enumerate(panels[-1]["rows"]):
        assert row[1].split() == [names[y] for y in batch["labels"][i][first[i]].tolist()]
        assert row[2].split() == [names[k] for k in pred[i][first[i]].tolist()]
        words = [dm.tokenizer.id_to_token(t).lstrip("▁") or "▁"
                 for t in batch["input_ids"][i][first[i]].tolist()]
        assert row[0].split() == words
        assert panels[i]["caption"] == " ".join(f"{w}/{t}" for w, t in zip(words, row[2].split()))
    assert panels[0]["image"].ndim == 3


def test_an_attention_maps_setting_a_task_cannot_draw_is_one_warning():
    from attnflow.training.trainer_checks import idle_settings

    class NoPictures:
        registry_name, monitor = "plain", "val/loss"

    cfg = {"callbacks": {"attention_maps": {"examples": 4}}}
    assert idle_settings(cfg, NoPictures) == {"callbacks.attention_maps": (
        "callbacks.attention_maps is unread: task 'plain' draws no pictures of its examples")}
    assert all("callbacks.attention_maps" not in idle_settings(cfg, TASKS.get(n)) for n in TASKS.names())


CAPTION_TINY = ["experiment=caption_shapes", "data.train_size=32", "data.val_size=8",
                "data.test_size=0", "data.size=48", "data.batch_size=16",
                "model.encoder.channels=[8,8]", "model.decoder.embed_dim=8",
                "model.decoder.hidden_dim=16", "test=false"]


@pytest.mark.slow
def test_captioning_run_logs_word_overlays_and_a_caption_table(tmp_path, wandb_env):
    """Each validation: per example one overlay picture of one size (image + each word's α) and a
    reference/hypothesis table, in W&B and TensorBoard; the PNGs in the run directory."""
    cfg = compose_cfg([*CAPTION_TINY, *QUIET, "logger=[wandb,tensorboard]",
                       "callbacks.attention_maps.examples=2"])
    train(cfg, tmp_path / "run")
    assert len(_overlay_sizes(tmp_path / "run")) == 1
    run = _wandb_run(tmp_path / "run")
    log = _wandb_log(run)
    table = json.loads(next((run / "files" / "media" / "table").rglob("captions*.table.json")).read_text())
    assert table["columns"] == ["reference", "hypothesis"] and len(table["data"]) == 2
    from attnflow.data.shapes import make_splits
    val = make_splits(32, 8, 0, seed=1234, size=48)["val"]
    assert [row[0] for row in table["data"]] == [val[0].caption, val[1].caption]
    for i, row in enumerate(table["data"]):  # each picture's caption: the prediction and its reference
        assert f"validation example {i}".encode() in log
        assert f"predicted: {row[1]}; reference: {row[0]}".encode() in log
    images = list((run / "files" / "media" / "images").rglob("*.png"))
    assert len(images) >= 2
    files = sorted(p.name for p in (tmp_path / "run" / "attention").glob("*.png"))
    assert files == ["val_example_0.png", "val_example_1.png"]


def test_panels_reach_tensorboard_as_images_and_markdown_tables(tmp_path):
    """Without a run: an image panel is TensorBoard's HWC image, a table its Markdown text (cells
    with '|' or a line break kept in one cell); no panels, no calls."""
    logger, calls = TensorBoardLogger(save_dir=str(tmp_path)), []
    logger.experiment.add_image = lambda *a, **k: calls.append(("image", a, k))
    logger.experiment.add_text = lambda *a, **k: calls.append(("text", a, k))
    image = torch.zeros(4, 6, 3)
    log_panels([logger], [], step=1)
    assert calls == []
    log_panels([logger], [{"kind": "image", "key": "val/map", "image": image},
                          {"kind": "table", "key": "val/table", "columns": ["word", "p"],
                           "rows": [["a|b", 0.5], ["c\nd", 1]]}], step=7)
    assert calls[0] == ("image", ("val/map", image, 7), {"dataformats": "HWC"})
    table = "| word | p |\n| --- | --- |\n| a\\|b | 0.5 |\n| c d | 1 |"
    assert calls[1] == ("text", ("val/table", table, 7), {}) and len(calls) == 2
    assert markdown_table(["x"], []) == "| x |\n| --- |"
