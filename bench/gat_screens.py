"""Quick screens of GAT variants on Cora's validation split (not a test; docs/benchmarks.md, "Cora
≥ 84.0"): a plain PyTorch loop, no Lightning, so a variant costs minutes to try before it is
worth building into attnflow. The protocol is gat_cora's: full-batch Adam (lr 0.005, ``--lr``;
weight decay 5e-4), early stopping with patience 100 (``--patience``) on the validation loss
(``--stop-on acc``: on the validation accuracy), the epoch of the best validation accuracy kept;
seeds 100+ for choosing (the reported seeds are 0–9).

Variants (``--variant``):

- ``base``: attnflow's ``gat`` as in ``experiment=gat_cora`` (value dropout 0.6).
- ``consistency``: base trained on S dropout samples at once (S copies of the graph side by
  side) with Feng et al. 2020 (GRAND), eq. (8)–(9): the mean prediction p̄ of the samples is
  sharpened, p̄ᵢ^(1/T) / Σ_c p̄_c^(1/T), and each sample's prediction is pulled to it on every
  node, λ · 1/S Σ_s mean_i ‖p̄′ᵢ − pᵢ⁽ˢ⁾‖²; the supervised loss is the mean over the samples.
- ``supergat``: PyG's ``SuperGATConv`` with MX attention (Kim & Oh 2021, "How to find your
  friendly neighborhood", eq. (6)–(8): eᵢⱼ = GAT's logit · σ((Whᵢ)ᵀWhⱼ), and the link-prediction
  loss of σ((Whᵢ)ᵀWhⱼ) on sampled edges and non-edges, weight λ), 8 heads in both layers as in
  PyG's example.
- ``diffusion``: base whose layers (``--diffuse``) spread their attention over K hops with
  teleport a, Z⁰ = Wh, Zᵏ⁺¹ = (1 − a)·A Zᵏ + a·Z⁰ (A: the layer's attention; Wang et al. 2021,
  MAGNA, eq. (5)).
- ``preg``: base with propagation regularisation (Yang et al. 2021, "Rethinking graph
  regularization", §3): μ · mean_i CE(softmax(Ẑᵢ), softmax(Zᵢ)), Ẑ = D⁻¹AZ (the neighbours'
  mean logits; attnflow's ``task.propagation_reg``, whose ``propagation_loss`` it calls).
  ``--preg μ`` adds the same term to any other variant (consistency: to each sample's output).
  ``--preg-hops K --preg-teleport a``: the target spread over K propagations,
  Ẑ⁽ᵏ⁺¹⁾ = (1 − a)ÂẐ⁽ᵏ⁾ + aZ (Klicpera et al. 2019, APPNP's personalised PageRank, eq. (3)),
  so the 2-hop model is pulled towards a wider neighbourhood's consensus.
  ``--preg-detach``: the target Ẑ without gradient, so each node is pulled to its neighbours'
  current outputs and not they to it (the paper's gradient flows through both sides).
  ``--preg-ramp E``: μ raised linearly over the first E epochs, μ·min(1, (t + 1)/E) at epoch t, so
  the term cannot pull every node to one output before the supervised loss has shaped them.

Other changes of the model or its inputs, with any variant:

- ``--drop-edge p``: DropEdge (Rong et al. 2020, "DropEdge: towards deep graph convolutional
  networks on node classification", §3): each training step the model sees the graph with a fraction
  p of its undirected edges removed (PyG's ``dropout_edge``, both directions together); evaluation
  and the P-reg target use the whole graph.
- ``--label-input r``: masked label prediction (Shi et al. 2021, UniMP, §3.3): the input is
  [x ‖ one-hot label] with the label part zero off the training split; each training step a random
  fraction r of the training nodes have their label hidden and only they carry the supervised loss;
  evaluation shows every training label. Validation and test labels are never input.
- ``--propagate K --prop-teleport a``: the GAT's logits spread by K steps of personalised PageRank
  over GCN's Â, H⁽ᵏ⁺¹⁾ = (1 − a)ÂH⁽ᵏ⁾ + aZ (Klicpera et al. 2019, APPNP, eq. (3)), in training and
  evaluation: a fixed propagation head after the attention layers.
- ``--features row|binary|l2|tfidf|tfidf_l1``: the bag-of-words rows normalised otherwise than
  GAT's row sums of 1 (``gat_variants.features``: 0/1, unit L2 rows, tf-idf weighted unit rows with
  the document frequencies of every node's text (no labels), or the tf-idf weights in rows summing
  to 1), in training and evaluation.
- ``--gat KEY=VALUE``: a keyword of attnflow's ``gat`` model (e.g. ``layers=3``, ``head_dropout=true``),
  as ``model.KEY=VALUE`` would set it in ``experiment=gat_cora``.
- ``--decay first``: weight decay on the first layer only (Kipf & Welling 2017, §5.2, the GCN
  recipe; GAT's authors decay every variable).
- ``--input-hops K --drop-node δ``: GRAND's random propagation of the input (Feng et al. 2020,
  "Graph random neural network for semi-supervised learning on graphs", §3.1, eq. (2)–(3)): each
  training step every node's whole feature row is dropped with probability δ (DropNode; kept rows
  scaled by 1/(1 − δ)), then the features are mixed over K orders, X̄ = 1/(K+1) Σₖ₌₀..K ÂᵏX̃ with
  GCN's Â = D̃^-½(A+I)D̃^-½, and X̄ is the GAT's input; evaluation propagates the whole features.
  With ``--variant consistency`` each of the S samples draws its own DropNode (GRAND's full loss,
  here with a GAT in the MLP's place).
- ``--vat ε``: virtual adversarial training (Miyato et al. 2018, "Virtual adversarial training: a
  regularization method for supervised and semi-supervised learning", eq. (5)–(6), (12)–(13)):
  λ (``--vat-weight``) times the mean over every node of KL(p(·|X) ‖ p(·|X + R)), R the
  perturbation of the feature rows (each of L2 norm ε) that one power iteration (from a random
  start, step ξ: ``--vat-xi``) finds to change the output most; on all nodes at once, as Deng et
  al. 2019's batch VAT for GCNs. Both passes without dropout (the deterministic model's
  smoothness), p(·|X) held fixed.
- ``--sam ρ``: sharpness-aware minimisation (Foret et al. 2021, "Sharpness-aware minimization for
  efficiently improving generalization", eq. (2), Algorithm 1): each step's gradient is taken at
  θ + ρ·g/‖g‖₂, the steepest-ascent point of radius ρ, so Adam descends the worst loss nearby (a
  second forward and backward pass a step, with its own dropout draw).
- ``--ema β``: an exponential moving average of the weights, θ̄ ← βθ̄ + (1 − β)θ after every step
  (θ̄ = θ at the first), validated, kept and stopped on in θ's place: attnflow's ``callbacks.ema``
  (Polyak & Juditsky 1992), which a full-batch run updates once an epoch.

Ensembles and distillation (``--ensemble K``, ``--distill λ``): K members from seeds s, s + 1000, …,
their kept models' mean softmax (a deep ensemble, Lakshminarayanan et al. 2017); then a student from
seed s trained with λ·T²·KL(teacher ‖ student) at temperature T (``--kd-temperature``) on every
node added to its loss (Hinton et al. 2015, §2), the members' mean softmax at T as the teacher.

Self-training (``--self-train t``, any variant): after the run, its t most confident predictions
per class among the nodes outside the training and validation splits become training labels, and
a fresh model (the same seed) is trained on the 140 labels and those (Li, Han & Wu 2018, "Deeper
insights into graph convolutional networks for semi-supervised learning", §5.1; ``--rounds`` k
repeats it, each round picking from the previous round's model, as Sun et al. 2020's M3S without
its clustering check). Validation nodes are never pseudo-labelled, so the val accuracy stays an
honest selection signal; the true labels of the other nodes are never read. The reported run is
the last round's; each round's val (and with --test, test) accuracy is printed.

Monte Carlo dropout (``--mc K``): the kept model's prediction as the mean softmax of K forward
passes with its dropout on (Gal & Ghahramani 2016, "Dropout as a Bayesian approximation", §3; MC
dropout's predictive mean), beside the usual deterministic one. The kept epoch is the one of the
best *deterministic* validation accuracy, which favours the deterministic figure on val.

Post-processing (``--correct-smooth``): the trained model's softmax output, then Correct and
Smooth (Huang et al. 2021, "Combining Label Propagation and Simple Models Out-performs Graph Neural
Networks", §3): the training residuals spread with E ← (1 − α₁)E₀ + α₁SE and added at the
training residuals' mean L1 size (autoscale; with ``--cs-scale s``: s times the spread values),
then the training labels clamped and spread with G ← (1 − α₂)G₀ + α₂SG, S = D^−½AD^−½ (PyG's
``CorrectAndSmooth``), with the training labels only, for each (α₁, α₂) of ``--cs-alphas``: the
val (and with --test, test) accuracy of each is reported beside the model's.

Which epoch to keep, judged on held-out validation nodes (``--selection``): the kept epoch's
validation accuracy is a maximum over ≈ 1,000 epochs, biased upwards, so rules that choose or
average epochs differently cannot be compared on it (nor a deep ensemble against its members). With
``--selection`` every epoch's log-probabilities on the validation and test nodes are kept, the
validation nodes are split into two fixed halves (a permutation from seed 0), and each rule of
``SELECTION_RULES`` chooses with one half and is scored on the other, both ways, averaged: an
unbiased figure for every rule from the same runs (early stopping itself still watches the whole
validation loss, for every rule alike). With ``--test``, each rule chosen on the whole validation
split is also scored on the test split (reporting only). ``--ensemble`` averages the members'
probabilities rule by rule.

The variants' models and losses: bench/gat_variants.py. Many seeds and variants at once, in parallel
processes: bench/gat_screen_pool.py.

    python bench/gat_screens.py --variant consistency --samples 2        # val seeds 100–103
    python bench/gat_screens.py --variant supergat --seeds 104 105 106 107
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from attnflow.data.planetoid import PlanetoidDataModule  # noqa: E402
import attnflow.models.gat  # noqa: E402,F401  (registers the "gat" model with MODELS)
from attnflow.config.registry import MODELS, ConfigError  # noqa: E402
from support import DATA_DIR  # noqa: E402
from gat_variants import (  # noqa: E402
    Diffused, Propagated, RandomPropagation, SuperGAT, correct_smooth, features, pseudo_labels,
    sharpness_aware, train_loss, with_labels,
)


def accuracy(out, y, nodes) -> float:
    """The accuracy (%) of ``out``'s argmax against ``y`` on ``nodes`` (a mask or indices)."""
    return 100 * float((out[nodes].argmax(-1) == y[nodes]).float().mean())


