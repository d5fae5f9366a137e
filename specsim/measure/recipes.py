"""Model recipes: the dimensions a proxy workload is sized by (docs/formats.md#recipe).

A recipe is a flat TOML file::

    id = "llama-3.1-8b/eagle-1l-bf16"   # optional; default: the file name without .toml
    layers = 32
    hidden = 4096
    ffn = 14336
    heads = 32
    kv_heads = 8
    head_dim = 128
    context = 4096
    vocab = 128256
    dtype = "bf16"                      # bf16, fp16 or fp32
    drafter_layers = 1

Dimensions are those one device runs: a tensor-parallel shard lists its per-device heads, FFN
and vocab slices (the built-in ``llama-3.1-70b-tp8`` does), and the proxy issues no collective.
Unknown fields are refused, so a typo cannot silently size a proxy wrongly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from specsim import _toml
from specsim._checks import int_problem, show
from specsim._io import read_input
from specsim.errors import MeasureError

DTYPES = ("bf16", "fp16", "fp32")
INT_FIELDS = ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "context", "vocab", "drafter_layers")


@dataclass(frozen=True)
class Recipe:
    """The shapes of one model + drafter + precision, as run on one device.

    ``layers``, ``hidden``, ``ffn`` (per-device FFN width), ``heads`` and ``kv_heads`` (per device),
    ``head_dim``, ``context`` (KV tokens each sequence attends over), ``vocab`` (per-device LM-head
    rows), ``dtype`` (``bf16``/``fp16``/``fp32``), ``drafter_layers`` (layers of an EAGLE-style
    drafter with the target's layer shape, sharing its LM head).
    """

    id: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    context: int
    vocab: int
    dtype: str
    drafter_layers: int

    def __post_init__(self):
        problems = recipe_problems(asdict(self))
        if problems:
            raise MeasureError(f"recipe {self.id!r} is refused", problems)

    def shapes(self) -> dict:
        """Every dimension as a plain dict (the recipe part of a launch plan)."""
        return {f: getattr(self, f) for f in INT_FIELDS} | {"dtype": self.dtype}

    def weight_count(self, layers: int) -> int:
        """Parameters of ``layers`` transformer layers (attention + FFN), LM head excluded."""
        qkv = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        out = self.heads * self.head_dim * self.hidden
        ffn = 3 * self.hidden * self.ffn
        return layers * (qkv + out + ffn)


def recipe_problems(values: dict) -> list:
    """Every way ``values`` fails to describe a recipe; empty when it is one."""
    problems = []
    rid = values.get("id")
    if not isinstance(rid, str) or not rid:
        problems.append(f"id = {rid!r} must be a non-empty string")
    for name in INT_FIELDS:
        v = values.get(name, _toml.MISSING)
        if v is _toml.MISSING:
            problems.append(f"`{name}` is missing (a positive integer)")
        elif int_problem(v, name, 1):
            problems.append(f"{name} = {show(v)} must be a positive integer")
    dtype = values.get("dtype", _toml.MISSING)
    if dtype is _toml.MISSING:
        problems.append(f"`dtype` is missing (one of {', '.join(DTYPES)})")
    elif dtype not in DTYPES:
        problems.append(f"dtype = {dtype!r} is not one of {', '.join(DTYPES)}")
    heads, kv = values.get("heads"), values.get("kv_heads")
    if isinstance(heads, int) and isinstance(kv, int) and heads >= 1 and kv >= 1 and heads % kv:
        problems.append(f"heads = {heads} is not a multiple of kv_heads = {kv} (grouped-query attention)")
    return problems


# Built-in recipes, smallest first. Real shapes from the models' published configs; the 70B entry
# is one device's shard of an 8-way tensor-parallel deployment (heads, kv_heads, ffn and vocab / 8).
BUILTIN = {
    "tiny": dict(id="tiny/proxy-fp32", layers=2, hidden=64, ffn=128, heads=4, kv_heads=2, head_dim=16,
                 context=64, vocab=256, dtype="fp32", drafter_layers=1),
    "small": dict(id="small/proxy-fp32", layers=4, hidden=512, ffn=1408, heads=8, kv_heads=4, head_dim=64,
                  context=512, vocab=8192, dtype="fp32", drafter_layers=1),
    "llama-3.2-1b": dict(id="llama-3.2-1b/eagle-1l-bf16", layers=16, hidden=2048, ffn=8192, heads=32,
                         kv_heads=8, head_dim=64, context=4096, vocab=128256, dtype="bf16", drafter_layers=1),
    "llama-3.1-8b": dict(id="llama-3.1-8b/eagle-1l-bf16", layers=32, hidden=4096, ffn=14336, heads=32,
                         kv_heads=8, head_dim=128, context=4096, vocab=128256, dtype="bf16", drafter_layers=1),
    "llama-3.1-70b-tp8": dict(id="llama-3.1-70b-tp8/eagle-1l-bf16", layers=80, hidden=8192, ffn=3584, heads=8,
                              kv_heads=1, head_dim=128, context=4096, vocab=16032, dtype="bf16", drafter_layers=1),
}


def builtin_recipe(name: str) -> Recipe:
    """The built-in recipe called ``name`` (see :data:`BUILTIN`)."""
    if name not in BUILTIN:
        raise MeasureError(f"there is no built-in recipe {show(name)}; built-in recipes: {', '.join(BUILTIN)}")
    return Recipe(**BUILTIN[name])


def parse_recipe(text, source: str = "<recipe>", default_id: str = "recipe") -> Recipe:
    """A recipe from TOML text, refused with every problem listed."""
    doc = _toml.loads(text, "the recipe", source, MeasureError)
    known = {"id", "dtype", *INT_FIELDS}
    problems = [f"unknown field `{f}` (known: {', '.join(sorted(known))})" for f in doc if f not in known]
    values = {"id": default_id} | doc
    problems += recipe_problems(values)
    if problems:
        raise MeasureError(f"{source}: the recipe is refused", problems)
    return Recipe(**{f: values[f] for f in ("id", "dtype", *INT_FIELDS)})


def load_recipe(spec) -> Recipe:
    """A recipe from a TOML file path or a built-in name."""
    if isinstance(spec, Recipe):
        return spec
    path = Path(spec)
    if path.suffix == ".toml" or (path.exists() and not path.is_dir()):
        text = read_input(path, "the recipe", MeasureError)
        return parse_recipe(text, str(path), default_id=path.stem)
    return builtin_recipe(str(spec))
