"""Exact positions: a byte that is not UTF-8 is named by file, line (1-based, as an editor
counts), byte in the line and offset in the file, whatever reads the file (an IMDB JSON-lines
file, a CSV table, a Multi30k translation source, a translate -f file, gzip'ed or not); a
non-finite node feature is named by node and column (a node table, a saved graph)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from attnflow.config.registry import DATA
from attnflow.data.documents import DocumentDataModule
from attnflow.data.errors import DataError
from attnflow.data.parallel import ParallelDataModule
from attnflow.data.tables import read_table
from attnflow.io.text import InputError, iter_lines

BAD = b"\xff"


def _with_bad_byte(lines: list, line: int, at: int) -> tuple:
    """``lines`` (str) as UTF-8 bytes with BAD inserted at byte ``at`` (0-based) of ``line``
    (1-based); and the BAD byte's offset in the whole text."""
    raw = [s.encode() for s in lines]
    raw[line - 1] = raw[line - 1][:at] + BAD + raw[line - 1][at:]
    return b"\n".join(raw) + b"\n", sum(len(r) + 1 for r in raw[:line - 1]) + at


def _message(path: Path, line: int, at: int, offset: int, gz: bool = False) -> str:
    where = f"offset {offset}" + (" of the unzipped text" if gz else "")
    return (f"{path} line {line}, byte {at + 1} ({where}): 0xff is not UTF-8 (invalid start "
            f"byte); save the file as UTF-8")


def _reviews(n: int = 40) -> list:
    return [json.dumps({"text": f"Review {i}: é {'great' if i % 2 else 'awful'}.", "label": i % 2},
                       ensure_ascii=False) for i in range(n)]


@pytest.mark.parametrize("gz", [False, True])
def test_a_bad_byte_in_an_imdb_jsonl_names_its_line_and_byte(tmp_path, gz):
    text, offset = _with_bad_byte(_reviews(), 31, 12)
    path = tmp_path / ("dev.jsonl.gz" if gz else "dev.jsonl")
    path.write_bytes(gzip.compress(text) if gz else text)
    good = tmp_path / "train.jsonl"
    good.write_text("\n".join(_reviews()) + "\n")
    with pytest.raises(DataError) as err:
        DocumentDataModule(train_path=str(good), val_path=str(path)).setup()
    assert str(err.value) == f"data 'documents': {_message(path, 31, 12, offset, gz)}"


def test_a_bad_byte_in_a_csv_table_names_its_line_and_byte(tmp_path):
    rows = ["text,label"] + [f"review {i} é,{i % 2}" for i in range(30)]
    text, offset = _with_bad_byte(rows, 27, 3)
    (tmp_path / "t.csv").write_bytes(text)
    with pytest.raises(DataError) as err:
        read_table(tmp_path / "t.csv", "text", "label")
    assert str(err.value) == f"data 'documents': {_message(tmp_path / 't.csv', 27, 3, offset)}"


def test_a_bad_byte_in_a_translation_source_names_its_line_and_byte(tmp_path):
    root = tmp_path / "m30k"
    root.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            lines = [f"ein satz {i} über {lang}" for i in range(20)]
            (root / f"{split}.{lang}.gz").write_bytes(gzip.compress("\n".join(lines).encode() + b"\n"))
    text, offset = _with_bad_byte([f"ein satz {i} über de" for i in range(20)], 8, 5)
    (root / "val.de.gz").write_bytes(gzip.compress(text))
    with pytest.raises(DataError) as err:
        ParallelDataModule(root=str(root), vocab_size=100).model_context()
    assert str(err.value) == f"data 'parallel': {_message(root / 'val.de.gz', 8, 5, offset, True)}"
    src = tmp_path / "source.de"  # what attnflow-translate -f reads
    src.write_bytes(text.replace(b"\n", b"\r\n"))
    with pytest.raises(InputError) as err:
        list(iter_lines(src, "-f"))
    assert str(err.value) == _message(src, 8, 5, offset + 7)  # (+1 per \r before it)


def _nodes(tmp_path: Path, value: str) -> dict:
    rows = ["id,label,a,b", "ada,x,1,2", "bo,y,3,4", f"cy,x,5,{value}", "di,y,7,8"]
    (tmp_path / "nodes.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "edges.csv").write_text("source,target\nada,bo\ncy,di\n")
    return {"nodes": str(tmp_path / "nodes.csv"), "edges": str(tmp_path / "edges.csv")}


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_feature_in_a_node_table_names_the_node_and_column(tmp_path, value):
    files = _nodes(tmp_path, value)
    with pytest.raises(DataError) as err:
        DATA.build({"name": "graph", **files}).full_graph()
    assert str(err.value) == (f"data 'graph': {files['nodes']} line 4: node 'cy', column 'b' is "
                              f"{float(value)}: features must be finite numbers")


def test_a_non_finite_feature_in_a_saved_graph_names_the_node_and_column(tmp_path):
    x = torch.ones(5, 3)
    x[3, 2], x[4, 0] = float("nan"), float("inf")
    torch.save(Data(x=x, y=torch.zeros(5, dtype=torch.long), edge_index=torch.tensor([[0], [1]])),
               tmp_path / "g.pt")
    with pytest.raises(DataError) as err:
        DATA.build({"name": "graph", "path": str(tmp_path / "g.pt")}).full_graph()
    assert str(err.value) == (f"data 'graph': {tmp_path / 'g.pt'}: node 3, feature column 2 is nan: "
                              f"x must be finite (2 value(s) are not)")
    assert not re.search(r"\n", str(err.value))
