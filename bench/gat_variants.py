"""The models, inputs and losses of bench/gat_screens.py's variants, apart from its training loop
and command line: each function or class says what it computes and from which paper; which option
turns it on, and the figures it gave, are in gat_screens.py's docstring and docs/benchmarks.md
("Cora ≥ 84.0"). Screening code, not attnflow's: what proves itself moves into attnflow's blocks and
tasks (P-reg did, as ``task.propagation_reg``)."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import dropout_edge, to_torch_csr_tensor

from attnflow.blocks.graph.graph_attention import GraphAttention
from attnflow.tasks.node_classification import propagate, propagation_loss


class Diffused(GraphAttention):
    """A graph attention layer whose aggregation runs ``hops`` times with teleport ``teleport``:
    Z⁰ = Wh, Zᵏ⁺¹ = (1 − a)·A Zᵏ + a·Z⁰, A the layer's attention (Wang et al. 2021, MAGNA, eq. (5))."""

    hops, teleport = 1, 0.0

    def propagate(self, edge_index, x, alpha, size):
        z = x
        for _ in range(self.hops):
            z = (1 - self.teleport) * super().propagate(edge_index, x=z, alpha=alpha, size=size) \
                + self.teleport * x
        return z


class SuperGAT(torch.nn.Module):
    """Two PyG ``SuperGATConv`` layers with MX attention, 8 heads each (Kim & Oh 2021, "How to find
    your friendly neighborhood", eq. (6)–(8): GAT's logit · σ((Whᵢ)ᵀWhⱼ), with a link-prediction
    loss on sampled edges and non-edges), dropout 0.6 as in gat_cora."""

    def __init__(self, in_dim: int, classes: int):
        super().__init__()
        from torch_geometric.nn import SuperGATConv

        kw = dict(dropout=0.6, attention_type="MX", edge_sample_ratio=0.8, is_undirected=True)
        self.c1 = SuperGATConv(in_dim, 8, heads=8, **kw)
        self.c2 = SuperGATConv(64, classes, heads=8, concat=False, **kw)

    def forward(self, x, edge_index):
        x = F.elu(self.c1(F.dropout(x, 0.6, self.training), edge_index))
        return self.c2(F.dropout(x, 0.6, self.training), edge_index)

    def attention_loss(self):
        """The two layers' link losses of the last training forward."""
        return self.c1.get_attention_loss() + self.c2.get_attention_loss()


def train_loss(model, d, args, S, xs, eis, mask, y, feed=None, epoch: int = 0):
    """The variant's training loss of one full-batch step (S samples: the copies in xs, eis), with
    the labels ``y`` on the nodes of ``mask`` (the training split, or with pseudo-labels added), and
    the (first sample's) logits of every node. ``feed``: a random input transform drawn afresh
    each step (``RandomPropagation``). ``epoch``: the step's number, for ``--preg-ramp``.
    consistency: Feng et al. 2020 (GRAND), eq. (8)–(9), each sample pulled to the sharpened mean
    prediction; preg: Yang et al. 2021, §3 (``preg_term``)."""
    N = d.x.shape[0]
    ramp = min(1.0, (epoch + 1) / args.preg_ramp) if args.preg_ramp else 1.0  # P-reg's μ warm-up
    if feed is not None:
        xs = feed(xs, training=True)
    if args.label_input:  # a fresh fraction r of the training labels hidden: those nodes carry the loss
        hidden = mask & (torch.rand(N, device=mask.device) < args.label_input)
        xs, mask = with_labels(d.x, y, mask & ~hidden, int(d.y.max()) + 1), hidden
    if args.drop_edge:
        eis = dropout_edge(eis, p=args.drop_edge, force_undirected=True)[0]
    if args.variant == "supergat":
        z = model(xs, eis)
        loss = F.cross_entropy(z[mask], y[mask]) + args.weight * model.attention_loss()
        return (loss + ramp * args.preg * preg_term(z, d.edge_index, args) if args.preg else loss), z
    z = model(xs, eis).view(S, N, -1)
    loss = sum(F.cross_entropy(z[s][mask], y[mask]) for s in range(S)) / S
    if args.variant == "consistency":
        p = z.softmax(-1)
        sharp = p.mean(0).pow(1 / args.temperature)
        sharp = (sharp / sharp.sum(-1, keepdim=True)).detach()
        loss = loss + args.weight * (p - sharp).pow(2).sum(-1).mean()
    mu = ramp * (args.weight if args.variant == "preg" else args.preg)
    if mu:
        loss = loss + mu * sum(preg_term(z[s], d.edge_index, args) for s in range(S)) / S
    if args.vat:
        loss = loss + args.vat_weight * vat_term(model, xs[:N], d.edge_index, args.vat, args.vat_xi)
    return loss, z[0]