def run_seed(seed: int, d, args) -> dict:
    if args.ensemble > 1 or args.distill:
        return run_ensemble(seed, d, args)
    mask, y, rounds = d.train_mask, d.y, []
    for _ in range(1 + (args.rounds if args.self_train else 0)):
        run, out = fit_seed(seed, d, args, mask, y)
        rounds.append({k: run[k] for k in ("val_acc", "test_acc", "epochs", "seconds")} | {"labels": int(mask.sum())})
        if args.self_train:
            mask, y = pseudo_labels(out, d, args.self_train)
    if args.self_train:
        run["rounds"], run["seconds"] = rounds, sum(q["seconds"] for q in rounds)
    if args.selection:
        run["selection"] = selection_figures(run.pop("_probs"))
    return run


def run_ensemble(seed: int, d, args) -> dict:
    """``--ensemble K``: K members from seeds seed, seed + 1000, …, their kept models' softmax
    averaged (a deep ensemble, Lakshminarayanan et al. 2017). ``--distill λ``: then a student from
    ``seed`` trained with λ·T²·KL(p_teacher^T ‖ p_student^T) on every node added to its loss (Hinton
    et al. 2015, §2; the ensemble, or the one member, as teacher; Furlanello et al. 2018's born-again
    network when it is one model of the same size)."""
    members = [fit_seed(seed + 1000 * k, d, args, d.train_mask, d.y) for k in range(args.ensemble)]
    p = sum(out.softmax(-1) for _, out in members) / len(members)
    run = dict(members[0][0])
    run["members"] = [{k: m[k] for k in ("val_acc", "test_acc", "epochs")} for m, _ in members]
    run["ensemble"] = {"val_acc": accuracy(p, d.y, d.val_mask), "test_acc": accuracy(p, d.y, d.test_mask)}
    run["seconds"] = sum(m["seconds"] for m, _ in members)
    if args.selection:  # each rule's choice made member by member, their probabilities averaged
        for m, _ in members:
            m["selection"] = selection_figures(m["_probs"])
        run["members"] = [dict(r, selection=m["selection"]) for r, (m, _) in zip(run["members"], members)]
        first = members[0][0]["_probs"]
        mean = {rule: {k: sum(m["_probs"]["rules"][rule][k] for m, _ in members) / len(members) for k in chosen}
                for rule, chosen in first["rules"].items()}
        run["selection"] = selection_figures(dict(first, rules=mean))
        run.pop("_probs", None)
    if args.distill:
        teacher = sum((out / args.kd_temperature).softmax(-1) for _, out in members) / len(members)
        student, _ = fit_seed(seed, d, args, d.train_mask, d.y, teacher=teacher)
        run["student"] = {k: student[k] for k in ("val_acc", "test_acc", "epochs")}
        run["seconds"] += student["seconds"]
    return run


