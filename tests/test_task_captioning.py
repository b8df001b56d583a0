"""The captioning task (Xu et al. 2015): the loss with the doubly stochastic regulariser against a
hand computation, the grounding measure on known masks (uniform attention scores exactly 1),
captions with one attention row per word, and the refusals."""

from __future__ import annotations


import pytest
import torch

from attnflow.config.registry import MODELS, TASKS
from attnflow.tasks.captioning_metrics import box_masks, grounding_sums, named_cells

V, PAD, BOS, EOS = 9, 0, 1, 2
ITOS = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "circle", "blue", "square"]


def make_task(decoder="rnn_attention", **task):
    torch.manual_seed(0)
    dec = {"name": decoder, "cell": "lstm", "embed_dim": 6, "hidden_dim": 8}
    if decoder == "rnn_attention":
        dec["attention"] = {"name": "single", "scorer": {"name": "additive"}}
    model = MODELS.build({"name": "captioner", "encoder": {"name": "cnn", "channels": [4, 8]},
                          "decoder": dec}, tgt_vocab=V, pad_id=PAD, in_channels=3, path="model")
    return TASKS.build({"name": "captioning", **task}, model, pad_id=PAD, bos_id=BOS, eos_id=EOS,
                       max_decode_len=6, itos=ITOS, path="task")


def batch():
    tgt_out = torch.tensor([[4, 5, 6, EOS], [4, 7, EOS, PAD]])
    tgt_in = torch.cat([torch.full((2, 1), BOS), tgt_out[:, :-1]], 1)
    return {"images": torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)),
            "tgt_in": tgt_in, "tgt_out": tgt_out, "idx": torch.arange(2)}


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_loss_is_word_cross_entropy_plus_lambda_times_regulariser_per_token(lam, monkeypatch):
    task = make_task(attention_reg=lam)
    logged = {}
    monkeypatch.setattr(task, "log", lambda name, value, **kw: logged.__setitem__(name, value))
    b = batch()
    loss = task._loss(b, "train")
    with torch.no_grad():
        logits, w = task.model(b["images"], None, b["tgt_in"], need_weights=True)
    # by hand: −Σ log p over the 7 real target tokens, + λ Σ_captions Σ_i (1 − Σ_t α_ti)², / 7
    nll, reg, tokens = 0.0, 0.0, 0
    for i in range(2):
        received = [0.0] * w.shape[-1]
        for t in range(4):
            y = int(b["tgt_out"][i, t])
            if y == PAD:
                continue
            tokens += 1
            nll -= float(torch.log_softmax(logits[i, t].double(), -1)[y])
            for r in range(w.shape[-1]):
                received[r] += float(w[i, t, 0, r])
        reg += sum((1 - s) ** 2 for s in received)
    assert loss.item() == pytest.approx((nll + lam * reg) / tokens, rel=1e-5)
    if lam > 0:  # (with λ = 0 training asks for no weights: nothing to log)
        assert float(logged["train/attention_reg"]) == pytest.approx(reg / 2, rel=1e-5)
    else:
        assert "train/attention_reg" not in logged


def test_lambda_zero_leaves_the_gradient_of_the_cross_entropy_alone():
    b = batch()
    grads = []
    for lam in (0.0, 1e-9):
        task = make_task(attention_reg=lam)
        task.model.zero_grad()
        task._loss(b, "train").backward()
        grads.append(next(task.model.decoder.attention.parameters()).grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-9)
    task = make_task(attention_reg=10.0)
    task.model.zero_grad()
    task._loss(b, "train").backward()
    assert not torch.allclose(next(task.model.decoder.attention.parameters()).grad, grads[0])


