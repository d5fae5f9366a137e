"""Draft-depth policies, parsed once from their text form into a frozen value.

Forms:

``fixed:K``
    Always depth ``K`` (``fixed:0`` is plain decoding).
``schedule:1-16=3,17-64=2,65-=0``
    Depth by batch width, as TensorRT-LLM and vLLM let users pin it: ``A-B=K`` covers widths
    ``A..=B``, ``A-=K`` covers ``A`` and up, ``A=K`` covers width ``A`` alone. Ranges may not
    overlap. A width that no range covers decodes plainly (depth 0), as a serve with no rule
    for that batch size would.
``propose``
    One depth for the batch from the cost table and the calibration's priors, before drafting.
``sequence``
    ``propose``, then per-sequence depths from the drafts' confidences, after drafting.
``goodput``
    Most expected tokens per ms, energy ignored (vLLM's dynamic speculation, SmartSpec).
``propose@SLACK``, ``sequence@SLACK``, ``load-aware@SLACK``
    The planner policy at that slack (``propose@0.1``), whatever the run's slack option says:
    the label reports print for a planner policy's run (:meth:`Policy.at_slack`), read back.
``tree:N``, ``tree:N,D``
    The best draft tree of ``N`` nodes (depth at most ``D``; default ``N``) of the
    calibration's ``[tree]`` table, every step (docs/simulation.md#draft-trees).
``tree:auto``
    Each step plain, a chain or a tree, as ``Planner.propose_tree`` chooses at the step's width.
``load-aware``
    ``propose`` while requests wait; while none wait, ``propose`` with each step's energy
    counted above idle power (step joules minus ``idle_w`` times step seconds), under the same
    speed floor: when the server keeps up, time a step saves is spent idle, not serving others
    (docs/planner.md, "Load-aware").

Nothing here reads a file: ``vllm:FILE``, ``trtllm:FILE`` and ``sglang:FILE`` (the ``schedule`` an
engine's config file sets, docs/schedules.md#reading-engine-files-back) are read where policies
enter, by :func:`specsim.interop.read_policy`, into the ``schedule`` they name; a ``trtllm:FILE``
whose config sets ``acceptance_window`` and ``acceptance_length_threshold`` also carries
TensorRT-LLM's speculation gate (docs/schedules.md#the-engines-own-adaptation). It also reads
``sglang-adaptive:FILE`` and ``sglang-adaptive[1,2,4,8]:FILE`` into an ``sglang-adaptive``
policy: SGLang's adaptive controller on the ``--speculative-adaptive-config`` FILE it reads (per
batch-size slot, an EMA of accepted drafts moves the depth among the slot's candidates, with
warm-up, update interval and hysteresis), simulated batch by batch; the brackets give
``--cuda-graph-bs`` (a batch is padded to the next size before its slot is chosen). It starts at
the file's deepest candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specsim.errors import PolicyError
from specsim.policy.schedule import depth_at, overlap, policy_text, span
from specsim._checks import MAX_TREE_NODES, MAX_WIDTH, show, slack_problem, slack_text
from specsim.tree._types import Tree

KINDS = ("fixed", "schedule", "propose", "sequence", "goodput", "load-aware", "sglang-adaptive", "tree")


@dataclass(frozen=True)
class Policy:
    """A parsed policy: everything the engine, the reports and the sweeps need to know about it.

    Parse it once with :func:`parse_policy`; nothing else reads policy strings.

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    depth : int
        ``fixed`` only: the depth.
    ranges : tuple of (int, int or None, int)
        ``schedule`` only: ``(first_width, last_width or None for open, depth)``, sorted.
    gate : tuple
        ``(acceptance_window, acceptance_length_threshold)`` when the policy came from a
        ``trtllm:FILE`` whose config sets TensorRT-LLM's speculation gate, else ``()``; the
        server's own options take precedence (:class:`~specsim.sim.options.ServerOptions`).

    adaptive : AdaptiveConfig or None
        ``sglang-adaptive`` only: the controller's config
        (:class:`specsim.interop.sglang.AdaptiveConfig`); ``graphs`` its CUDA-graph capture
        sizes (``()``: none) and ``source`` the file it was read from.
    slack : float or None
        A planner policy read from ``KIND@SLACK``: the slack its runs use (None: the run's
        slack option).
    nodes, tree_depth : int
        ``tree`` only: the tree's nodes and its depth bound (``tree:N,D``); ``nodes`` 0 for
        ``tree:auto``.
    shape : Tree or None
        ``tree`` only: a given tree (:func:`tree_policy`) verified every step instead of the
        best tree; its ``source`` names it in reports.
    settings : tuple
        ``tree`` only: an engine's tree settings, ``("sglang", topk, steps, draft_tokens)`` from an
        ``sglang:FILE`` (``specsim.interop.engine_tree``), built from the calibration's ``[tree]``
        table where the run starts; ``source`` names the file.
    """

    kind: str
    depth: int = 0
    ranges: tuple = ()
    gate: tuple = ()
    adaptive: object = None
    graphs: tuple = ()
    source: str = ""
    slack: float = None
    nodes: int = 0
    tree_depth: int = 0
    shape: object = None
    settings: tuple = ()

    @property
    def params(self) -> tuple:
        """The policy's arguments: ``(depth,)`` for ``fixed``, the ranges for ``schedule``, else ()."""
        if self.kind == "fixed":
            return (self.depth,)
        return self.ranges

    @property
    def needs_planner(self) -> bool:
        """Whether the depth comes from a cost table and a calibration (propose, sequence, goodput)."""
        return self.kind in ("propose", "sequence", "goodput", "load-aware")

    @property
    def reads_slack(self) -> bool:
        """Whether the planner slack changes what it does (propose, sequence, load-aware)."""
        return self.kind in ("propose", "sequence", "load-aware")

    @property
    def counts_idle(self) -> bool:
        """Whether, while no request waits, the depth is planned by tokens per joule above idle
        power (load-aware)."""
        return self.kind == "load-aware"

    @property
    def per_sequence(self) -> bool:
        """Whether depths are picked per sequence from the drafts' confidences (sequence)."""
        return self.kind == "sequence"

    @property
    def maximises_goodput(self) -> bool:
        """Whether the batch depth maximises expected tokens per ms (goodput) rather than
        following the planner's energy rule (propose, sequence)."""
        return self.kind == "goodput"

    @property
    def fixed_depth(self):
        """The depth of a ``fixed`` policy; None for every other kind."""
        return self.depth if self.kind == "fixed" else None

    @property
    def max_depth(self):
        """The deepest depth a ``fixed`` or ``schedule`` policy names; None for planner policies."""
        if self.kind == "fixed":
            return self.depth
        if self.kind == "schedule":
            return max(k for _, _, k in self.ranges)
        if self.kind == "sglang-adaptive":
            return self.adaptive.deepest
        if self.kind == "tree" and self.nodes:
            return self.nodes  # rows per sequence past the root's: a tree of N nodes verifies N + 1
        return None

    @property
    def label(self) -> str:
        """The canonical text form (``str(policy)``), as reports name it."""
        return str(self)

    def at_slack(self, slack) -> str:
        """The label of this policy's run at ``slack``: ``propose@0.1`` for a policy that reads
        the slack (its own slack, when it names one, wins), its text for any other; the one rule
        that prints it, and :func:`parse_policy` reads it back."""
        if not self.reads_slack:
            return str(self)
        return str(replace(self, slack=float(slack) + 0.0 if self.slack is None else self.slack))

    def clamped(self, k_cap: int) -> "Policy":
        """The same policy with every named depth lowered to ``k_cap`` (what a server capped at
        ``k_cap`` drafts runs); planner policies are returned unchanged."""
        if self.kind == "fixed":
            return replace(self, depth=min(self.depth, k_cap))
        if self.kind == "schedule":
            return replace(self, ranges=tuple((lo, hi, min(k, k_cap)) for lo, hi, k in self.ranges))
        return self

    def depth_for_width(self, width: int) -> int:
        """The depth of a ``fixed`` or ``schedule`` policy at batch ``width``."""
        if self.kind == "fixed":
            return self.depth
        if self.kind == "schedule":
            return depth_at(self.ranges, width)
        if self.kind == "tree" and self.nodes:
            return self.nodes
        if self.kind == "sglang-adaptive":
            raise PolicyError(f"policy {self} moves its depth with the acceptance it measures batch by batch, not "
                              "with the width alone: simulate it (specsim simulate)")
        raise PolicyError(f"policy {self} picks its depth with the planner, not from the width alone")

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.depth}"
        if self.kind == "schedule":
            return policy_text(self.ranges)
        if self.kind == "sglang-adaptive":
            graphs = f"[{','.join(map(str, self.graphs))}]" if self.graphs else ""
            return f"sglang-adaptive{graphs}:{self.source}"
        if self.kind == "tree":
            if self.shape is not None or self.settings:
                return self.source or f"tree:{self.nodes},{self.tree_depth} (given)"
            if not self.nodes:
                return "tree:auto"
            return f"tree:{self.nodes}" if self.tree_depth == self.nodes else f"tree:{self.nodes},{self.tree_depth}"
        if self.slack is not None:
            return f"{self.kind}@{slack_text(self.slack)}"
        return self.kind


