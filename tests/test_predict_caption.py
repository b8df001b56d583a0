"""attnflow-predict on captioning runs (``attnflow-predict RUN image.png --attention out.png``): the
captions equal the task's own on images read here with PIL, the overlay PNG, α as data summing
to 1 over the region grid, JSON lines, unreadable images refused before anything is written, and
the refusal of runs it does not serve unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from attnflow.cli.predict import main
from attnflow.config.registry import MODELS, TASKS
from cli_runs import (QUIET, fabricate_run, one_torch_thread,  # noqa: F401  (autouse fixture)
                      parallel_files, translation_overrides)

SIZE = 48  # data.size: the smallest canvas of a 3 × 3 layout
TINY = ["experiment=caption_shapes", "data.train_size=32", "data.val_size=8", "data.test_size=8",
        f"data.size={SIZE}", "data.batch_size=16", "model.encoder.channels=[8,8]",
        "model.decoder.embed_dim=8", "model.decoder.hidden_dim=16", "trainer.max_epochs=1",
        "task.beam_size=2", "test=false", "callbacks.attention_maps.examples=1", *QUIET]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny captioning run trained for a few steps (2 batches), and three images: two shapes
    pictures saved as PNG (one at another size: resized on reading) and a JPEG."""
    from attnflow.data.shapes import make_example
    from attnflow.training.run import train
    from support import compose_cfg

    base = tmp_path_factory.mktemp("caption_run")
    train(compose_cfg(TINY), base / "run")
    images = []
    for i, (size, suffix) in enumerate([(SIZE, ".png"), (64, ".png"), (SIZE, ".jpg")]):
        pixels = make_example(9000 + i, size=size).image.permute(1, 2, 0).numpy()
        path = base / f"img{i}{suffix}"
        Image.fromarray((pixels * 255).round().astype(np.uint8)).save(path)
        images.append(path)
    return {"dir": base / "run", "images": images}


def _rebuild(run_dir):
    """The run's task (model inside, weights loaded) from its checkpoint and vocab.json alone."""
    best = json.loads((run_dir / "metrics.json").read_text())["best_checkpoint"]
    ckpt = torch.load(best, weights_only=True)
    cfg, art = ckpt["attnflow_config"], json.loads((run_dir / "vocab.json").read_text())
    assert art["input"] == "pixels" and art["image_size"] == SIZE
    model = MODELS.build(cfg["model"], tgt_vocab=len(art["itos"]), pad_id=0, in_channels=3)
    task = TASKS.build(cfg["task"], model, pad_id=0, bos_id=1, eos_id=2,
                       max_decode_len=art["max_decode_len"], itos=art["itos"])
    model.load_state_dict({k[6:]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")})
    return task.eval()


def _pixels(path) -> torch.Tensor:
    """(3, S, S) in [0, 1], read with PIL as the tutorials do (RGB, bilinear resize)."""
    img = Image.open(path).convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)


def _out(capsys):
    cap = capsys.readouterr()
    return cap.out.split("\n")[:-1], cap.err


@pytest.mark.slow
def test_captions_and_attention_equal_the_tasks_own(run, tmp_path, capsys):
    task = _rebuild(run["dir"])
    paths = [str(p) for p in run["images"]]
    npz, png = tmp_path / "attn.npz", tmp_path / "out.png"
    assert main([str(run["dir"]), *paths, "--save-attention", str(npz), "--attention", str(png),
                 "--batch-size", "2"]) == 0
    out, err = _out(capsys)
    assert len(out) == 3
    z = np.load(npz)
    assert str(z["kind"]) == "captioning" and int(z["lines"]) == 3
    h, w = task.model.grid(_pixels(paths[0])[None])
    for i, path in enumerate(paths):
        # no --beam: the run's task.beam_size=2
        words, alphas = task.caption(_pixels(path)[None], 2, need_weights=True)
        assert out[i] == f"{path}\t{' '.join(words[0])}"
        assert z[f"{i}/words"].tolist() == words[0] and str(z[f"{i}/image"]) == path
        a = z[f"{i}/alpha"]
        assert a.shape == (len(words[0]), h, w)
        np.testing.assert_allclose(a.reshape(len(words[0]), h * w), alphas[0].numpy(), rtol=1e-4)
        np.testing.assert_allclose(a.sum((1, 2)), 1.0, atol=1e-5)
        picture = tmp_path / f"out-{i}.png"
        assert f"attention of {path} drawn to {picture}" in err
        with Image.open(picture) as img:
            img.verify()
        with Image.open(picture) as img:
            assert img.format == "PNG" and img.size == (800, 860)
    assert not png.exists()  # several images: out-0.png, out-1.png, out-2.png


@pytest.mark.slow
def test_beam_option_and_one_image_json(run, tmp_path, capsys):
    task = _rebuild(run["dir"])
    path = str(run["images"][1])
    png = tmp_path / "one.png"
    assert main([str(run["dir"]), path, "--json", "--beam", "1", "--attention", str(png)]) == 0
    out, _ = _out(capsys)
    greedy, _ = task.caption(_pixels(path)[None], 1)
    assert [json.loads(line) for line in out] == [{"image": path, "caption": " ".join(greedy[0]),
                                                    "words": greedy[0]}]
    assert png.is_file() and not (tmp_path / "one-0.png").exists()
    with pytest.raises(SystemExit) as exc:
        main([str(run["dir"]), path, "--beam", "0"])
    assert exc.value.code == 2 and "argument --beam: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_image_paths_from_a_file_skip_blank_lines(run, tmp_path, capsys):
    listing = tmp_path / "images.txt"
    listing.write_text(f"{run['images'][0]}\n\n{run['images'][2]}\n")
    assert main([str(run["dir"]), "--file", str(listing)]) == 0
    out, _ = _out(capsys)
    assert [line.split("\t")[0] for line in out] == [str(run["images"][0]), str(run["images"][2])]
    blank = tmp_path / "blank.txt"  # blank lines only: no image, and the file is named
    blank.write_text("\n\n")
    assert main([str(run["dir"]), "--file", str(blank)]) == 2
    assert capsys.readouterr().err == (f"attnflow-predict: no images given (arguments, --file or "
                                       f"stdin): --file {blank} holds no image paths\n")


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["missing", "corrupt", "text"])
def test_an_unreadable_image_is_named_and_nothing_is_written(run, tmp_path, capsys, bad):
    good = str(run["images"][0])
    path = tmp_path / f"{bad}.png"
    if bad == "corrupt":  # a PNG cut short
        path.write_bytes(run["images"][0].read_bytes()[:80])
    elif bad == "text":
        path.write_text("not an image\n")
    out, npz, png = tmp_path / "captions.txt", tmp_path / "a.npz", tmp_path / "o.png"
    code = main([str(run["dir"]), good, str(path), "-o", str(out), "--save-attention", str(npz),
                 "--attention", str(png), "--batch-size", "1"])
    printed, err = _out(capsys)
    assert code == 2 and printed == []
    assert err.count("\n") == 1 and str(path) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{bad}.png"] if bad != "missing" else [])


