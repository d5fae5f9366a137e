"""The demo's inputs, built in for trying specsim with no files: an EAGLE calibration from
published acceptance rates, and the modelled table it pairs with (Llama-3.1-8B + EAGLE on one H200).

Neither is a measurement of anyone's serve: the calibration's numbers are read from papers, the
table from the roofline. Both say so in their ``[meta]``.
"""

from __future__ import annotations

import math

from specsim.calibration import AcceptanceCalibration, DrafterKey
from specsim.costmodel.roofline import model_table

DEMO_GPU = "h200"
DEMO_MODEL = "llama-3.1-8b"
DEMO_DRAFTER = "eagle-1l"
DEMO_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEMO_MAX_K = 8
DEMO_CONTEXT_TOKENS = 1024

# Per-position conditional acceptance (P(draft j accepted | drafts before it accepted)).
# EAGLE (Li, Wei, Zhang, Zhang; ICML 2024, arXiv:2401.15077) reports its "n-alpha" acceptance
# rates on MT-bench -- the acceptance of a draft whose input holds n predicted features, i.e.
# of chain position n + 1 given the earlier ones were accepted -- of about 0.79, 0.74, 0.72,
# 0.73, 0.74 for n = 0..4 (Vicuna-7B, greedy). Those are the priors of positions 1-5; later
# positions keep the last value (docs/calibration.md#queries). No such per-position table is published for
# Llama-3.1-8B; the 7B-class numbers stand in for it.
EAGLE_PRIORS = (0.79, 0.74, 0.72, 0.73, 0.74)

# Confidence buckets: the fit's default edges (docs/calibration.md#from-logs-to-counts). EAGLE-2 (Li et al.; EMNLP 2024, arXiv:2406.16858)
# observes that the EAGLE draft model is well calibrated -- its confidence (top-1 probability)
# approximates the acceptance rate with small error -- so each bucket's P(accept) is
# exp(midpoint of its log-probability range). The lowest bucket (-inf, -4] takes -5, the
# midpoint of [-6, -4], as a floor of its range.
DEMO_EDGES = (-4.0, -2.0, -1.0, -0.5, -0.25, -0.1, -0.05, -0.02, -0.005, 0.0)
_LOWEST_BUCKET_FLOOR = -6.0


def demo_p_accept(edges=DEMO_EDGES):
    """P(accept) per bucket as ``exp`` of each bucket's log-probability midpoint."""
    out, low = [], _LOWEST_BUCKET_FLOOR
    for e in edges:
        out.append(math.exp((low + e) / 2.0))
        low = e
    return out


def demo_drafter_key():
    """The drafter key the demo calibration is filed under (not any real weights' digest)."""
    # An honest placeholder: the demo drafter has no weights to hash, so the key names itself.
    return DrafterKey(weights_sha256="demo:eagle-llama-3.1-8b-published-rates", vocab=128256,
                      quantization="bf16", context=True)


def demo_calibration():
    """An :class:`~specsim.AcceptanceCalibration` for an EAGLE drafter on Llama-3.1-8B, from
    published acceptance rates (see the module's comments for the sources)."""
    return AcceptanceCalibration(
        demo_drafter_key(), DEMO_EDGES, demo_p_accept(), EAGLE_PRIORS,
        meta={
            "source": "published rates, not fitted: EAGLE (arXiv:2401.15077) n-alpha acceptance on MT-bench "
                      "for the priors; EAGLE-2 (arXiv:2406.16858) confidence ~ acceptance for the buckets",
            "model": DEMO_MODEL,
            "drafter": DEMO_DRAFTER,
        },
    )


# The demo's [tree] table (rank acceptance, docs/planner.md#draft-trees): ranks 2..4 of every
# depth, the chance that the target's token is the draft's second (third, fourth) candidate.
# Illustrative, not published for this drafter: of the falling shape Sequoia's acceptance vectors
# have (arXiv:2402.12374); fit a drafter's own with calib fit --drafts-log. Rank 1 of each depth is
# the demo's prior there (EAGLE_PRIORS), so trees and chains are weighed on the same acceptance.
DEMO_TREE_TAIL = (0.10, 0.04, 0.02)
# Depths of that table: the planner's default deepest tree (the priors cover 5 positions; deeper
# rows repeat the last, as the priors do past their end).
DEMO_TREE_DEPTHS = 8


def demo_tree_calibration():
    """:func:`demo_calibration` with a ``[tree]`` table of :data:`DEMO_TREE_DEPTHS` depths: its
    priors as the rank-1 column (the last repeated) and :data:`DEMO_TREE_TAIL` for ranks 2..4
    (illustrative; see the comment above it). What the demo serves its trees from, and
    ``examples/tree-cal.toml``."""
    cal = demo_calibration()
    first = list(EAGLE_PRIORS) + [EAGLE_PRIORS[-1]] * (DEMO_TREE_DEPTHS - len(EAGLE_PRIORS))
    return cal.with_rank_acceptance([[p, *DEMO_TREE_TAIL] for p in first])


def demo_table():
    """The demo's modelled cost table: Llama-3.1-8B + EAGLE one-layer on one H200, widths 1-256,
    depths 0-8, at :data:`DEMO_CONTEXT_TOKENS` context tokens."""
    return model_table(DEMO_GPU, DEMO_MODEL, DEMO_DRAFTER, tp=1, context_tokens=DEMO_CONTEXT_TOKENS,
                       widths=DEMO_WIDTHS, max_k=DEMO_MAX_K)
