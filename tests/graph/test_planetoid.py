"""Planetoid data module: Cora from PyG's raw layout with the public split; clear errors."""

import pytest
import torch

from attnflow.data.planetoid import PlanetoidDataModule, read_planetoid
from attnflow.config.registry import DATA, ConfigError
from support import DATA_DIR

ROOT = DATA_DIR / "planetoid"
needs_cora = pytest.mark.skipif(not (ROOT / "Cora" / "raw").is_dir(),
                                reason=f"Cora raw files not found at {ROOT / 'Cora' / 'raw'} "
                                       "(set ATTNFLOW_DATA_DIR)")


@needs_cora
def test_cora_has_the_published_statistics():
    dm = DATA.build({"name": "planetoid", "dataset": "Cora", "root": str(ROOT)})
    d = dm.full_graph()
    assert d.num_nodes == 2708 and d.edge_index.shape == (2, 10556) and d.x.shape[1] == 1433
    assert dm.num_classes == 7 and not dm.multi_label
    assert [int(d[f"{s}_mask"].sum()) for s in ("train", "val", "test")] == [140, 500, 1000]
    assert not (d.train_mask & d.val_mask).any() and not (d.val_mask & d.test_mask).any()
    # 20 labelled training nodes per class; undirected; no self-loops
    assert torch.equal(torch.bincount(d.y[d.train_mask]), torch.full((7,), 20))
    pairs = set(map(tuple, d.edge_index.t().tolist()))
    assert all((j, i) in pairs for i, j in pairs) and all(i != j for i, j in pairs)
    # row-normalised bag of words
    torch.testing.assert_close(d.x.sum(1), torch.ones(2708))
    assert dm.model_context() == {"in_dim": 1433, "num_classes": 7}


@needs_cora
def test_raw_features_are_binary_without_normalisation():
    d = PlanetoidDataModule(root=str(ROOT), normalize_features=False).full_graph()
    assert set(d.x.unique().tolist()) == {0.0, 1.0}
    assert int(d.x.sum()) == 49216  # Cora's word occurrences


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown data set 'Coraa'.*Cora, CiteSeer, PubMed"):
        read_planetoid(ROOT, "Coraa")
    with pytest.raises(ConfigError, match="'Cora', 'CiteSeer', 'PubMed'"):
        DATA.validate({"name": "planetoid", "dataset": "cora_ml"})


def test_missing_raw_folder_names_the_path_and_files(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        PlanetoidDataModule(dataset="CiteSeer", root=str(tmp_path)).full_graph()
    msg = str(err.value)
    assert str(tmp_path / "CiteSeer" / "raw") in msg and "ind.citeseer.graph" in msg


def test_neighbor_sampling_without_extras_says_what_to_install():
    from attnflow.data.graph import neighbor_sampling_available

    if neighbor_sampling_available():
        pytest.skip("pyg-lib or torch-sparse is installed")
    with pytest.raises(ValueError, match="pyg-lib or torch-sparse.*data.loader=khop"):
        PlanetoidDataModule(root=str(ROOT), loader="neighbor")


@pytest.mark.parametrize("loader, field, value", [
    ("full", "batch_size", 64), ("full", "num_hops", 3), ("khop", "num_neighbors", [5]),
    ("full", "seed", 7), ("khop", "batch_size", 512)])
def test_a_field_the_loader_does_not_read_warns(loader, field, value, recwarn):
    PlanetoidDataModule(root=str(ROOT), loader=loader, **{field: value})
    said = [str(w.message) for w in recwarn if "is unread" in str(w.message)]
    if (loader, field) in (("khop", "batch_size"), ("full", "seed")):  # read, or the run's seed
        assert said == []
    else:
        assert said == [f"data 'planetoid': {field}={value} is unread: loader={loader} does not read it"]


def test_the_synthetic_graphs_seed_never_warns(recwarn):
    from attnflow.data.synthetic_graph import SyntheticGraphDataModule

    SyntheticGraphDataModule(seed=3, num_hops=2)
    assert not [w for w in recwarn if "is unread" in str(w.message)]


@pytest.mark.data
def test_a_crafted_raw_file_cannot_run_code_and_is_named(tmp_path):
    import os
    import pickle
    import shutil

    src = DATA_DIR / "planetoid" / "Cora" / "raw"
    if not src.is_dir():
        pytest.skip(f"Cora raw files not found at {src} (set ATTNFLOW_DATA_DIR)")
    raw = tmp_path / "Cora" / "raw"
    shutil.copytree(src, raw)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (raw / "ind.cora.x").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ValueError, match=r"ind\.cora\.x.*posix\.system|ind\.cora\.x.*os\.system"):
        read_planetoid(tmp_path, "Cora")
    assert not marker.exists()
    (raw / "ind.cora.x").write_bytes((src / "ind.cora.x").read_bytes()[:100])  # truncated
    with pytest.raises(ValueError, match=r"cannot read .*ind\.cora\.x"):
        read_planetoid(tmp_path, "Cora")
