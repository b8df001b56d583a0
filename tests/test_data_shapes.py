"""The synthetic shapes captioning set: determinism, captions that agree with the pixels, exact
regions, vocabulary. Checks recompute everything from the image itself (colour pixels, their
centroids and fill ratios) and parse captions with an independent parser."""

from __future__ import annotations

import random

import pytest
import torch

from attnflow.data.shapes import (BOS, EOS, PAD, UNK, ShapesCaptions, Vocab, collate,
                                  make_example, make_splits)

RGB = {"red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0),
       "yellow": (1.0, 1.0, 0.0)}
GREY = {"black": 0.0, "grey": 0.5}


def parse(words):
    """Caption → [(colour, shape)], [(relation, object index)] by the documented grammar; fails
    (AssertionError) on anything else."""
    objs, rels, i = [], [], 0

    def obj(i):
        assert words[i] == "a" and words[i + 1] in RGB and words[i + 2] in ("circle", "square",
                                                                           "triangle"), words
        objs.append((words[i + 1], words[i + 2]))
        return i + 3

    i = obj(0)
    while i < len(words):
        if rels:
            assert words[i] == "and", words
            i += 1
        if words[i] in ("left", "right"):
            assert words[i + 1] == "of", words
            rel, i = words[i] + " of", i + 2
        else:
            assert words[i] in ("above", "below"), words
            rel, i = words[i], i + 1
        i = obj(i)
        rels.append((rel, len(objs) - 1))
    return objs, rels


def colour_pixels(image, colour):
    return (image == torch.tensor(RGB[colour]).view(3, 1, 1)).all(dim=0)


def kind_from_pixels(mask):
    """Square fills its bounding box, a circle ~π/4 of it, a triangle ~1/2."""
    rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
    fill = mask.sum().item() / ((rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1)).item()
    return "square" if fill > 0.95 else "circle" if fill > 0.65 else "triangle"


def centroid(mask):
    ys, xs = mask.nonzero(as_tuple=True)
    return xs.float().mean().item(), ys.float().mean().item()


EXAMPLES = [make_example(s, background="mixed") for s in range(150)]


def test_same_seed_same_example_other_seed_differs():
    for s in (0, 7, 99):
        a, b = make_example(s), make_example(s)
        assert torch.equal(a.image, b.image) and a.words == b.words
    different = sum(not torch.equal(make_example(s).image, make_example(s + 1).image)
                    for s in range(20))
    assert different == 20
    assert len({EXAMPLES[s].caption for s in range(50)}) > 30


def test_global_rng_untouched_and_example_reproducible_alone():
    torch.manual_seed(0)
    random.seed(0)
    before = (torch.rand(1).item(), random.random())
    torch.manual_seed(0)
    random.seed(0)
    ds = ShapesCaptions(10, seed=40)
    _ = [ds[i] for i in range(10)]
    assert (torch.rand(1).item(), random.random()) == before
    assert torch.equal(ds[7].image, make_example(47).image) and ds[-1].words == ds[9].words
    with pytest.raises(IndexError):
        ds[10]


def test_captions_agree_with_the_drawn_pixels():
    n_rel = {"left of": 0, "right of": 0, "above": 0, "below": 0}
    counts = set()
    for e in EXAMPLES:
        objs, rels = parse(e.words)
        counts.add(len(objs))
        colours = [c for c, _ in objs]
        assert len(set(colours)) == len(colours)
        # Every non-background pixel belongs to a named colour: no unnamed shape is drawn.
        named = torch.zeros(e.image.shape[1:], dtype=torch.bool)
        for c in colours:
            named |= colour_pixels(e.image, c)
        assert (e.image[:, ~named] == GREY[e.background]).all()
        for c in set(RGB) - set(colours):
            assert not colour_pixels(e.image, c).any()
        for c, kind in objs:
            assert kind_from_pixels(colour_pixels(e.image, c)) == kind, (e.caption, c)
        sx, sy = centroid(colour_pixels(e.image, colours[0]))
        for rel, j in rels:
            ox, oy = centroid(colour_pixels(e.image, colours[j]))
            n_rel[rel] += 1
            holds = {"left of": sx < ox - 3, "right of": sx > ox + 3, "above": sy < oy - 3,
                     "below": sy > oy + 3}[rel]
            assert holds, (e.caption, (sx, sy), (ox, oy))
    assert counts == {1, 2, 3} and min(n_rel.values()) > 5


