//! The depth planner's `sequence_depths` (docs/planner.md, "After drafting") as a Rust serve
//! writes it: a `Vec` per call for the caps, the depths, the extra rows and the costs at the
//! batch's width; a stable comparison sort of the extra rows; the table read by linear
//! interpolation in width; every prefix scanned with the exact cost arithmetic.
//!
//! All arithmetic is float64 in the order docs/planner.md writes it (ratios as tokens / ms,
//! interpolation as `a + (b - a) * f`, running products and sums left to right), so its answers
//! equal specsim's bit for bit. Nothing here is tuned: it is the yardstick specsim's planner is
//! timed against (benchmarks/rust_reference.py).

use std::cmp::Ordering;

/// The four costs of a cell, in the table's order.
pub const VERIFY_MS: usize = 0;
pub const VERIFY_J: usize = 1;
pub const DRAFT_MS: usize = 2;
pub const DRAFT_J: usize = 3;

/// A cost table: measured widths (ascending) and, per width and depth `0..=max_k`, four costs.
pub struct Table {
    pub widths: Vec<i64>,
    /// `cells[w * (max_k + 1) + k]`.
    pub cells: Vec<[f64; 4]>,
    pub depths: usize,
}

impl Table {
    pub fn max_k(&self) -> usize {
        self.depths - 1
    }

    /// `cell(n, k)`: the costs at width `n`, linear in width between the measured widths around
    /// it, the nearest measured width outside them.
    pub fn cell(&self, n: i64, k: usize) -> [f64; 4] {
        let at = |w: usize| self.cells[w * self.depths + k];
        // First width >= n; the one before it is the last width < n.
        let b = self.widths.partition_point(|&w| w < n);
        if b == self.widths.len() {
            return at(b - 1);
        }
        if self.widths[b] == n || b == 0 {
            return at(b);
        }
        let a = b - 1;
        let t = (n - self.widths[a]) as f64 / (self.widths[b] - self.widths[a]) as f64;
        let (p, q) = (at(a), at(b));
        let mut out = [0.0; 4];
        for f in 0..4 {
            out[f] = p[f] + (q[f] - p[f]) * t;
        }
        out
    }
}

/// An acceptance calibration: confidence bucket edges (ascending, float32), the acceptance
/// probability of each bucket, and the position priors.
pub struct Calibration {
    pub edges: Vec<f32>,
    pub p_accept: Vec<f64>,
    pub priors: Vec<f64>,
}

impl Calibration {
    /// The prior of 1-based position `j` (the last fitted one past the fitted positions).
    pub fn prior(&self, j: usize) -> f64 {
        self.priors[(j - 1).min(self.priors.len() - 1)]
    }

    /// P(accept) of 1-based draft `j` given a sequence's real confidences: its bucket's
    /// probability (the first edge at or above it, else the last bucket), the prior when the
    /// confidence is absent or NaN.
    pub fn p(&self, confidences: &[f32], j: usize) -> f64 {
        match confidences.get(j - 1) {
            Some(&lp) if !lp.is_nan() => {
                let b = self.edges.partition_point(|&e| e < lp);
                self.p_accept[b.min(self.edges.len() - 1)]
            }
            _ => self.prior(j),
        }
    }
}

/// One sequence of the batch after drafting.
pub struct Sequence {
    /// Top-1 log-probabilities of its drafts, as many as were measured.
    pub confidences: Vec<f32>,
    /// How many drafts it has.
    pub known_drafts: usize,
}

struct Extra {
    gain: f64,
    sequence: usize,
}

/// How many of each sequence's drafts to verify (docs/planner.md).
pub fn sequence_depths(
    table: &Table,
    cal: &Calibration,
    batch: &[Sequence],
    k_max: usize,
    row_budget: usize,
    slack: f64,
) -> Vec<usize> {
    let n = batch.len();
    let max_k = table.max_k();
    let k_max = k_max.min(max_k);
    let caps: Vec<usize> = batch.iter().map(|s| s.known_drafts.min(k_max)).collect();
    let mut depths: Vec<usize> = caps.iter().map(|&c| c.min(1)).collect();
    let base_rows: usize = depths.iter().sum();
    if n == 0 || base_rows > row_budget {
        return vec![0; n];
    }

    let mut base_tokens = n as f64;
    for (i, s) in batch.iter().enumerate() {
        if depths[i] == 1 {
            base_tokens += cal.p(&s.confidences, 1);
        }
    }
    let mut extras = Vec::new();
    for (i, s) in batch.iter().enumerate() {
        if depths[i] < 1 {
            continue;
        }
        let mut run = cal.p(&s.confidences, 1);
        for j in 2..=caps[i] {
            run *= cal.p(&s.confidences, j);
            extras.push(Extra { gain: run, sequence: i });
        }
    }
    // Descending, stable: equal gains keep sequence order, then depth order.
    extras.sort_by(|a, b| b.gain.partial_cmp(&a.gain).unwrap_or(Ordering::Equal));

    let width = n as i64;
    let at_width: Vec<[f64; 4]> = (0..=max_k).map(|k| table.cell(width, k)).collect();
    let sunk = at_width[k_max];
    // Verify cost of `rows` rows, interpolated between the integer depths around rows / n, plus
    // the draft cost of depth k_max (already spent).
    let cost = |rows: usize, field: usize| -> f64 {
        let depth = rows as f64 / n as f64;
        let lo = depth.floor();
        let hi = depth.ceil();
        let f = depth - lo;
        let lo = (lo as usize).min(max_k);
        let hi = (hi as usize).min(max_k);
        let v = at_width[lo][field] + (at_width[hi][field] - at_width[lo][field]) * f;
        v + sunk[field + 2]
    };

    let reference = base_tokens / cost(base_rows, VERIFY_MS);
    let floor = (1.0 - slack) * reference;
    let mut best_take = 0;
    let mut best = base_tokens / cost(base_rows, VERIFY_J);
    let mut tokens = base_tokens;
    let take_max = (row_budget - base_rows).min(extras.len());
    for take in 1..=take_max {
        tokens += extras[take - 1].gain;
        let rows = base_rows + take;
        if tokens / cost(rows, VERIFY_MS) < floor {
            continue;
        }
        let eff = tokens / cost(rows, VERIFY_J);
        if eff > best {
            best_take = take;
            best = eff;
        }
    }
    for e in &extras[..best_take] {
        depths[e.sequence] += 1;
    }
    depths
}