def parse_policy(text) -> Policy:
    """Parse a policy string (see the module docstring for the forms).

    Raises
    ------
    PolicyError
        Naming what is wrong and the accepted forms.
    """
    if isinstance(text, Policy):
        return text
    raw = str(text).strip()
    kind, sep, arg = raw.partition(":")
    kind = kind.strip().lower()
    forms = ("fixed:K, schedule:1-16=3,17-64=2,65-=0, propose, sequence, goodput, load-aware (propose@0.1: at slack "
             "0.1), tree:N, tree:N,D, tree:auto")
    if kind == "sglang-adaptive" or kind.startswith("sglang-adaptive["):
        raise PolicyError(f"policy {raw!r} names a file: read it with specsim.interop.read_policy (as every command "
                          "does)")
    kind, at, slack = kind.partition("@")
    kind = kind.strip()
    if kind not in KINDS:
        raise PolicyError(f"unknown policy {raw!r}: use one of {forms}")
    if at:
        if not Policy(kind).reads_slack:
            raise PolicyError(f"policy {raw!r}: only propose, sequence and load-aware take a slack (@0.1)")
        if sep:
            raise PolicyError(f"policy {raw!r}: {kind}@SLACK takes no argument (caps are separate options)")
        return Policy(kind, slack=_slack(slack, raw))
    if Policy(kind).needs_planner:
        if sep:
            raise PolicyError(f"policy {kind} takes no argument, got {raw!r} (slack and caps are separate options)")
        return Policy(kind)
    if not sep or not arg.strip():
        examples = {"fixed": "fixed:3", "tree": "tree:8, tree:8,4 or tree:auto"}
        example = examples.get(kind, "schedule:1-16=3,17-64=2,65-=0")
        raise PolicyError(f"policy {kind} needs an argument, e.g. {example}")
    if kind == "fixed":
        return Policy("fixed", depth=_int(arg, raw, "depth K"))
    if kind == "tree":
        return _tree_policy(arg, raw)
    ranges = []
    for part in arg.split(","):
        part = part.strip()
        if not part:
            continue
        widths, eq, depth = part.partition("=")
        if not eq:
            raise PolicyError(f"policy {raw!r}: {part!r} is not WIDTHS=DEPTH (e.g. 1-16=3 or 65-=0)")
        k = _int(depth, raw, f"depth in {part!r}")
        lo_text, dash, hi_text = widths.strip().partition("-")
        lo = _int(lo_text, raw, f"first width in {part!r}")
        if lo < 1:
            raise PolicyError(f"policy {raw!r}: widths start at 1, got {part!r}")
        if not dash:
            hi = lo
        elif not hi_text.strip():
            hi = None
        else:
            hi = _int(hi_text, raw, f"last width in {part!r}")
            if hi < lo:
                raise PolicyError(f"policy {raw!r}: range {widths.strip()!r} ends before it starts")

        if max(lo, hi or 0) > MAX_WIDTH:
            raise PolicyError(f"policy {show(raw)}: {show(part)} names a width past {MAX_WIDTH:,}, the widest batch "
                              f"specsim takes (docs/limits.md); end the last range open instead, e.g. {lo}-=K")
        ranges.append((lo, hi, k))
    if not ranges:
        raise PolicyError(f"policy {raw!r} has no WIDTHS=DEPTH range")
    ranges.sort(key=lambda r: r[0])
    clash = overlap(ranges)
    if clash:
        raise PolicyError(f"policy {raw!r}: width ranges {span(clash[0])} and {span(clash[1])} overlap")
    return Policy("schedule", ranges=tuple(ranges))