def fit_seed(seed: int, d, args, mask, y, teacher=None):
    """One training run from seed ``seed`` with the labels ``y`` on ``mask``: its figures, and the
    best-val-accuracy model's output on every node. ``teacher``: soft targets (softmax at
    ``--kd-temperature``) on every node, distilled with weight ``--distill``."""
    N, classes = d.x.shape[0], int(d.y.max()) + 1
    S = args.samples if args.variant == "consistency" else 1
    x = features(d.x, args.features)
    x = with_labels(x, y, mask, classes) if args.label_input else x  # evaluation: every training label
    xs = x.repeat(S, 1)  # S copies side by side: one forward draws S independent dropouts
    eis = torch.cat([d.edge_index + s * N for s in range(S)], 1)
    feed = None
    if args.input_hops:  # GRAND's random propagation: whole in evaluation, drawn each step in training
        x = RandomPropagation(d.edge_index, N, args.input_hops)(x)
        if args.drop_node:
            feed = RandomPropagation(eis, S * N, args.input_hops, args.drop_node)
        else:  # nothing random: the training input is the evaluation input's S copies
            xs = x.repeat(S, 1)
    torch.manual_seed(seed)
    random.seed(seed)  # PyG's negative_sampling (supergat) draws with Python's random
    if args.variant == "supergat":
        model = SuperGAT(x.shape[1], classes)
    else:
        model = MODELS.build({"name": "gat", "value_dropout": 0.6} | args.gat, x.shape[1], classes)
        if args.variant == "diffusion":
            for i in args.diffuse:
                layer = model.layers[i]
                layer.__class__ = Diffused
                layer.hops, layer.teleport = args.hops, args.teleport
    if args.propagate:
        model = Propagated(model, args.propagate, args.prop_teleport)
    model.to(x.device)
    if args.decay == "first":  # GCN's recipe: only the first layer's weights decay
        first = {id(q) for q in (model.gat if args.propagate else model).layers[0].parameters()}
        groups = [{"params": [q for q in model.parameters() if id(q) in first], "weight_decay": 5e-4},
                  {"params": [q for q in model.parameters() if id(q) not in first], "weight_decay": 0.0}]
    else:
        groups = [{"params": list(model.parameters()), "weight_decay": 5e-4}]
    opt = torch.optim.Adam(groups, lr=args.lr)
    judged = model  # what is validated and kept: θ, or with --ema its running average θ̄
    if args.ema:  # callbacks.ema's rule (get_ema_multi_avg_fn); the first update copies θ
        judged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema), use_buffers=True)

    best_acc, best_loss, waited, state, trace = -1.0, float("inf"), 0, None, []
    kept = (d.val_mask | d.test_mask).nonzero().view(-1)  # --selection: the nodes whose outputs are kept
    start = time.perf_counter()
    for epoch in range(args.max_epochs):
        model.train()
        opt.zero_grad()

        def step_loss():
            loss, z = train_loss(model, d, args, S, xs, eis, mask, y, feed, epoch)
            if teacher is not None:
                T = args.kd_temperature
                loss = loss + args.distill * T * T * F.kl_div((z / T).log_softmax(-1), teacher, reduction="batchmean")
            return loss

        step_loss().backward()
        if args.sam:
            sharpness_aware(model, step_loss, args.sam)
        opt.step()
        if args.ema:
            judged.update_parameters(model)
        judged.eval()
        with torch.no_grad():
            out = judged(x, d.edge_index)
            val_loss = float(F.cross_entropy(out[d.val_mask], d.y[d.val_mask]))
            val_acc = float((out[d.val_mask].argmax(-1) == d.y[d.val_mask]).float().mean())
            if args.selection:
                trace.append(out[kept].log_softmax(-1).cpu())
        improved = val_acc > best_acc if args.stop_on == "acc" else val_loss < best_loss
        if val_acc > best_acc:
            best_acc, state = val_acc, copy.deepcopy(judged.state_dict())
        if improved:
            best_loss, waited = min(best_loss, val_loss), 0
        else:
            waited += 1
            if waited >= args.patience:
                break
    model = judged
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        out = model(x, d.edge_index)
    run = {"seed": seed, "val_acc": 100 * best_acc, "test_acc": accuracy(out, d.y, d.test_mask),
           "epochs": epoch + 1, "seconds": time.perf_counter() - start}
    if args.selection:
        run["_probs"] = selection_probs(torch.stack(trace), d, kept)
    if args.mc:
        torch.manual_seed(seed)
        model.train()  # dropout on: K stochastic passes, their softmax averaged
        with torch.no_grad():
            p = sum(model(x, d.edge_index).softmax(-1) for _ in range(args.mc)) / args.mc
        run["mc"] = {"val_acc": accuracy(p, d.y, d.val_mask), "test_acc": accuracy(p, d.y, d.test_mask)}
    if args.correct_smooth:
        run["cs"] = {}
        for a1, a2 in args.cs_alphas:
            p = correct_smooth(out, d, a1, a2, args.cs_scale)
            run["cs"][f"{a1}/{a2}"] = {"val_acc": accuracy(p, d.y, d.val_mask),
                                       "test_acc": accuracy(p, d.y, d.test_mask)}
    return run, out


