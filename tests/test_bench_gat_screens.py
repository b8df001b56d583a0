"""bench/gat_screens.py's held-out epoch selection, bench/gat_screen_pool.py's paired summary and
pieces of bench/gat_variants.py (GRAND's input propagation, P-reg's detached target and μ ramp):
the figures docs/benchmarks.md draws conclusions from, checked against answers worked out by hand
on made-up traces and graphs (no training, no data files)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from support import load_bench


@pytest.fixture(scope="module")
def screens():
    return load_bench("gat_screens")


@pytest.fixture(scope="module")
def variants():
    return load_bench("gat_variants")


def graph():
    """Six nodes: 0–3 validation, 4–5 test; two classes."""
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    val = torch.tensor([True, True, True, True, False, False])
    return SimpleNamespace(y=y, val_mask=val, test_mask=~val)


def probs_of(rows):
    """(epochs, nodes, 2) log-probabilities from each epoch's P(class 1) per node."""
    p1 = torch.tensor(rows, dtype=torch.float)
    return torch.stack([1 - p1, p1], -1).log()


def test_each_rule_chooses_on_one_half_and_is_scored_on_the_other(screens):
    d = graph()
    kept = torch.arange(6)
    # epoch 0: every val node right, confidently; epoch 1: every val node wrong; epoch 2: right but
    # unsure (a higher loss than epoch 0); test nodes: right only at epoch 1.
    right = {0: 0.1, 1: 0.9, 2: 0.1, 3: 0.9}
    rows = []
    for epoch in range(3):
        row = []
        for node in range(6):
            if node < 4:
                p = right[node] if epoch == 0 else (1 - right[node] if epoch == 1 else (0.4 if node % 2 == 0 else 0.6))
            else:
                p = (0.9 if node == 5 else 0.1) if epoch == 1 else (0.1 if node == 5 else 0.9)
            row.append(p)
        rows.append(row)
    out = screens.selection_figures(screens.selection_probs(probs_of(rows), d, kept))
    # first max accuracy (epochs 0 and 2 tie at 100 % on either half): epoch 0, right on the other
    # half: 100 % held out; the whole val split chooses epoch 0 too, whose test nodes are wrong.
    assert out["first-max-acc"] == {"heldout": 100.0, "test_acc": 0.0}
    assert out["max-acc-min-loss"] == {"heldout": 100.0, "test_acc": 0.0}
    assert out["min-loss"] == {"heldout": 100.0, "test_acc": 0.0}
    # the mean of every epoch (fewer than 10): on val node 0, P(1) = (0.1 + 0.9 + 0.4) / 3 < ½:
    # right; the test nodes: (0.9 + 0.1 + 0.9) / 3 on node 4 > ½: wrong.
    assert out["mean-top10"]["heldout"] == 100.0 and out["mean-top10"]["test_acc"] == 0.0


def test_a_choice_that_is_right_on_one_half_only_scores_what_the_other_half_says(screens):
    d = graph()
    val = torch.arange(4)
    half = val[torch.randperm(4, generator=torch.Generator().manual_seed(0))]
    A, B = half[:2].tolist(), half[2:].tolist()
    truth = d.y.tolist()
    # epoch 0: right on A, wrong on B; epoch 1: wrong on A, right on B (test nodes: right always)
    rows = []
    for good in (A, B):
        rows.append([(0.9 if truth[n] else 0.1) if (n in good or n >= 4) else (0.1 if truth[n] else 0.9)
                     for n in range(6)])
    out = screens.selection_figures(screens.selection_probs(probs_of(rows), d, torch.arange(6)))
    # choosing on A takes epoch 0, which B scores 0 %; choosing on B takes epoch 1, which A scores 0 %
    assert out["first-max-acc"]["heldout"] == 0.0
    assert out["first-max-acc"]["test_acc"] == 100.0


