"""The KV read against published measurements of paged decode attention (docs/tables.md, "KV reads
against measured attention kernels"): the transcribed figures hold together, the what-if moves only
the attention part, and the docs print what the script gives now."""

import pytest

from benchmarks import kv_bandwidth as kv
from specsim.costmodel import forward_breakdown
from tests.fixtures import ROOT

DOCS = ROOT / "docs" / "tables.md"


def test_the_onnxruntime_rows_agree_with_their_printed_utilisation():
    # The thread prints a BWUtil column beside the GB/s: the share of 3.35 TB/s, to 0.01%.
    printed = {32: 0.1480, 64: 0.2452, 128: 0.3695, 256: 0.4739}
    rows = [m for m in kv.SOURCES if m.kernel.startswith("FlashAttention-2")]
    assert sorted(m.context for m in rows) == sorted(printed)
    for m in rows:
        # 1.239 TB/s and 1.589 TB/s are printed to four figures.
        assert kv.fraction(m) == pytest.approx(printed[m.context], abs=0.001)


def test_the_flash_attention_rows_agree_with_their_printed_times():
    # The thread prints each run's time: the K and V bytes of the shape over it give the GB/s (the
    # kernel also reads the queries and writes the outputs, so allow 2%).
    times_us = {128: 27.6, 2000: 292.0, 4000: 567.2}
    for m in (m for m in kv.SOURCES if m.kernel.startswith("FlashAttention-3")):
        kv_bytes = m.seqs * m.context * 32 * 128 * 2 * 2.0
        assert kv_bytes / (times_us[m.context] * 1e-6) / 1e9 == pytest.approx(m.gbs, rel=0.02)


def test_the_kernel_fraction_is_linear_between_the_measured_contexts():
    fa3 = {m.context: kv.fraction(m) for m in kv.SOURCES if m.kernel.startswith("FlashAttention-3")}
    assert kv.kernel_fraction(2000) == pytest.approx(fa3[2000])
    assert kv.kernel_fraction(3000) == pytest.approx((fa3[2000] + fa3[4000]) / 2)
    assert kv.kernel_fraction(1) == pytest.approx(fa3[128])
    assert kv.kernel_fraction(10 ** 6) == pytest.approx(fa3[4000])


@pytest.mark.parametrize("batch,context", [(1, 1), (1, 4000), (128, 1000), (128, 4000)])
def test_the_what_if_moves_only_the_attention_part(batch, context):
    shipped = forward_breakdown(kv.GPU, kv.MODEL, tokens=batch, seqs=batch, context=context)
    moved = kv.specsim_ms(batch, context, kv.TRAINED_KV_FRACTION)
    rest = shipped.total_ms - shipped.attention_ms
    assert kv.specsim_ms(batch, context) == shipped.total_ms
    # A slower KV stream can only lengthen attention, never the rest of the step.
    assert moved - rest > shipped.attention_ms
    _, _, attention, rest_again = kv.split(batch, context)
    assert rest_again == pytest.approx(rest)
    assert attention == pytest.approx(moved - rest)


def test_the_trained_step_grows_with_the_kv_bytes_at_its_coefficient():
    # One more token of context for every sequence adds the KV bytes of a token at peak / beta.
    m_bytes = 32 * 2 * 8 * 128 * 2.0          # Llama-3.1-8B: layers x (K, V) x KV heads x head dim x bf16
    step = kv.trained_physics_ms(64, 2001) - kv.trained_physics_ms(64, 2000)
    assert step == pytest.approx(64 * m_bytes / (kv.TRAINED_PEAK_TBS * 1e12 * kv.TRAINED_KV_FRACTION) * 1e3)


def test_the_context_effect_what_if_is_the_shipped_effect_at_the_shipped_fraction():
    from specsim.costmodel import gpu_spec
    from specsim.costmodel.passes import achieved_for

    shipped = kv.effect_speedups()
    same = kv.effect_speedups(achieved_for(gpu_spec(kv.EFFECT[0])).memory_efficiency)
    assert same == pytest.approx(shipped, rel=1e-12)
    # The first context is where the tokens per step are fitted; a slower KV read raises the rest.
    slower = kv.effect_speedups(kv.TRAINED_KV_FRACTION)
    first, *rest = sorted(kv.EFFECT_PUBLISHED)
    assert slower[first] == pytest.approx(0.79) == pytest.approx(shipped[first])
    assert all(slower[c] > shipped[c] for c in rest)


def test_docs_print_the_current_figures():
    text = DOCS.read_text(encoding="utf-8")
    missing = [line for line in kv.render().splitlines() if line.strip() and line not in text]
    assert not missing, "docs/tables.md, 'KV reads against measured attention kernels':\n" + "\n".join(missing)