SELECTION_RULES = {
    "first-max-acc": "the first epoch of the highest accuracy (the runs' rule, gat_cora's checkpoint)",
    "max-acc-min-loss": "of the epochs of the highest accuracy, the one of the lowest loss",
    "min-loss": "the epoch of the lowest loss",
    "mean-top10": "the mean probabilities of the 10 best epochs (by accuracy, then loss)",
    "mean-top50": "the same over the 50 best",
    "mean-last100": "the mean probabilities of the last 100 epochs (chosen with nothing)",
}


def selection_probs(logp, d, kept) -> dict:
    """For each rule of SELECTION_RULES and each choosing set ("A", "B": the two fixed halves of the
    validation nodes; "val": all of them), the chosen probabilities on the nodes ``kept`` (val and
    test), from ``logp`` (epochs, kept nodes, classes), every epoch's log-probabilities."""
    y = d.y[kept].cpu()
    val = d.val_mask[kept].cpu().nonzero().view(-1)
    half = val[torch.randperm(len(val), generator=torch.Generator().manual_seed(0))]
    sets = {"A": half[: len(val) // 2], "B": half[len(val) // 2:], "val": val}
    E, out = logp.shape[0], {}
    for name, sel in sets.items():
        acc = (logp[:, sel].argmax(-1) == y[sel]).float().mean(1)
        loss = -logp[:, sel].gather(-1, y[sel].expand(E, -1).unsqueeze(-1)).mean((1, 2))
        accs, losses = acc.tolist(), loss.tolist()
        order = sorted(range(E), key=lambda e: (-accs[e], losses[e]))
        epochs = {"first-max-acc": [int(acc.argmax())], "max-acc-min-loss": order[:1],
                  "min-loss": [int(loss.argmin())], "mean-top10": order[:10], "mean-top50": order[:50],
                  "mean-last100": list(range(max(0, E - 100), E))}
        for rule, chosen in epochs.items():
            out.setdefault(rule, {})[name] = logp[chosen].exp().mean(0)
    return {"rules": out, "sets": sets, "y": y, "test": d.test_mask[kept].cpu().nonzero().view(-1)}


def selection_figures(probs: dict) -> dict:
    """Per rule: "heldout", the accuracy (%) on each validation half of the choice made with the
    other, averaged over the two ways; "test": the whole-validation choice's test accuracy."""
    y, sets = probs["y"], probs["sets"]
    return {rule: {"heldout": (accuracy(p["A"], y, sets["B"]) + accuracy(p["B"], y, sets["A"])) / 2,
                   "test_acc": accuracy(p["val"], y, probs["test"])}
            for rule, p in probs["rules"].items()}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=["base", "consistency", "supergat", "diffusion", "preg"],
                    default="base")
    ap.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103])
    ap.add_argument("--samples", type=int, default=2, help="consistency: S")
    ap.add_argument("--temperature", type=float, default=0.5, help="consistency: T")
    ap.add_argument("--weight", type=float, default=None,
                    help="λ of the extra loss (default: consistency 1.0, supergat 4.0, preg 1.0)")
    ap.add_argument("--preg", type=float, default=0.0, help="μ of a P-reg term added to another variant")
    ap.add_argument("--preg-phi", choices=["ce", "se"], default="ce", help="P-reg's φ: cross-entropy or ‖·‖₂")
    ap.add_argument("--preg-adj", choices=["mean", "gcn"], default="mean",
                    help="P-reg's Â: D⁻¹A (the paper's text) or D̃^-½(A+I)D̃^-½ (its code's GCNConv)")
    ap.add_argument("--preg-hops", type=int, default=1,
                    help="P-reg's target over K propagations, Ẑ⁽ᵏ⁺¹⁾ = (1 − a)ÂẐ⁽ᵏ⁾ + aZ (a: --preg-teleport)")
    ap.add_argument("--preg-teleport", type=float, default=0.0, help="--preg-hops: a")
    ap.add_argument("--preg-ramp", type=int, default=0, metavar="E",
                    help="P-reg's μ raised linearly from μ/E to μ over the first E epochs")
    ap.add_argument("--preg-detach", action="store_true",
                    help="P-reg's target Ẑ without gradient (the paper: through both sides)")
    ap.add_argument("--hops", type=int, default=6, help="diffusion: K")
    ap.add_argument("--teleport", type=float, default=0.1, help="diffusion: a")
    ap.add_argument("--diffuse", type=int, nargs="+", default=[0, 1], help="diffusion: layers")
    ap.add_argument("--patience", type=int, default=100)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--stop-on", choices=["loss", "acc"], default="loss",
                    help="early stopping watches the val loss (gat_cora) or the val accuracy")
    ap.add_argument("--max-epochs", type=int, default=1000)
    ap.add_argument("--correct-smooth", action="store_true", help="also Correct and Smooth the output")
    ap.add_argument("--cs-alphas", type=lambda t: tuple(map(float, t.split("/"))), nargs="+",
                    default=[(a1, a2) for a1 in (0.5, 0.8, 1.0) for a2 in (0.5, 0.8, 0.9)],
                    help="(α₁/α₂) pairs of --correct-smooth, e.g. 0.8/0.9")
    ap.add_argument("--cs-scale", type=float, default=None, help="--correct-smooth: fixed scale (default autoscale)")
    ap.add_argument("--mc", type=int, default=0, metavar="K",
                    help="also predict with Monte Carlo dropout: the mean softmax of K passes with dropout on")
    ap.add_argument("--self-train", type=int, default=0, metavar="T",
                    help="pseudo-label the T most confident nodes per class outside train/val, then retrain")
    ap.add_argument("--rounds", type=int, default=1, help="--self-train: rounds of pseudo-labelling")
    ap.add_argument("--ensemble", type=int, default=1, metavar="K",
                    help="also train K − 1 more members (seeds + 1000·k) and report their mean softmax")
    ap.add_argument("--distill", type=float, default=0.0, metavar="λ",
                    help="then train a student distilled from the ensemble (or the one model), weight λ")
    ap.add_argument("--kd-temperature", type=float, default=1.0, help="--distill: T")
    ap.add_argument("--drop-edge", type=float, default=0.0, metavar="p",
                    help="DropEdge: each training step without a fraction p of the undirected edges")
    ap.add_argument("--label-input", type=float, default=0.0, metavar="r",
                    help="UniMP's label input: each step a fraction r of the training labels hidden and predicted")
    ap.add_argument("--propagate", type=int, default=0, metavar="K",
                    help="K personalised-PageRank steps over GCN's Â after the GAT (APPNP)")
    ap.add_argument("--prop-teleport", type=float, default=0.1, help="--propagate: a")
    ap.add_argument("--input-hops", type=int, default=0, metavar="K",
                    help="GRAND's mixed-order propagation of the input features over K orders")
    ap.add_argument("--drop-node", type=float, default=0.0, metavar="δ",
                    help="--input-hops: GRAND's DropNode rate, each training step")
    ap.add_argument("--gat", action="append", default=[], metavar="KEY=VALUE",
                    help="a keyword of attnflow's GAT for the non-SuperGAT variants, e.g. layers=3 (value read as YAML)")
    ap.add_argument("--features", choices=["row", "binary", "l2", "tfidf", "tfidf_l1"], default="row",
                    help="the bag-of-words rows' normalisation (row: GAT's, each row sums to 1)")
    ap.add_argument("--decay", choices=["all", "first"], default="all",
                    help="weight decay on every parameter (GAT) or on the first layer only (GCN)")
    ap.add_argument("--vat", type=float, default=0.0, metavar="ε",
                    help="virtual adversarial training: each feature row moved by ε (L2)")
    ap.add_argument("--vat-weight", type=float, default=1.0, help="--vat: λ")
    ap.add_argument("--vat-xi", type=float, default=1e-3, help="--vat: the power iteration's step ξ")
    ap.add_argument("--ema", type=float, default=0.0, metavar="β",
                    help="validate and keep an exponential moving average of the weights (callbacks.ema)")
    ap.add_argument("--sam", type=float, default=0.0, metavar="ρ",
                    help="sharpness-aware minimisation: each step's gradient taken at θ + ρ·g/‖g‖")
    ap.add_argument("--selection", action="store_true",
                    help="also score the epoch-selection rules on held-out validation halves")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--test", action="store_true", help="also print test accuracy (reporting only)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gat_screens.json"))
    return ap


