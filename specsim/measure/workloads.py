"""What a measured step runs: a proxy of a recipe, or the user's own step functions.

Both kinds answer ``verify(n, k)`` (one verify step: ``n`` sequences of ``k + 1`` rows) and
``draft(n)`` (one draft step over ``n`` rows; the harness chains ``k`` of them), and name the
digest of each mode's launch plan (``verify``, ``draft``) for the table's key.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from specsim.errors import MeasureError
from specsim.measure.recipes import load_recipe

MODES = ("verify", "draft")

# Bump when the sequence of operations a proxy step issues changes: the op list in a plan
# is written beside the code, not derived from it, and this number keeps old digests stale.
PROXY_VERSION = 1


def canonical_json(obj) -> str:
    """The one JSON text of ``obj`` a digest is taken over: sorted keys, no spaces, ASCII."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise MeasureError(f"a launch plan must be plain JSON data (dicts, lists, strings, numbers): {e}") from e


def plan_digest(plan) -> str:
    """``"sha256:" + hex`` over :func:`canonical_json` of a launch plan."""
    return "sha256:" + hashlib.sha256(canonical_json(plan).encode("ascii")).hexdigest()


class ProxyWorkload:
    """Real GEMMs and attention reads sized like a recipe, on one code path over ``backend.xp``.

    A verify step runs every target layer over ``rows = n * (k + 1)`` rows: RMS norm, fused QKV
    projection, attention of each sequence's ``k + 1`` queries over its ``context`` cached keys and
    values (grouped-query), output projection, RMS norm, gated FFN (SiLU), then the LM head and
    an argmax per row. A draft step runs the drafter's layers (the target's layer shape) over
    ``n`` rows with one query each, the shared LM head and argmax, and feeds its hidden state and
    the chosen token's embedding into the next draft step. New keys are not appended to the cache
    (the reads dominate), and no collective is issued for tensor-parallel shards.

    Parameters
    ----------
    recipe : Recipe or str
        A :class:`Recipe`, a recipe file or a built-in name.
    backend : NumpyBackend or CupyBackend
    seed : int
        Seed of the random weights and caches (values do not change timings, only avoid
        denormals and overflow).
    """

    def __init__(self, recipe, backend, seed: int = 0):
        self.recipe = load_recipe(recipe)
        self.backend = backend
        self.xp = backend.xp
        self.dtype = backend.compute_dtype(self.recipe.dtype)
        self.seed = seed
        self.recipe_id = self.recipe.id
        self._ready = None

    # -- plans ----------------------------------------------------------------------------
    def _layer_ops(self, rows: str, q_len: str) -> list:
        r = self.recipe
        group = r.heads // r.kv_heads
        qkv = (r.heads + 2 * r.kv_heads) * r.head_dim
        return [
            f"rmsnorm x[{rows},{r.hidden}]",
            f"gemm [{rows},{r.hidden}]x[{r.hidden},{qkv}]",
            f"attention q[n,{r.kv_heads},{group}*{q_len},{r.head_dim}] kT[n,{r.kv_heads},{r.head_dim},{r.context}] "
            f"softmax v[n,{r.kv_heads},{r.context},{r.head_dim}]",
            f"gemm [{rows},{r.heads * r.head_dim}]x[{r.heads * r.head_dim},{r.hidden}] residual",
            f"rmsnorm x[{rows},{r.hidden}]",
            f"gemm [{rows},{r.hidden}]x[{r.hidden},{2 * r.ffn}] silu*up",
            f"gemm [{rows},{r.ffn}]x[{r.ffn},{r.hidden}] residual",
        ]

    def plans(self) -> dict:
        """Mode -> launch plan (plain JSON data): shapes, dtype, backend and library versions."""
        r = self.recipe
        common = {"workload": "proxy", "proxy_version": PROXY_VERSION, "backend": self.backend.name,
                  "compute_dtype": self.dtype, "versions": self.backend.versions()}
        # Each mode's plan holds only what that mode launches: the drafter's depth is not part
        # of a verify step, nor the target's depth part of a draft step, and the recipe's dtype
        # enters as the dtype it computes in on this backend.
        shapes = {f: v for f, v in r.shapes().items() if f != "dtype"}
        verify_shapes = {f: v for f, v in shapes.items() if f != "drafter_layers"}
        draft_shapes = {f: v for f, v in shapes.items() if f != "layers"}
        head = [f"rmsnorm x[rows,{r.hidden}]", f"gemm [rows,{r.hidden}]x[{r.hidden},{r.vocab}]", "argmax per row"]
        return {
            "verify": common | {"mode": "verify", "shapes": verify_shapes, "rows": "n*(k+1)", "layers": r.layers,
                                "layer_ops": self._layer_ops("n*(k+1)", "(k+1)"), "head_ops": head},
            "draft": common | {"mode": "draft", "shapes": draft_shapes, "rows": "n", "layers": r.drafter_layers,
                               "layer_ops": self._layer_ops("n", "1"), "head_ops": head,
                               "chain": "k steps; each adds the chosen token's embedding to its normalised "
                                        "hidden state and feeds the next"},
        }

    def digests(self) -> dict:
        """Mode -> ``sha256:`` digest of its launch plan."""
        return {mode: plan_digest(plan) for mode, plan in self.plans().items()}

    # -- memory ---------------------------------------------------------------------------
    def bytes_needed(self, max_n: int, max_k: int) -> int:
        """Estimated bytes of weights, caches and the largest step's temporaries."""
        r = self.recipe
        item = np.dtype(self.dtype).itemsize
        layers = r.layers + r.drafter_layers
        weights = r.weight_count(layers) + r.hidden * r.vocab
        cache = layers * max_n * 2 * r.kv_heads * r.context * r.head_dim
        rows = max_n * (max_k + 1)
        temps = rows * (2 * r.heads * r.context + 4 * r.ffn + 2 * r.vocab + 8 * r.hidden
                        + 2 * (r.heads + 2 * r.kv_heads) * r.head_dim)
        return item * (weights + cache + temps + rows * r.hidden)

    # -- running --------------------------------------------------------------------------
    def prepare(self, max_n: int, max_k: int) -> None:
        """Allocate weights and caches for widths up to ``max_n`` and depths up to ``max_k``.

        Raises
        ------
        MeasureError
            When the estimate exceeds the memory free on the device.
        """
        need = self.bytes_needed(max_n, max_k)
        free = self.backend.free_bytes()
        if free is not None and need > 0.9 * free:
            raise MeasureError(
                f"recipe {self.recipe_id!r} at widths up to {max_n} and depth {max_k} needs about "
                f"{need / 2**30:.1f} GiB on the {self.backend.name} device, which has {free / 2**30:.1f} GiB free: "
                "use smaller widths, a smaller context in the recipe, or a larger device"
            )
        xp, r = self.xp, self.recipe
        rng = xp.random.default_rng(self.seed)
        dt = np.dtype(self.dtype)

        def uniform(shape, fan_in, scale=1.0):
            # Variance 1/fan_in keeps activations O(1); drawn in float32, then cast.
            a = scale * math.sqrt(3.0 / fan_in)
            w = rng.random(shape, dtype=xp.float32)
            w *= 2 * a
            w -= a
            return w.astype(dt, copy=False)

        qkv = (r.heads + 2 * r.kv_heads) * r.head_dim
        residual = 1.0 / math.sqrt(2 * (r.layers + r.drafter_layers))
        # Keys are cached transposed, so that the score GEMM reads them in place (no strided copy).
        k_shape = (max_n, r.kv_heads, r.head_dim, r.context)
        v_shape = (max_n, r.kv_heads, r.context, r.head_dim)

        def layer():
            return {
                "qkv": uniform((r.hidden, qkv), r.hidden),
                "o": uniform((r.heads * r.head_dim, r.hidden), r.heads * r.head_dim, residual),
                "gate_up": uniform((r.hidden, 2 * r.ffn), r.hidden),
                "down": uniform((r.ffn, r.hidden), r.ffn, residual),
                "k": uniform(k_shape, 3.0),
                "v": uniform(v_shape, 3.0),
            }

        self._target = [layer() for _ in range(r.layers)]
        self._drafter = [layer() for _ in range(r.drafter_layers)]
        self._lm = uniform((r.hidden, r.vocab), r.hidden)
        self._x = uniform((max_n * (max_k + 1), r.hidden), 3.0)
        self._draft_x = uniform((max_n, r.hidden), 3.0)
        self._ready = (max_n, max_k)
        self.backend.synchronize()

    def _check(self, n, k):
        if self._ready is None:
            raise MeasureError("ProxyWorkload.prepare(max_n, max_k) must run before a step")
        max_n, max_k = self._ready
        if not (1 <= n <= max_n and 0 <= k <= max_k):
            raise MeasureError(f"step (n={n}, k={k}) is outside the prepared n <= {max_n}, k <= {max_k}")

    def _rms(self, x):
        xp = self.xp
        scale = xp.mean(x * x, axis=-1, keepdims=True) + 1e-6
        return x * (1.0 / xp.sqrt(scale)).astype(x.dtype, copy=False)

    def _layer(self, w, x, n, q_len):
        xp, r = self.xp, self.recipe
        rows, group, d = x.shape[0], r.heads // r.kv_heads, r.head_dim
        qkv = self._rms(x) @ w["qkv"]
        q = qkv[:, : r.heads * d].reshape(n, q_len, r.kv_heads, group, d)
        q = q.transpose(0, 2, 3, 1, 4).reshape(n, r.kv_heads, group * q_len, d)
        scores = xp.matmul(q, w["k"][:n])
        scores *= x.dtype.type(1.0 / math.sqrt(d))
        scores -= scores.max(axis=-1, keepdims=True)
        xp.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        att = xp.matmul(scores, w["v"][:n])
        att = att.reshape(n, r.kv_heads, group, q_len, d).transpose(0, 3, 1, 2, 4).reshape(rows, r.heads * d)
        x = x + att @ w["o"]
        gu = self._rms(x) @ w["gate_up"]
        gate, up = gu[:, : r.ffn], gu[:, r.ffn:]
        return x + ((gate / (1.0 + xp.exp(-gate))) * up) @ w["down"]

    def verify(self, n: int, k: int):
        """One verify step over ``n`` sequences of ``k + 1`` rows; returns the argmax tokens."""
        self._check(n, k)
        x = self._x[: n * (k + 1)]
        for w in self._target:
            x = self._layer(w, x, n, k + 1)
        return self.xp.argmax(self._rms(x) @ self._lm, axis=-1)

    def draft(self, n: int):
        """One draft step over ``n`` rows; its output state feeds the next draft step."""
        self._check(n, 0)
        x = self._draft_x[:n]
        for w in self._drafter:
            x = self._layer(w, x, n, 1)
        x = self._rms(x)
        tokens = self.xp.argmax(x @ self._lm, axis=-1)
        # The next step's input: this state plus the chosen token's (tied) embedding, normalised
        # so that a long window of chained steps never drifts towards overflow.
        self._draft_x[:n] = self._rms(x + self._lm[:, tokens].T)
        return tokens

    def close(self) -> None:
        self._target = self._drafter = self._lm = self._x = self._draft_x = None
        self._ready = None


