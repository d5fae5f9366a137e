"""Request-trace readers and the synthetic generator (docs/simulation.md, "Traces")."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.errors import TraceError
from specsim.traces import (
    REQUEST_DT,
    EmpiricalLengths,
    LogNormalLengths,
    detect_format,
    parse_columns,
    parse_synthetic,
    read_trace,
    synthetic_trace,
)
from specsim.traces import readers as traces_mod
from tests import reference as ref

AZURE_CODE = "traces/azure2023/AzureLLMInferenceTrace_code.csv"
AZURE_CONV = "traces/azure2023/AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = "traces/mooncake/conversation_trace.jsonl"
MOONCAKE_SYN = "traces/mooncake/synthetic_trace.jsonl"
BURSTGPT = "traces/burstgpt/BurstGPT_1_first400.csv"


def check_against(read, rows):
    r = read.requests
    assert r.dtype == REQUEST_DT and r.dtype.isalignedstruct
    assert r.shape[0] == len(rows)
    assert r["prompt_tokens"].tolist() == [p for _, p, _ in rows]
    assert r["output_tokens"].tolist() == [o for _, _, o in rows]
    expect = np.array([float(t) for t, _, _ in rows])
    np.testing.assert_allclose(r["arrival_s"], expect, rtol=0, atol=1e-9)
    assert np.all(np.diff(r["arrival_s"]) >= 0)


# -- the real files -------------------------------------------------------------------------------

@pytest.mark.parametrize("rel, fmt, count", [(AZURE_CODE, "azure2023", 8819), (AZURE_CONV, "azure2023", 19366)])
def test_azure2023_real(shared_data, rel, fmt, count):
    path = shared_data / rel
    assert detect_format(path) == fmt
    read = read_trace(path)
    rows, zero = ref.ref_read_csv(path, "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime")
    assert (read.format, read.rows, read.requests.shape[0], read.skipped_zero, read.skipped_bad) == (fmt, count, count, 0, 0)
    assert zero == 0
    check_against(read, rows)
    assert read.requests["arrival_s"][0] == 0.0
    assert read.span_s == pytest.approx(float(rows[-1][0]), abs=1e-9)
    assert 3000 < read.span_s < 3600  # about an hour


@pytest.mark.parametrize("rel, count", [(MOONCAKE_CONV, 1000), (MOONCAKE_SYN, 500)])
def test_mooncake_real(shared_data, rel, count):
    path = shared_data / rel
    assert detect_format(path) == "mooncake"
    read = read_trace(path)
    rows, zero = ref.ref_read_mooncake(path)
    assert (read.rows, read.requests.shape[0], read.skipped_zero) == (count, count, zero)
    check_against(read, rows)
    assert int(read.requests["prompt_tokens"].sum()) == sum(p for _, p, _ in rows)
    assert read.span_s == pytest.approx(float(rows[-1][0]), abs=1e-9)


def test_burstgpt_real_skips_and_counts_zero_token_rows(shared_data):
    path = shared_data / BURSTGPT
    assert detect_format(path) == "burstgpt"
    read = read_trace(path)
    rows, zero = ref.ref_read_csv(path, "Timestamp", "Request tokens", "Response tokens", "s")
    assert zero == 17
    assert (read.rows, read.skipped_zero, read.requests.shape[0]) == (400, 17, 383)
    check_against(read, rows)
    assert int(read.requests["output_tokens"].sum()) == sum(o for _, _, o in rows)


def test_burstgpt_is_sorted_stably(shared_data):
    # the file is not in time order; equal stamps must keep file order
    path = shared_data / BURSTGPT
    read = read_trace(path)
    with open(path, newline="") as f:
        raw = [r for r in __import__("csv").DictReader(f) if int(r["Request tokens"]) and int(r["Response tokens"])]
    order = sorted(range(len(raw)), key=lambda i: int(raw[i]["Timestamp"]))
    assert read.requests["prompt_tokens"].tolist() == [int(raw[i]["Request tokens"]) for i in order]


def test_real_file_in_small_blocks_matches(shared_data, monkeypatch):
    path = shared_data / AZURE_CODE
    whole = read_trace(path).requests
    monkeypatch.setattr(traces_mod, "_BLOCK_BYTES", 777)
    assert np.array_equal(read_trace(path).requests, whole)
    monkeypatch.setattr(traces_mod, "_BLOCK_BYTES", 5000)  # shorter than some Mooncake lines
    mc = shared_data / MOONCAKE_SYN
    check_against(read_trace(mc), ref.ref_read_mooncake(mc)[0])


# -- Azure 2024 style, plain CSV, detection -------------------------------------------------------

AZ24 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.009930+00:00,2162,5
2024-05-10 00:00:00.016615+00:00,1175,17
2024-05-10 00:00:01.000000+00:00,0,3
2024-05-10 02:00:00.500000+02:00,9,9
2024-05-10 00:00:00.016615+00:00,7,8
"""