def sharpness_aware(model, closure, rho: float):
    """Sharpness-aware minimisation (Foret et al. 2021, "Sharpness-aware minimization for efficiently
    improving generalization", eq. (2) and Algorithm 1), called after ``closure()``'s loss was
    backpropagated: each parameter's gradient g = ∇L(θ) is replaced by ∇L(θ + ε̂), ε̂ = ρ·g / ‖g‖₂
    (the norm over every parameter at once), and θ is put back, so the optimiser's step (Adam, its
    L2 term at θ) follows the gradient at the worst nearby point. ``closure`` recomputes the loss
    (a fresh dropout draw, as the reference implementation's second forward pass)."""
    params = [q for q in model.parameters() if q.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(q.grad) for q in params]))
    kept = [q.detach().clone() for q in params]  # θ restored exactly, not as (θ + ε̂) − ε̂
    with torch.no_grad():
        for q in params:
            q.add_(q.grad, alpha=float(rho / (norm + 1e-12)))
            q.grad = None
    closure().backward()
    with torch.no_grad():
        for q, old in zip(params, kept):
            q.copy_(old)


def adversarial_direction(model, x, edge_index, p, d, xi: float):
    """VAT's power iteration (Miyato et al. 2018, "Virtual adversarial training", eq. (12)–(13),
    one iteration as in their experiments): g = ∇ᵣ KL(p ‖ p(·| x + r)) at r = ξ·d̂, each node's
    row of d̂ the unit vector of ``d``'s; returned with unit rows. For small ξ, g ≈ ξ·H d̂ with H the
    Hessian of the KL at r = 0, so the rows approach H's dominant eigenvector. The model's
    parameters get no gradient."""
    r = (xi * F.normalize(d, dim=-1)).requires_grad_()
    kl = F.kl_div(model(x + r, edge_index).log_softmax(-1), p, reduction="sum")
    (g,) = torch.autograd.grad(kl, r)
    return F.normalize(g, dim=-1)


def vat_term(model, x, edge_index, eps: float, xi: float):
    """VAT's local distributional smoothness on a graph (Miyato et al. 2018, eq. (5)–(6); on every
    node at once as Deng et al. 2019's batch VAT for GCNs): mean over nodes of
    KL(p(·|x) ‖ p(·|x + ε·r̂)), r̂ from ``adversarial_direction`` with a random start, each node's
    feature row moved by ε (L2). The target p(·|x) is held fixed; both passes run the model in
    evaluation mode (no dropout), so the term measures the deterministic model's smoothness, not
    dropout's noise (which GRAND's consistency loss already tried)."""
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            p = model(x, edge_index).softmax(-1)
        r = eps * adversarial_direction(model, x, edge_index, p, torch.randn_like(x), xi)
        return F.kl_div(model(x + r, edge_index).log_softmax(-1), p, reduction="batchmean")
    finally:
        model.train(was)


def features(x, kind: str):
    """Cora's bag-of-words rows ``x`` (as loaded: row-normalised) in the normalisation ``kind``
    (``--features``): 'row', unchanged (each row sums to 1: GAT's and GCN's preprocessing, Kipf &
    Welling 2017's ``preprocess_features``); 'binary', the 0/1 words; 'l2', the 0/1 rows scaled to
    unit L2 norm; 'tfidf', the 0/1 words weighted by idf_j = ln((1 + N)/(1 + df_j)) + 1 (df_j: the
    nodes whose text has word j, over all N nodes; no labels), rows of unit L2 norm (Salton &
    Buckley 1988's term weighting, with scikit-learn's TfidfTransformer defaults); 'tfidf_l1', the
    same weights in rows that sum to 1 (GAT's scale: only the words' relative weights change). Rows
    without a word stay 0."""
    if kind == "row":
        return x
    words = (x > 0).to(x.dtype)
    if kind == "binary":
        return words
    if kind.startswith("tfidf"):
        n = words.shape[0]
        words = words * (torch.log((1 + n) / (1 + words.sum(0))) + 1)
    return F.normalize(words, p=1 if kind == "tfidf_l1" else 2, dim=-1)  # a wordless row stays 0