@pytest.mark.slow
def test_an_attention_picture_named_as_another_output_is_refused(run, tmp_path, capsys):
    paths = [str(p) for p in run["images"][:2]]  # two images: o-0.png and o-1.png
    out = tmp_path / "o-1.png"
    assert main([str(run["dir"]), *paths, "--attention", str(tmp_path / "o.png"), "-o", str(out)]) == 2
    printed, err = _out(capsys)
    assert printed == [] and err.count("\n") == 1
    assert f"--attention {out} and -o {out} name the same file" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_attention_must_name_a_png(run, tmp_path, capsys):
    assert main([str(run["dir"]), str(run["images"][0]), "--attention", str(tmp_path / "a.pdf")]) == 2
    assert "--attention takes the PNG file" in capsys.readouterr().err


def test_region_features_of_the_wrong_size_are_named(tmp_path):
    from attnflow.inference.captions import read_input
    from attnflow.inference.runs import InferenceError

    model = MODELS.build({"name": "captioner", "encoder": {"name": "features"},
                          "decoder": {"name": "rnn_attention", "cell": "lstm", "embed_dim": 4,
                                      "hidden_dim": 8}}, tgt_vocab=8, feature_dim=6)
    art = {"input": "features", "feature_dim": 6}
    good, wide, ragged = tmp_path / "good.npy", tmp_path / "wide.npy", tmp_path / "ragged.npy"
    np.save(good, np.random.rand(9, 6).astype(np.float32))
    np.save(wide, np.random.rand(9, 7).astype(np.float32))
    np.save(ragged, np.random.rand(7, 6).astype(np.float32))  # 7 regions: no square grid
    assert read_input(str(good), art, model).shape == (9, 6)
    with pytest.raises(InferenceError, match=r"wide\.npy have shape \(9, 7\).*\(L, 6\)"):
        read_input(str(wide), art, model)
    with pytest.raises(InferenceError, match=r"ragged\.npy: .*L = 7 regions"):
        read_input(str(ragged), art, model)


def test_other_runs_keep_their_refusal(tmp_path, capsys):
    mt = fabricate_run(translation_overrides(parallel_files(tmp_path / "mt")), tmp_path / "mt_run")
    assert main([str(mt), "photo.png", "--attention", str(tmp_path / "o.png")]) == 2
    assert capsys.readouterr().err == (
        f"attnflow-predict: the run at {mt} works on seq2seq; attnflow-predict labels documents, "
        f"graph nodes and texts (BERT runs: text_classification, token_classification, "
        f"bert_pretraining, multitask) and captions images (translation runs: attnflow-translate)\n")


