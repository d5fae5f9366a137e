"""TensorRT-LLM's speculative-decoding telemetry: per-iteration ``specDecodingStats`` and
per-request blocks (``docs/telemetry.md``, "TensorRT-LLM")."""

from __future__ import annotations

from specsim.interop._records import Format, Record, Tally, as_count, as_number, block_records, walk
from specsim.interop.vllm import request_records

_STATS = ("specDecodingStats", "spec_decoding_stats")
_FIELDS = {
    "drafts": ("numDraftTokens", "num_draft_tokens"),
    "accepted": ("numAcceptedTokens", "num_accepted_tokens"),
    "requests": ("numRequestsWithDraftTokens", "num_requests_with_draft_tokens"),
    "length": ("acceptanceLength", "acceptance_length"),
}


def parse_iterations(text: str, source: str):
    """``"mean"`` records of iteration stats: accepted drafts over the requests that drafted in
    that iteration (one verify step each); their drafted tokens over them give the depth."""
    tally = Tally()
    records = block_records(text, source, tally,
                            lambda doc: [d[k] for d in walk(doc) for k in _STATS if isinstance(d.get(k), dict)],
                            lambda s, where: _iteration(s, where, tally), "stats")
    return records, tally


def _get(stats, field):
    for name in _FIELDS[field]:
        if name in stats:
            return stats[name]
    return None


def _iteration(stats, where, tally):
    drafts, accepted, requests = (as_count(_get(stats, f)) for f in ("drafts", "accepted", "requests"))
    if requests == 0 or drafts == 0:
        tally.zero_draft += 1
        return None
    if None in (drafts, accepted, requests) or accepted > drafts:
        tally.bad(where, "specDecodingStats without numDraftTokens, numAcceptedTokens and numRequestsWithDraftTokens "
                         "(accepted <= drafted)")
        return None
    length = as_number(_get(stats, "length"))
    if length is not None:
        # acceptanceLength counts the step's own token: tells whether numAcceptedTokens does too.
        with_bonus = abs(length - accepted / requests) < abs(length - (1.0 + accepted / requests))
        if with_bonus:
            accepted = max(accepted - requests, 0)
            tally.notes["numAcceptedTokens"] = "includes the bonus token"
    depth = drafts // requests if drafts % requests == 0 else None
    return Record("mean", where, mean_accepted=accepted / requests, n_steps=requests, depth=depth)


def parse_requests(text: str, source: str):
    """Records of per-request ``speculative_decoding`` blocks (the PyTorch backend's names). The
    released block (``RequestPerfMetrics.speculative_decoding``) holds accepted and drafted tokens
    only: a mean whose steps are ``total_draft_tokens / depth`` (``--depth``). The payload with
    ``acceptance_histogram``, ``num_spec_steps`` and ``num_spec_tokens`` (null under
    ``draft_len_schedule``) is read as vLLM's is."""
    return request_records(text, source, keys=("total_accepted_draft_tokens", "total_draft_tokens"))


TELEMETRY = (
    Format("trtllm-iteration", "TensorRT-LLM per-iteration `specDecodingStats` (JSON or JSON Lines)",
           ("specDecodingStats", "spec_decoding_stats"), parse_iterations),
    Format("trtllm-request", "TensorRT-LLM per-request `speculative_decoding` blocks (JSON or JSON Lines)",
           ("total_accepted_draft_tokens",), parse_requests),
)
"""TensorRT-LLM's telemetry formats (the registry in :mod:`specsim.interop` collects them)."""
