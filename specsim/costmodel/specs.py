"""Hardware, model and drafter specs for the analytic cost model: built-ins and TOML files.

Why one module of this size: the three spec kinds share one field-rule table, one TOML reader and
one digest, and most of the length is the built-in specs themselves, each with its source.

Every built-in number comes from a public datasheet or a published model config (the ``source``
of each spec says which). Dense (non-sparse) matrix rates are used throughout: decode GEMMs do
not use 2:4 structured sparsity. Users add or override specs with a TOML file::

    [[gpu]]
    name = "my-gpu"
    memory_gb = 96
    bandwidth_gbs = 4000
    bf16_tflops = 900
    tdp_w = 700
    idle_w = 80

    [[model]]
    name = "my-model"
    layers = 32
    hidden = 4096
    ...

    [[drafter]]
    name = "my-eagle"
    layers = 1
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from specsim import _toml
from specsim._checks import is_int, is_number, show
from specsim._io import loads_json, read_input
from specsim.errors import CostModelError

# Bytes per weight (scales included) and the matrix-rate class each dtype runs at.
# nvfp4: 4-bit values + one fp8 scale per 16 -> 4.5 bits; mxfp4: + one 8-bit scale per 32 -> 4.25;
# int4: group-wise (128) fp16 scales -> 4.125 bits.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
               "nvfp4": 0.5625, "mxfp4": 0.53125, "int4": 0.515625}
DTYPE_RATE = {"fp32": "bf16", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "fp8",
              "nvfp4": "fp4", "mxfp4": "fp4", "int4": "fp4"}


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator, as its datasheet states it.

    ``*_tflops`` are dense matrix rates (0 = no such tensor-core format: the weights are
    dequantised and run at the next wider rate); ``link_gbs`` is the per-GPU, per-direction
    bandwidth tensor-parallel collectives run over (NVLink, or PCIe where there is none);
    ``idle_w`` the board power with nothing running; ``arch`` the GPU class whose fitted achieved
    fractions apply (``ampere``, ``hopper``; any other takes the mean of the fitted classes, see
    :func:`specsim.costmodel.roofline.achieved_for`); ``interconnect`` how the GPUs of one server
    reach each other (:data:`INTERCONNECTS`), which decides whether a serving engine's own
    all-reduce runs over peer links (docs/tables.md#engine-profiles). It prices nothing without an
    engine, so it stays out of the spec's digest (an engine's table keys it in its stack).
    """

    name: str
    memory_gb: float
    bandwidth_gbs: float
    bf16_tflops: float
    tdp_w: float
    idle_w: float
    fp8_tflops: float = 0.0
    fp4_tflops: float = 0.0
    link_gbs: float = 32.0
    arch: str = ""
    source: str = ""
    interconnect: str = dataclasses.field(default="pcie", metadata={"digest_omitted": True})

    def matrix_tflops(self, dtype: str) -> float:
        """Dense matrix rate for weights of ``dtype``, falling back to a wider format."""
        rate = DTYPE_RATE[dtype]
        if rate == "fp4" and self.fp4_tflops > 0:
            return self.fp4_tflops
        if rate in ("fp4", "fp8") and self.fp8_tflops > 0:
            return self.fp8_tflops
        return self.bf16_tflops


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape, as in its published config.

    Attention: ``heads`` query heads and ``kv_heads`` key/value heads of ``head_dim``;
    ``kv_layers`` layers keep a KV cache (0 = all; fewer for hybrids with linear attention).
    MLP: ``mlp_matrices`` = 3 for gated (SwiGLU) MLPs, 2 for plain ones; dense layers use
    ``intermediate``. MoE (``experts > 0``): ``layers - dense_layers`` layers have ``experts``
    routed experts of ``expert_intermediate``, ``experts_per_token`` active, plus a shared
    expert of ``shared_intermediate`` (0 = none).
    ``dtype`` is the weights' format, ``head_dtype`` the LM head's (quantised checkpoints often
    keep it in bf16; "" = same as ``dtype``), ``kv_dtype`` the KV cache's.
    Multi-head latent attention (MLA, DeepSeek-V2/V3; ``kv_lora_rank > 0``): each KV layer caches
    one latent of ``kv_lora_rank + rope_head_dim`` elements a token, shared by every head (give
    ``kv_heads = 1``); queries pass a ``q_lora_rank`` bottleneck (0 = none); ``head_dim`` is a
    query head's width (``qk_nope + rope_head_dim``) and ``v_head_dim`` a value head's. Decode is
    priced in the absorbed form serving engines run: the latent is read once per sequence and
    every head attends over it.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    mlp_matrices: int = 3
    kv_layers: int = 0
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    dense_layers: int = 0
    dtype: str = "bf16"
    head_dtype: str = ""
    kv_dtype: str = "bf16"
    source: str = ""
    # Fields added after tables were keyed on model specs: left out of a digest at their default.
    kv_lora_rank: int = dataclasses.field(default=0, metadata={"digest_default_omitted": True})
    q_lora_rank: int = dataclasses.field(default=0, metadata={"digest_default_omitted": True})
    rope_head_dim: int = dataclasses.field(default=0, metadata={"digest_default_omitted": True})
    v_head_dim: int = dataclasses.field(default=0, metadata={"digest_default_omitted": True})

    # -- parameter counts (biases and norms are < 0.1 % and left out) ---------------------
    @property
    def attention_params(self) -> int:
        """Per layer: Q and O projections, K and V projections (MLA: the down- and up-projections)."""
        if self.kv_lora_rank:
            h, heads, rank, rope = self.hidden, self.heads, self.kv_lora_rank, self.rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * self.head_dim if self.q_lora_rank
                 else h * heads * self.head_dim)
            nope = self.head_dim - rope
            return q + h * (rank + rope) + rank * heads * (nope + self.v_head_dim) + heads * self.v_head_dim * h
        return 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim

    @property
    def dense_mlp_params(self) -> int:
        return self.mlp_matrices * self.hidden * self.intermediate

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return self.mlp_matrices * self.hidden * self.expert_intermediate

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def always_params(self) -> int:
        """Layer parameters every token reads: attention, dense MLPs, shared experts, routers."""
        moe = self.moe_layers
        return (self.layers * self.attention_params
                + (self.layers - moe) * self.dense_mlp_params
                + moe * (self.mlp_matrices * self.hidden * self.shared_intermediate + self.hidden * self.experts))

    @property
    def head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params_total(self) -> int:
        """All weights, with the input embedding counted once more (untied or not, it is stored)."""
        return self.always_params + self.moe_layers * self.experts * self.expert_params + 2 * self.head_params

    @property
    def params_active(self) -> int:
        """Weights one token's forward pass multiplies by (embedding lookup excluded)."""
        return self.always_params + self.moe_layers * self.experts_per_token * self.expert_params + self.head_params

    @property
    def kv_layer_count(self) -> int:
        return self.kv_layers or self.layers

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token adds, over all layers."""
        if self.kv_lora_rank:
            return self.kv_layer_count * (self.kv_lora_rank + self.rope_head_dim) * DTYPE_BYTES[self.kv_dtype]
        return 2 * self.kv_layer_count * self.kv_heads * self.head_dim * DTYPE_BYTES[self.kv_dtype]

    @property
    def lm_head_dtype(self) -> str:
        return self.head_dtype or self.dtype


@dataclass(frozen=True)
class DrafterSpec:
    """What drafts, by ``kind``:

    - ``"head"`` (the default): a draft head that runs on the target's hidden states (EAGLE-style
      or MTP): ``layers`` decoder layers of the target's width (``moe``: the target's MoE layer
      shape, as MTP modules are; else a dense layer of the target's ``intermediate``); a fusing
      projection of ``fuse_inputs * hidden -> hidden`` (0 = none; 2 = [token embedding; feature]
      every pass; more = that many target layers' features, which an engine fuses once per step,
      EAGLE-3's way); an LM head of ``draft_vocab`` rows (0 = the target's, shared); weights in
      ``dtype`` ("" = the target's).
    - ``"model"``: a separate draft model, the model spec named ``model`` (its own layers, KV
      cache and LM head; ``dtype`` overrides its weight format).
    - ``"ngram"``: prompt lookup: no draft pass, the drafts matched on the host (only the stack's
      per-draft host overhead is priced).
    """

    name: str
    layers: int = 1
    fuse_inputs: int = 2
    draft_vocab: int = 0
    moe: bool = False
    dtype: str = ""
    source: str = ""
    # Fields added after tables were keyed on drafter specs: left out of a digest at their default,
    # so an EAGLE or MTP head keeps the digests it had.
    kind: str = dataclasses.field(default="head", metadata={"digest_default_omitted": True})
    model: str = dataclasses.field(default="", metadata={"digest_default_omitted": True})


DRAFTER_KINDS = ("head", "model", "ngram")
INTERCONNECTS = ("pcie", "nvlink-bridge", "nvswitch", "xgmi", "network")
"""What ``GpuSpec.interconnect`` may say: ``pcie`` (no GPU-to-GPU link: PCIe only), ``nvlink-bridge``
(NVLink between pairs of GPUs), ``nvswitch`` (every GPU of the server reaches every other over
NVLink through NVSwitch), ``xgmi`` (AMD Infinity Fabric links, a full mesh on an 8-GPU MI300X
platform), ``network`` (one GPU a node: tensor parallelism crosses a network adapter)."""


def interconnect_problem(value) -> str | None:
    """``None`` if ``value`` is one of :data:`INTERCONNECTS`, else what is wrong with it."""
    if isinstance(value, str) and value in INTERCONNECTS:
        return None
    return f"interconnect = {value!r} must be one of {', '.join(INTERCONNECTS)}"


LINK_DOMAIN_GPUS = {"nvlink-bridge": 2, "nvswitch": 8, "xgmi": 8}
"""The most GPUs one domain of each kind of link joins, as the built-in GPUs ship: an NVLink bridge
a pair, an HGX or DGX board's NVSwitch and an MI300X platform's Infinity Fabric eight. Tensor
parallelism past it crosses slower links (PCIe between bridged pairs, the network between
servers), which the cost model does not price: its all-reduces stay at the spec's ``link_gbs``
(``specsim table model`` warns)."""


# -- built-ins ------------------------------------------------------------------------------
_GPUS = (
    GpuSpec("h100-sxm", memory_gb=80, bandwidth_gbs=3350, bf16_tflops=989.4, fp8_tflops=1978.9,
            tdp_w=700, idle_w=70, link_gbs=450, arch="hopper", interconnect="nvswitch",
            source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3.35 TB/s HBM3, BF16 1,979 / FP8 3,958 "
                   "TFLOPS with sparsity (halved: dense), 700 W, NVLink 900 GB/s; idle ~70 W as nvidia-smi reports"),
    GpuSpec("h100-nvl", memory_gb=94, bandwidth_gbs=3900, bf16_tflops=835.5, fp8_tflops=1670.5,
            tdp_w=400, idle_w=60, link_gbs=300, arch="hopper", interconnect="nvlink-bridge",
            source="NVIDIA H100 NVL datasheet: 94 GB HBM3, 3.9 TB/s, BF16 1,671 / FP8 3,341 TFLOPS with sparsity "
                   "(halved: dense), 350-400 W, NVLink bridge 600 GB/s; idle power estimated"),
    GpuSpec("h200", memory_gb=141, bandwidth_gbs=4800, bf16_tflops=989.4, fp8_tflops=1978.9,
            tdp_w=700, idle_w=75, link_gbs=450, arch="hopper", interconnect="nvswitch",
            source="NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, BF16 1,979 / FP8 3,958 TFLOPS "
                   "with sparsity (halved: dense), up to 700 W, NVLink 900 GB/s; idle power estimated as H100's"),
    GpuSpec("a100-80gb", memory_gb=80, bandwidth_gbs=2039, bf16_tflops=312,
            tdp_w=400, idle_w=55, link_gbs=300, arch="ampere", interconnect="nvswitch",
            source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): 2,039 GB/s HBM2e, BF16 312 TFLOPS dense, "
                   "no FP8, 400 W, NVLink 600 GB/s; idle ~55 W as nvidia-smi reports"),
    GpuSpec("rtx3090", memory_gb=24, bandwidth_gbs=936, bf16_tflops=71, tdp_w=350, idle_w=30, link_gbs=32,
            arch="ampere",
            source="NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3090: 24 GB GDDR6X, 936 GB/s, "
                   "FP16/BF16 tensor 71 TFLOPS dense with FP32 accumulate (142 with sparsity), no FP8, 350 W "
                   "board power, PCIe Gen4 x16 (NVLink bridge not assumed); idle power estimated; achieved "
                   "fractions of the ampere class (fitted on A100 profiles)"),
    GpuSpec("l40s", memory_gb=48, bandwidth_gbs=864, bf16_tflops=362.05, fp8_tflops=733,
            tdp_w=350, idle_w=35, link_gbs=32, arch="ada",
            source="NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, BF16 362.05 / FP8 733 TFLOPS dense "
                   "(724 / 1,466 with sparsity), 350 W, PCIe Gen4 x16 (64 GB/s both ways), no NVLink"),
    GpuSpec("b200", memory_gb=180, bandwidth_gbs=8000, bf16_tflops=2250, fp8_tflops=4500, fp4_tflops=9000,
            tdp_w=1000, idle_w=120, link_gbs=900, arch="blackwell", interconnect="nvswitch",
            source="NVIDIA HGX B200 datasheet, per GPU: 180 GB HBM3e, 8 TB/s, FP16/BF16 4.5 / FP8 9 / FP4 18 "
                   "PFLOPS with sparsity (halved: dense), 1,000 W, NVLink 5 1.8 TB/s; idle power estimated"),
    GpuSpec("mi300x", memory_gb=192, bandwidth_gbs=5300, bf16_tflops=1307.4, fp8_tflops=2614.9,
            tdp_w=750, idle_w=90, link_gbs=448, arch="cdna3", interconnect="xgmi",
            source="AMD Instinct MI300X data sheet: 192 GB HBM3, 5.3 TB/s, BF16 1,307.4 / FP8 2,614.9 TFLOPS dense, "
                   "750 W, seven Infinity Fabric links of 64 GB/s per direction (448 GB/s); idle power estimated; "
                   "no profile of this class: the mean of the fitted classes"),
    GpuSpec("gb10", memory_gb=128, bandwidth_gbs=273, bf16_tflops=62.5, fp8_tflops=250, fp4_tflops=500,
            tdp_w=140, idle_w=10, link_gbs=25, arch="blackwell", interconnect="network",
            source="NVIDIA DGX Spark (GB10 Grace Blackwell Superchip) spec sheet: 128 GB LPDDR5x unified, "
                   "273 GB/s, 1 PFLOP FP4 with sparsity (halved: 500 dense), 140 W SoC TDP; FP8 and BF16 rates "
                   "are not published and are estimated at 1/2 and 1/8 of FP4 (Blackwell ratios); ConnectX-7 200 Gb/s"),
)

_MODELS = (
    ModelSpec("llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336,
              vocab=128256, source="meta-llama/Llama-3.1-8B config.json"),
    ModelSpec("llama-3.1-70b", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, intermediate=28672,
              vocab=128256, source="meta-llama/Llama-3.1-70B config.json"),
    ModelSpec("llama-2-70b", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, intermediate=28672,
              vocab=32000, dtype="fp16", kv_dtype="fp16", source="meta-llama/Llama-2-70b-hf config.json (float16)"),
    ModelSpec("bloom-176b", layers=70, hidden=14336, heads=112, kv_heads=112, head_dim=128, intermediate=57344,
              vocab=250880, mlp_matrices=2, dtype="fp16", kv_dtype="fp16",
              source="bigscience/bloom config.json (n_embed 14336, n_layer 70, n_head 112, 4x GELU MLP)"),
    ModelSpec("deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=1, head_dim=192, intermediate=18432,
              vocab=129280, experts=256, experts_per_token=8, expert_intermediate=2048, shared_intermediate=2048,
              dense_layers=3, dtype="fp8", head_dtype="bf16", kv_lora_rank=512, q_lora_rank=1536, rope_head_dim=64,
              v_head_dim=128,
              source="deepseek-ai/DeepSeek-V3 config.json (DeepSeek-R1's is the same shape): MLA with kv_lora_rank "
                     "512, q_lora_rank 1536, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128; 256 routed "
                     "experts of 2,048 (8 active) and one shared, the first 3 layers dense (18,432); FP8 weights "
                     "(block-quantised), the LM head in BF16; 671B total, 37B active"),
    ModelSpec("llama-3.2-1b", layers=16, hidden=2048, heads=32, kv_heads=8, head_dim=64, intermediate=8192,
              vocab=128256, source="meta-llama/Llama-3.2-1B config.json (tied embeddings: the LM head is the "
                                   "embedding, read once a pass)"),
    ModelSpec("qwen3-32b", layers=64, hidden=5120, heads=64, kv_heads=8, head_dim=128, intermediate=25600,
              vocab=151936, source="Qwen/Qwen3-32B config.json"),
    ModelSpec("qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, intermediate=6144,
              vocab=151936, experts=128, experts_per_token=8, expert_intermediate=768,
              source="Qwen/Qwen3-30B-A3B config.json (30.5B total, 3.3B active)"),
)

_DRAFTERS = (
    DrafterSpec("eagle-1l", layers=1, fuse_inputs=2, dtype="bf16",
                source="EAGLE / EAGLE-2 (Li et al. 2024): one decoder layer of the target's shape, an FC fusing "
                       "[feature; token embedding] (2h -> h), the target's LM head"),
    DrafterSpec("eagle3-1l", layers=1, fuse_inputs=3, draft_vocab=32000, dtype="bf16",
                source="EAGLE-3 (Li et al. 2025): one decoder layer, FC fusing three feature levels (3h -> h), "
                       "a 32k-token draft vocabulary"),
    DrafterSpec("mtp-1l", layers=1, fuse_inputs=2, moe=True,
                source="DeepSeek-V3 / Qwen3-Next multi-token prediction: one module = a full target layer "
                       "(MoE where the target is), an eh_proj (2h -> h), the shared LM head"),
    DrafterSpec("llama-3.2-1b", kind="model", model="llama-3.2-1b", layers=0, fuse_inputs=0,
                source="a separate draft model, Llama-3.2-1B (the Llama-3 tokenizer: drafts for Llama-3.1 targets), "
                       "its own KV cache and LM head"),
    DrafterSpec("ngram", kind="ngram", layers=0, fuse_inputs=0,
                source="prompt lookup (n-gram matching of the context, vLLM ngram, TensorRT-LLM NGram, SGLang "
                       "ngram): no draft pass"),
)

BUILTIN_GPUS = {s.name: s for s in _GPUS}
BUILTIN_MODELS = {s.name: s for s in _MODELS}
BUILTIN_DRAFTERS = {s.name: s for s in _DRAFTERS}

_KINDS = {"gpu": GpuSpec, "model": ModelSpec, "drafter": DrafterSpec}


# -- lookup ---------------------------------------------------------------------------------
def gpu_spec(name, extra=None) -> GpuSpec:
    """The GPU spec called ``name`` (from ``extra`` first, then the built-ins); a spec passes through."""
    return _find("gpu", name, BUILTIN_GPUS, extra)


def model_spec(name, extra=None, dtype=None) -> ModelSpec:
    """The model spec called ``name`` (from ``extra`` first, then the built-ins); ``dtype``, if
    given, overrides its weight format (e.g. ``"fp8"``)."""
    m = _find("model", name, BUILTIN_MODELS, extra)
    if dtype is None:
        return m
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise CostModelError(f"dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    return dataclasses.replace(m, dtype=dtype)


def drafter_spec(name, extra=None) -> DrafterSpec:
    """The drafter spec called ``name`` (from ``extra`` first, then the built-ins)."""
    return _find("drafter", name, BUILTIN_DRAFTERS, extra)


def _find(kind, name, builtins, extra):
    cls = _KINDS[kind]
    if isinstance(name, cls):
        return check_spec(name)
    if extra is not None and not isinstance(extra, dict):
        raise CostModelError(f"the user {kind} specs must be a dict of name -> spec (as load_specs returns), got "
                             f"{show(extra)}")
    known = dict(builtins)
    known.update(extra or {})
    if isinstance(name, str) and name in known:
        return known[name]
    if not isinstance(name, str):
        raise CostModelError(f"{kind} = {show(name)} must be a {kind} spec's name (text) or a {cls.__name__}")
    raise CostModelError(
        f"unknown {kind} {name!r}: known {kind}s are {', '.join(sorted(known))}; "
        f"describe another in a TOML file ([[{kind}]] with a name) and pass it with --{kind}-spec"
    )


def digest(*specs, **values) -> str:
    """``sha256:`` of the canonical JSON of every spec field (but ``source``) and the extra values."""
    doc = []
    for s in specs:
        fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "source"
                  and not f.metadata.get("digest_omitted")
                  and not (f.metadata.get("digest_default_omitted") and getattr(s, f.name) == f.default)}
        doc.append({"kind": type(s).__name__, **fields})
    doc.append(values)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- models from a Hugging Face config.json -------------------------------------------------
# The fields a decoder's config.json must hold for the roofline to price it, each under the
# names the families spell it (the first one a config holds is read): gpt2, gptj and gpt_bigcode
# write n_embd, n_head, n_layer and n_inner; opt ffn_dim; falcon ffn_hidden_size; bloom n_embed
# and n_head; mpt d_model, n_heads and n_layers.
HF_FIELD_NAMES = {
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads"),
    "vocab_size": ("vocab_size",),
}
HF_CONFIG_FIELDS = tuple(HF_FIELD_NAMES)
# Families whose MLP width is 4 x hidden when the config leaves it out (or null); mpt's is its
# expansion_ratio (default 4) x d_model.
HF_FOUR_X_TYPES = frozenset({"gpt2", "gptj", "gpt_bigcode", "falcon", "bloom"})
# model_type -> gated (SwiGLU/GeGLU: gate, up and down matrices) or plain MLP (up and down).
HF_GATED_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
                            "phi3", "granite", "olmo", "olmo2", "internlm2", "cohere", "exaone", "yi", "deepseek"})
HF_PLAIN_TYPES = frozenset({"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "starcoder2", "phi",
                            "gpt_bigcode", "mpt"})
# hidden_act -> gated, when model_type names neither list.
HF_GATED_ACTS = frozenset({"silu", "swish", "swiglu"})
HF_PLAIN_ACTS = frozenset({"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "quick_gelu"})
HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}
# Keys that mark a mixture-of-experts config, at the top or nested (DBRX's
# ffn_config.moe_num_experts), besides any key naming experts (num_experts_per_tok): priced only
# from a TOML spec, which names the shape.
HF_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
# Keys that mark multi-head latent attention (DeepSeek-V2/V3, MiniCPM3): a config.json read as
# plain attention would price a KV cache of every head's keys and values instead of one latent.
HF_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim")


def load_hf_config(path, name=None, dtype=None) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` (a dense decoder).

    Read: the hidden size, MLP width, layer count, attention heads and vocabulary under any of
    the names :data:`HF_FIELD_NAMES` lists (all required, but the MLP width of the families that
    default it: 4 x hidden for :data:`HF_FOUR_X_TYPES`, ``expansion_ratio`` x ``d_model`` for mpt),
    the KV heads (``num_key_value_heads``, missing or null: the attention heads; falcon, mpt and
    gpt_bigcode by their own multi-query settings), ``head_dim`` (default hidden size / heads),
    gated or plain MLP (from ``model_type``, else ``hidden_act``), and the weights' format
    (``torch_dtype`` or ``dtype``, not needed when ``dtype`` is given; a ``quantization_config``
    with ``quant_method = "fp8"`` makes it fp8). A mixture-of-experts config, wherever it names
    its experts, and a multi-head latent attention one (:data:`HF_MLA_KEYS`) are refused. The name is ``name``, else the file's folder, lower-cased.

    Raises
    ------
    CostModelError
        Naming the file and every missing or wrong field.
    """
    path = Path(path)
    doc = loads_json(read_input(path, "the model config", CostModelError), "the model config", path, CostModelError)
    default = (path.parent.name if path.name == "config.json" else path.stem).lower()
    return parse_hf_config(doc, str(path), name or default, dtype)


def _moe_keys(doc, where="", depth=0) -> list:
    """The keys of ``doc`` (dotted, nested objects included) that set up experts."""
    found = []
    for key, value in doc.items():
        k = str(key).lower()
        if isinstance(value, dict) and depth < 4:
            found += _moe_keys(value, f"{where}{key}.", depth + 1)
        elif (k in HF_MOE_KEYS or "expert" in k or k.startswith("moe_")) and value not in (None, False, 0, "", [], {}):
            found.append(f"{where}{key}")
    return found


def _hf_kv_heads(doc, model_type, heads, problems):
    """The KV heads of a config: 1 for a multi-query falcon (old architecture) or gpt_bigcode,
    mpt's attn_config, else ``num_key_value_heads`` (``num_kv_heads``), the attention heads when
    missing or null."""
    def flag(name, default, where=doc):
        value = where.get(name, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            problems.append(f"{name} = {show(value)} must be true or false")
            return default
        return value

    if model_type == "gpt_bigcode":
        return 1 if flag("multi_query", True) else heads
    if model_type == "falcon" and not flag("new_decoder_architecture", False):
        return 1 if flag("multi_query", True) else heads
    names = ("num_key_value_heads", "num_kv_heads")
    if model_type == "mpt":
        attn = doc.get("attn_config") or {}
        if not isinstance(attn, dict):
            problems.append(f"attn_config = {show(attn)} must be an object")
            return heads
        kind = attn.get("attn_type", "multihead_attention")
        if kind == "multiquery_attention":
            return 1
        if kind != "grouped_query_attention":
            return heads
        doc, names = attn, ("kv_n_heads",)
    name = next((n for n in names if doc.get(n) is not None), None)
    if name is None:
        return heads
    value = doc[name]
    if not is_int(value) or value < 1:
        problems.append(f"{name} = {show(value)} must be a whole number >= 1")
        return None
    return value


def _hf_unsaid_shapes(doc, model_type, hidden) -> list:
    """What a ``config.json`` describes that its reading cannot price (MLA, experts, a projected
    embedding, another MPT MLP): each names the TOML ``[[model]]`` spec that can."""
    problems = []
    mla = [k for k in HF_MLA_KEYS if doc.get(k) not in (None, False, 0)]
    if mla:
        problems.append(f"{', '.join(mla)}: multi-head latent attention (MLA); describe its shape in a TOML "
                        "[[model]] spec (kv_lora_rank, q_lora_rank, rope_head_dim, v_head_dim) and pass --model-spec")
    moe = _moe_keys(doc)
    if moe:
        problems.append(f"{', '.join(moe[:5])}: a mixture-of-experts config; describe its shape in a TOML "
                        "[[model]] spec (experts, experts_per_token, expert_intermediate) and pass --model-spec")
    if model_type == "opt" and doc.get("word_embed_proj_dim") not in (None, hidden):
        problems.append(f"word_embed_proj_dim = {show(doc['word_embed_proj_dim'])} differs from hidden_size = "
                        f"{hidden}: the embedding and LM head run at another width (and two projections), which a "
                        "config.json model cannot say; describe it in a TOML [[model]] spec and pass --model-spec")
    if model_type == "mpt" and isinstance(doc.get("ffn_config"), dict) \
            and doc["ffn_config"].get("ffn_type", "mptmlp") != "mptmlp":
        problems.append(f"ffn_config.ffn_type = {show(doc['ffn_config'].get('ffn_type'))}: only mpt's plain "
                        "\"mptmlp\" is read; describe another in a TOML [[model]] spec and pass --model-spec")
    return problems


def _hf_dtype(doc, dtype_override, problems):
    """The weights' number format of a ``config.json`` (``torch_dtype``, an fp8
    ``quantization_config``), or None with the reason in ``problems``."""
    raw_dtype = doc.get("torch_dtype", doc.get("dtype"))
    dtype = HF_DTYPES.get(raw_dtype) if isinstance(raw_dtype, str) else None
    if dtype is None and raw_dtype is None and dtype_override is not None:
        dtype = "bf16"  # the format --dtype overrides
    if dtype is None:
        problems.append(f"torch_dtype = {show(raw_dtype)} is not one of {', '.join(HF_DTYPES)} (or pass --dtype)")
    quant = doc.get("quantization_config")
    if isinstance(quant, dict) and quant:
        method = quant.get("quant_method")
        if method == "fp8":
            dtype = "fp8"
        else:
            problems.append(f"quantization_config.quant_method = {show(method)}: only \"fp8\" is read; pass --dtype "
                            "for another format")
    return dtype


def parse_hf_config(doc, source: str, name: str, dtype_override=None) -> ModelSpec:
    """The :class:`ModelSpec` of a parsed ``config.json`` (see :func:`load_hf_config`)."""
    if not isinstance(doc, dict):
        raise CostModelError(f"{source}: a model config is a JSON object, not {type(doc).__name__}")
    problems = []
    texts = {}
    for f in ("model_type", "hidden_act", "activation_function"):
        v = doc.get(f)
        if v is not None and not isinstance(v, str):
            problems.append(f"{f} = {show(v)} must be a name (text such as \"llama\" or \"silu\")")
        else:
            texts[f] = v
    model_type = texts.get("model_type")
    act_field = "hidden_act" if "hidden_act" in doc else "activation_function"
    act = texts.get(act_field)
    values, missing = {}, []
    for f, names in HF_FIELD_NAMES.items():
        spelt = next((n for n in names if doc.get(n) is not None), None)
        if spelt is None:
            missing.append(f)
            continue
        v = doc[spelt]
        if not is_int(v) or v < 1:
            problems.append(f"{spelt} = {show(v)} must be a whole number >= 1")
        else:
            values[f] = v
    hidden = values.get("hidden_size")
    if "intermediate_size" in missing and hidden and model_type in HF_FOUR_X_TYPES:
        missing.remove("intermediate_size")
        values["intermediate_size"] = 4 * hidden
    elif "intermediate_size" in missing and hidden and model_type == "mpt":
        missing.remove("intermediate_size")
        ratio = doc.get("expansion_ratio", 4)
        if not is_number(ratio) or not 0 < ratio <= 1024 \
                or float(ratio * hidden) != int(ratio * hidden):
            problems.append(f"expansion_ratio = {show(ratio)} must be a number > 0 that makes a whole MLP width")
        else:
            values["intermediate_size"] = int(ratio * hidden)
    if missing:
        spellings = "; ".join(f"{f} (or {', '.join(HF_FIELD_NAMES[f][1:])})" if len(HF_FIELD_NAMES[f]) > 1 else f
                              for f in missing)
        problems.append(f"missing field(s) {spellings}: a decoder's config.json names them all")
    if doc.get("head_dim") is not None:
        v = doc["head_dim"]
        if not is_int(v) or v < 1:
            problems.append(f"head_dim = {show(v)} must be a whole number >= 1")
        else:
            values["head_dim"] = v
    problems += _hf_unsaid_shapes(doc, model_type, hidden)
    heads = values.get("num_attention_heads")
    if hidden and heads and hidden % heads:
        problems.append(f"num_attention_heads = {heads} does not divide hidden_size = {hidden}")
    kv = _hf_kv_heads(doc, model_type, heads, problems) if heads else None
    if heads and kv and heads % kv:
        problems.append(f"num_key_value_heads = {kv} does not divide num_attention_heads = {heads}")
    if model_type in HF_GATED_TYPES or (model_type not in HF_PLAIN_TYPES and act in HF_GATED_ACTS):
        matrices = 3
    elif model_type in HF_PLAIN_TYPES or act in HF_PLAIN_ACTS:
        matrices = 2
    else:
        matrices = None
        if "model_type" in texts and act_field in texts:  # (a name that is not text is refused above)
            problems.append(f"model_type = {model_type!r} and hidden_act = {act!r} do not say whether the MLP is "
                            f"gated: a gated one has hidden_act in {', '.join(sorted(HF_GATED_ACTS))}, a plain one in "
                            f"{', '.join(sorted(HF_PLAIN_ACTS))}")
    dtype = _hf_dtype(doc, dtype_override, problems)
    if problems:
        raise CostModelError(f"{source}: the model config is refused", problems)
    head_dim = values.get("head_dim", hidden // heads)
    spec = ModelSpec(name, layers=values["num_hidden_layers"], hidden=hidden, heads=heads, kv_heads=kv,
                     head_dim=head_dim, intermediate=values["intermediate_size"], vocab=values["vocab_size"],
                     mlp_matrices=matrices, dtype=dtype, head_dtype="bf16" if dtype == "fp8" else "",
                     kv_dtype=dtype if dtype in ("fp16", "fp32") else "bf16",
                     source=f"{source} (Hugging Face config.json, model_type {model_type})")
    bad = _value_problems(spec)
    if bad:
        raise CostModelError(f"{source}: the model config is refused", bad)
    return spec


# -- user specs from TOML -------------------------------------------------------------------
def load_specs(path) -> dict:
    """Specs from a TOML file: ``{"gpu": {name: GpuSpec}, "model": {...}, "drafter": {...}}``.

    Raises
    ------
    CostModelError
        Listing every problem: entry, field, value and what it must be.
    """
    path = Path(path)
    text = read_input(path, "the spec file", CostModelError)
    return parse_specs(text, str(path))


def parse_specs(text, source: str = "<text>") -> dict:
    """Specs from TOML text (see :func:`load_specs`)."""
    doc = _toml.loads(text, "the spec file", source, CostModelError)
    out = {kind: {} for kind in _KINDS}
    problems = []
    unknown = sorted(set(doc) - set(_KINDS))
    if unknown:
        problems.append(f"unknown top-level entries {unknown}: use [[gpu]], [[model]] or [[drafter]] tables")
    for kind, cls in _KINDS.items():
        entries = doc.get(kind, [])
        if isinstance(entries, dict):
            entries = [entries]
        if not isinstance(entries, list):
            problems.append(f"`{kind}` is a {_toml.type_name(entries)}, not an array of tables ([[{kind}]])")
            continue
        for i, raw in enumerate(entries):
            where = f"[[{kind}]] #{i + 1}"
            spec = _spec_from_dict(cls, raw, where, problems)
            if spec is None:
                continue
            if spec.name in out[kind]:
                problems.append(f"{where}: name {spec.name!r} appears twice in the file")
            out[kind][spec.name] = spec
    if not problems and not any(out.values()):
        problems.append("the file holds no [[gpu]], [[model]] or [[drafter]] table")
    if problems:
        raise CostModelError(f"{source}: the spec file is refused", problems)
    return out


def _spec_from_dict(cls, raw, where, problems):
    if not isinstance(raw, dict):
        problems.append(f"{where} is a {_toml.type_name(raw)}, not a table")
        return None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values, ok = {}, True
    for name, value in raw.items():
        f = fields.get(name)
        if f is None:
            problems.append(f"{where}: unknown field {name!r}; {cls.__name__} fields are {', '.join(fields)}")
            ok = False
            continue
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "str":
            good = isinstance(value, str)
        elif kind == "int":
            good = _toml.as_uint(value) is not None
        elif kind == "bool":
            good = isinstance(value, bool)
        else:
            good = _toml.as_float(value) is not None
            value = _toml.as_float(value)
        if not good:
            problems.append(f"{where}: {name} = {raw[name]!r} is not a{'n' if kind == 'int' else ''} {kind}")
            ok = False
            continue
        values[name] = value
    missing = [n for n, f in fields.items()
               if f.default is dataclasses.MISSING and n not in values and n not in raw]
    if missing:
        problems.append(f"{where}: missing required field(s) {', '.join(missing)}")
        return None
    if not ok:
        return None
    spec = cls(**values)
    before = len(problems)
    problems.extend(f"{where} ({spec.name!r}): {p}" for p in _value_problems(spec))
    return spec if len(problems) == before else None


def check_spec(spec):
    """``spec`` itself, or CostModelError listing every out-of-range field."""
    problems = _value_problems(spec)
    if problems:
        raise CostModelError(f"{type(spec).__name__} {spec.name!r} is refused", problems)
    return spec


# What a GPU spec's numbers may be: a thousand times past any board on sale either way, so a
# typo (1e308, 1e-308) is named here rather than surfacing as an infinite cost in some cell.
GPU_RANGES = {
    "memory_gb": (0.001, 1e6), "bandwidth_gbs": (0.001, 1e7), "bf16_tflops": (1e-6, 1e7),
    "fp8_tflops": (1e-6, 1e7), "fp4_tflops": (1e-6, 1e7), "tdp_w": (0.001, 1e6), "idle_w": (0.001, 1e6),
    "link_gbs": (0.001, 1e7),
}
# Largest whole-number field of a model or drafter spec (layers, hidden, heads, vocab, ...).
MAX_SPEC_INT = 1 << 31


def _value_problems(spec) -> list:
    problems = []
    if not spec.name:
        problems.append("name is empty")
    if isinstance(spec, GpuSpec):
        for f in ("memory_gb", "bandwidth_gbs", "bf16_tflops", "tdp_w", "link_gbs"):
            v = getattr(spec, f)
            low, high = GPU_RANGES[f]
            if not (math.isfinite(v) and low <= v <= high):
                problems.append(f"{f} = {v!r} must be in {low:g}..{high:g}")
        for f in ("fp8_tflops", "fp4_tflops", "idle_w"):
            v = getattr(spec, f)
            high = GPU_RANGES[f][1]
            if not (math.isfinite(v) and (v == 0 or GPU_RANGES[f][0] <= v <= high)):
                problems.append(f"{f} = {v!r} must be 0 (none) or in {GPU_RANGES[f][0]:g}..{high:g}")
        if spec.idle_w >= spec.tdp_w:
            problems.append(f"idle_w = {spec.idle_w!r} must be below tdp_w = {spec.tdp_w!r}")
        problems += [p for p in (interconnect_problem(spec.interconnect),) if p]
    elif isinstance(spec, ModelSpec):
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
            if not 1 <= getattr(spec, f) <= MAX_SPEC_INT:
                problems.append(f"{f} = {getattr(spec, f)!r} must be in 1..{MAX_SPEC_INT:,}")
        for f in ("intermediate", "kv_layers", "experts", "experts_per_token", "expert_intermediate",
                  "shared_intermediate", "dense_layers"):
            if getattr(spec, f, 0) > MAX_SPEC_INT:
                problems.append(f"{f} = {getattr(spec, f)!r} must be at most {MAX_SPEC_INT:,}")
        if spec.mlp_matrices not in (2, 3):
            problems.append(f"mlp_matrices = {spec.mlp_matrices!r} must be 2 (plain MLP) or 3 (gated)")
        if spec.kv_layers > spec.layers:
            problems.append(f"kv_layers = {spec.kv_layers} exceeds layers = {spec.layers}")
        if spec.heads % spec.kv_heads:
            problems.append(f"heads = {spec.heads} is not a multiple of kv_heads = {spec.kv_heads}")
        for f in ("kv_lora_rank", "q_lora_rank", "rope_head_dim", "v_head_dim"):
            if not 0 <= getattr(spec, f) <= MAX_SPEC_INT:
                problems.append(f"{f} = {getattr(spec, f)!r} must be in 0..{MAX_SPEC_INT:,}")
        if spec.kv_lora_rank:
            if spec.kv_heads != 1:
                problems.append(f"kv_heads = {spec.kv_heads}: an MLA model (kv_lora_rank > 0) caches one latent "
                                "shared by every head; give kv_heads = 1")
            if not 0 <= spec.rope_head_dim < spec.head_dim:
                problems.append(f"rope_head_dim = {spec.rope_head_dim} must be below head_dim = {spec.head_dim} "
                                "(a query head is its non-rotary part plus its rotary part)")
            if spec.v_head_dim < 1:
                problems.append("v_head_dim must be >= 1 for an MLA model (kv_lora_rank > 0)")
        elif spec.q_lora_rank or spec.rope_head_dim or spec.v_head_dim:
            problems.append("q_lora_rank, rope_head_dim and v_head_dim describe MLA: give kv_lora_rank too")
        if spec.experts:
            if not 1 <= spec.experts_per_token <= spec.experts:
                problems.append(f"experts_per_token = {spec.experts_per_token} must be in 1..={spec.experts}")
            if spec.expert_intermediate < 1:
                problems.append("expert_intermediate must be >= 1 for an MoE model (experts > 0)")
            if spec.dense_layers >= spec.layers:
                problems.append(f"dense_layers = {spec.dense_layers} leaves no MoE layer of {spec.layers}")
        elif spec.intermediate < 1:
            problems.append("intermediate must be >= 1 for a dense model")
        for f in ("dtype", "kv_dtype"):
            if getattr(spec, f) not in DTYPE_BYTES:
                problems.append(f"{f} = {getattr(spec, f)!r} is not one of {', '.join(DTYPE_BYTES)}")
        if spec.head_dtype and spec.head_dtype not in DTYPE_BYTES:
            problems.append(f"head_dtype = {spec.head_dtype!r} is not one of {', '.join(DTYPE_BYTES)} (or \"\")")
    elif isinstance(spec, DrafterSpec):
        if spec.kind not in DRAFTER_KINDS:
            problems.append(f"kind = {spec.kind!r} is not one of {', '.join(DRAFTER_KINDS)}")
        elif spec.kind == "head" and spec.layers < 1:
            problems.append(f"layers = {spec.layers} must be >= 1")
        if spec.kind == "model" and not spec.model:
            problems.append("a drafter of kind \"model\" names its draft model: model = \"NAME\" (a model spec)")
        elif spec.kind != "model" and spec.model:
            problems.append(f"model = {spec.model!r} is for a drafter of kind \"model\" (this one is {spec.kind!r})")
        if spec.dtype and spec.dtype not in DTYPE_BYTES:
            problems.append(f"dtype = {spec.dtype!r} is not one of {', '.join(DTYPE_BYTES)} (or \"\" = the target's)")
    return problems