def test_azure2024_timestamps(tmp_path):
    path = tmp_path / "az24.csv"
    path.write_text(AZ24)
    assert detect_format(path) == "azure2024"
    read = read_trace(path)
    assert read.format == "azure2024" and read.skipped_zero == 1 and read.rows == 5
    r = read.requests
    # 02:00:00.5+02:00 is 00:00:00.5 UTC; the two equal stamps keep file order
    assert r["prompt_tokens"].tolist() == [2162, 1175, 7, 9]
    np.testing.assert_allclose(r["arrival_s"], [0.0, 0.006685, 0.006685, 0.49007], atol=1e-12)
    rows, zero = ref.ref_read_csv(path, "TIMESTAMP", "ContextTokens", "GeneratedTokens", "datetime")
    check_against(read, rows)


def test_plain_csv_with_columns(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_bytes(b'\xef\xbb\xbfid,"when ms",in,out,comment\r\n'
                     b'a,1500,10,3,"hello, world"\r\n'
                     b'\r\n'
                     b'b,500,"20",4,x\r\n'
                     b'c,2500.0,30,5.0,\r\n')
    with pytest.raises(TraceError, match="cannot tell the trace format"):
        detect_format(path)
    with pytest.raises(TraceError, match="needs columns"):
        read_trace(path, "csv")
    read = read_trace(path, "csv", columns="arrival=when ms,prompt=in,output=out", arrival_unit="ms")
    assert read.requests.tolist() == [(0.0, 20, 4), (1.0, 10, 3), (2.0, 30, 5)]
    rows, _ = ref.ref_read_csv(path, "when ms", "in", "out", "ms")
    check_against(read, rows)
    with pytest.raises(TraceError, match="no column 'nope'"):
        read_trace(path, "csv", columns={"arrival": "nope", "prompt": "in", "output": "out"})
    with pytest.raises(TraceError, match="apply to format csv only"):
        read_trace(path, "burstgpt", arrival_unit="ms")


def test_plain_csv_datetime_unit(tmp_path):
    path = tmp_path / "dt.csv"
    path.write_text("t,p,o\n2024-02-29T23:59:59Z,1,1\n2024-03-01 00:00:01.25,2,2\n")
    read = read_trace(path, "csv", columns="arrival=t,prompt=p,output=o", arrival_unit="datetime")
    assert read.requests["arrival_s"].tolist() == [0.0, 2.25]


def test_parse_columns_errors():
    assert parse_columns("arrival=a, prompt=b ,output=c") == {"arrival": "a", "prompt": "b", "output": "c"}
    for bad in ("arrival=a,prompt=b", "arrival=a,prompt=b,output=c,arrival=d", "time=a,prompt=b,output=c", "x"):
        with pytest.raises(TraceError):
            parse_columns(bad)


def test_detect_unknown_and_missing(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "absent.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(TraceError, match="empty"):
        read_trace(empty)
    js = tmp_path / "other.jsonl"
    js.write_text('{"a": 1}\n')
    with pytest.raises(TraceError, match="Mooncake keys"):
        read_trace(js)
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(js, "parquet")


# -- malformed rows ---------------------------------------------------------------------------------

def test_bad_csv_row_names_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:17:03.9799600,10,2\n"
                    "\n"
                    "2023-11-16 18:17:04.0000000,ten,2\n"
                    "2023-13-16 18:17:04.0000000,10,2\n"
                    "2023-11-16 18:17:05.0000000,10\n"
                    "2023-11-16 18:17:06.0000000,10,-1\n"
                    "2023-11-16 18:17:07.0000000,5,5")
    with pytest.raises(TraceError) as e:
        read_trace(path)
    msg = str(e.value)
    assert f"{path}:4:" in msg and "prompt token count" in msg and "ten" in msg and "skip" in msg
    read = read_trace(path, skip_bad_rows=True)
    assert (read.skipped_bad, read.bad_lines, read.rows) == (4, (4, 5, 6, 7), 6)
    assert read.requests["prompt_tokens"].tolist() == [10, 5]
    np.testing.assert_allclose(read.requests["arrival_s"], [0.0, 3.02004], atol=1e-12)


@pytest.mark.parametrize("line, why", [
    ("2023-11-16 18:17:04.00,10", "too few fields"),
    ("2023-02-29 18:17:04.00,10,1", "timestamp"),
    ("2023-11-16 24:00:00,10,1", "timestamp"),
    ("2023-11-16 18:17:04.,10,1", "timestamp"),
    ("2023-11-16 18:17:04+1:00,10,1", "timestamp"),
    ("2023-11-16 18:17:04,10,1.5", "output token count"),
])
def test_bad_azure_rows(tmp_path, line, why):
    path = tmp_path / "bad.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,1\n{line}\n")
    with pytest.raises(TraceError, match=why) as e:
        read_trace(path, "azure2023")
    assert f"{path}:3:" in str(e.value)