def test_regions_are_exactly_the_named_shapes_pixels():
    for e in EXAMPLES:
        H, W = e.image.shape[1:]
        masks = e.word_masks()
        assert masks.shape == (len(e.words), H, W) and masks.dtype == torch.bool
        for t, w in enumerate(e.words):
            region = e.region(t)
            if w not in RGB and w not in ("circle", "square", "triangle"):
                assert region is None and not masks[t].any()
                continue
            # The named shape's colour: the word itself, or the adjective just before the noun.
            colour = w if w in RGB else e.words[t - 1]
            box, mask = region
            expect = colour_pixels(e.image, colour)
            assert mask.dtype == torch.bool and torch.equal(mask, expect) and torch.equal(
                masks[t], expect)
            ys, xs = expect.nonzero(as_tuple=True)
            assert box == (xs.min().item(), ys.min().item(), xs.max().item(), ys.max().item())


def test_sizes_dtypes_and_options():
    e = EXAMPLES[0]
    assert e.image.shape == (3, 64, 64) and e.image.dtype == torch.float32
    assert 0.0 <= e.image.min() and e.image.max() <= 1.0
    assert {x.background for x in EXAMPLES} == {"black", "grey"}
    small = make_example(3, size=32, grid=2, min_shapes=2, max_shapes=2, background="grey")
    assert small.image.shape == (3, 32, 32) and len(parse(small.words)[0]) == 2
    for bad, field in [(dict(grid=1), "grid"), (dict(size=40, grid=3), "size"),
                       (dict(max_shapes=5), "max_shapes")]:
        with pytest.raises(ValueError, match=field):
            ShapesCaptions(1, **bad)


def test_splits_differ_and_vocab_round_trips():
    splits = make_splits(60, 10, 10, seed=5)
    assert [len(splits[k]) for k in ("train", "val", "test")] == [60, 10, 10]
    imgs = {k: [splits[k][i].image for i in range(10)] for k in splits}
    assert not any(torch.equal(a, b) for a in imgs["val"] for b in imgs["test"] + imgs["train"])
    vocab = Vocab.build(splits["train"].captions())
    assert vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (vocab.stoi["<pad>"], vocab.stoi["<bos>"], vocab.stoi["<eos>"]) == (PAD, BOS, EOS)
    assert vocab.itos[4] == "a"  # the most frequent word: once per object
    for e in (splits["val"][i] for i in range(10)):
        ids = vocab.encode(e.words)
        assert vocab.decode(ids + [EOS, PAD]) == e.words
    assert vocab.encode(["a", "purple"]) == [vocab.stoi["a"], UNK]
    assert Vocab.build([["x", "y", "y"]]).itos[4:] == ["y", "x"]


def test_collate_frames_captions_and_regions():
    ds = ShapesCaptions(4, seed=11)
    vocab = Vocab.build(ds.captions())
    b = collate([ds[i] for i in range(4)], vocab)
    T = max(len(ds[i].words) for i in range(4)) + 1
    assert b["images"].shape == (4, 3, 64, 64) and b["tgt_in"].shape == b["tgt_out"].shape == (4, T)
    for i in range(4):
        words = ds[i].words
        n = len(words)
        assert b["tgt_in"][i, 0] == BOS and vocab.decode(b["tgt_in"][i, 1:]) == words
        assert b["tgt_out"][i, n] == EOS and (b["tgt_out"][i, n + 1:] == PAD).all()
        assert torch.equal(b["regions"][i, :n], ds[i].word_masks())
        assert not b["regions"][i, n:].any()


def test_all_captions_are_every_true_caption_of_the_grammar():
    """all_captions: the drawn caption first, then every other subject, order and true relation;
    each parses and holds for the pixels (centroids more than half a cell apart), none repeats, and
    their number is Σ_subjects (n−1)! · Π_others (true relations), counted here from the pixels."""
    from math import factorial

    from attnflow.data.shapes import all_captions

    half = 64 / 3 / 2  # shapes of different cells: centroids more than half a cell apart
    sizes = set()
    for e in EXAMPLES[:40]:
        caps = all_captions(e)
        assert caps[0] == e.words and len({tuple(c) for c in caps}) == len(caps)
        centre = {s.colour: centroid(colour_pixels(e.image, s.colour)) for s in e.shapes}

        def true_relations(a, b):
            (ax, ay), (bx, by) = centre[a], centre[b]
            return ({"left of"} if ax < bx - half else {"right of"} if ax > bx + half else set()) | \
                   ({"above"} if ay < by - half else {"below"} if ay > by + half else set())

        for words in caps:
            objs, rels = parse(words)
            assert sorted(c for c, _ in objs) == sorted(centre)
            for rel, j in rels:
                assert rel in true_relations(objs[0][0], objs[j][0]), (words, centre)
        n = len(e.shapes)
        expected = 0
        for s in centre:
            count = factorial(n - 1)
            for o in centre:
                if o != s:
                    count *= len(true_relations(s, o))
            expected += count
        assert len(caps) == expected, (e.caption, caps)
        sizes.add(len(caps))
    assert max(sizes) >= 8 and 1 in sizes
