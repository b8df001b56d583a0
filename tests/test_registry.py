"""The registry: typed configs from constructors, validation messages, building, plugins."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, List, Literal, Optional, Union

import pytest
from torch import nn

from attnflow.config.registry import (ATTENTIONS, ENCODERS, SCORERS, BlockSpec, ConfigError, Range,
                                      Registry, reload_plugins, type_name)
from support import readme_block_example


def test_unknown_name_lists_registered_names():
    with pytest.raises(ConfigError) as err:
        SCORERS.validate({"name": "dott"}, "model.decoder.attention.scorer")
    msg = str(err.value)
    assert "unknown scorer 'dott'" in msg
    assert "model.decoder.attention.scorer.name" in msg
    for name in ["additive", "cosine", "dot", "gat", "general", "mlp", "scaled_dot"]:
        assert name in msg
    assert "Did you mean 'dot'?" in msg


def test_unknown_field_names_block_field_and_path():
    with pytest.raises(ConfigError) as err:
        SCORERS.validate({"name": "additive", "hiden_dim": 3}, "scorer")
    msg = str(err.value)
    assert "scorer 'additive' has no field 'hiden_dim'" in msg
    assert "scorer.hiden_dim" in msg and "hidden_dim" in msg


def test_mistyped_field_names_type():
    with pytest.raises(ConfigError) as err:
        SCORERS.validate({"name": "additive", "hidden_dim": "wide"}, "scorer")
    msg = str(err.value)
    assert "hidden_dim" in msg and "int" in msg and "'wide'" in msg


def test_literal_field_lists_choices():
    with pytest.raises(ConfigError) as err:
        SCORERS.validate({"name": "mlp", "activation": "sigmoid"}, "scorer")
    assert "'tanh', 'relu', 'gelu'" in str(err.value)


def test_an_optional_literal_field_takes_its_choices_or_null_and_refuses_the_rest():
    reg = Registry("test_registry_optional_literal")

    @reg.register("pick")
    class Pick(nn.Module):
        def __init__(self, *, mode: Optional[Literal["min", "max"]] = None):
            super().__init__()
            self.mode = mode

    assert reg.validate({"name": "pick"}) == {"name": "pick", "mode": None}
    assert reg.build({"name": "pick", "mode": "max"}).mode == "max"
    assert reg.validate({"name": "pick", "mode": None})["mode"] is None
    with pytest.raises(ConfigError, match=r"field 'mode' \(at 'x.mode'\) must be one of 'min', "
                                          r"'max', null, got 'mx'\. Did you mean 'max'"):
        reg.validate({"name": "pick", "mode": "mx"}, "x")
    assert dict((f, t) for f, t, _ in reg.fields("pick"))["mode"] == "'min' | 'max' | null"


@pytest.mark.parametrize("tp, name", [
    (int, "int"), (Optional[int], "int or null"), (int | None, "int or null"),
    (Union[int, float, None], "int or float or null"), (List[str], "list of str"),
    (list[int], "list of int"), (Optional[Annotated[int, Range(ge=2)]], "int or null"),
    (Literal["min", "max"], "'min' | 'max'"), (Optional[Literal["min", "max"]], "'min' | 'max' | null"),
    (Union[Literal[16, 32], Literal["bf16"], None], "16 | 32 | 'bf16' | null"),
    (Union[bool, Literal["warn"], None], "bool or 'warn' or null"), (nn.Module, "Module")])
def test_type_names_read_as_yaml(tp, name):
    """What messages and attnflow-blocks print for a field's type: YAML's words (null, list of),
    not Python's (Optional[int], NoneType, typing.List)."""
    assert type_name(tp) == name


def test_nested_block_errors_carry_the_full_path():
    cfg = {"name": "multihead", "aggregator": {"name": "concat_projj"}}
    with pytest.raises(ConfigError) as err:
        ATTENTIONS.validate(cfg, "model.decoder.attention")
    assert "model.decoder.attention.aggregator.name" in str(err.value)
    assert "concat_proj" in str(err.value)


def test_missing_name():
    with pytest.raises(ConfigError, match="needs a 'name'") as err:
        SCORERS.validate({"hidden_dim": 3}, "model.scorer")
    assert str(err.value).endswith("(it holds only hidden_dim)")
    with pytest.raises(ConfigError) as err:
        SCORERS.validate({}, "scorer")
    assert "holds only" not in str(err.value)  # nothing typed: nothing to point at


