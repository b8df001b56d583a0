"""data=graph: a known six-node graph read from a node table and an edge list, a saved PyG Data
and a PyG data set class's raw files gives exactly its features, edges, labels and masks; drawn
masks are seeded, disjoint and sized; bad files are one-line errors; nothing is downloaded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from attnflow.config.registry import DATA, ConfigError
from attnflow.data.errors import DataError

IDS = ["ada", "bo", "cy", "di", "ed", "fa"]
LABELS = ["ml", "ml", "db", "db", "ml", ""]  # fa: no label
X = [[3, 1, 0], [2, 1, 0], [2, 0, 1], [3, 0, 1], [1, 1, 0], [1, 0, 1]]
EDGES = [("ada", "bo"), ("ada", "ed"), ("bo", "cy"), ("cy", "di"), ("di", "fa")]


def tables(tmp_path, split=None, sep=","):
    ext = "csv" if sep == "," else "tsv"
    head = ["id", "label", "a", "b", "c"] + (["split"] if split else [])
    lines = [sep.join(head)] + [sep.join([i, y, *map(str, x)] + ([split[k]] if split else []))
                                for k, (i, y, x) in enumerate(zip(IDS, LABELS, X))]
    (tmp_path / f"nodes.{ext}").write_text("\n".join(lines) + "\n")
    (tmp_path / f"edges.{ext}").write_text("source,target\n".replace(",", sep)
                                           + "".join(f"{a}{sep}{b}\n" for a, b in EDGES))
    return {"nodes": str(tmp_path / f"nodes.{ext}"), "edges": str(tmp_path / f"edges.{ext}")}


def graph(**fields):
    return DATA.build({"name": "graph", **fields}).full_graph()


def expected_edges(undirected=True):
    e = torch.tensor([[IDS.index(a), IDS.index(b)] for a, b in EDGES]).t()
    return to_undirected(e, num_nodes=6) if undirected else e


@pytest.mark.parametrize("sep", [",", "\t"])
def test_a_node_table_and_edge_list(tmp_path, sep):
    g = graph(**tables(tmp_path, ["train", "train", "val", "test", "test", ""], sep))
    assert torch.equal(g.x, torch.tensor(X, dtype=torch.float))
    assert g.y.tolist() == [1, 1, 0, 0, 1, -1]  # classes sorted: db, ml; fa unlabelled
    assert torch.equal(g.edge_index, expected_edges())
    assert g.train_mask.tolist() == [True, True, False, False, False, False]
    assert g.val_mask.tolist() == [False, False, True, False, False, False]
    assert g.test_mask.tolist() == [False, False, False, True, True, False]
    kept = graph(**tables(tmp_path), undirected=False, labels=["ml", "db"], feature_fields=["c", "a"])
    assert torch.equal(kept.edge_index, expected_edges(False)) and kept.y.tolist() == [0, 0, 1, 1, 0, -1]
    assert kept.x.tolist() == [[x[2], x[0]] for x in X]


def test_drawn_masks_are_seeded_disjoint_and_sized(tmp_path):
    files = tables(tmp_path)
    a, b = graph(**files, split=[0.4, 0.2, 0.4], seed=3), graph(**files, split=[0.4, 0.2, 0.4], seed=3)
    masks = torch.stack([a.train_mask, a.val_mask, a.test_mask])
    assert torch.equal(masks, torch.stack([b.train_mask, b.val_mask, b.test_mask]))
    assert masks.sum(1).tolist() == [2, 1, 2] and masks.sum(0).max() == 1  # of the 5 labelled
    assert not masks[:, 5].any()  # fa has no label
    drawn = {tuple(graph(**files, split=[0.4, 0.2, 0.4], seed=s).train_mask.tolist()) for s in range(3, 9)}
    assert len(drawn) > 1  # the seed decides


def test_a_saved_data_or_dict_weights_only(tmp_path):
    x = torch.tensor(X, dtype=torch.float)
    e = expected_edges(False)
    y = torch.tensor([1, 1, 0, 0, 1, 0])
    masks = {f"{s}_mask": torch.tensor(m) for s, m in (("train", [1, 1, 0, 0, 0, 0]), ("val", [0, 0, 1, 0, 0, 0]),
                                                       ("test", [0, 0, 0, 1, 1, 1]))}
    torch.save(Data(x=x, edge_index=e, y=y, **masks), tmp_path / "g.pt")
    torch.save({"x": x, "edge_index": e, "y": y}, tmp_path / "d.pt")
    g = graph(path=str(tmp_path / "g.pt"), undirected=False)
    assert torch.equal(g.x, x) and torch.equal(g.edge_index, e) and torch.equal(g.y, y)
    assert g.test_mask.tolist() == [False, False, False, True, True, True]
    d = graph(path=str(tmp_path / "d.pt"), split=[0.5, 0.5, 0.0])
    assert d.train_mask.sum() == 3 and d.val_mask.sum() == 3 and not d.test_mask.any()
    torch.save({"x": x, "why": np.arange(3)}, tmp_path / "bad.pt")  # a NumPy global: refused
    with pytest.raises(DataError, match=r"bad.pt holds numpy"):
        graph(path=str(tmp_path / "bad.pt"))


def test_a_pyg_class_reads_its_raw_files_offline(tmp_path):
    """torch_geometric.datasets.Amazon from <root>/Photo/raw/amazon_electronics_photo.npz (its
    raw layout), written here for the known graph; its processed copy goes elsewhere."""
    import scipy.sparse as sp

    raw = tmp_path / "Photo" / "raw"
    raw.mkdir(parents=True)
    adj = sp.csr_matrix((np.ones(len(EDGES)), ([IDS.index(a) for a, _ in EDGES],
                                               [IDS.index(b) for _, b in EDGES])), shape=(6, 6))
    attr = sp.csr_matrix((np.array(X) > 1).astype(np.float32))
    np.savez(raw / "amazon_electronics_photo.npz", adj_data=adj.data, adj_indices=adj.indices,
             adj_indptr=adj.indptr, adj_shape=adj.shape, attr_data=attr.data,
             attr_indices=attr.indices, attr_indptr=attr.indptr, attr_shape=attr.shape,
             labels=np.array([1, 1, 0, 0, 1, 0]))
    g = graph(dataset="Amazon", dataset_args={"name": "photo"}, root=str(tmp_path))
    assert torch.equal(g.x, (torch.tensor(X) > 1).float()) and g.y.tolist() == [1, 1, 0, 0, 1, 0]
    assert torch.equal(g.edge_index, expected_edges())
    assert not (tmp_path / "Photo" / "processed").exists()
    with pytest.raises(DataError, match=r"Amazon needs its raw files under data.root=.*missing: "
                                        r".*Computers/raw/amazon_electronics_computers.npz"):
        graph(dataset="Amazon", dataset_args={"name": "computers"}, root=str(tmp_path))
    with pytest.raises(ConfigError, match=r"has no class 'Amazn'.*Did you mean 'Amazon'"):
        graph(dataset="Amazn", root=str(tmp_path))


def test_a_pyg_class_without_files_is_the_graph_its_code_holds(tmp_path):
    """KarateClub takes no ``root``: its graph is Zachary's club as networkx draws it (34
    members, 78 ties, both directions), and a ``data.root`` given is one warning."""
    nx = pytest.importorskip("networkx")
    with pytest.warns(UserWarning, match=r"data.root=.* is unread: KarateClub holds its graph in its code"):
        g = graph(dataset="KarateClub", root=str(tmp_path))
    club = nx.karate_club_graph()
    want = to_undirected(torch.tensor(list(club.edges)).t(), num_nodes=34)
    assert g.num_nodes == 34 and torch.equal(g.edge_index, want)


@pytest.mark.parametrize("break_, match", [
    (lambda p: p.with_name("edges.csv").write_text("source,target\nada,zed\n"),
     r"edges.csv line 2: target='zed' is not a node of .*nodes.csv"),
    (lambda p: p.write_text(p.read_text().replace("ada,ml,3", "ada,ml,three")),
     r"nodes.csv line 2: a='three' is not a number"),
    (lambda p: p.write_text(p.read_text() + "bo,db,1,1,1\n"), r"nodes.csv line 8: node 'bo' is listed twice"),
])
def test_bad_files_are_one_line_errors(tmp_path, break_, match):
    files = tables(tmp_path)
    from pathlib import Path

    break_(Path(files["nodes"]))
    with pytest.raises(DataError, match=match) as err:
        graph(**files)
    assert "\n" not in str(err.value)


def test_one_source_is_asked_for(tmp_path):
    with pytest.raises(ConfigError, match=r"give one source.*got none"):
        DATA.build({"name": "graph"})
    with pytest.raises(ConfigError, match=r"got dataset, path"):
        DATA.build({"name": "graph", "dataset": "Amazon", "path": "g.pt"})
    with pytest.raises(ConfigError, match=r"without data.edges"):
        DATA.build({"name": "graph", "nodes": "n.csv"})


def test_predict_names_the_files_nodes_and_classes(tmp_path, capsys):
    from attnflow.cli.predict import main
    from cli_runs import QUIET, fabricate_run

    files = tables(tmp_path)
    run = fabricate_run(["experiment=gat_graph", f"data.nodes={files['nodes']}",
                         f"data.edges={files['edges']}", "task.picture=false", *QUIET], tmp_path / "run")
    assert main([str(run), "--explain", "--top-k", "2"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header == "node,label,prob,prob_db,prob_ml,neighbours"
    assert [r.split(",")[0] for r in rows] == IDS
    assert rows[0].split(",")[-1].split()[0].split(":")[0] in ("ada", "bo", "ed")  # ada's neighbours, self-loop