def test_pool_summary_pairs_seeds_with_the_reference():
    pool = load_bench("gat_screen_pool")
    rows = [{"spec": "ref", "seed": s, "val_acc": v, "epochs": 10, "seconds": 1.0}
            for s, v in ((1, 80.0), (2, 82.0), (3, 81.0))]
    rows += [{"spec": "new", "seed": s, "val_acc": v, "epochs": 20, "seconds": 2.0}
             for s, v in ((1, 81.0), (2, 82.5), (4, 90.0))]  # seed 4: no reference to pair with
    ref, new = pool.summary(rows, ["ref", "new"])
    assert ref["diff"] == 0.0 and ref["runs"] == 3
    assert new["paired_seeds"] == 2
    assert new["diff"] == pytest.approx(0.75)  # (1.0 + 0.5) / 2
    assert new["diff_se"] == pytest.approx(math.sqrt(((1.0 - 0.75) ** 2 + (0.5 - 0.75) ** 2) / 1) / math.sqrt(2))
    assert new["val_mean"] == pytest.approx((81.0 + 82.5 + 90.0) / 3)
    assert pool.seed_list("3-5") == [3, 4, 5] and pool.device_list("cuda:2,cpu") == ["cuda", "cuda", "cpu"]


def path3():
    """A path 0 – 1 – 2 (both directions) and its Â = D̃^-½(A+I)D̃^-½ written out by hand: with
    self-loops the degrees are 2, 3, 2, so Â = [[1/2, 1/√6, 0], [1/√6, 1/3, 1/√6], [0, 1/√6, 1/2]]."""
    r6 = 6 ** -0.5
    return torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), torch.tensor([[0.5, r6, 0.0], [r6, 1 / 3, r6], [0.0, r6, 0.5]])


def test_random_propagation_mixes_orders_over_gcn_adjacency_and_drops_whole_rows(variants):
    edge_index, a_hat = path3()
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]])
    prop = variants.RandomPropagation(edge_index, 3, hops=2, drop=0.5)
    want = (x + a_hat @ x + a_hat @ a_hat @ x) / 3  # X̄ = (X + ÂX + Â²X) / (K + 1), K = 2
    assert torch.allclose(prop(x), want, atol=1e-6)  # evaluation: nothing dropped
    torch.manual_seed(0)
    keep = torch.rand(3, 1) >= 0.5  # the rows the training call keeps under the same seed
    torch.manual_seed(0)
    got = prop(x, training=True)
    x_tilde = x * keep / 0.5  # kept rows doubled, dropped rows zero
    assert torch.allclose(got, (x_tilde + a_hat @ x_tilde + a_hat @ a_hat @ x_tilde) / 3, atol=1e-6)
    assert not torch.allclose(got, want)


def test_detached_preg_pulls_each_node_to_its_neighbours_without_moving_them(variants):
    # With Ẑ = ÂZ held fixed, d/dz_i of mean_i CE(softmax(ẑ_i), softmax(z_i)) is
    # (softmax(z_i) − softmax(ẑ_i)) / N: the cross-entropy's gradient against a constant target.
    edge_index, a_hat = path3()
    z0 = torch.tensor([[2.0, -1.0], [0.5, 0.5], [-1.0, 3.0]])
    args = SimpleNamespace(preg_phi="ce", preg_adj="gcn", preg_hops=1, preg_teleport=0.0, preg_detach=True)
    z = z0.clone().requires_grad_()
    loss = variants.preg_term(z, edge_index, args)
    loss.backward()
    target = (a_hat @ z0).softmax(-1)
    assert torch.allclose(loss, -(target * z0.log_softmax(-1)).sum(-1).mean(), atol=1e-6)
    assert torch.allclose(z.grad, (z0.softmax(-1) - target) / 3, atol=1e-6)
    args.preg_detach = False  # the paper's: the gradient also flows through Ẑ, so it differs
    z = z0.clone().requires_grad_()
    variants.preg_term(z, edge_index, args).backward()
    assert not torch.allclose(z.grad, (z0.softmax(-1) - target) / 3, atol=1e-4)


