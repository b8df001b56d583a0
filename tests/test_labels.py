"""labels.json: a classifier run names its classes beside config.yaml in the model's output
order; attnflow-predict and attnflow-export read the names there (edited ones too), and a file
that does not fit the model is one line, exit status 2."""

from __future__ import annotations

import json

import pytest

from attnflow.cli.export import main as export_main
from attnflow.cli.predict import main as predict_main
from attnflow.config.registry import DATA
from cli_runs import QUIET, document_files, document_overrides, fabricate_run, write_jsonl
from support import train_cli

LABELS = ["ml", "db", "ml", "db", "ml", "ml"]


@pytest.mark.slow
def test_a_trained_node_classifier_names_its_files_classes_in_the_models_order(monkeypatch, tmp_path):
    """Labels given as strings in a node table: labels.json lists them in the order of the class
    indices the data module gives the nodes (node 'ada', labelled ml, has y = the index of ml)."""
    (tmp_path / "nodes.csv").write_text("id,label,a,b\n" + "".join(
        f"n{i},{y},{i % 3},{(i * 7) % 5}\n" for i, y in enumerate(LABELS)))
    (tmp_path / "edges.csv").write_text("source,target\n" + "".join(f"n{i},n{(i + 1) % 6}\n" for i in range(6)))
    data = {"name": "graph", "nodes": str(tmp_path / "nodes.csv"), "edges": str(tmp_path / "edges.csv")}
    run = tmp_path / "run"
    assert train_cli(monkeypatch, "experiment=gat_graph", f"data.nodes={data['nodes']}",
                     f"data.edges={data['edges']}", "task.picture=false", "trainer.max_epochs=1",
                     *QUIET, f"hydra.run.dir={run}") == 0
    names = json.loads((run / "labels.json").read_text())
    y = DATA.build(data).full_graph().y.tolist()
    assert sorted(names) == ["db", "ml"] and [names[i] for i in y] == LABELS


def test_predict_and_export_read_the_names_edited_in_labels_json(tmp_path, capsys):
    docs = fabricate_run(document_overrides(document_files(tmp_path / "docs")), tmp_path / "han")
    assert json.loads((docs / "labels.json").read_text()) == ["0", "1"]
    (docs / "labels.json").write_text('["negative", "positive"]')
    assert predict_main([str(docs), "a great film.", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["label"] in ("negative", "positive") and set(out["probabilities"]) == {"negative", "positive"}

    rows = [{"text": f"the film was {w}.", "label": w} for w in ("good", "bad", "dull") * 4]
    write_jsonl(tmp_path / "texts.jsonl", rows)
    bert = fabricate_run(["experiment=bert_imdb", f"data.train_path={tmp_path}/texts.jsonl",
                          f"data.val_path={tmp_path}/texts.jsonl", "data.test_path=", "data.labels=null",
                          "data.max_len=16", "model.d_model=16", "model.layers=1", "model.ffn_dim=32",
                          "attention.heads=2", "data.vocab_size=60", *QUIET], tmp_path / "bert")
    assert json.loads((bert / "labels.json").read_text()) == ["bad", "dull", "good"]
    (bert / "labels.json").write_text('["awful", "boring", "fine"]')
    assert export_main([str(bert), "--to", "hf", str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "awful", "1": "boring", "2": "fine"}


@pytest.mark.parametrize("text, why", [
    ('["neg"]', "lists 1 names; the run's model has 2 classes"),
    ('{"polarity": ["neg", "pos"]}', "must hold one list of names: the run has one task"),
    ('["neg", 1]', "must list the class names in the model's order, as strings"),
    ("[neg, pos]", "is not valid JSON"),
])
def test_a_labels_json_that_does_not_fit_is_one_line(tmp_path, capsys, text, why):
    run = fabricate_run(document_overrides(document_files(tmp_path / "docs")), tmp_path / "han")
    (run / "labels.json").write_text(text)
    assert predict_main([str(run), "a great film."]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnflow-predict: {run / 'labels.json'} ") and why in err and err.count("\n") == 1
