"""The registered captioning data modules: ``shapes`` (synthetic, regions known) and ``captions``
(real layouts, on a tiny generated folder): batches, vocabularies, splits, features, errors,
artifacts."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from attnflow.data.captioning import tokenize_caption
from attnflow.data.errors import DataError
from attnflow.config.registry import DATA, AttnflowWarning, ConfigError

PAD, BOS, EOS, UNK = 0, 1, 2, 3  # the contract's ids
RGB = {"red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0),
       "yellow": (1.0, 1.0, 0.0)}  # the colour words' pure RGB values (the synthetic set's spec)
NOUNS = {"circle", "square", "triangle"}


def shapes(**kw):
    return DATA.build({"name": "shapes", "train_size": 40, "val_size": 12, "test_size": 12,
                       "batch_size": 8, **kw}, path="data")


def words_of(ids, itos):
    out = []
    for i in ids.tolist():
        if i == EOS:
            break
        out.append(itos[i])
    return out


# -- shapes ------------------------------------------------------------------------------------------
def test_shapes_batch_keys_dtypes_and_framing():
    dm = shapes()
    ctx, task = dm.model_context(), dm.task_context()
    assert ctx == {"tgt_vocab": len(task["itos"]), "pad_id": 0, "in_channels": 3, "feature_dim": None}
    b = next(iter(dm.val_dataloader()))
    assert set(b) == {"images", "tgt_in", "tgt_out", "idx", "regions"}
    B, T = b["tgt_out"].shape
    assert b["images"].shape == (B, 3, 64, 64) and b["images"].dtype == torch.float32
    assert b["tgt_in"].dtype == b["tgt_out"].dtype == b["idx"].dtype == torch.long
    assert b["regions"].shape == (B, T, 64, 64) and b["regions"].dtype == torch.bool
    assert b["idx"].tolist() == list(range(B))  # val is not shuffled
    for row in range(B):
        n = int((b["tgt_out"][row] != PAD).sum())  # words + ⟨eos⟩
        assert b["tgt_out"][row, n - 1] == EOS and (b["tgt_out"][row, n:] == PAD).all()
        assert b["tgt_in"][row, 0] == BOS and (b["tgt_in"][row, n:] == PAD).all()
        assert torch.equal(b["tgt_in"][row, 1:n], b["tgt_out"][row, : n - 1])
        caption = " ".join(words_of(b["tgt_out"][row], task["itos"]))
        refs = task["references"]("val", [row])[0]  # every true caption, the drawn one first
        assert refs[0] == caption and len(refs) == len(set(refs)) >= 1
        assert caption == dm.sets["val"][row].caption


def test_shapes_regions_cover_the_named_shape_pixels():
    """For a word naming a shape, its region is exactly the pixels of that word's colour in the
    image (read from the pixel values); other words have no region."""
    dm = shapes(background="mixed")
    b = dm.example_batch(12)
    itos = dm.task_context()["itos"]
    named = 0
    for row in range(12):
        image, words = b["images"][row], words_of(b["tgt_out"][row], itos)
        for t in range(b["tgt_out"].shape[1]):
            region = b["regions"][row, t]
            if t < len(words) and (words[t] in RGB or words[t] in NOUNS):
                colour = words[t] if words[t] in RGB else words[t - 1]
                want = torch.tensor(RGB[colour]).view(3, 1, 1)
                of_colour = (image == want).all(dim=0)
                assert region.any() and torch.equal(region, of_colour)
                named += 1
            else:
                assert not region.any()
    assert named >= 24  # at least a colour and a noun per caption


def test_shapes_vocabulary_from_train_only():
    dm = shapes(train_size=2, val_size=40)
    itos = dm.task_context()["itos"]
    train_words = {w for i in range(2) for w in dm.sets["train"][i].words}
    assert itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and set(itos[4:]) == train_words
    val_words = {w for i in range(40) for w in dm.sets["val"][i].words}
    assert val_words - train_words  # some val words are new
    b = dm.example_batch(40)
    assert (b["tgt_out"] == UNK).any()
    other = shapes(train_size=2, val_size=5, test_size=3)  # other held-out sizes, same vocabulary
    assert other.task_context()["itos"] == itos


def test_shapes_splits_disjoint_and_deterministic():
    dm = shapes()
    seeds = {s: set(range(d.seed, d.seed + len(d))) for s, d in dm.sets.items()}
    assert not (seeds["train"] & seeds["val"] or seeds["train"] & seeds["test"]
                or seeds["val"] & seeds["test"])
    val, test = dm.example_batch(12, "val"), dm.example_batch(12, "test")
    assert not torch.equal(val["images"], test["images"])
    again = shapes().example_batch(12, "val")
    assert all(torch.equal(val[k], again[k]) for k in val)
    other = shapes(seed=99).example_batch(12, "val")
    assert not torch.equal(val["images"], other["images"])


def test_shapes_max_decode_len_from_the_grammar():
    # "a C S" + per other shape "left of a C S" (5 words) + "and" between relations: 3 + 5 + 1 + 5
    assert shapes().task_context()["max_decode_len"] == 14 + 2
    dm = shapes(max_shapes=2, val_size=300)  # "a C S left of a C S" is common: the bound is met
    lengths = [len(dm.sets["val"][i].words) for i in range(300)]
    assert max(lengths) + 2 == dm.task_context()["max_decode_len"] == 8 + 2


def test_shapes_no_test_split_and_bad_fields():
    dm = shapes(test_size=0)
    with pytest.raises(ValueError, match="test_size=0"):
        dm.test_dataloader()
    with pytest.raises(ConfigError, match="grid"):
        shapes(grid=1)


def test_shapes_artifacts_round_trip(tmp_path):
    dm = shapes()
    path = dm.save_artifacts(tmp_path)
    art = json.loads(path.read_text())
    assert art == {"itos": dm.task_context()["itos"], "input": "pixels", "image_size": 64,
                   "feature_dim": None, "max_decode_len": 16}
    fresh = shapes(train_size=3)  # another train set would give another vocabulary ...
    fresh.setup_evaluation(tmp_path, art, "val")  # ... the run's is used
    assert fresh.task_context()["itos"] == art["itos"]
    assert torch.equal(fresh.example_batch(5)["tgt_out"], dm.example_batch(5)["tgt_out"])
    with pytest.raises(ConfigError, match="no vocabulary"):
        shapes().setup_evaluation(tmp_path, {}, "val")


# -- captions: a tiny generated folder -------------------------------------------------------------
COLOURS = {"a.png": (255, 0, 0), "b.png": (0, 0, 255), "c.png": (0, 255, 0), "d.png": (255, 255, 0)}
TRAIN = [("a.png", "A red square."), ("a.png", "Red, red everywhere!"), ("b.png", "a blue thing"),
         ("b.png", "Something blue")]
VAL = [("c.png", "A green field"), ("c.png", "green grass"), ("d.png", "A yellow sun")]


@pytest.fixture
def folder(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name, colour in COLOURS.items():
        Image.new("RGB", (6, 4), colour).save(images / name)
    (tmp_path / "train.tsv").write_text("".join(f"{n}#{k}\t{c}\n" for k, (n, c) in enumerate(TRAIN)))
    (tmp_path / "val.tsv").write_text("".join(f"{n}\t{c}\n" for n, c in VAL))
    return tmp_path


def captions(folder, **kw):
    cfg = {"name": "captions", "root": str(folder), "captions": None, "train_captions": "train.tsv",
           "val_captions": "val.tsv", "image_dir": "images", "image_size": 8, "min_freq": 1,
           "batch_size": 8, **kw}
    return DATA.build(cfg, path="data")


def hand_tokens(text):  # lower case, punctuation removed (independently of the module)
    return "".join(ch if ch.isalnum() or ch == " " else " " for ch in text.lower()).split()


def test_tokenize_caption():
    assert tokenize_caption("A dog's ball,  RED!  (2 of them)") == ["a", "dog's", "ball", "red",
                                                                   "2", "of", "them"]


def test_captions_items_pairs_and_references(folder):
    dm = captions(folder)
    ctx, task = dm.model_context(), dm.task_context()
    assert ctx == {"tgt_vocab": len(task["itos"]), "pad_id": 0, "in_channels": 3, "feature_dim": None}
    assert len(dm.train_dataloader().dataset) == len(TRAIN)  # one item per (image, caption) pair
    b = dm.example_batch(10, "train")
    assert b["images"].shape == (4, 3, 8, 8) and set(b) == {"images", "tgt_in", "tgt_out", "idx"}
    for row, (name, text) in enumerate(TRAIN):
        assert words_of(b["tgt_out"][row], task["itos"]) == hand_tokens(text)
        want = torch.tensor(COLOURS[name], dtype=torch.float32).view(3, 1, 1) / 255
        assert torch.allclose(b["images"][row], want.expand(3, 8, 8), atol=1e-6)
    v = dm.example_batch(10)  # val: one item per image, first caption the target
    assert v["idx"].tolist() == [0, 1] and torch.equal(v["tgt_in"][:, 1:], v["tgt_out"][:, :-1]
                                                      * (v["tgt_out"][:, :-1] != EOS))
    assert task["references"]("val", [1, 0]) == [
        [" ".join(hand_tokens(VAL[2][1]))], [" ".join(hand_tokens(c)) for _, c in VAL[:2]]]
    assert words_of(v["tgt_out"][0], task["itos"])[0] == "a"  # "a green field": a, then <unk>s
    with pytest.raises(ValueError, match="test_captions"):  # no test source: no test split
        dm.test_dataloader()


def test_captions_min_freq_unk_and_max_len(folder):
    dm = captions(folder, min_freq=2, max_len=2)
    itos = dm.task_context()["itos"]
    counts = {}
    for _, text in TRAIN:
        for w in hand_tokens(text):
            counts[w] = counts.get(w, 0) + 1
    assert set(itos[4:]) == {w for w, c in counts.items() if c >= 2} == {"a", "red", "blue"}
    b = dm.example_batch(10, "train")
    assert b["tgt_out"].shape[1] == 3  # 2 words + <eos>
    for row, (_, text) in enumerate(TRAIN):
        kept = hand_tokens(text)[:2]
        assert words_of(b["tgt_out"][row], itos) == [w if counts.get(w, 0) >= 2 else "<unk>" for w in kept]
    assert dm.task_context()["max_decode_len"] == 4
    assert dm.references("train", [1]) == [["red red everywhere"]]  # references are not cut


def test_captions_karpathy_and_coco_json(folder):
    split = {"a.png": "train", "b.png": "restval", "c.png": "val", "d.png": "test"}
    images = [{"filename": n, "split": s, "sentences": [{"raw": c} for m, c in TRAIN + VAL if m == n]}
              for n, s in split.items()]
    (folder / "karpathy.json").write_text(json.dumps({"images": images}))
    dm = captions(folder, captions="karpathy.json", train_captions="", val_captions="")
    dm.setup()
    assert len(dm.dataset("train")) == len(TRAIN) and len(dm.dataset("val")) == 1
    assert dm.references("test", [0]) == [["a yellow sun"]]
    only = captions(folder, captions="karpathy.json", train_captions="", val_captions="",
                    train_split=["train"], test_split=None)
    only.setup()
    assert len(only.dataset("train")) == 2 and only.missing_test()
    coco = {"images": [{"id": 7, "file_name": "c.png"}, {"id": 9, "file_name": "d.png"}],
            "annotations": [{"image_id": 9, "caption": "A yellow sun"},
                            {"image_id": 7, "caption": "green grass"}]}
    (folder / "coco.json").write_text(json.dumps(coco))
    dm = captions(folder, val_captions="coco.json")
    dm.setup()  # images in the order the annotations first name them
    assert dm.references("val", [0, 1]) == [["a yellow sun"], ["green grass"]]


def test_captions_features_npy_and_npz(folder):
    feats = folder / "feats"
    feats.mkdir()
    arrays = {n: np.random.default_rng(i).normal(size=(4, 5)).astype(np.float32)
              for i, n in enumerate(COLOURS)}
    for n, arr in arrays.items():
        np.save(feats / n.replace(".png", ".npy"), arr)
    dm = captions(folder, features="feats")
    assert dm.model_context() == {"tgt_vocab": len(dm.vocab), "pad_id": 0, "in_channels": None,
                                  "feature_dim": 5}
    b = dm.example_batch(4, "train")
    assert b["images"].shape == (4, 4, 5) and b["pixels"].shape == (4, 3, 8, 8)
    for row, (name, _) in enumerate(TRAIN):
        assert torch.equal(b["images"][row], torch.from_numpy(arrays[name]))
    assert dm.artifacts()["input"] == "features" and dm.artifacts()["feature_dim"] == 5
    assert dm.artifacts()["image_size"] is None
    np.savez(folder / "feats.npz", **arrays)  # keyed by image file name
    z = captions(folder, features="feats.npz").example_batch(2, "val")
    assert torch.equal(z["images"][1], torch.from_numpy(arrays["d.png"]))
    np.save(feats / "c.npy", np.zeros((4, 6), np.float32))  # another D
    with pytest.raises(DataError, match=r"c\.npy.*\(4, 6\)"):
        captions(folder, features="feats").model_context()
    (feats / "d.npy").unlink()
    np.save(feats / "c.npy", arrays["c.png"])
    with pytest.raises(DataError, match=r"d\.png.*d\.npy"):
        captions(folder, features="feats").model_context()


def test_captions_clear_errors(folder):
    with pytest.raises(ConfigError, match=r"val split.*data\.val_captions"):
        captions(folder, val_captions="")
    with pytest.raises(DataError, match=r"nope\.tsv.*data\.val_captions|data\.val_captions.*nope\.tsv"):
        captions(folder, val_captions="nope.tsv").model_context()
    (folder / "bad.tsv").write_text("a.png\tfine\nzzz.png\ta caption\n")
    with pytest.raises(DataError, match=r"bad\.tsv line 2.*zzz\.png"):
        captions(folder, train_captions="bad.tsv").model_context()
    (folder / "empty.tsv").write_text("a.png\tfine\nb.png\t  \n")
    with pytest.raises(DataError, match=r"empty\.tsv line 2: empty caption"):
        captions(folder, train_captions="empty.tsv").model_context()
    (folder / "punct.tsv").write_text("a.png\tfine\nb.png\t... !\n")
    with pytest.raises(DataError, match=r"punct\.tsv line 2: the caption '... !' has no words"):
        captions(folder, train_captions="punct.tsv").model_context()
    with pytest.raises(DataError, match=r"train\.tsv.*no splits"):  # a TSV has no Karpathy splits
        captions(folder, captions="train.tsv", train_captions="").model_context()


def test_captions_artifacts_round_trip(folder, tmp_path):
    dm = captions(folder, min_freq=2)
    art = json.loads(dm.save_artifacts(tmp_path).read_text())
    assert art == {"itos": dm.task_context()["itos"], "input": "pixels", "image_size": 8,
                   "feature_dim": None, "max_decode_len": 52}
    # the training file, its split's name and the vocabulary's cut-off are not read in evaluation
    fresh = captions(folder, train_captions="missing.tsv", train_split=["nowhere"], min_freq=9)
    fresh.setup_evaluation(tmp_path, art, "val")
    assert fresh.task_context()["itos"] == art["itos"]
    mine, theirs = fresh.example_batch(5), dm.example_batch(5)
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    with pytest.raises(ConfigError, match="trained on features"):
        captions(folder).setup_evaluation(tmp_path, {**art, "input": "features"}, "val")


def test_fields_a_splits_own_file_leaves_unread_change_nothing(folder):
    """train_split/val_split beside train_captions/val_captions, captions when every split has
    its own file, and the data seed (the order comes from the run's seed) are unread."""
    def pairs(**kw):
        dm = captions(folder, test_split=None, **kw)
        return [(b["tgt_out"].tolist(), b["images"].sum().item())
                for b in (dm.example_batch(10, s) for s in ("train", "val"))]

    assert pairs() == pairs(train_split=["other"], val_split="nowhere", captions="missing.json", seed=7)


def test_a_split_name_beside_the_splits_own_file_warns(folder):
    with pytest.warns(AttnflowWarning) as said:
        captions(folder, train_split=["other"], val_split="nowhere")
    assert [str(w.message) for w in said] == [
        "data 'captions': train_split=['other'] is unread: train_captions=train.tsv names the "
        "split's own file",
        "data 'captions': val_split=nowhere is unread: val_captions=val.tsv names the split's own file"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        captions(folder, test_split="other")  # test has no own file: test_split is read
