"""Where the data is found (``${attnflow_data:}``: ATTNFLOW_DATA_DIR, ``data/`` in the working
directory, a source checkout's ``../shared/data``, never beside an installed package), what a
missing data file says, optional test files, and a sweep that stops before its first job when its
data is missing."""

from __future__ import annotations

import pytest

import attnflow
from attnflow.config.registry import DATA
from attnflow.data.documents import DocumentDataModule
from attnflow.data.errors import DataFileNotFoundError
from attnflow.data.graph_files import saved_graph
from attnflow.data.parallel import ParallelDataModule
from attnflow.data.planetoid import read_planetoid
from attnflow.data.text_classification import TextClassificationDataModule
from attnflow.sweep.checks import check_data_files, check_sweep_data
from support import ROOT, compose_cfg, train_cli


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory without data/, ATTNFLOW_DATA_DIR unset."""
    monkeypatch.delenv("ATTNFLOW_DATA_DIR", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _package_root(parent):
    """A folder holding the package with conf/, and a shared/data beside it."""
    root = parent / "attnflow_root"
    (root / "conf").mkdir(parents=True)
    (parent / "shared" / "data").mkdir(parents=True)
    return root


def test_the_environment_variable_wins(elsewhere, tmp_path, monkeypatch):
    (elsewhere / "data").mkdir()
    monkeypatch.setenv("ATTNFLOW_DATA_DIR", str(tmp_path / "mine"))
    assert attnflow.data_dir() == str(tmp_path / "mine")
    assert compose_cfg([]).paths.data_dir == str(tmp_path / "mine")


def test_a_data_folder_in_the_working_directory_comes_next(elsewhere, tmp_path):
    (elsewhere / "data").mkdir()
    assert attnflow.data_dir(_package_root(tmp_path)) == str(elsewhere / "data")
    assert compose_cfg([]).paths.data_dir == str(elsewhere / "data")


def test_a_checkout_reads_its_sibling_shared_data(elsewhere, tmp_path):
    root = _package_root(tmp_path)
    assert attnflow.data_dir(root) == str(tmp_path / "shared" / "data")
    shared = ROOT.parent / "shared" / "data"  # this checkout's, where the project keeps it
    assert attnflow.data_dir() == str(shared if shared.is_dir() else elsewhere / "data")


@pytest.mark.parametrize("site", ["lib/python3.11/site-packages", "usr/lib/python3/dist-packages"])
def test_an_installed_package_never_reads_beside_site_packages(elsewhere, tmp_path, site):
    root = _package_root(tmp_path / site)  # shared/data beside the package: not used
    assert attnflow.data_dir(root) == str(elsewhere / "data")
    (tmp_path / "conf-less").mkdir()  # nor beside a folder that is no checkout
    (tmp_path / "shared" / "data").mkdir(parents=True, exist_ok=True)
    assert attnflow.data_dir(tmp_path / "conf-less") == str(elsewhere / "data")


@pytest.mark.parametrize("load, layout", [
    (lambda d: ParallelDataModule(root=str(d / "multi30k")).model_context(), "multi30k/"),
    (lambda d: read_planetoid(d / "planetoid", "Cora"), "planetoid/<Name>/raw/ind.<name>.*"),
    (lambda d: DocumentDataModule(train_path=str(d / "imdb" / "train.jsonl.gz"),
                                  val_path=str(d / "imdb" / "dev.jsonl.gz")).setup(), "imdb/train.jsonl.gz"),
    (lambda d: TextClassificationDataModule(train_path=str(d / "imdb" / "train.jsonl.gz"),
                                            val_path=str(d / "imdb" / "dev.jsonl.gz")).setup(), "imdb/"),
    (lambda d: saved_graph(str(d / "graph.pt")), None)])
def test_a_missing_data_file_names_the_variable_the_setting_and_the_layout(tmp_path, load, layout):
    with pytest.raises(DataFileNotFoundError) as err:
        load(tmp_path / "nowhere")
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "nowhere") in message
    assert "ATTNFLOW_DATA_DIR" in message and "paths.data_dir=" in message
    assert layout is None or f"<data dir>/{layout}" in message


@pytest.mark.parametrize("experiment", ["han_imdb", "bert_imdb"])
def test_a_null_test_path_is_no_test_split(tmp_path, experiment):
    cfg = compose_cfg([f"experiment={experiment}", "data.test_path=null"])
    dm = DATA.build(dict(cfg.data), path="data")
    assert "no test split" in dm.missing_test()


# -- a sweep's data, before its first job ------------------------------------------------------------
def test_an_optuna_sweep_without_its_data_stops_before_making_its_folder(tmp_path, monkeypatch, capsys):
    pytest.importorskip("optuna")
    sweep = tmp_path / "sweep"
    code = train_cli(monkeypatch, "hparams_search=gat_cora_optuna", f"paths.data_dir={tmp_path / 'none'}",
                     f"hydra.sweep.dir={sweep}")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("attnflow: data error: data 'planetoid': Cora is missing") and "ATTNFLOW_DATA_DIR" in err
    assert not sweep.exists()


def test_a_grid_without_its_data_stops_before_making_its_folder(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    code = train_cli(monkeypatch, "-m", "experiment=gat_cora", "task.optim.lr=0.01,0.02",
                     f"paths.data_dir={tmp_path / 'none'}", f"hydra.sweep.dir={sweep}")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "ATTNFLOW_DATA_DIR" in err, err
    assert not sweep.exists()


def test_a_sweep_of_the_data_itself_is_left_to_its_jobs(tmp_path):
    missing = ["experiment=gat_cora", f"data.root={tmp_path / 'none'}"]
    cfg = compose_cfg(missing, return_hydra_config=True)
    with pytest.raises(DataFileNotFoundError):
        check_sweep_data(cfg, ["-m", *missing, "task.optim.lr=0.01,0.02"])
    check_sweep_data(cfg, ["-m", *missing, f"data.root={tmp_path / 'a'},{tmp_path / 'b'}"])


def test_the_test_files_are_checked_only_for_a_tested_run(tmp_path):
    root = tmp_path / "m30k"
    root.mkdir()
    for split in ("train", "val"):
        for lang in ("de", "en"):
            (root / f"{split}.{lang}.gz").write_bytes(b"")
    tested = ["experiment=mt_transformer", f"data.root={root}"]
    check_data_files(compose_cfg([*tested, "test=false"], return_hydra_config=True))
    with pytest.raises(DataFileNotFoundError, match=r"test_2016_flickr\.de"):
        check_data_files(compose_cfg(tested, return_hydra_config=True))


def test_a_captions_sweep_checks_its_captions_and_images_first(tmp_path):
    """The captions data module told its missing files only inside the first job."""
    root = tmp_path / "flickr8k"
    cfg = compose_cfg(["experiment=caption_shapes", "data=captions", f"data.root={root}"],
                      return_hydra_config=True)
    with pytest.raises(DataFileNotFoundError, match=r"captions file not found: .*dataset_flickr8k\.json "
                                                     r"\(at 'data.captions'\).*ATTNFLOW_DATA_DIR"):
        check_data_files(cfg)
    root.mkdir()
    (root / "dataset_flickr8k.json").write_text("{}")
    with pytest.raises(DataFileNotFoundError, match=r"image_dir=.*Flicker8k_Dataset not found"):
        check_data_files(cfg)
    (root / "Flicker8k_Dataset").mkdir()
    check_data_files(cfg)  # (what the files hold is the run's to read)


@pytest.mark.slow
def test_a_run_with_test_false_never_reads_its_test_file(tmp_path):
    """Documents (and the other file data) read every split's file as they set up, so a run with
    test=false still read, and failed on, a test file it never uses."""
    from attnflow.data.errors import DataError
    from attnflow.training.run import train
    from cli_runs import document_files, document_overrides

    folder = document_files(tmp_path / "docs")
    (folder / "test.jsonl").write_text("not json\n")  # would fail any read
    args = [*document_overrides(folder), f"data.test_path={folder}/test.jsonl",
            "trainer.max_epochs=1", "callbacks.attention_maps.examples=0"]
    summary = train(compose_cfg([*args, "test=false"]), tmp_path / "untested")
    assert "best/val/acc" in summary["metrics"] and not any(k.startswith("test/") for k in summary["metrics"])
    with pytest.raises(DataError, match=r"test\.jsonl"):
        train(compose_cfg([*args, "test=true"]), tmp_path / "tested")
