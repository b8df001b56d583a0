"""Reading image–caption pairs (attnflow.data.captions) from a tiny generated Flickr8k / COCO /
Karpathy-split example, and the errors for bad files."""

from __future__ import annotations

import gzip
import json
import pickle

import pytest
import torch
from PIL import Image

from attnflow.data.captions import load_image, read_captions
from attnflow.data.errors import DataError

COLOURS = {"a.png": (255, 0, 0), "b.png": (0, 128, 255), "c.png": (10, 200, 30)}
CAPTIONS = [("a.png", "a red square ."), ("a.png", "something red"),
            ("b.png", "a blue square"), ("c.png", "green  everywhere")]


@pytest.fixture
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for name, colour in COLOURS.items():
        Image.new("RGB", (6, 4), colour).save(folder / name)
    return folder


def expected(folder):
    return [(folder / name, " ".join(text.split())) for name, text in CAPTIONS]


def test_flickr_tsv_strips_caption_number(tmp_path, images):
    path = tmp_path / "Flickr8k.token.txt"
    counts = {}
    lines = []
    for name, text in CAPTIONS:
        k = counts.get(name, 0)
        counts[name] = k + 1
        lines.append(f"{name}#{k}\t{text}")
    path.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n", encoding="utf-8")
    assert read_captions(path, images) == expected(images)
    gz = tmp_path / "caps.tsv.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    assert read_captions(gz, images) == expected(images)
    pairs = read_captions(path, images)
    assert [p.where for p in pairs] == [f"{path} line {n}" for n in (1, 2, 4, 5)]
    assert pickle.loads(pickle.dumps(pairs[3])).where == pairs[3].where


def test_corrupt_image_error_names_captions_line(tmp_path, images):
    png = (images / "b.png").read_bytes()
    (images / "b.png").write_bytes(png[: len(png) // 2])
    path = tmp_path / "caps.tsv"
    path.write_text("a.png\tred\nb.png#0\tblue\n", encoding="utf-8")
    pairs = read_captions(path, images)
    assert load_image(pairs[0][0], 3).shape == (3, 3, 3)
    with pytest.raises(DataError, match=r"cannot read image .*b\.png \(named in .*caps\.tsv "
                                        r"line 2\)"):
        load_image(pairs[1][0], 3, where=pairs[1].where)


def coco(captions):
    ids = {name: 100 + i for i, name in enumerate(COLOURS)}
    return {"images": [{"id": i, "file_name": n} for n, i in ids.items()],
            "annotations": [{"image_id": ids[n], "caption": t, "id": k}
                            for k, (n, t) in enumerate(captions)]}


def test_coco_json(tmp_path, images):
    path = tmp_path / "captions_train.json"
    path.write_text(json.dumps(coco(CAPTIONS)), encoding="utf-8")
    assert read_captions(path, images) == expected(images)


def karpathy(folder_name):
    splits = {"a.png": "train", "b.png": "val", "c.png": "restval"}
    return {"images": [{"filename": n, "filepath": folder_name, "split": splits[n],
                        "sentences": [{"raw": t, "tokens": t.split()}
                                      for m, t in CAPTIONS if m == n]} for n in COLOURS]}


def test_karpathy_json_and_split_filter(tmp_path, images):
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(karpathy("images")), encoding="utf-8")
    assert read_captions(path, tmp_path) == expected(images)
    everything = expected(images)
    assert read_captions(path, tmp_path, split="val") == [p for p in everything
                                                          if p[0].name == "b.png"]
    assert read_captions(path, tmp_path, split=["train", "restval"]) == [
        p for p in everything if p[0].name != "b.png"]
    with pytest.raises(DataError, match="holds no captions for split"):
        read_captions(path, tmp_path, split="test")


def test_split_refused_for_layouts_without_splits(tmp_path, images):
    path = tmp_path / "caps.tsv"
    path.write_text("a.png\tred\n", encoding="utf-8")
    with pytest.raises(DataError, match="no splits"):
        read_captions(path, images, split="train")


def test_load_image_pixels_and_shape(images):
    for name, colour in COLOURS.items():
        x = load_image(images / name, 5)
        assert x.shape == (3, 5, 5) and x.dtype == torch.float32
        want = torch.tensor(colour, dtype=torch.float32).div(255).view(3, 1, 1).expand(3, 5, 5)
        assert torch.allclose(x, want, atol=1e-6)
    grey = images / "grey.png"
    Image.new("L", (3, 3), 51).save(grey)
    assert torch.allclose(load_image(grey, 2), torch.full((3, 2, 2), 51 / 255))


def test_load_image_errors_name_file_and_reference(tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not an image at all")
    with pytest.raises(DataError, match=r"broken\.jpg \(named in caps\.tsv line 3\)"):
        load_image(bad, 4, where="caps.tsv line 3")
    with pytest.raises(DataError, match="image file not found: .*nope.png"):
        load_image(tmp_path / "nope.png", 4)


@pytest.mark.parametrize("text, message", [
    ("a.png\tfine\nb.png no tab here\n", r"caps\.tsv line 2 has no tab"),
    ("a.png\tfine\n\nb.png\t   \n", r"caps\.tsv line 3: empty caption"),
    ("a.png\tfine\nmissing.png#0\tx\n", r"caps\.tsv line 2 names image 'missing\.png'"),
])
def test_text_errors_name_file_and_line(tmp_path, images, text, message):
    path = tmp_path / "caps.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_captions(path, images)


def test_missing_files(tmp_path, images):
    with pytest.raises(DataError, match=r"captions file not found: .*absent\.txt"):
        read_captions(tmp_path / "absent.txt", images)
    path = tmp_path / "caps.tsv"
    path.write_text("a.png\tx\n", encoding="utf-8")
    with pytest.raises(DataError, match="image folder not found"):
        read_captions(path, tmp_path / "no_dir")
    weird = tmp_path / "caps.csv"
    weird.write_text("a.png,x\n", encoding="utf-8")
    with pytest.raises(DataError, match="unknown format"):
        read_captions(weird, images)


def _broken_coco():
    data = coco(CAPTIONS)
    data["annotations"][2]["image_id"] = 999
    return data


def _no_caption():
    data = coco(CAPTIONS)
    del data["annotations"][1]["caption"]
    return data


def _empty_raw():
    data = karpathy("")
    data["images"][1]["sentences"][0]["raw"] = " "
    return data


def _no_filename():
    data = karpathy("")
    del data["images"][2]["filename"]
    return data


@pytest.mark.parametrize("make, message", [
    (_broken_coco, r"annotations\[2\]\.image_id 999 has no image"),
    (_no_caption, r"annotations\[1\] lacks the field 'caption'"),
    (_empty_raw, r"images\[1\]\.sentences\[0\]: empty caption"),
    (_no_filename, r"images\[2\] lacks the field 'filename'"),
    (lambda: {"annotations": []}, "with an 'images' field"),
    (lambda: {**coco([]), "annotations": [{"image_id": [1], "caption": "x"}]},
     r"annotations\[0\]\.image_id should be an integer or a string"),
])
def test_json_errors_name_field(tmp_path, images, make, message):
    path = tmp_path / "caps.json"
    path.write_text(json.dumps(make()), encoding="utf-8")
    with pytest.raises(DataError, match=message) as err:
        read_captions(path, images)
    assert "caps.json" in str(err.value)


def test_invalid_json_names_line(tmp_path, images):
    path = tmp_path / "caps.json"
    path.write_text('{"images": [\n  {"filename": "a.png",}\n]}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"caps\.json line 2 column \d+ is not valid JSON"):
        read_captions(path, images)
