"""What the run asks of registered classes (attnflow.config.contracts): the data, model and task
registries take only subclasses of their contract, and every registered block derives the base
whose capabilities its parents and validation read (input_kind, attends, relative, max_len)."""

from __future__ import annotations

import pytest
from torch import nn

from attnflow.blocks.attention.base import AttentionBlock
from attnflow.blocks.decoders.base import Decoder
from attnflow.blocks.encoders.base import Encoder
from attnflow.blocks.positional.base import Positional
from attnflow.config.contracts import DataContract, ModelContract, TaskContract
from attnflow.config.registry import ATTENTIONS, DATA, DECODERS, ENCODERS, MODELS, POSITIONALS, TASKS

BASES = [(DATA, DataContract), (MODELS, ModelContract), (TASKS, TaskContract), (ENCODERS, Encoder),
         (DECODERS, Decoder), (ATTENTIONS, AttentionBlock), (POSITIONALS, Positional)]


@pytest.mark.parametrize("registry, base", BASES, ids=[r.kind for r, _ in BASES])
def test_every_registered_block_derives_the_base_its_users_read(registry, base):
    assert [n for n in registry.names() if not issubclass(registry.get(n), base)] == []


@pytest.mark.parametrize("registry", [DATA, MODELS, TASKS], ids=lambda r: r.kind)
def test_a_class_without_its_registrys_contract_is_refused(registry):
    class Plain(nn.Module):
        def __init__(self, *, width: int = 2):
            super().__init__()

    with pytest.raises(TypeError, match=r"'plain_test': .*Plain must derive from attnflow\.config"):
        registry.register("plain_test")(Plain)
    assert "plain_test" not in registry
