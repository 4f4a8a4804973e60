//! A strict reader of the Prometheus text exposition format (0.0.4), for tests of `/metrics`:
//! every line must parse (names, label escapes, values), a family's `# TYPE` comes once and
//! before its samples, a family's samples are contiguous, and a histogram's buckets carry `le`,
//! rise with it and end in `+Inf` equal to its `_count`. And a scrape over plain HTTP/1.1.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::SocketAddr,
    time::Duration,
};

use crate::raw_http::RawConnection;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition.
#[derive(Debug, Default)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    /// Family name → its `# TYPE`.
    pub types: HashMap<String, String>,
}

impl Exposition {
    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn find<'a>(&'a self, name: &'a str, labels: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |sample| {
            sample.name == name && labels.iter().all(|(k, v)| sample.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The sum of the samples [`Exposition::find`] finds.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels).map(|sample| sample.value).sum()
    }

    /// Every family name with samples.
    pub fn families(&self) -> HashSet<String> {
        self.samples.iter().map(|sample| family_of(&sample.name, &self.types).to_owned()).collect()
    }
}

/// `GET /metrics` on `addr`: the status and body.
pub async fn scrape(addr: SocketAddr) -> (u16, String) {
    get(addr, "/metrics").await
}

/// A `GET` of `path` on `addr` over a fresh connection: the status and body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut connection = RawConnection::connect(addr).await;
    connection.send_get(path, &addr.to_string()).await;
    let (status, body) = connection.response(Duration::from_secs(10)).await.expect("an HTTP response within 10 s");
    (status, String::from_utf8(body).expect("a UTF-8 body"))
}

/// Parses `text` strictly (see the module); the error names the line.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut exposition = Exposition::default();
    let mut finished: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut helped: HashSet<String> = HashSet::new();
    for (index, line) in text.lines().enumerate() {
        let at = |message: String| format!("line {}: {message}: {line:?}", index + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    check_metric_name(name).map_err(at)?;
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(at(format!("unknown type {kind}")));
                    }
                    if exposition.types.insert(name.to_owned(), kind.to_owned()).is_some() {
                        return Err(at(format!("second TYPE for {name}")));
                    }
                    if exposition.samples.iter().any(|s| family_of(&s.name, &exposition.types) == name) {
                        return Err(at(format!("TYPE for {name} after its samples")));
                    }
                }
                (Some("HELP"), Some(name), _) => {
                    check_metric_name(name).map_err(at)?;
                    if !helped.insert(name.to_owned()) {
                        return Err(at(format!("second HELP for {name}")));
                    }
                }
                _ => {}
            }
            continue;
        }
        let sample = parse_sample(line).map_err(at)?;
        let family = family_of(&sample.name, &exposition.types).to_owned();
        if current.as_deref() != Some(family.as_str()) {
            if finished.contains(&family) {
                return Err(at(format!("samples of {family} are not contiguous")));
            }
            if let Some(previous) = current.replace(family.clone()) {
                finished.insert(previous);
            }
        }
        exposition.samples.push(sample);
    }
    check_histograms(&exposition)?;
    Ok(exposition)
}

/// The family a sample belongs to: its name, or a histogram's without its suffix.
fn family_of<'a>(name: &'a str, types: &HashMap<String, String>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types.get(base).is_some_and(|kind| kind == "histogram" || kind == "summary")
        {
            return base;
        }
    }
    name
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.starts_with("__") {
        Ok(())
    } else {
        Err(format!("bad label name {name:?}"))
    }
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text.parse::<f64>().map_err(|_| format!("bad value {text:?}")),
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let end;
        loop {
            // A label name up to '=', or the closing brace.
            let start = match chars.peek() {
                Some((_, '}')) => {
                    end = chars.next().map(|(i, _)| i).ok_or("unclosed labels")?;
                    break;
                }
                Some((i, _)) => *i,
                None => return Err("unclosed labels".into()),
            };
            let eq = after[start..].find('=').ok_or("label without =")? + start;
            let key = &after[start..eq];
            check_label_name(key)?;
            while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {key} value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")? {
                    (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        other => return Err(format!("bad escape \\{other}")),
                    },
                    (_, '"') => break,
                    (_, '\n') => return Err("newline in a label value".into()),
                    (_, c) => value.push(c),
                }
            }
            if labels.insert(key.to_owned(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            match chars.peek() {
                Some((_, ',')) => {
                    chars.next();
                }
                Some((_, '}')) => {}
                _ => return Err("expected , or } after a label".into()),
            }
        }
        rest = &after[end + 1..];
    }
    let mut fields = rest.split(' ').filter(|f| !f.is_empty());
    let value = parse_value(fields.next().ok_or("no value")?)?;
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().map_err(|_| format!("bad timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample { name: name.to_owned(), labels, value })
}

/// Each histogram series: `le` on every bucket, counts rising with it, `+Inf` last and equal
/// to `_count`.
fn check_histograms(exposition: &Exposition) -> Result<(), String> {
    for (family, kind) in &exposition.types {
        if kind != "histogram" {
            continue;
        }
        let bucket_name = format!("{family}_bucket");
        // One series per label set (without `le`): its buckets as (le, cumulative count).
        type Labels = Vec<(String, String)>;
        let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
        for sample in exposition.samples.iter().filter(|s| s.name == bucket_name) {
            let le = sample.labels.get("le").ok_or_else(|| format!("{bucket_name} without le"))?;
            let le = parse_value(le)?;
            let key = sample.labels.iter().filter(|(k, _)| *k != "le").map(|(k, v)| (k.clone(), v.clone())).collect();
            series.entry(key).or_default().push((le, sample.value));
        }
        for (labels, buckets) in series {
            let rising = buckets.windows(2).all(|pair| pair[0].0 < pair[1].0 && pair[0].1 <= pair[1].1);
            if !rising {
                return Err(format!("{family}{labels:?}: buckets not rising: {buckets:?}"));
            }
            let last = buckets.last().ok_or("no buckets")?;
            if last.0 != f64::INFINITY {
                return Err(format!("{family}{labels:?}: no +Inf bucket"));
            }
            let count = exposition
                .samples
                .iter()
                .find(|s| {
                    s.name == format!("{family}_count")
                        && s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>() == labels
                })
                .ok_or_else(|| format!("{family}{labels:?}: no _count"))?;
            if count.value != last.1 {
                return Err(format!("{family}{labels:?}: +Inf bucket {} but _count {}", last.1, count.value));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_exposition_parses() {
        let text = "# HELP a_total Things\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\\n\",y=\"\"} 3\n\
                    # TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3.5\nh_count 2\n";
        let parsed = parse(text).unwrap();
        assert_eq!(parsed.sum("a_total", &[("x", "q\"\\\n")]), 3.0);
        assert_eq!(parsed.types["h"], "histogram");
    }

    #[test]
    fn malformed_expositions_are_refused() {
        for bad in [
            "a b c d\n",
            "9a 1\n",
            "a{x=\"unterminated} 1\n",
            "a{x=\"bad\\t\"} 1\n",
            "a{x=unquoted} 1\n",
            "a one\n",
            "# TYPE a counter\n# TYPE a counter\na 1\n",
            "a 1\nb 1\na 2\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",
            "# TYPE h histogram\nh_bucket 1\n",
        ] {
            assert!(parse(bad).is_err(), "accepted: {bad:?}");
        }
    }
}