def test_preg_ramp_raises_mu_linearly_over_the_first_epochs(variants):
    edge_index, _ = path3()
    z = torch.tensor([[2.0, -1.0], [0.5, 0.5], [-1.0, 3.0]])
    train = torch.tensor([True, False, True])
    y = torch.tensor([0, 1, 1])
    d = SimpleNamespace(x=torch.zeros(3, 4), y=y, edge_index=edge_index, train_mask=train)
    args = SimpleNamespace(variant="preg", weight=0.6, preg=0.0, preg_ramp=4, preg_phi="ce", preg_adj="gcn",
                           preg_hops=1, preg_teleport=0.0, preg_detach=False, label_input=0.0, drop_edge=0.0,
                           vat=0.0)
    ce = torch.nn.functional.cross_entropy(z[train], y[train])
    term = variants.preg_term(z, edge_index, args)
    for epoch, share in ((0, 1 / 4), (1, 2 / 4), (3, 1.0), (50, 1.0)):  # μ·min(1, (t + 1)/E), E = 4
        loss, _ = variants.train_loss(lambda x, e: z, d, args, 1, d.x, edge_index, train, y, epoch=epoch)
        assert torch.allclose(loss, ce + share * 0.6 * term, atol=1e-6), epoch
    args.preg_ramp = 0  # off: the whole μ from the first epoch
    loss, _ = variants.train_loss(lambda x, e: z, d, args, 1, d.x, edge_index, train, y, epoch=0)
    assert torch.allclose(loss, ce + 0.6 * term, atol=1e-6)


def test_gat_keywords_reach_the_model_or_are_refused_by_name(screens, capsys):
    ap = screens.build_parser()
    args = screens.parse(ap, ["--gat", "layers=3", "--gat", "head_dropout=true"])
    assert args.gat == {"layers": 3, "head_dropout": True}  # YAML values: an int and a bool
    with pytest.raises(SystemExit):
        screens.parse(screens.build_parser(), ["--gat", "lyers=3"])
    assert "'lyers=3'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        screens.parse(screens.build_parser(), ["--variant", "supergat", "--gat", "layers=3"])
    assert "SuperGATConv" in capsys.readouterr().err


class Linear(torch.nn.Module):
    """logits = xW: each node on its own (the graph ignored), so VAT's answers can be worked out."""

    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)

    def forward(self, x, edge_index):
        return x @ self.w


def test_vat_direction_with_two_classes_is_the_logit_gap_direction(variants):
    # With two classes the output depends on r only through r·(w₁ − w₀), so the KL's gradient is
    # along u = (w₁ − w₀)/‖w₁ − w₀‖, signed as the start d: the exact answer, for any ξ.
    torch.manual_seed(0)
    w = torch.randn(5, 2, dtype=torch.float64)
    x, d = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    model = Linear(w)
    p = model(x, None).softmax(-1).detach()
    r = variants.adversarial_direction(model, x, None, p, d, xi=1e-2)
    u = (w[:, 1] - w[:, 0]) / (w[:, 1] - w[:, 0]).norm()
    expected = torch.sign(d @ u).unsqueeze(-1) * u
    assert torch.allclose(r, expected, atol=1e-9)
    assert model.w.grad is None  # the power iteration leaves the parameters alone


def test_vat_direction_is_a_power_iteration_of_the_kl_hessian(variants):
    # Three classes: for small ξ the gradient is ξ·Hᵢd̂ᵢ per node, Hᵢ = Wᵀ(diag(pᵢ) − pᵢpᵢᵀ)W the
    # Hessian of KL(pᵢ ‖ softmax((xᵢ + r)W)) at r = 0 (Miyato et al. 2018, eq. (10)–(12)).
    torch.manual_seed(1)
    w, x, d = (torch.randn(5, 3, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64),
               torch.randn(4, 5, dtype=torch.float64))
    model = Linear(w)
    p = model(x, None).softmax(-1).detach()
    r = variants.adversarial_direction(model, x, None, p, d, xi=1e-6)
    unit = d / d.norm(dim=-1, keepdim=True)
    for i in range(4):
        h = w @ (torch.diag(p[i]) - torch.outer(p[i], p[i])) @ w.T
        g = h @ unit[i]
        assert torch.allclose(r[i], g / g.norm(), atol=1e-6), i


