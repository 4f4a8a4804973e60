//! Scores from predictions: the confusion matrix, accuracy, per-class precision and recall,
//! and latency percentiles.

use serde_json::{Value, json};

/// Rows are the expected class, columns the predicted one.
#[derive(Debug, Clone)]
pub struct Confusion {
    names: &'static [&'static str],
    counts: Vec<Vec<u64>>,
}

impl Confusion {
    pub fn new(names: &'static [&'static str]) -> Self {
        Self { names, counts: vec![vec![0; names.len()]; names.len()] }
    }

    pub fn add(&mut self, expected: usize, predicted: usize) {
        if let Some(cell) = self.counts.get_mut(expected).and_then(|row| row.get_mut(predicted)) {
            *cell += 1;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().flatten().sum()
    }

    /// Correct over all; 0 with no cases.
    pub fn accuracy(&self) -> f64 {
        let correct: u64 = (0..self.names.len()).map(|class| self.counts[class][class]).sum();
        ratio(correct, self.total())
    }

    /// `{class: {precision, recall, support}}`; a class never predicted has precision 0.
    pub fn per_class(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (class, name) in self.names.iter().enumerate() {
            let hits = self.counts[class][class];
            let predicted: u64 = self.counts.iter().map(|row| row[class]).sum();
            let support: u64 = self.counts[class].iter().sum();
            out.insert(
                (*name).to_owned(),
                json!({
                    "precision": ratio(hits, predicted),
                    "recall": ratio(hits, support),
                    "support": support,
                }),
            );
        }
        Value::Object(out)
    }

    pub fn to_json(&self) -> Value {
        json!({ "labels": self.names, "rows_expected_columns_predicted": self.counts })
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

/// p50, p99 and mean of per-decision latencies in milliseconds (nearest-rank percentiles).
pub fn latency(mut millis: Vec<f64>) -> Value {
    if millis.is_empty() {
        return json!({ "p50": null, "p99": null, "mean": null, "decisions": 0 });
    }
    millis.sort_by(f64::total_cmp);
    let rank = |quantile: f64| {
        let index = ((quantile * millis.len() as f64).ceil() as usize).clamp(1, millis.len()) - 1;
        millis[index]
    };
    let mean = millis.iter().sum::<f64>() / millis.len() as f64;
    json!({ "p50": rank(0.50), "p99": rank(0.99), "mean": mean, "decisions": millis.len() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_follow_the_matrix() {
        let mut confusion = Confusion::new(&["direct", "tools"]);
        for (expected, predicted) in [(0, 0), (0, 0), (0, 1), (1, 1)] {
            confusion.add(expected, predicted);
        }
        confusion.add(5, 0); // out of range: ignored, not a panic
        assert_eq!(confusion.total(), 4);
        assert!((confusion.accuracy() - 0.75).abs() < 1e-9);
        let per = confusion.per_class();
        assert_eq!(per["tools"]["precision"], 0.5);
        assert_eq!(per["direct"]["recall"].as_f64().map(|r| (r * 3.0).round()), Some(2.0));
        let times = latency((1..=100).map(f64::from).collect());
        assert_eq!((times["p50"].as_f64(), times["p99"].as_f64()), (Some(50.0), Some(99.0)));
    }
}