class RandomPropagation:
    """GRAND's random propagation (Feng et al. 2020, §3.1, eq. (2)–(3)): X ↦ 1/(K+1) Σₖ ÂᵏX̃ with
    X̃ = X with whole rows dropped with probability ``drop`` (kept rows × 1/(1 − drop)) when
    ``training``, X̃ = X otherwise; Â = D̃^-½(A+I)D̃^-½ of ``edge_index`` on ``n`` nodes, built once
    as a sparse matrix."""

    def __init__(self, edge_index, n: int, hops: int, drop: float = 0.0):
        (src, dst), weight = gcn_norm(edge_index, None, n, add_self_loops=True)
        with warnings.catch_warnings():  # CSR's matmul is the one used here, beta or not
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            self.adj = to_torch_csr_tensor(torch.stack([dst, src]), weight, size=n)  # row i: Â[i, j]
        self.hops, self.drop = hops, drop

    def __call__(self, x, training: bool = False):
        if training and self.drop:
            keep = torch.rand(x.shape[0], 1, device=x.device) >= self.drop
            x = x * keep / (1 - self.drop)
        total = h = x
        for _ in range(self.hops):
            h = self.adj @ h
            total = total + h
        return total / (self.hops + 1)


def with_labels(x, y, shown, classes: int):
    """[x ‖ one-hot(y)] with the label part zero outside ``shown`` (Shi et al. 2021, UniMP's label
    input, §3.3)."""
    return torch.cat([x, F.one_hot(y, classes).to(x.dtype) * shown.unsqueeze(-1)], -1)


class Propagated(torch.nn.Module):
    """``gat``'s logits Z spread by K personalised-PageRank steps over GCN's Â (APPNP, eq. (3))."""

    def __init__(self, gat, hops: int, teleport: float):
        super().__init__()
        self.gat, self.hops, self.teleport = gat, hops, teleport

    def forward(self, x, edge_index):
        z = self.gat(x, edge_index)
        return pagerank_steps(z, z, edge_index, "gcn", self.hops, self.teleport)


def pagerank_steps(h, z, edge_index, adjacency: str, steps: int, teleport: float):
    """``steps`` personalised-PageRank steps from h, H ← (1 − a)·ÂH + a·Z (APPNP, eq. (3))."""
    for _ in range(steps):
        h = (1 - teleport) * propagate(h, edge_index, adjacency)[0] + teleport * z
    return h


def preg_term(z, edge_index, args):
    """P-reg's φ(Z, Ẑ) (``--preg-phi``): ``ce``, attnflow's ``propagation_loss``; ``se``, the mean of
    ‖softmax(ẑᵢ) − softmax(zᵢ)‖₂ (Yang et al. 2021's squared-error φ, on the probabilities as their
    code has it) over the same nodes, Ẑ = ÂZ from the same ``propagate`` (``--preg-adj``: Â), or
    over ``--preg-hops`` K propagations with teleport ``--preg-teleport`` a; ``--preg-detach``: no
    gradient through Ẑ (each node pulled to its neighbours' current outputs, not they to it)."""
    phi, adjacency = args.preg_phi, args.preg_adj
    if phi == "ce" and args.preg_hops == 1 and not args.preg_detach:
        return propagation_loss(z, edge_index, adjacency)
    source = z.detach() if args.preg_detach else z  # --preg-detach: Ẑ a fixed target this step
    mean, has = propagate(source, edge_index, adjacency)  # then Ẑ⁽ᵏ⁺¹⁾ = (1 − a)·ÂẐ⁽ᵏ⁾ + a·Z
    mean = pagerank_steps(mean, source, edge_index, adjacency, args.preg_hops - 1, args.preg_teleport)
    if phi == "ce":
        return -(mean.softmax(-1) * z.log_softmax(-1)).sum(-1)[has].mean()
    return (mean.softmax(-1) - z.softmax(-1)).norm(dim=-1)[has].mean()


def pseudo_labels(out, d, per_class: int):
    """The training mask and labels with, for each class, the ``per_class`` nodes outside the
    training and validation splits that ``out`` predicts as that class most confidently (Li, Han &
    Wu 2018's self-training, §5.1)."""
    prob, pred = out.softmax(-1).max(-1)
    free = ~(d.train_mask | d.val_mask)
    mask, y = d.train_mask.clone(), d.y.where(d.train_mask, torch.zeros_like(d.y))
    for c in range(out.shape[-1]):
        nodes = (free & (pred == c)).nonzero().view(-1)
        top = nodes[prob[nodes].argsort(descending=True)[:per_class]]
        mask[top], y[top] = True, c
    return mask, y


def correct_smooth(out, d, a1: float, a2: float, scale=None, layers: int = 50):
    """Correct and Smooth (Huang et al. 2021) of ``out``'s softmax with the training labels only;
    ``scale`` None: autoscale, else the fixed scale of the spread residuals (their FDiff-scale)."""
    from torch_geometric.nn.models import CorrectAndSmooth

    cs = CorrectAndSmooth(layers, a1, layers, a2, autoscale=scale is None, scale=scale or 1.0)
    y_train = d.y[d.train_mask]
    fixed = cs.correct(out.softmax(-1), y_train, d.train_mask, d.edge_index)
    return cs.smooth(fixed, y_train, d.train_mask, d.edge_index)