def test_named_cells_and_grounding_by_hand():
    boxes = torch.tensor([[0, 0, 4, 4], [0, 4, 4, 8], [4, 0, 8, 4], [4, 4, 8, 8]])  # 2 × 2 cells
    masks = box_masks(boxes, 8, 8)
    assert masks.sum().item() == 64 and bool(masks[3, 5, 6]) and not bool(masks[0, 4, 0])
    regions = torch.zeros(1, 3, 8, 8, dtype=torch.bool)
    regions[0, 0, 1:3, 1:3] = True  # word 0 names an object inside cell 0
    regions[0, 1, 3:5, 5:6] = True  # word 1: an object across cells 1 and 3
    cells = named_cells(regions, boxes)  # word 2 names nothing
    assert cells[0].tolist() == [[True, False, False, False], [False, True, False, True],
                                 [False, False, False, False]]
    alpha = torch.tensor([[[0.7, 0.1, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25] * 4]])
    mass, share, n = grounding_sums(alpha, cells)
    assert n.item() == 2
    assert mass.item() == pytest.approx(0.7 + 0.6)
    assert share.item() == pytest.approx(1 / 4 + 2 / 4)
    uniform = torch.full_like(alpha, 0.25)
    m_u, s_u, _ = grounding_sums(uniform, cells)
    assert (m_u / s_u).item() == pytest.approx(1.0)  # uniform attention: exactly the share


def test_caption_gives_words_and_one_attention_row_per_word():
    task = make_task().eval()
    images = batch()["images"]
    words, alphas = task.caption(images, beam_size=1, need_weights=True)
    tokens, w = task.model.greedy(images, None, BOS, EOS, 6, need_weights=True)
    for i, row in enumerate(tokens.tolist()):
        ids = row[: row.index(EOS)] if EOS in row else row
        at = [j for j, t in enumerate(ids) if t not in (PAD, BOS)]  # specials are not words
        assert words[i] == [ITOS[ids[j]] for j in at]
        assert alphas[i].shape == (len(at), 16)
        torch.testing.assert_close(alphas[i], w[i, at, 0])
        torch.testing.assert_close(alphas[i].sum(-1), torch.ones(len(at)))
    assert task.caption(images, beam_size=1)[1] is None
    beam_words, _ = task.caption(images, beam_size=3)
    assert len(beam_words) == 2


def test_attention_reg_without_attention_is_unread_and_warns():
    """decoder 'rnn' has no attention: λ (given, or the default 1) warns once when the config is
    resolved and adds nothing to the loss."""
    from attnflow.config.registry import AttnflowWarning
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    rnn = ["data=shapes", "model=captioner", "task=captioning", "model.decoder.name=rnn",
           "~model.decoder.attention"]
    for lam in ([], ["task.attention_reg=0.5"]):
        with pytest.warns(AttnflowWarning, match=r"task.attention_reg=(1.0|0.5) is unread: "
                                                 r"decoder 'rnn' has no attention"):
            resolve_config(compose_cfg([*rnn, *lam]))
    with_reg = make_task(decoder="rnn", attention_reg=1.0).eval()._loss(batch(), "train")
    without = make_task(decoder="rnn", attention_reg=0.0).eval()._loss(batch(), "train")
    torch.testing.assert_close(with_reg, without)


@pytest.mark.parametrize("others_updated", [False, True])
def test_grounding_sync_is_joined_by_a_rank_without_grounded_words(others_updated, monkeypatch):
    """Under DDP, compute() all-gathers: a rank whose (unrepeated) shard held no grounded word must
    still call it when another rank has one, or the other ranks wait for it forever."""
    from types import SimpleNamespace

    from torchmetrics import SumMetric

    task = make_task(attention_reg=0.0)
    asked = []

    def reduce(decision, all=True):  # the other ranks' decisions, OR-ed with this one's
        asked.append((decision, all))
        return decision or others_updated

    task._trainer = SimpleNamespace(strategy=SimpleNamespace(reduce_boolean_decision=reduce),
                                    sanity_checking=False)
    computed = []
    for metric in task._ground.values():  # (torchmetrics wraps compute per instance)
        assert isinstance(metric, SumMetric)
        monkeypatch.setattr(metric, "compute", lambda m=metric: computed.append(m) or torch.tensor(0.0))
    task._epoch_start("val")
    task._epoch_end("val")
    assert asked == [(False, False)]  # this rank had no update, asked as "any rank"
    assert len(computed) == (3 if others_updated else 0)