def test_captioning_options_on_other_runs_are_one_warning(tmp_path, capsys):
    """--beam and --attention do nothing for a document classifier: one warning naming them."""
    from cli_runs import document_files, document_overrides

    han = fabricate_run(document_overrides(document_files(tmp_path / "docs")), tmp_path / "han_run")
    capsys.readouterr()
    assert main([str(han), "a good film"]) == 0
    plain = capsys.readouterr().out
    assert main([str(han), "a good film", "--beam", "2", "--attention", str(tmp_path / "o.png")]) == 0
    out, err = capsys.readouterr()
    assert out == plain and err == (f"attnflow: warning: --beam, --attention: not read for the run "
                                    f"at {han}, which works on documents\n")
    assert not (tmp_path / "o.png").exists()


@pytest.fixture(scope="module")
def features_run(tmp_path_factory):
    """An untrained run on region features (data 'captions' with data.features, encoder
    'features'): 4 regions of D = 5 per image, from .npy files."""
    base = tmp_path_factory.mktemp("caption_features")
    (base / "images").mkdir()
    (base / "feats").mkdir()
    lines = []
    for i, caption in enumerate(["a red circle", "a blue square", "a green circle"]):
        Image.fromarray(np.full((8, 8, 3), 60 * i, np.uint8)).save(base / "images" / f"im{i}.png")
        np.save(base / "feats" / f"im{i}.npy",
                np.random.default_rng(i).normal(size=(4, 5)).astype(np.float32))
        lines.append(f"im{i}.png\t{caption}\n")
    (base / "caps.tsv").write_text("".join(lines))
    run_dir = fabricate_run([
        "model=captioner", "task=captioning", "data=captions", "attention=single",
        "scorer=additive", f"data.root={base}", "data.captions=", "data.train_captions=caps.tsv",
        "data.val_captions=caps.tsv", "data.test_split=null", "data.image_dir=images",
        "data.features=feats", "data.min_freq=1", "model.encoder.name=features",
        "model.decoder.embed_dim=8", "model.decoder.hidden_dim=16",
        "task.beam_size=1", "data.max_len=4", *QUIET],
        base / "run")
    return {"dir": run_dir, "feats": base / "feats", "images": base / "images"}


@pytest.mark.slow
def test_region_features_runs_caption_npy_files(features_run, tmp_path, capsys):
    ckpt = torch.load(features_run["dir"] / "checkpoints" / "last.ckpt", weights_only=True)
    cfg, art = ckpt["attnflow_config"], json.loads((features_run["dir"] / "vocab.json").read_text())
    assert art["input"] == "features" and art["feature_dim"] == 5
    model = MODELS.build(cfg["model"], tgt_vocab=len(art["itos"]), pad_id=0, feature_dim=5)
    task = TASKS.build(cfg["task"], model, pad_id=0, bos_id=1, eos_id=2,
                       max_decode_len=art["max_decode_len"], itos=art["itos"])
    model.load_state_dict({k[6:]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")})
    task.eval()
    feats = features_run["feats"]
    (feats / "im0.png").write_bytes((features_run["images"] / "im0.png").read_bytes())  # beside it
    paths = [str(feats / f"im{i}.npy") for i in range(3)]
    npz, png = tmp_path / "f.npz", tmp_path / "f.png"
    assert main([str(features_run["dir"]), *paths, "--save-attention", str(npz),
                 "--attention", str(png)]) == 0
    out, err = _out(capsys)
    z = np.load(npz)
    for i, path in enumerate(paths):
        words, alphas = task.caption(torch.from_numpy(np.load(path))[None], 1, need_weights=True)
        assert out[i] == f"{path}\t{' '.join(words[0])}"
        np.testing.assert_allclose(z[f"{i}/alpha"].reshape(len(words[0]), 4), alphas[0].numpy(),
                                   rtol=1e-4)
        with Image.open(tmp_path / f"f-{i}.png") as img:
            assert img.size == (800, 860)
            centre = np.asarray(img.convert("RGB"))[173, 100]  # the middle of the image panel
        # im0.png beside im0.npy is black: drawn; the others have none: the grey canvas
        assert (centre < 10).all() if i == 0 else (abs(centre.astype(int) - 128) < 3).all()
    np.save(feats / "wide.npy", np.zeros((4, 6), np.float32))
    assert main([str(features_run["dir"]), paths[0], str(feats / "wide.npy")]) == 2
    assert f"features {feats / 'wide.npy'} have shape (4, 6)" in capsys.readouterr().err