def test_vat_term_is_the_mean_kl_at_the_adversarial_step_and_trains_the_model(variants):
    torch.manual_seed(2)
    w, x = torch.randn(5, 2), torch.randn(4, 5)
    model = Linear(w)
    model.train()
    torch.manual_seed(3)
    loss = variants.vat_term(model, x, None, eps=0.5, xi=1e-2)
    torch.manual_seed(3)
    d = torch.randn_like(x)  # vat_term's random start: its first draw
    u = (w[:, 1] - w[:, 0]) / (w[:, 1] - w[:, 0]).norm()
    p = (x @ w).softmax(-1)
    q = ((x + 0.5 * torch.sign(d @ u).unsqueeze(-1) * u) @ w).softmax(-1)
    expected = (p * (p.log() - q.log())).sum(-1).mean()
    assert torch.allclose(loss, expected, atol=1e-6)
    assert loss > 0 and model.training  # the evaluation-mode passes leave the mode as it was
    loss.backward()
    assert model.w.grad is not None and model.w.grad.abs().sum() > 0


def test_vat_is_refused_where_it_would_perturb_something_else(screens, capsys):
    for extra in (["--input-hops", "2"], ["--label-input", "0.5"], ["--variant", "supergat"]):
        with pytest.raises(SystemExit):
            screens.parse(screens.build_parser(), ["--vat", "0.05", *extra])
        assert "--vat perturbs the raw features" in capsys.readouterr().err


def test_feature_normalisations_against_hand_values(variants, screens, capsys):
    # three texts over three words, loaded row-normalised: {0, 1}, {1}, {} (an empty row)
    words = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    x = words / words.sum(-1, keepdim=True).clamp_min(1)
    assert torch.equal(variants.features(x, "row"), x)
    assert torch.equal(variants.features(x, "binary"), words)
    r = 1 / math.sqrt(2)
    assert torch.allclose(variants.features(x, "l2"), torch.tensor([[r, r, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    # idf: word 0 in 1 of 3 texts: ln(4/2) + 1; word 1 in 2: ln(4/3) + 1; then unit rows
    a, b = math.log(2) + 1, math.log(4 / 3) + 1
    n = math.hypot(a, b)
    assert torch.allclose(variants.features(x, "tfidf"),
                          torch.tensor([[a / n, b / n, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert torch.allclose(variants.features(x, "tfidf_l1"),
                          torch.tensor([[a / (a + b), b / (a + b), 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(SystemExit):
        screens.parse(screens.build_parser(), ["--features", "tfidf", "--label-input", "0.5"])
    assert "--features renormalises" in capsys.readouterr().err


def test_sam_takes_the_gradient_at_the_ascent_point_and_puts_the_weights_back(variants):
    # L(θ) = ½‖Aθ − b‖²: ∇L(θ) = Aᵀ(Aθ − b), so SAM's gradient (Foret et al. 2021, eq. (2)) is
    # Aᵀ(A(θ + ρ g/‖g‖) − b), g = ∇L(θ), worked out here without autograd.
    A = torch.tensor([[2.0, 0.0, 1.0], [0.0, 1.0, -1.0]], dtype=torch.float64)
    b = torch.tensor([1.0, -2.0], dtype=torch.float64)
    theta = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(theta.clone())
    model.unused = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))  # no gradient: untouched

    def closure():
        return 0.5 * (A @ model.w - b).pow(2).sum()

    closure().backward()
    rho = 0.3
    g = A.T @ (A @ theta - b)
    expected = A.T @ (A @ (theta + rho * g / g.norm()) - b)
    variants.sharpness_aware(model, closure, rho)
    assert torch.allclose(model.w.grad, expected)
    assert not torch.allclose(expected, g)  # the ascent point's gradient differs from θ's
    assert torch.equal(model.w.data, theta)  # the weights are put back exactly
    assert model.unused.grad is None and torch.equal(model.unused.data, torch.ones(2, dtype=torch.float64))


def test_sam_option_reaches_the_screen(screens):
    args = screens.parse(screens.build_parser(), ["--variant", "preg", "--sam", "0.05"])
    assert args.sam == 0.05