def test_bad_jsonl_rows(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1, [2, 3], {"x": "]"}]}',
        '{"timestamp": 10, "input_length": 5}',
        'not json',
        '{"timestamp": "x", "input_length": 5, "output_length": 2}',
        '{"note": "a \\" quote", "output_length": 7, "input_length": 6, "timestamp": 2.5e1}',
        '{"timestamp": 30, "input_length": 5, "output_length": 2',
    ]
    path.write_text("\n".join(lines) + "\n\n")
    with pytest.raises(TraceError, match=r":2: the object lacks one of the keys"):
        read_trace(path, "mooncake")
    read = read_trace(path, "mooncake", skip_bad_rows=True)
    assert (read.skipped_bad, read.bad_lines) == (4, (2, 3, 4, 6))
    assert read.requests.tolist() == [(0.0, 5, 2), (0.025, 6, 7)]


def test_many_bad_rows_count_past_the_listed_lines(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens\n" + "x,m,1,1\n" * 50 + "3,m,1,1\n")
    read = read_trace(path, skip_bad_rows=True)
    assert read.skipped_bad == 50 and len(read.bad_lines) == 20 and read.requests.shape[0] == 1


# -- kernels against references ----------------------------------------------------------------------

def _ns_kernel(text):
    from specsim.traces._parse_kernels import parse_datetime_nb

    b = np.frombuffer(text.encode(), dtype=np.uint8)
    return parse_datetime_nb(b, 0, b.shape[0])


@settings(max_examples=150, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 12, 31)),
       st.integers(0, 12), st.sampled_from(["", "Z", "+00:00", "-05:30", "+0130"]), st.sampled_from([" ", "T"]))
def test_datetime_kernel_matches_reference(moment, frac_digits, tz, sep):
    frac = f"{moment.microsecond:06d}{moment.second:02d}1234"[:frac_digits]
    text = moment.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + ("." + frac if frac_digits else "") + tz
    ok, ns = _ns_kernel(text)
    assert ok and ns == ref.ref_datetime_ns(text)


@pytest.mark.parametrize("text", ["", "2023-11-16", "2023-11-16 18:17:03.", "2023-00-01 00:00:00", "2023-04-31 00:00:00",
                                  "2023-11-16 18:60:03", "2023-11-16 18:17:03 ", "2023-11-16X18:17:03",
                                  "2023-11-16 18:17:03+24:00", "2023-11-16 18:17:03+05"])
def test_datetime_kernel_refuses(text):
    assert not _ns_kernel(text)[0]


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.floats(min_value=-1e15, max_value=1e15).filter(lambda x: x == 0 or abs(x) >= 1e-5),
                 st.integers(-(2**53), 2**53)))
def test_number_kernel_matches_float(value):
    from specsim.traces._parse_kernels import parse_number_nb

    text = repr(value)
    b = np.frombuffer(text.encode(), dtype=np.uint8)
    ok, got = parse_number_nb(b, 0, b.shape[0])
    assert ok
    if isinstance(value, int):
        assert got == float(value)
    else:
        # two roundings at most (18-digit mantissa to float, then an exact power of ten)
        assert got == pytest.approx(float(text), rel=4.5e-16, abs=1e-300)


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=-1e300, max_value=1e300).filter(lambda x: x == 0 or abs(x) >= 1e-290))
def test_number_kernel_wide_range(value):
    from specsim.traces._parse_kernels import parse_number_nb

    text = repr(value)
    b = np.frombuffer(text.encode(), dtype=np.uint8)
    ok, got = parse_number_nb(b, 0, b.shape[0])
    assert ok
    assert got == pytest.approx(value, rel=1e-13)


@pytest.mark.parametrize("text", ["", "-", ".", "1e", "1.2.3", "nan", "inf", "0x10", "1 2", "1e999"])
def test_number_kernel_refuses(text):
    from specsim.traces._parse_kernels import parse_number_nb

    b = np.frombuffer(text.encode(), dtype=np.uint8)
    assert not parse_number_nb(b, 0, b.shape[0])[0]


# -- options --------------------------------------------------------------------------------------

