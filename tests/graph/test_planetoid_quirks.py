"""CiteSeer and PubMed by name from generated Planetoid raw files, checked against the GAT authors'
loader (PetarV-/GAT ``utils/process.py``: ``load_data`` + ``preprocess_features``, from tkipf/gcn)
re-implemented here with SciPy and NetworkX — an independent reading of the same files.

The generated CiteSeer has the real set's quirks: ``test.index`` lists test nodes in shuffled
order with gaps (nodes in the test range that are in no file: isolated, zero features), and
nodes whose bag of words is empty (row normalisation must leave them at 0, not NaN)."""

import pickle
from collections import defaultdict

import numpy as np
import pytest
import torch

from attnflow.data.planetoid import PlanetoidDataModule

sp = pytest.importorskip("scipy.sparse", reason="writing Planetoid raw files needs SciPy")
nx = pytest.importorskip("networkx")


def write_planetoid(root, name, *, n_train=12, n_all=560, n_test=40, gaps=(3, 17, 18, 31),
                    classes=3, feats=30, seed=0):
    """Raw files ``<root>/<Name>/raw/ind.<name>.*`` as kimiyoung/planetoid lays them out: x/y the
    first ``n_train`` nodes, allx/ally the first ``n_all`` (train + 500 val + the rest), tx/ty the
    test nodes, whose ids run from n_all with ``gaps`` (offsets in that range with no node data),
    listed in ``test.index`` in shuffled order; CSR features, one-hot labels, a dict-of-lists graph."""
    rng = np.random.default_rng(seed)
    span = n_test + len(gaps)
    test_ids = np.array([n_all + k for k in range(span) if k not in gaps])
    n = n_all + span
    X = (rng.random((n, feats)) < 0.15).astype(np.float32) * rng.integers(1, 3, (n, feats))
    X[[5, n_all + 1]] = 0.0  # empty bags of words: a training and a test node
    labels = rng.integers(0, classes, n)
    Y = np.eye(classes, dtype=np.int32)[labels]
    order = rng.permutation(len(test_ids))
    files = {"x": sp.csr_matrix(X[:n_train]), "y": Y[:n_train],
             "allx": sp.csr_matrix(X[:n_all]), "ally": Y[:n_all],
             "tx": sp.csr_matrix(X[test_ids]), "ty": Y[test_ids]}
    graph = defaultdict(list)
    for i in range(n):
        graph[i]  # every node a key, the gap nodes with no edges (isolated)
    real = [i for i in range(n) if i < n_all or i in set(test_ids)]
    for _ in range(3 * n):
        a, b = rng.choice(real, 2)
        graph[int(a)].append(int(b))
    graph[int(real[0])].append(int(real[0]))  # a self-loop and a duplicate, as in the real files
    graph[int(real[1])] += [int(real[2]), int(real[2])]
    raw = root / {"citeseer": "CiteSeer", "pubmed": "PubMed", "cora": "Cora"}[name] / "raw"
    raw.mkdir(parents=True)
    for key, obj in {**files, "graph": graph}.items():
        (raw / f"ind.{name}.{key}").write_bytes(pickle.dumps(obj, protocol=2))
    (raw / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_ids[order]))
    return raw


def authors_load(raw, name):
    """PetarV-/GAT utils/process.py ``load_data`` and ``preprocess_features``, as released."""
    objs = [pickle.loads((raw / f"ind.{name}.{k}").read_bytes(), encoding="latin1")
            for k in ("x", "y", "tx", "ty", "allx", "ally", "graph")]
    x, y, tx, ty, allx, ally, graph = objs
    test_idx_reorder = [int(s) for s in (raw / f"ind.{name}.test.index").read_text().split()]
    test_idx_range = np.sort(test_idx_reorder)
    if name == "citeseer":
        full = range(min(test_idx_reorder), max(test_idx_reorder) + 1)
        tx_ext = sp.lil_matrix((len(full), x.shape[1]))
        tx_ext[test_idx_range - min(test_idx_range), :] = tx
        tx = tx_ext
        ty_ext = np.zeros((len(full), y.shape[1]))
        ty_ext[test_idx_range - min(test_idx_range), :] = ty
        ty = ty_ext
    features = sp.vstack((allx, tx)).tolil()
    features[test_idx_reorder, :] = features[test_idx_range, :]
    g = nx.from_dict_of_lists(graph)
    adj = nx.to_scipy_sparse_array(g, nodelist=sorted(g.nodes()))
    labels = np.vstack((ally, ty))
    labels[test_idx_reorder, :] = labels[test_idx_range, :]
    rowsum = np.asarray(features.sum(1)).flatten()
    with np.errstate(divide="ignore"):
        r_inv = np.power(rowsum, -1.0)
    r_inv[np.isinf(r_inv)] = 0.0
    features = np.asarray(sp.diags(r_inv).dot(features).todense())
    n = labels.shape[0]
    masks = {s: np.zeros(n, bool) for s in ("train", "val", "test")}
    masks["train"][range(len(y))] = True
    masks["val"][range(len(y), len(y) + 500)] = True
    masks["test"][test_idx_range.tolist()] = True
    return adj, features, labels, masks