def tree_policy(tree, source: str = "") -> Policy:
    """The ``tree`` policy that verifies ``tree`` (a :class:`specsim.tree.Tree`, such as an
    engine's setting gives, ``specsim.tree.tree_from_sglang``) every step; ``source`` its label."""
    if not isinstance(tree, Tree) or tree.nodes == 0:
        raise PolicyError(f"a tree policy needs a specsim.tree.Tree of at least one node, got {show(tree)}")
    if tree.nodes > MAX_TREE_NODES:
        raise PolicyError(f"a tree of {tree.nodes} nodes; at most {MAX_TREE_NODES}")
    return Policy("tree", nodes=tree.nodes, tree_depth=tree.depth, shape=tree, source=str(source))


def _tree_policy(arg, raw) -> Policy:
    """``tree:auto``, ``tree:N`` or ``tree:N,D`` (N nodes 1..MAX_TREE_NODES, depth D 1..N)."""
    if arg.strip().lower() == "auto":
        return Policy("tree")
    nodes_text, comma, depth_text = arg.partition(",")
    nodes = _int(nodes_text, raw, "tree nodes N")
    if not 1 <= nodes <= MAX_TREE_NODES:
        raise PolicyError(f"policy {show(raw)}: a tree of {nodes} nodes; use 1..{MAX_TREE_NODES} (tree:N or tree:N,D) "
                          "or tree:auto")
    depth = _int(depth_text, raw, "tree depth D") if comma else nodes
    if not 1 <= depth:
        raise PolicyError(f"policy {show(raw)}: tree depth D must be >= 1 (tree:N,D)")
    return Policy("tree", nodes=nodes, tree_depth=min(depth, nodes))


