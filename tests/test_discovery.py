"""Block discovery: a block is one file in its kind's folder (no import list to edit), and importing
a block module stays light (no Lightning, no PyG)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnflow.config.registry import SCORERS, reload_plugins
from support import readme_block_example

PACKAGE = Path(__file__).resolve().parent.parent / "attnflow"


@pytest.mark.slow
def test_importing_a_block_module_does_not_import_lightning_or_pyg():
    code = textwrap.dedent("""
        import sys
        import attnflow.blocks.scorers.dot
        import attnflow.blocks.normalizers.softmax, attnflow.blocks.normalizers.norm
        import attnflow.config.registry
        from attnflow.config.registry import SCORERS
        SCORERS.build({"name": "additive"}, 4, 4)
        heavy = [m for m in ("pytorch_lightning", "lightning", "torch_geometric") if m in sys.modules]
        assert not heavy, heavy
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("folder", ["blocks", "models", "tasks", "data"])
def test_package_inits_hold_only_a_docstring(folder):
    for init in sorted((PACKAGE / folder).rglob("__init__.py")):
        body = ast.parse(init.read_text()).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), f"{init}: docstring only, no imports"


@pytest.fixture
def scorer_folder(tmp_path):
    """A folder that counts as part of attnflow/blocks/scorers/, as a new file there would."""
    import attnflow.blocks.scorers as package

    package.__path__.append(str(tmp_path))
    yield tmp_path
    package.__path__.remove(str(tmp_path))
    for path in tmp_path.glob("*.py"):
        sys.modules.pop(f"attnflow.blocks.scorers.{path.stem}", None)
    SCORERS.unregister("negdot_discovered")
    reload_plugins()


def test_a_new_block_file_is_found_without_an_import_list(scorer_folder):
    SCORERS.names()  # discovered before the file exists: it is seen after reload_plugins()
    (scorer_folder / "negdot_discovered.py").write_text(readme_block_example("negdot_discovered")[0])
    (scorer_folder / "_private_helper.py").write_text("raise RuntimeError('private modules are not imported')\n")
    assert "negdot_discovered" not in SCORERS
    reload_plugins()
    cls = SCORERS.get("negdot_discovered")
    assert cls.__module__ == "attnflow.blocks.scorers.negdot_discovered"
    assert SCORERS.build({"name": "negdot_discovered", "gain": 2.0}, 3, 3).gain == 2.0
    assert "attnflow.blocks.scorers._private_helper" not in sys.modules
    assert {"additive", "dot", "negdot_discovered"} <= set(SCORERS.names())


def test_a_broken_block_module_raises_its_own_error(scorer_folder):
    (scorer_folder / "broken_discovered.py").write_text("raise ImportError('no such thing')\n")
    reload_plugins()
    with pytest.raises(ImportError, match="no such thing"):
        SCORERS.get("dot")
