"""A search space in Hydra's override syntax, as Optuna distributions.

``hydra.sweeper.params`` (and the command line's sweep overrides) map an override key to a value:

==============================  ==========================================================
``interval(a, b)``              ``FloatDistribution(a, b)``; ``tag(log, …)``: log scale;
                                ``tag(int, …)``: ``IntDistribution``
``range(a, b, s)``              ints: ``IntDistribution(a, last, step=s)`` (``b`` excluded, as in
                                Python); floats: ``FloatDistribution(a, last, step=s)``
``choice(x, y, …)``, ``x,y``    ``CategoricalDistribution``
anything else                   a fixed override, the same in every trial
==============================  ==========================================================

An Optuna parameter is named by the override's key without its ``+``/``++`` prefix; a trial's
overrides keep the prefix (``++task.optim.lr=0.003`` reaches a field the YAML leaves at its
block's default).

Optuna (the sweep extra) is imported where it is used: every attnflow-train run imports this
module (through :mod:`.migration`, for :func:`format_value`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

from attnflow.config.overrides import parse
from attnflow.config.registry import ConfigError


@dataclass
class Space:
    """The distributions to sample (by parameter name), each parameter's override key, and the
    overrides every trial shares."""

    distributions: Dict[str, Any] = field(default_factory=dict)
    keys: Dict[str, str] = field(default_factory=dict)
    fixed: List[str] = field(default_factory=list)

    def overrides(self, params: Mapping[str, Any]) -> List[str]:
        """A trial's overrides: the fixed ones, then one per sampled parameter."""
        return [*self.fixed, *(f"{self.keys[name]}={format_value(v)}" for name, v in params.items())]

    def grid(self) -> Dict[str, list]:
        """The search space of Optuna's GridSampler: every parameter's values (choice or range)."""
        import optuna

        out = {}
        for name, dist in self.distributions.items():
            if isinstance(dist, optuna.distributions.CategoricalDistribution):
                out[name] = list(dist.choices)
            elif dist.step is not None and not dist.log:
                n = int(round((dist.high - dist.low) / dist.step)) + 1
                out[name] = [type(dist.low)(dist.low + i * dist.step) for i in range(n)]
            else:
                raise ConfigError(f"hydra.sweeper.params.{self.keys[name]}: the grid sampler needs "
                                  f"choice(…) or range(…), not a continuous interval")
        return out


def format_value(value: Any) -> str:
    """``value`` as an override's value: Hydra's grammar reads it back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][\w./:-]*", text) and text.lower() not in ("true", "false", "null"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def parse_space(params: Optional[Mapping[str, Any]], arguments: List[str]) -> Space:
    """The space of ``hydra.sweeper.params`` and the command line's ``arguments`` (which win)."""
    lines = {str(k): f"{k}={v if isinstance(v, str) else format_value(v)}" for k, v in (params or {}).items()}
    for override in map(parse, arguments):
        key = override.get_key_element()
        lines.pop(next((k for k in lines if k.lstrip("+") == key.lstrip("+")), key), None)
        lines[key] = override.input_line
    space = Space()
    for key, line in lines.items():
        override = parse(line)
        if not override.is_sweep_override():
            space.fixed.append(line)
            continue
        name = key.lstrip("+")
        space.keys[name] = key
        space.distributions[name] = distribution(override.value(), f"hydra.sweeper.params.{name}")
    return space


def distribution(sweep: Any, where: str) -> Any:
    """The Optuna distribution of a parsed ``interval``, ``range`` or ``choice``."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    tags = set(sweep.tags)
    if tags - {"log", "int"}:
        raise ConfigError(f"{where}: unknown tag {sorted(tags - {'log', 'int'})[0]!r} (log, int)")
    log = "log" in tags
    if isinstance(sweep, ChoiceSweep):
        return CategoricalDistribution([_categorical(v, where) for v in sweep.list])
    if isinstance(sweep, IntervalSweep):
        low, high = sweep.start, sweep.end
        if "int" in tags:
            return _checked(IntDistribution, where, int(low), int(high), log=log)
        return _checked(FloatDistribution, where, float(low), float(high), log=log)
    if isinstance(sweep, RangeSweep):
        start, stop, step = sweep.start, sweep.stop, sweep.step
        count = math.ceil((stop - start) / step) if step else 0
        if count < 1:
            raise ConfigError(f"{where}: range({start}, {stop}, {step}) holds no value")
        last = start + (count - 1) * step
        if all(isinstance(v, int) for v in (start, stop, step)) and step > 0:
            return _checked(IntDistribution, where, start, last, log=log, step=step if not log else 1)
        return _checked(FloatDistribution, where, float(start), float(last), log=log,
                        step=None if log else float(step))
    raise ConfigError(f"{where}: {sweep} is not interval(…), range(…) or choice(…)")


def _checked(cls: Any, where: str, low: Any, high: Any, **kwargs: Any) -> Any:
    try:
        return cls(low, high, **kwargs)
    except ValueError as err:  # low > high, log with low <= 0: Optuna says which
        raise ConfigError(f"{where}: {err}") from None


def _categorical(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ConfigError(f"{where}: choice values are numbers, strings or booleans, not {value!r}")