def parse(ap: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The arguments, checked, with the variant's default weight."""
    args = ap.parse_args(argv)
    if args.preg and args.variant == "preg":
        ap.error("--preg adds P-reg to another variant; for preg itself use --weight")
    if args.selection and (args.self_train or args.distill or args.mc or args.correct_smooth):
        ap.error("--selection works with single runs and --ensemble only")
    if args.label_input and (args.variant in ("consistency", "supergat") or args.self_train or args.distill):
        ap.error("--label-input works with base, preg and diffusion, without --self-train or --distill")
    if args.drop_node and not args.input_hops:
        ap.error("--drop-node is applied before --input-hops' propagation; give --input-hops K")
    if args.input_hops and (args.label_input or args.variant == "supergat"):
        ap.error("--input-hops works with base, consistency, preg and diffusion, without --label-input")
    if args.features != "row" and args.label_input:
        ap.error("--features renormalises the words; --label-input appends labels to the loaded rows: not both")
    if args.vat and (args.input_hops or args.label_input or args.variant == "supergat"):
        ap.error("--vat perturbs the raw features: not with --input-hops, --label-input or --variant supergat")
    args.gat = dict(gat_keyword(ap, item) for item in args.gat)
    if args.gat and args.variant == "supergat":
        ap.error("--gat sets attnflow's GAT; --variant supergat builds PyG's SuperGATConv layers")
    if args.weight is None:
        args.weight = {"supergat": 4.0}.get(args.variant, 1.0)
    return args


def gat_keyword(ap: argparse.ArgumentParser, item: str):
    """``--gat KEY=VALUE`` as (key, value), refused unless the registry's ``gat`` model config takes
    it (its field names and types, as ``model.KEY=VALUE`` is checked in a run)."""
    import yaml

    key, sep, value = item.partition("=")
    if not sep:
        ap.error(f"--gat {item!r}: give KEY=VALUE, KEY a field of the 'gat' model")
    value = yaml.safe_load(value)
    try:
        MODELS.validate({"name": "gat", key: value}, "--gat")
    except ConfigError as e:
        ap.error(f"--gat {item!r}: {e}")
    return key, value


def load_cora(device: str = "cpu"):
    """Cora's whole graph from the data root, on ``device``."""
    raw = DATA_DIR / "planetoid" / "Cora" / "raw"
    if not raw.is_dir():
        sys.exit(f"Cora not found at {raw} (set ATTNFLOW_DATA_DIR)")
    return PlanetoidDataModule(root=str(DATA_DIR / "planetoid")).full_graph().to(device)


def main():
    args = parse(build_parser())
    torch.set_num_threads(1)
    d = load_cora(args.device)
    runs = []
    for seed in args.seeds:
        r = run_seed(seed, d, args)
        runs.append(r)
        print(f"seed {seed}: val {r['val_acc']:.1f}" + (f" test {r['test_acc']:.1f}" if args.test else "")
              + f" ({r['epochs']} epochs, {r['seconds']:.0f} s)"
              + "".join(f"; round {i} ({q['labels']} labels): val {q['val_acc']:.1f}"
                        + (f" test {q['test_acc']:.1f}" if args.test else "") for i, q in enumerate(r.get("rounds", [])))
              + "".join(f"; {k} val {r[k]['val_acc']:.1f}" + (f" test {r[k]['test_acc']:.1f}" if args.test else "")
                        for k in ("ensemble", "student") if k in r)
              + (f"; MC dropout ({args.mc}): val {r['mc']['val_acc']:.1f}"
                 + (f" test {r['mc']['test_acc']:.1f}" if args.test else "") if "mc" in r else "")
              + "".join(f"; C&S {k}: val {v['val_acc']:.1f}" + (f" test {v['test_acc']:.1f}" if args.test else "")
                        for k, v in r.get("cs", {}).items())
              + "".join(f"\n    {k}: held-out val {v['heldout']:.1f}" + (f" test {v['test_acc']:.1f}" if args.test else "")
                        + ("; members " + ", ".join(f"{m['selection'][k]['heldout']:.1f}" for m in r["members"])
                           if "members" in r else "")
                        for k, v in r.get("selection", {}).items()), flush=True)
    val = statistics.mean(r["val_acc"] for r in runs)
    print(f"{args.variant}: val mean {val:.2f}" + (
        f", test {statistics.mean(r['test_acc'] for r in runs):.2f}" if args.test else ""))
    for k in ("ensemble", "student"):
        if k in runs[0]:
            print(f"  {k}: val mean {statistics.mean(r[k]['val_acc'] for r in runs):.2f}" + (
                f", test {statistics.mean(r[k]['test_acc'] for r in runs):.2f}" if args.test else ""))
    for k in runs[0].get("cs", {}):
        print(f"  + C&S {k}: val mean {statistics.mean(r['cs'][k]['val_acc'] for r in runs):.2f}" + (
            f", test {statistics.mean(r['cs'][k]['test_acc'] for r in runs):.2f}" if args.test else ""))
    for k in runs[0].get("selection", {}):
        print(f"  {k} ({SELECTION_RULES[k]}): held-out val {statistics.mean(r['selection'][k]['heldout'] for r in runs):.2f}"
              + (f", test {statistics.mean(r['selection'][k]['test_acc'] for r in runs):.2f}" if args.test else "")
              + (f"; members {statistics.mean(m['selection'][k]['heldout'] for r in runs for m in r['members']):.2f}"
                 if "members" in runs[0] else ""))
    def without_test(r: dict) -> dict:  # test accuracies are written only with --test
        if isinstance(r, list):
            return [without_test(v) for v in r]
        return {k: (without_test(v) if isinstance(v, (dict, list)) else v)
                for k, v in r.items() if k != "test_acc" or args.test} if isinstance(r, dict) else r

    out = {"command": " ".join(["python", *sys.argv]), "args": vars(args), "val_mean": val,
           "runs": [without_test(r) for r in runs]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
