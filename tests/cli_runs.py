"""Small run directories for the tests of the command-line tools (attnflow-eval, -predict,
-translate), made in a second instead of trained for minutes (imported as `cli_runs`).

:func:`fabricate_run` does what ``attnflow.training.run.train`` does up to ``Trainer.fit`` — the resolved
config (``config.yaml``), the data module's saved files (``tokenizer/``, ``vocab.json``) and a
checkpoint holding the resolved config and artifacts as Lightning's would — with the model's
freshly initialised (seeded) weights. The tools only read these files, so what they compute can
be checked against the same model rebuilt in the test.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import sys
from pathlib import Path
from typing import Callable, Iterable, List, Sequence

import pytest
import torch
import yaml

from attnflow.config.registry import DATA, MODELS, TASKS
from attnflow.io.labels import save_labels
from attnflow.io.weights import atomic_torch_save
from attnflow.training.validate import resolve_config
from support import compose_cfg

QUIET = ["callbacks.progress_bar=none", "trainer.accelerator=cpu", "logger=none"]

POSITIVE = "good great wonderful brilliant moving superb".split()
NEGATIVE = "bad awful boring dull stupid poor".split()
FILLER = "the film was a and it story acting plot".split()


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Torch on one thread for a test module that imports this fixture (small CPU steps on a
    shared machine: see tests/documents/conftest.py); the previous setting is restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def assert_streams(monkeypatch, module, main: Callable, args: List[str], line: str) -> None:
    """``main(args)`` reading 5 copies of ``line`` from ``module.iter_stdin`` in batches of 2
    prints its first batch before reading the third line, and one output line per input line."""
    consumed, seen_at_write = [], []

    def lines():
        for i in range(5):
            consumed.append(i)
            yield line

    class Out(io.StringIO):
        def write(self, s):
            seen_at_write.append(len(consumed))
            return super().write(s)

    monkeypatch.setattr(module, "iter_stdin", lines)
    monkeypatch.setattr(sys, "stdout", Out())
    assert main([*args, "--batch-size", "2"]) == 0
    assert seen_at_write[0] == 2 and len(sys.stdout.getvalue().splitlines()) == 5


def fabricate_run(overrides: Sequence[str], run_dir: Path, seed: int = 0) -> Path:
    """A run directory with untrained weights (see the module docstring)."""
    cfg = resolve_config(compose_cfg(list(overrides)))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    torch.manual_seed(seed)
    dm = DATA.build(cfg["data"], path="data")
    if hasattr(dm, "set_run_dir"):
        dm.set_run_dir(run_dir)
    model = MODELS.build(cfg["model"], path="model", **dm.model_context())
    task = TASKS.build(cfg["task"], model, path="task", **dm.task_context())
    ckpt = {"state_dict": task.state_dict(), "attnflow_config": cfg, "epoch": 0, "global_step": 0}
    if hasattr(dm, "save_artifacts"):
        dm.save_artifacts(run_dir)
        save_labels(run_dir, dm.label_names())
    if hasattr(dm, "artifacts"):  # as Task.on_save_checkpoint stores them
        ckpt["attnflow_artifacts"] = dm.artifacts()
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    atomic_torch_save(ckpt, run_dir / "checkpoints" / "last.ckpt")  # (with its digest)
    return run_dir


def document(label: int, rng: random.Random, words: int = 0) -> str:
    """A review-like text whose sentiment words follow ``label`` (sentences of 7 words)."""
    n = words or rng.randint(5, 30)
    ws = [rng.choice(POSITIVE if label else NEGATIVE) if rng.random() < 0.3 else rng.choice(FILLER)
          for _ in range(n)]
    return " ".join(" ".join(ws[i:i + 7]) + "." for i in range(0, n, 7))


def write_jsonl(path: Path, rows: Iterable[dict]) -> Path:
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def document_files(folder: Path, sizes=(("train", 60), ("dev", 20), ("other", 16))) -> Path:
    """JSON-lines files {text, label} of alternating labels, one per (name, size)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for name, n in sizes:
        write_jsonl(folder / f"{name}.jsonl", ({"text": document(i % 2, rng), "label": i % 2}
                                               for i in range(n)))
    return folder


def document_overrides(folder: Path, experiment: str = "han_imdb") -> List[str]:
    small = ["data.min_freq=1", "data.batch_size=64", "data.max_sentences=4", "data.max_words=6",
             "model.embed_dim=8"]
    if experiment == "han_imdb":
        small += ["model.word_encoder.hidden_dim=4", "model.sentence_encoder.hidden_dim=4",
                  "pooling.dim=4", "task.renderings=0"]
    else:
        small += ["model.encoder.hidden_dim=4", "model.hops=3", "model.attn_dim=5", "model.mlp_dim=6"]
    return [f"experiment={experiment}", f"data.train_path={folder}/train.jsonl",
            f"data.val_path={folder}/dev.jsonl", "data.test_path=''", *small, *QUIET]


PAIRS = [("Ein Mann schläft.", "A man sleeps."), ("Zwei Hunde spielen.", "Two dogs play."),
         ("Eine Frau liest ein Buch.", "A woman reads a book."), ("Ein Kind lacht.", "A child laughs."),
         ("Drei Männer laufen.", "Three men run."), ("Ein Hund schläft.", "A dog sleeps.")]


def parallel_files(folder: Path) -> Path:
    """Line-aligned de/en files: train (the pairs, repeated), val, test_a and test_b."""
    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": PAIRS * 4, "val": PAIRS[:3], "test_a": PAIRS[3:], "test_b": PAIRS[:4]}
    for stem, pairs in splits.items():
        (folder / f"{stem}.de").write_text("".join(d + "\n" for d, _ in pairs), encoding="utf-8")
        (folder / f"{stem}.en").write_text("".join(e + "\n" for _, e in pairs), encoding="utf-8")
    return folder


def translation_overrides(folder: Path, experiment: str = "mt_rnnsearch") -> List[str]:
    small = [f"data.root={folder}", "data.vocab_size=80", "data.test=test_a", "data.max_src_len=12",
             "data.max_tgt_len=12", "task.beam_size=1"]
    if experiment == "mt_transformer":
        small += ["model.d_model=16", "model.ffn_dim=16", "model.encoder_layers=2",
                  "model.decoder_layers=2", "attention.heads=2", "model.dropout=0.0"]
    else:
        small += ["model.embed_dim=8", "model.encoder.hidden_dim=8", "model.decoder.embed_dim=8",
                  "model.decoder.hidden_dim=8"]
    return [f"experiment={experiment}", *small, *QUIET]


GRAPH = ["experiment=gat_synthetic", "data.num_nodes=80", "data.loader=full", "task.picture=false",
         "trainer.num_sanity_val_steps=0", *QUIET]
