//! `bench TABLE CAL BATCH [SAMPLES]`: reads the three files benchmarks/rust_reference.py writes,
//! times `sequence_depths` on the batch (the median of SAMPLES timed samples after a warm-up, in
//! ns per call; default 2001) and prints the depths it chose and the time. With SAMPLES 0 it
//! prints the depths only.
//!
//! Each file is a list of named arrays, `NAME COUNT VALUE...`, separated by whitespace, with
//! floats written so they read back exactly (`nan` for NaN).
//! - table: `widths W ...`, `depths 1 K+1`, `cells W*(K+1)*4 ...` (width-major, then depth, then
//!   verify_ms verify_j draft_ms draft_j);
//! - calibration: `edges B ...`, `p_accept B ...`, `priors P ...`;
//! - batch: `k_max 1 K`, `row_budget 1 R`, `slack 1 S`, `known N ...`, `n_conf N ...`,
//!   `confidences SUM(n_conf) ...` (each sequence's real confidences, one after another).

use planner_reference::{sequence_depths, Calibration, Sequence, Table};
use std::collections::HashMap;
use std::hint::black_box;
use std::process::exit;
use std::time::Instant;

fn fail(msg: String) -> ! {
    eprintln!("bench: {msg}");
    exit(2)
}

fn read_arrays(path: &str) -> HashMap<String, Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| fail(format!("{path}: {e}")));
    let mut tokens = text.split_whitespace();
    let mut arrays = HashMap::new();
    while let Some(name) = tokens.next() {
        let count: usize = tokens
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| fail(format!("{path}: `{name}` needs a count")));
        let values: Vec<String> = tokens.by_ref().take(count).map(str::to_owned).collect();
        if values.len() != count {
            fail(format!("{path}: `{name}` has {} of its {count} values", values.len()));
        }
        arrays.insert(name.to_owned(), values);
    }
    arrays
}

fn numbers<T: std::str::FromStr>(arrays: &HashMap<String, Vec<String>>, path: &str, name: &str) -> Vec<T> {
    let values = arrays.get(name).unwrap_or_else(|| fail(format!("{path}: no `{name}`")));
    values
        .iter()
        .map(|v| v.parse().unwrap_or_else(|_| fail(format!("{path}: `{name}` value `{v}` is not a number"))))
        .collect()
}

fn scalar<T: std::str::FromStr + Copy>(arrays: &HashMap<String, Vec<String>>, path: &str, name: &str) -> T {
    let v: Vec<T> = numbers(arrays, path, name);
    if v.len() != 1 {
        fail(format!("{path}: `{name}` is one number"));
    }
    v[0]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 || args.len() > 5 {
        fail("usage: bench TABLE CAL BATCH [SAMPLES]".to_owned());
    }
    let (tp, cp, bp) = (&args[1], &args[2], &args[3]);
    let samples: usize = match args.get(4) {
        Some(c) => c.parse().unwrap_or_else(|_| fail(format!("SAMPLES `{c}` is not a whole number"))),
        None => 2001,
    };

    let t = read_arrays(tp);
    let depths: usize = scalar(&t, tp, "depths");
    let flat: Vec<f64> = numbers(&t, tp, "cells");
    let table = Table {
        widths: numbers(&t, tp, "widths"),
        cells: flat.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect(),
        depths,
    };
    if depths == 0 || table.widths.is_empty() || table.cells.len() != table.widths.len() * depths {
        fail(format!("{tp}: `cells` does not hold widths x depths cells"));
    }
    let c = read_arrays(cp);
    let edges: Vec<f64> = numbers(&c, cp, "edges");
    let cal = Calibration {
        edges: edges.iter().map(|&e| e as f32).collect(),
        p_accept: numbers(&c, cp, "p_accept"),
        priors: numbers(&c, cp, "priors"),
    };
    let b = read_arrays(bp);
    let k_max: usize = scalar(&b, bp, "k_max");
    let row_budget: usize = scalar(&b, bp, "row_budget");
    let slack: f64 = scalar(&b, bp, "slack");
    let known: Vec<usize> = numbers(&b, bp, "known");
    let n_conf: Vec<usize> = numbers(&b, bp, "n_conf");
    let conf: Vec<f64> = numbers(&b, bp, "confidences");
    if n_conf.len() != known.len() || n_conf.iter().sum::<usize>() != conf.len() {
        fail(format!("{bp}: `known`, `n_conf` and `confidences` do not agree"));
    }
    let mut start = 0;
    let batch: Vec<Sequence> = known
        .iter()
        .zip(&n_conf)
        .map(|(&k, &m)| {
            let s =
                Sequence { confidences: conf[start..start + m].iter().map(|&x| x as f32).collect(), known_drafts: k };
            start += m;
            s
        })
        .collect();

    let call = || sequence_depths(black_box(&table), black_box(&cal), black_box(&batch), k_max, row_budget, slack);
    let chosen = call();
    let text: Vec<String> = chosen.iter().map(|d| d.to_string()).collect();
    println!("depths {} {}", chosen.len(), text.join(" "));
    if samples == 0 {
        return;
    }
    // Warm up, then size a sample to at least 20 us so the clock's own cost is diluted.
    let warm = Instant::now();
    let mut warm_calls = 0u64;
    while warm.elapsed().as_secs_f64() < 0.05 || warm_calls < 10 {
        black_box(call());
        warm_calls += 1;
    }
    let per_call = warm.elapsed().as_secs_f64() / warm_calls as f64;
    let calls = ((20e-6 / per_call).ceil() as usize).max(1);
    let mut ns: Vec<f64> = (0..samples)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..calls {
                black_box(call());
            }
            t0.elapsed().as_nanos() as f64 / calls as f64
        })
        .collect();
    ns.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = ns[ns.len() / 2];

    println!("ns_per_call {median:.1}");
    println!("samples {} calls_per_sample {calls}", ns.len());
}