def _trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens\n"
                    + "".join(f"{t},m,{i + 1},{i + 2}\n" for i, t in enumerate([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])))
    return path


def test_rate_scale_limit_window(tmp_path):
    path = _trace(tmp_path)
    assert read_trace(path, rate_scale=2).requests["arrival_s"].tolist() == [t / 2 for t in range(10)]
    lim = read_trace(path, limit=3)
    assert lim.requests["prompt_tokens"].tolist() == [1, 2, 3] and lim.dropped == 7
    win = read_trace(path, window=(2.5, 6))
    assert win.requests["arrival_s"].tolist() == [0.5, 1.5, 2.5] and win.dropped == 7
    assert win.requests["prompt_tokens"].tolist() == [4, 5, 6]
    both = read_trace(path, window=(2, None), limit=2, rate_scale=4)
    assert both.requests["arrival_s"].tolist() == [0.0, 0.25]
    assert read_trace(path, limit=0).requests.shape == (0,)
    for bad in ({"rate_scale": 0}, {"rate_scale": float("nan")}, {"limit": -1}, {"limit": 1.5},
                {"window": (5, 5)}, {"window": (-1, 3)}, {"window": "x"}):
        with pytest.raises(TraceError):
            read_trace(path, **bad)


# -- synthetic ------------------------------------------------------------------------------------------

def test_synthetic_is_seeded_and_reproducible():
    a = synthetic_trace(2000, 4.0, seed=7)
    b = synthetic_trace(2000, 4.0, seed=7)
    c = synthetic_trace(2000, 4.0, seed=8)
    assert np.array_equal(a.requests, b.requests)
    assert not np.array_equal(a.requests, c.requests)
    assert a.requests.dtype == REQUEST_DT and a.format == "synthetic" and a.requests["arrival_s"][0] == 0.0
    assert (a.requests["prompt_tokens"] >= 1).all() and (a.requests["output_tokens"] >= 1).all()


@pytest.mark.parametrize("arrival, cv", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 3.0)])
def test_synthetic_rate_and_burstiness(arrival, cv):
    read = synthetic_trace(40000, 8.0, arrival=arrival, cv=cv, seed=1)
    gaps = np.diff(read.requests["arrival_s"])
    assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_synthetic_lengths():
    read = synthetic_trace(20000, 1.0, prompt=LogNormalLengths(300, 0.5), output=EmpiricalLengths([3, 7, 11]), seed=2)
    assert np.median(read.requests["prompt_tokens"]) == pytest.approx(300, rel=0.05)
    assert set(read.requests["output_tokens"].tolist()) == {3, 7, 11}
    capped = synthetic_trace(100, 1.0, prompt=LogNormalLengths(1000, 2.0, max_tokens=50), seed=3)
    assert capped.requests["prompt_tokens"].max() <= 50
    scaled = synthetic_trace(100, 1.0, seed=3, rate_scale=2, limit=10)
    base = synthetic_trace(100, 1.0, seed=3)
    assert np.array_equal(scaled.requests["arrival_s"], base.requests["arrival_s"][:10] / 2)


def test_synthetic_refusals():
    for kwargs in ({"requests": -1, "rate_per_s": 1}, {"requests": 10, "rate_per_s": 0},
                   {"requests": 10, "rate_per_s": 1, "arrival": "weibull"},
                   {"requests": 10, "rate_per_s": 1, "cv": 2.0}, {"requests": 10, "rate_per_s": 1, "seed": -1}):
        with pytest.raises(TraceError):
            synthetic_trace(**kwargs)
    for bad in (lambda: LogNormalLengths(0, 1), lambda: LogNormalLengths(10, -1), lambda: EmpiricalLengths([]),
                lambda: EmpiricalLengths([0, 3])):
        with pytest.raises(TraceError):
            bad()


def test_parse_synthetic(shared_data):
    src = read_trace(shared_data / AZURE_CONV)
    kw = parse_synthetic("requests=500,rate=2.5,arrival=gamma,cv=2,prompt=lognormal:400:0.8,output=empirical,seed=4", src)
    assert kw["requests"] == 500 and kw["rate_per_s"] == 2.5 and kw["cv"] == 2.0 and kw["seed"] == 4
    out = synthetic_trace(**kw).requests["output_tokens"]
    assert set(out.tolist()) <= set(src.requests["output_tokens"].tolist())
    for bad in ("rate=1", "requests=1,rate=1,speed=3", "requests=1,rate=1,prompt=normal:1:2", "requests=x,rate=1"):
        with pytest.raises(TraceError):
            parse_synthetic(bad, src)
    with pytest.raises(TraceError, match="resample"):
        parse_synthetic("requests=1,rate=1,output=empirical")