def test_validate_fills_defaults_and_build_passes_fields():
    assert SCORERS.validate({"name": "additive"}) == {"name": "additive", "hidden_dim": 128, "bias": True}
    scorer = SCORERS.build({"name": "additive", "hidden_dim": 7}, 5, 6)
    assert scorer.U.weight.shape == (7, 6) and scorer.V.weight.shape == (7, 5)


def test_fields_listing():
    fields = {f: (t, d) for f, t, d in ATTENTIONS.fields("multihead")}
    assert fields["heads"] == ("int >= 1", 8)  # the type, with its range
    assert fields["dropout"] == ("float in [0, 1)", 0.0)
    assert fields["scorer"][0] == "BlockSpec[scorer]"


@dataclasses.dataclass(frozen=True)
class Knobs:  # a nested config with a bounded field (module level: annotations are strings here)
    rate: Annotated[float, Range(gt=0, what="a step size")] = 0.5


def test_a_field_out_of_its_range_is_refused_naming_field_range_and_value():
    """Bounds declared in the annotation (``Annotated[T, Range(...)]``, plain, ``Optional`` and in
    a nested dataclass config) are checked with the type; the edges are where the Range says."""
    reg = Registry("test_range_kind")

    @reg.register("r")
    class R(nn.Module):
        def __init__(self, *, p: Annotated[float, Range(ge=0, lt=1)] = 0.1,
                     n: Optional[Annotated[int, Range(ge=2, le=4)]] = None, knobs: Knobs = Knobs()):
            super().__init__()
            self.p, self.n, self.knobs = p, n, knobs

    try:
        for ok in ({"p": 0.0}, {"p": 0.999}, {"n": 2}, {"n": 4}, {"n": None}, {"knobs": {"rate": 1e-9}}):
            reg.validate({"name": "r", **ok}, "block")
        for bad, says in [({"p": 1.0}, "field 'p' (at 'block.p') must be in [0, 1), got 1.0"),
                          ({"p": -0.1}, "must be in [0, 1), got -0.1"),
                          ({"p": float("nan")}, "must be in [0, 1), got nan"),
                          ({"n": 1}, "field 'n' (at 'block.n') must be in [2, 4], got 1"),
                          ({"n": 5}, "must be in [2, 4], got 5"),
                          ({"knobs": {"rate": 0}}, "field 'rate' (at 'block.knobs.rate') must be > 0 "
                                                   "(a step size), got 0"),
                          # inf passed "> 0" (YAML reads `inf`), and the run failed on a NaN loss
                          ({"knobs": {"rate": float("inf")}}, "field 'rate' (at 'block.knobs.rate') "
                                                              "must be a finite number > 0 (a step "
                                                              "size), got inf"),
                          ({"p": float("-inf")}, "must be a finite number in [0, 1), got -inf")]:
            with pytest.raises(ConfigError) as err:
                reg.validate({"name": "r", **bad}, "block")
            assert says in str(err.value)
        assert reg.build({"name": "r", "n": 3}).n == 3
        fields = {f: t for f, t, _ in reg.fields("r")}
        assert fields["n"] == "int or null in [2, 4]" and fields["knobs.rate"] == "float > 0"
        @reg.register("bad_default")  # a block's own bug: refused where it is used
        class B(nn.Module):
            def __init__(self, *, p: Annotated[float, Range(ge=0, lt=1)] = 2):
                super().__init__()

        with pytest.raises(ConfigError, match=r"must be in \[0, 1\), got 2"):
            reg.validate({"name": "bad_default"}, "block")
    finally:
        del Registry._all["test_range_kind"]


def test_duplicate_name_fails_loudly():
    reg = Registry("test_dup_kind")

    @reg.register("a")
    class A(nn.Module):
        pass

    with pytest.raises(ValueError, match="registered already"):
        @reg.register("a")
        class B(nn.Module):
            pass


def test_in_process_registration_is_usable_from_config():
    reg = Registry("test_inproc_kind")

    @reg.register("scaled")
    class Scaled(nn.Module):
        def __init__(self, dim: int, *, factor: float = 2.0, child: BlockSpec["scorer"] = {"name": "dot"}):
            super().__init__()
            self.factor, self.child = factor, SCORERS.build(child, dim, dim)

    block = reg.build({"name": "scaled", "factor": 3.0, "child": {"name": "scaled_dot"}}, 4)
    assert block.factor == 3.0 and type(block.child).__name__ == "ScaledDotScorer"
    with pytest.raises(ConfigError, match="test_inproc_kind 'scaled' has no field 'factr'"):
        reg.build({"name": "scaled", "factr": 3.0}, 4)