def _slack(text, raw) -> float:
    """The slack of ``KIND@SLACK``: a plain decimal number in [0, 1)."""
    t = text.strip()
    try:
        value = float(t) if t.isascii() and "_" not in t else None
    except ValueError:
        value = None
    if value is None:
        raise PolicyError(f"policy {show(raw)}: slack {show(t)} is not a share in [0, 1), e.g. propose@0.1")
    problem = slack_problem(value, f"policy {show(raw)}: slack")
    if problem:
        raise PolicyError(problem)
    return value + 0.0


def _int(text, raw, what) -> int:
    t = str(text).strip()
    if not t.isdigit() or not t.isascii():
        raise PolicyError(f"policy {raw!r}: {what} {t!r} is not a non-negative integer")
    if len(t) > 19:  # int() refuses 4,300 digits and more; no width or depth has 20
        raise PolicyError(f"policy {raw[:60]!r}: {what} has {len(t):,} digits, far past any width or depth")
    return int(t)


def policy_runs(policies, slacks):
    """``(Policy, slack)`` pairs to simulate: the planner policies (``propose``, ``sequence``)
    once per slack, the others once (they do not read it), one naming its own slack
    (``propose@0.1``) once at it. ``policies`` are texts or :class:`Policy` values
    (``ENGINE:FILE`` ones read already)."""
    out = []
    for text in policies:
        pol = parse_policy(text)
        if pol.slack is not None:
            out.append((pol, pol.slack))
            continue
        for s in (slacks if pol.reads_slack else slacks[:1]):
            out.append((pol, s))
    return out