# -- CLI ----------------------------------------------------------------------------------------------

def test_cli_trace_show(shared_data, capsys, tmp_path):
    from specsim.cli import main

    assert main(["trace", "show", str(shared_data / BURSTGPT), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["requests"], out["skipped_zero_token"], out["format"]) == (383, 17, "burstgpt")
    assert main(["trace", "show", "--format", "synthetic", "--synthetic", "requests=50,rate=2", "--limit", "10"]) == 0
    assert "10 requests" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("Timestamp,Model,Request tokens,Response tokens\n1,m,x,1\n2,m,1,1\n")
    assert main(["trace", "show", str(bad)]) == 2
    assert f"{bad}:2:" in capsys.readouterr().err
    assert main(["trace", "show", str(bad), "--skip-bad-rows", "--window", "0:"]) == 0
    assert "first bad lines: 2" in capsys.readouterr().out
    assert main(["trace", "show", str(bad), "--window", "zero:1"]) == 2


# -- whole readers against the references on random files ---------------------------------------

_rows = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000), st.integers(0, 900)), max_size=30)


@settings(max_examples=40, deadline=None)
@given(_rows, st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_csv_reader_matches_reference(tmp_path_factory, rows, newline, quoted):
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    q = '"' if quoted else ""
    body = "".join(f'{t},"GPT, 4",{q}{p}{q},{o},{p + o},log{newline}' for t, p, o in rows)
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type" + newline + body,
                    newline="")
    read = read_trace(path, "burstgpt")
    want, zero = ref.ref_read_csv(path, "Timestamp", "Request tokens", "Response tokens", "s")
    assert (read.rows, read.skipped_zero) == (len(rows), zero)
    check_against(read, want)


_junk = st.recursive(st.one_of(st.integers(), st.text(alphabet='ab{}[]",:\\ ', max_size=6), st.none()),
                     lambda inner: st.one_of(st.lists(inner, max_size=3),
                                             st.dictionaries(st.text(alphabet="xyz", max_size=3), inner, max_size=3)),
                     max_leaves=6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 10**5), st.integers(0, 10**4), _junk,
                          st.booleans()), max_size=20))
def test_jsonl_reader_matches_reference(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("jsonl") / "t.jsonl"
    lines = []
    for t, p, o, junk, junk_first in rows:
        obj = {"hash_ids": junk} if junk_first else {}
        obj.update({"timestamp": t, "input_length": p, "output_length": o})
        if not junk_first:
            obj["hash_ids"] = junk
        lines.append(json.dumps(obj))
    path.write_text("".join(line + "\n" for line in lines))
    read = read_trace(path, "mooncake")
    want, zero = ref.ref_read_mooncake(path)
    assert (read.rows, read.skipped_zero) == (len(rows), zero)
    check_against(read, want)


@pytest.mark.parametrize("fmt", [None, "azure2023", "burstgpt", "mooncake", "csv"])
def test_utf16_binary_and_broken_headers_are_refused_in_plain_words(tmp_path, fmt):
    """A UTF-16 trace was refused as a garbage header ('\\x00a\\x00r...'); a binary one given a
    format raised a bare csv.Error with a traceback."""
    from specsim.errors import TraceError

    utf16 = tmp_path / "t16.csv"
    utf16.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,10,5\n", encoding="utf-16")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x93\r\x00\x17" * 50)
    crs = tmp_path / "cr.csv"
    crs.write_bytes(b"TIMESTAMP,ContextTokens\rGeneratedTokens\n2023-11-16 18:15:46.6805900,10,5\n")
    kw = {"columns": "arrival=a,prompt=b,output=c"} if fmt == "csv" else {}
    with pytest.raises(TraceError, match="UTF-16 .*save it as UTF-8"):
        read_trace(utf16, fmt, **kw)
    with pytest.raises(TraceError, match="NUL byte at offset 2: a binary file"):
        read_trace(binary, fmt, **kw)
    if fmt in ("azure2023", "burstgpt", "csv"):
        with pytest.raises(TraceError, match="cr.csv:1: the header is not one CSV line"):
            read_trace(crs, fmt, **kw)


def test_a_synthetic_key_given_twice_is_refused():
    """``rate=1,rate=2`` kept the last rate silently."""
    from specsim.traces.synthetic import parse_synthetic

    with pytest.raises(TraceError, match=r"rate= is given twice \(rate=1 and rate=2\)"):
        parse_synthetic("requests=10,rate=1,rate=2")
    assert parse_synthetic("requests=10,rate=2")["rate_per_s"] == 2.0
