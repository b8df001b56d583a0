"""attnflow-compare end to end on fabricated runs: the page, its figures against the models' own
attention, the refusals, the W&B table and the page in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy

from attnflow.cli.compare import main
from attnflow.compare.loading import load_task
from cli_runs import (GRAPH, QUIET, document_files, document_overrides, fabricate_run, parallel_files,
                      translation_overrides)
from support import CHROMIUM, CHROMIUM_MISSING, chromium_dom, chromium_flags

REVERSE = ["data.train_size=200", "data.val_size=20", "data.test_size=20", *QUIET]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("compare")
    return {s: fabricate_run([f"scorer={s}", *REVERSE], base / s, seed=i)
            for i, s in enumerate(("dot", "general", "additive"))}


def _teacher_forced(run, n):
    """α (B, T, S) of the run's own model on the first n validation pairs, and the pairs' sizes."""
    task, dm, _ = load_task(run)
    batch = dm.example_batch(n)
    with torch.no_grad():
        _, alpha = task.model(batch["src"], batch["src_lengths"], batch["tgt_in"], need_weights=True)
    T = (batch["tgt_out"] != 0).sum(1).tolist()
    return alpha.squeeze(2).numpy(), T, batch["src_lengths"].tolist()


def test_help_imports_neither_torch_nor_lightning():
    code = ("import sys\nfrom attnflow.cli.compare import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\nprint('HEAVY', [m for m in ('torch', 'pytorch_lightning', "
            "'matplotlib') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "--examples" in proc.stdout and "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


def test_page_and_figures_match_the_models_own_attention(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main([str(runs["dot"]), str(runs["general"]), "--examples", "3", "-o", str(out)]) == 0
    page = (out / "compare.html").read_text()
    assert page.count("<img") == 6 and "dot" in page and "general" in page
    stats = json.loads((out / "stats.json").read_text())
    (a, Ta, Sa), (b, _, _) = _teacher_forced(runs["dot"], 3), _teacher_forced(runs["general"], 3)
    rows_a = [a[i, t, :Sa[i]] for i in range(3) for t in range(Ta[i])]
    rows_b = [b[i, t, :Sa[i]] for i in range(3) for t in range(Ta[i])]
    js = [s["js"] for s in stats["js"] if s["view"] == "cross"]
    assert js == pytest.approx([np.mean([jensenshannon(p, q, base=2) ** 2 for p, q in zip(rows_a, rows_b)])],
                               rel=1e-4)
    dot = next(r for r in stats["statistics"] if r["run"] == "dot")
    assert dot["entropy (bits)"] == pytest.approx(np.mean([entropy(p, base=2) for p in rows_a]), rel=1e-4)
    assert dot["rows"] == len(rows_a)
    assert "dot" in capsys.readouterr().out


def test_aer_is_of_each_target_words_heaviest_source_word(runs, tmp_path):
    alpha, T, S = _teacher_forced(runs["dot"], 3)
    gold = tmp_path / "gold.txt"  # the reversal: source word i with target word n - 1 - i
    gold.write_text("".join(" ".join(f"{i}-{n - 1 - i}" for i in range(n)) + "\n" for n in S))
    assert main([str(runs["dot"]), str(runs["general"]), "--examples", "3", "--alignments",
                 str(gold), "-o", str(tmp_path / "o")]) == 0
    got = json.loads((tmp_path / "o" / "stats.json").read_text())["aer"]["dot"]
    hits = sum(int(alpha[e, t, : S[e]].argmax()) == S[e] - 1 - t for e in range(3) for t in range(T[e] - 1))
    links = sum(T[e] - 1 for e in range(3))  # every target word but <eos>, one link each
    assert got == pytest.approx(1 - 2 * hits / (links + sum(S)))


def test_a_sweep_folder_names_runs_by_what_was_swept(runs, tmp_path):
    sweep = tmp_path / "sweep"
    for i, (scorer, acc) in enumerate((("dot", 0.5), ("additive", 0.9))):
        job = sweep / str(i)
        shutil.copytree(runs[scorer], job)
        (job / ".hydra").mkdir()
        (job / ".hydra" / "overrides.yaml").write_text(f"- scorer={scorer}\n")
        (job / "metrics.json").write_text(json.dumps({"metrics": {"val/seq_acc": acc}, "epochs": 1}))
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    from attnflow.compare.runs import named_runs

    for i, scorer in enumerate(("dot", "additive")):
        (sweep / str(i) / ".hydra" / "overrides.yaml").write_text(f"- model.decoder.scorer.name={scorer}\n")
    named, _ = named_runs([sweep])  # a block's name field is shown by its block
    assert [label for label, _ in named] == ["scorer=additive", "scorer=dot"]
    for i, scorer in enumerate(("dot", "additive")):
        (sweep / str(i) / ".hydra" / "overrides.yaml").write_text(f"- scorer={scorer}\n")
    assert main([str(sweep), "--examples", "2", "--permutations", "0"]) == 0
    stats = json.loads((sweep / "compare" / "stats.json").read_text())
    assert list(stats["runs"]) == ["scorer=additive", "scorer=dot"]  # best first
    report = tmp_path / "report"  # a report folder names its sweep in .report-of
    report.mkdir()
    (report / ".report-of").write_text(str(sweep.resolve()))
    assert main([str(report), "--top", "2", "--examples", "1", "--permutations", "0",
                 "-o", str(tmp_path / "r")]) == 0
    assert list(json.loads((tmp_path / "r" / "stats.json").read_text())["runs"]) == list(stats["runs"])


def test_runs_of_other_families_or_data_are_refused_in_one_line(runs, tmp_path, capsys):
    han = fabricate_run(document_overrides(document_files(tmp_path / "docs")), tmp_path / "han")
    assert main([str(runs["dot"]), str(han)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different families" in err
    other = fabricate_run(["scorer=dot", "data.seed=7", *REVERSE], tmp_path / "seed7")
    assert main([str(runs["dot"]), str(other), "--examples", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "see val 0 differently" in err
    assert main([str(runs["dot"])]) == 2
    assert "name two runs or more" in capsys.readouterr().err
    assert main([str(runs["dot"]), str(runs["general"]), "--ids", "3,99", "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == ("attnflow-compare: example ids 99 are outside the "
                                               "split's 20 items (0 to 19)")


def test_classifiers_get_jain_and_wallace_and_graphs_compare_chosen_nodes(tmp_path):
    docs = document_files(tmp_path / "docs")
    han = [fabricate_run(document_overrides(docs), tmp_path / f"han{i}", seed=i) for i in range(2)]
    assert main([*map(str, han), "--examples", "3", "--permutations", "4", "-o", str(tmp_path / "h")]) == 0
    stats = json.loads((tmp_path / "h" / "stats.json").read_text())
    assert {r["view"] for r in stats["statistics"]} == {"word", "sentence"}
    for d in stats["diagnostics"].values():
        assert -1 <= d["kendall_tau"] <= 1 and 0 <= d["tvd"] <= 1 and "permuted" in d
    assert "Jain &amp; Wallace" in (tmp_path / "h" / "compare.html").read_text()
    gat = [fabricate_run(GRAPH, tmp_path / f"gat{i}", seed=i) for i in range(2)]
    assert main([*map(str, gat), "--ids", "3,5", "-o", str(tmp_path / "g")]) == 0
    stats = json.loads((tmp_path / "g" / "stats.json").read_text())
    assert stats["examples"] == ["node 3", "node 5"]
    assert {r["view"] for r in stats["statistics"]} == {"neighbours L1", "neighbours L2"}


def test_sentences_of_a_file_are_compared_teacher_forced_on_their_target(runs, tmp_path, capsys):
    from attnflow.compare.comparison import Choice, build_comparison

    c = build_comparison([("dot", runs["dot"]), ("general", runs["general"])],
                         Choice(texts=["a b c d", "k l m"], permutations=0))
    assert c.keys() == ["text 1", "text 2"]
    cross = c.examples["general"][0].views[0]
    assert cross.rows == ["d", "c", "b", "a", "<eos>"] and cross.labels[0] == ["a", "b", "c", "d"]
    (tmp_path / "s.txt").write_text("a b zz\n")
    assert main([str(runs["dot"]), str(runs["general"]), "--texts", str(tmp_path / "s.txt"),
                 "-o", str(tmp_path / "o")]) == 2
    assert "text 1: zz: not a sequence of the data's symbols" in capsys.readouterr().err
    graph = [fabricate_run(GRAPH, tmp_path / f"gat{i}", seed=i) for i in range(2)]
    assert main([*map(str, graph), "--texts", str(tmp_path / "s.txt"), "-o", str(tmp_path / "g")]) == 2
    assert "takes no texts: choose its validation examples by number" in capsys.readouterr().err


def test_texts_of_your_own_reach_classifiers_tokenised_as_their_data(tmp_path):
    from attnflow.compare.comparison import Choice, build_comparison
    from attnflow.data.documents import encode_texts

    docs = document_files(tmp_path / "docs")
    han = [fabricate_run(document_overrides(docs), tmp_path / f"han{i}", seed=i) for i in range(2)]
    texts = ["A wonderful film. The acting was superb.", "Dull and boring."]
    c = build_comparison([("a", han[0]), ("b", han[1])], Choice(texts=texts, permutations=2))
    dm = load_task(han[0])[1]
    batch, shown = encode_texts(texts, dm.vocab, dm.max_sentences, dm.max_words)
    first = c.examples["a"][0]
    word = next(v for v in first.views if v.kind == "word")
    assert word.labels == shown[0] and first.title.startswith("a wonderful film")
    assert c.diagnostics["a"]["kendall_tau"] == c.diagnostics["a"]["kendall_tau"]  # a number
    assert "true" not in first.caption


def test_runs_tokenised_differently_are_compared_per_word(tmp_path, capsys):
    files = parallel_files(tmp_path / "mt")
    long = ["data.max_src_len=40", "data.max_tgt_len=40"]  # (no source cut: the same words)
    runs = [fabricate_run([*translation_overrides(files), f"data.vocab_size={v}", *long], tmp_path / f"v{v}")
            for v in (40, 80)]
    assert main([*map(str, runs), "--examples", "3", "-o", str(tmp_path / "o")]) == 0
    assert "compared per word" in capsys.readouterr().err
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert "per word" in stats["note"] and stats["js"] and all(0 <= s["js"] <= 1 for s in stats["js"])
    cut = fabricate_run([*translation_overrides(files), "data.vocab_size=40"], tmp_path / "cut")
    assert main([str(runs[1]), str(cut), "--examples", "3", "-o", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err  # the source cut to 12 pieces: a word fewer
    assert "see val 0 differently (cross columns: Ein Mann schläft . … against Ein Mann schläft …)" in err


def test_an_output_folder_with_other_files_is_refused_first(runs, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main([str(runs["dot"]), str(runs["general"]), "-o", str(tmp_path)]) == 2
    assert "holds other files (notes.txt)" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_wandb_table_has_a_row_per_example_and_a_column_per_run(runs, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from attnflow.compare.comparison import Choice, build_comparison
    from attnflow.compare.wandb_table import example_rows

    c = build_comparison([("dot", runs["dot"]), ("additive", runs["additive"])], Choice(examples=2))
    columns, rows = example_rows(c)
    assert columns == ["example", "title", "dot", "additive"]
    assert [r[0] for r in rows] == ["val 0", "val 1"] and all(r[2].size[0] > 100 for r in rows)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert main([str(runs["dot"]), str(runs["additive"]), "--examples", "2", "--wandb",
                 "-o", str(tmp_path / "w")]) == 0
    assert list((tmp_path / "w" / "wandb").glob("offline-run-*/run-*.wandb"))


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=CHROMIUM_MISSING)
def test_page_shows_the_runs_side_by_side_in_chromium(runs, tmp_path):
    from PIL import Image

    out = tmp_path / "cmp"
    assert main([*(str(r) for r in runs.values()), "--examples", "2", "-o", str(out)]) == 0
    probe = ("<script>addEventListener('load', () => { const b = document.body.dataset;"
             "b.boxes = [...document.images].map(i => { const r = i.getBoundingClientRect();"
             "return [r.left, r.top, r.right, i.naturalWidth > 0 ? 1 : 0].map(Math.round).join(','); })"
             ".join(';'); b.scroll = document.documentElement.scrollWidth; });</script></body>")
    window = "--window-size=1400,1600"
    dom = chromium_dom(out / "compare.html", probe, tmp_path, window, "--hide-scrollbars")
    boxes = [tuple(map(int, b.split(","))) for b in re.search(r'data-boxes="([^"]*)"', dom).group(1).split(";")]
    assert len(boxes) == 6 and all(loaded for *_, loaded in boxes)
    for row in (boxes[:3], boxes[3:]):  # one example: three runs on one line, left to right
        assert len({top for _, top, _, _ in row}) == 1 and [l for l, *_ in row] == sorted(l for l, *_ in row)
    assert int(re.search(r'data-scroll="(\d+)"', dom).group(1)) <= 1400
    shot = tmp_path / "shot.png"
    subprocess.run([*chromium_flags(tmp_path), f"--screenshot={shot}", window, "--hide-scrollbars",
                    (out / "compare.html").as_uri()], capture_output=True, timeout=120, check=True)
    with Image.open(shot) as im:
        colours = len(im.convert("RGB").getcolors(maxcolors=1 << 20) or [])
    assert colours > 50  # text, tables and heat maps drawn, not blank