@pytest.mark.parametrize("name,dataset", [("citeseer", "CiteSeer"), ("pubmed", "PubMed")])
def test_generated_set_loads_by_name_as_the_authors_loader_reads_it(tmp_path, name, dataset):
    raw = write_planetoid(tmp_path, name) if name == "citeseer" else \
        write_planetoid(tmp_path, name, gaps=())  # PubMed's test ids are contiguous
    adj, feats, labels, masks = authors_load(raw, name)
    dm = PlanetoidDataModule(dataset=dataset, root=str(tmp_path))
    d = dm.full_graph()
    assert d.num_nodes == labels.shape[0] == adj.shape[0]
    # features: the authors' row-normalised matrix, empty and isolated rows 0 (not NaN)
    assert torch.isfinite(d.x).all()
    np.testing.assert_allclose(d.x.numpy(), feats, rtol=1e-6, atol=1e-7)
    for s in ("train", "val", "test"):
        assert np.array_equal(d[f"{s}_mask"].numpy(), masks[s]), s
        m = masks[s]
        assert np.array_equal(d.y.numpy()[m], labels[m].argmax(1)), s
    # edges: the authors' adjacency without self-loops (the layer adds one per node), symmetric
    a = adj.tolil()
    a.setdiag(0)
    a = sp.coo_matrix(a)
    want = {(int(i), int(j)) for i, j, v in zip(a.row, a.col, a.data) if v}
    assert set(map(tuple, d.edge_index.t().tolist())) == want


def test_citeseer_gap_nodes_are_isolated_unlabelled_test_range_nodes(tmp_path):
    gaps = (3, 17, 18, 31)
    write_planetoid(tmp_path, "citeseer", gaps=gaps)
    d = PlanetoidDataModule(dataset="CiteSeer", root=str(tmp_path)).full_graph()
    gap_ids = [560 + k for k in gaps]
    assert d.num_nodes == 560 + 40 + len(gaps) and int(d.test_mask.sum()) == 40
    assert not d.test_mask[gap_ids].any() and not d.val_mask[gap_ids].any()
    assert (d.x[gap_ids] == 0).all()
    touching = torch.isin(d.edge_index, torch.tensor(gap_ids)).any(0)
    assert not touching.any()


@pytest.mark.parametrize("experiment,name,out_heads,lr,wd", [
    ("gat_citeseer", "citeseer", 1, 0.005, 5e-4), ("gat_pubmed", "pubmed", 8, 0.01, 1e-3)])
@pytest.mark.slow
def test_preset_runs_by_name_with_the_authors_settings(tmp_path, experiment, name, out_heads, lr, wd):
    from attnflow.models.gat import GAT
    from attnflow.training.validate import resolve_config
    from attnflow.training.run import train
    from support import compose_cfg

    write_planetoid(tmp_path / "data" / "planetoid", name, **({} if name == "citeseer" else {"gaps": ()}))
    cfg = compose_cfg([f"experiment={experiment}", f"paths.data_dir={tmp_path / 'data'}",
                       "trainer.max_epochs=3", "callbacks.progress_bar=none", "logger=none",
                       "trainer.accelerator=cpu", "callbacks.attention_maps.examples=0",
                       "task.picture=false"])
    # PetarV-/GAT execute_cora.py (+ the paper's PubMed changes): heads [8, out], 8 hidden units,
    # ffd/attn dropout 0.6 (input per head, Wh, α), Adam, L2 on all parameters, patience 100
    resolved = resolve_config(cfg)
    model = GAT(30, 3, **{k: v for k, v in resolved["model"].items() if k != "name"})
    first, out = model.layers
    assert (first.heads, first.out_dim, out.heads, out.out_dim) == (8, 8, out_heads, 3)
    assert first.input_dropout == out.input_dropout == 0.6 and model.head_dropout
    assert first.value_dropout == first.dropout == out.value_dropout == out.dropout == 0.6
    assert (cfg.task.optim.lr, cfg.task.optim.weight_decay) == (lr, wd)
    assert resolved["task"]["optim"].get("decay_bias_and_norm", True)  # L2 on every parameter
    assert cfg.callbacks.early_stopping.patience == 100
    # attn_head's conv1d(seq_fts, 1, 1) terms: a bias per head inside the LeakyReLU, kernels drawn
    # with each head's own glorot bound √(6/(C+1))
    for layer in model.layers:
        assert all(s.b is not None and s.init == "per_head" for s in layer.scorers)
    m = train(cfg, tmp_path / "run")["metrics"]
    assert 0.0 <= m["test/acc"] <= 1.0 and 0.0 <= m["val/acc"] <= 1.0