class CallableWorkload:
    """The user's own step functions, so a serve measures its real model through specsim.

    Parameters
    ----------
    verify : callable(n, k)
        Runs one verify step of ``n`` sequences with ``k`` drafts each (``k + 1`` rows each).
    draft : callable(n) or None
        Runs one draft step over ``n`` rows; None when only ``k = 0`` is measured.
    recipe_id : str
        The recipe id that goes into the key.
    digests : dict, optional
        Mode -> digest the serve already computes for its launch plans (e.g. its compiled
        circuit's plan digest); used as given.
    plans : dict, optional
        Mode -> plain JSON description of what the mode launches, hashed here. One of
        ``digests``/``plans`` is required for both modes: a digest of the functions' names would
        not change when their launches do.
    prepare : callable(max_n, max_k), optional
        Called once before the sweep (allocate caches for the largest step).

    With the numpy backend the step functions are timed on the host clock and must return
    after their work is done; with the cupy backend CUDA events on the current stream time them.
    """

    def __init__(self, verify, draft, recipe_id: str, digests=None, plans=None, prepare=None):
        if not callable(verify) or (draft is not None and not callable(draft)):
            raise MeasureError("verify must be a callable verify(n, k) and draft a callable draft(n) or None")
        if not isinstance(recipe_id, str) or not recipe_id:
            raise MeasureError(f"recipe_id {recipe_id!r} must be a non-empty string")
        self._verify, self._draft, self._prepare = verify, draft, prepare
        self.recipe_id = recipe_id
        given = dict(digests or {})
        for mode, plan in dict(plans or {}).items():
            given.setdefault(mode, plan_digest(plan))
        missing = [m for m in MODES if m not in given]
        if missing:
            raise MeasureError(f"user step functions need a digest or a plan for mode(s) {', '.join(missing)}: "
                               "pass digests={mode: 'sha256:...'} or plans={mode: {...what it launches...}}")
        bad = [m for m, d in given.items() if not isinstance(d, str) or not d]
        if bad:
            raise MeasureError(f"digest of mode(s) {', '.join(bad)} must be a non-empty string")
        self._digests = given

    def digests(self) -> dict:
        return dict(self._digests)

    def prepare(self, max_n: int, max_k: int) -> None:
        if max_k > 0 and self._draft is None:
            raise MeasureError(f"depths up to {max_k} need a draft(n) step function; none was given")
        if self._prepare is not None:
            self._prepare(max_n, max_k)

    def verify(self, n: int, k: int):
        return self._verify(n, k)

    def draft(self, n: int):
        return self._draft(n)

    def close(self) -> None:
        pass