def test_a_child_is_validated_once_and_a_complete_but_bad_config_still_is_checked(monkeypatch):
    reg = Registry("test_once_kind")
    seen = []

    @reg.register("holder")
    class Holder(nn.Module):
        def __init__(self, dim: int, *, child: BlockSpec["scorer"] = {"name": "dot"}):
            super().__init__()
            self.child = SCORERS.build(child, dim, dim)

    validate = SCORERS.validate
    monkeypatch.setattr(SCORERS, "validate", lambda cfg, path="": seen.append(path) or validate(cfg, path))
    reg.build({"name": "holder", "child": {"name": "additive"}}, 4)
    assert seen == ["test_once_kind.child"]  # by the parent's check; the child's build trusts it
    bad = {"name": "holder", "child": {"name": "additive", "hidden_dim": -3, "bias": True}}
    with pytest.raises(ConfigError, match="hidden_dim"):  # every field present, one out of range
        reg.build(bad, 4)

    @reg.register("fixed")
    class Fixed(nn.Module):  # builds a literal child config inside its own build
        def __init__(self, dim: int):
            super().__init__()
            self.child = SCORERS.build(bad["child"], dim, dim)

    with pytest.raises(ConfigError, match="hidden_dim"):
        reg.build({"name": "fixed"}, 4)


def test_third_party_entry_point_registers_blocks(tmp_path, monkeypatch):
    """A package on sys.path with an `attnflow.blocks` entry point is found and loaded."""
    pkg = tmp_path / "attnflow_demo_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(readme_block_example()[0])  # a third-party scorer: 'negdot'
    dist = tmp_path / "attnflow_demo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: attnflow-demo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnflow.blocks]\ndemo = attnflow_demo_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reload_plugins()
    try:
        assert "negdot" in SCORERS.names()
        import torch

        s = SCORERS.build({"name": "negdot", "gain": 2.0}, 3, 3)
        q, k = torch.randn(1, 2, 3), torch.randn(1, 4, 3)
        assert torch.allclose(s.score(q, k), -2.0 * torch.einsum("bqd,bkd->bqk", q, k))
    finally:
        SCORERS.unregister("negdot")
        sys.modules.pop("attnflow_demo_plugin", None)
        reload_plugins()  # the next lookup reloads plugins without this package on sys.path


def test_a_run_checks_each_block_config_once(tmp_path, monkeypatch):
    """A GAT run checks its data, model and task when it starts and builds them after (twice the
    model: on the meta device, then for real), its two layers share a scorer: each distinct
    config is checked once; its result is a copy the caller may change."""
    from collections import Counter

    from attnflow.training.run import train
    from support import compose_cfg

    checks, check = Counter(), Registry._check

    def counted(self, data, path):
        checks[(self.kind, repr(sorted(data.items())))] += 1
        return check(self, data, path)

    monkeypatch.setattr(Registry, "_check", counted)
    for registry in Registry._all.values():
        registry._checked.clear()
    train(compose_cfg(["experiment=gat_synthetic", "trainer.max_epochs=1", "logger=none",
                       "callbacks.progress_bar=none", "task.picture=false", "test=false"]), tmp_path)
    kinds = Counter(kind for kind, _ in checks)
    assert {"data", "model", "task", "scorer", "graph_layer"} <= set(kinds)
    assert max(checks.values()) == 1, [k for k, n in checks.items() if n > 1]
    first = SCORERS.validate({"name": "dot"})
    first["scaled"] = "changed"
    assert SCORERS.validate({"name": "dot"}) != first


def test_a_child_default_is_a_fresh_copy_of_the_blocks_default():
    """What a caller does with a child block's default changes neither the next one nor the block."""
    default = ENCODERS.child_default("transformer_encoder", "attention")
    assert default == {"name": "multihead"}
    default["heads"] = 99
    assert ENCODERS.child_default("transformer_encoder", "attention") == {"name": "multihead"}
    assert ENCODERS.validate({"name": "transformer_encoder"})["attention"] == ATTENTIONS.validate(
        {"name": "multihead"}, "model.encoder.attention")
    assert ENCODERS.child_default("transformer_encoder", "d_model") is None  # not a child block
