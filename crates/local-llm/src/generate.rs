//! The decoding loop: sampling, stop strings, incremental text.

use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::{
    forward::{Logits, Session},
    tokenizer::{ChatTokenizer, Utf8Stream},
};

/// What to generate: how much, how to pick tokens, where to stop.
#[derive(Debug, Clone, Default)]
pub struct Limits<'a> {
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Strings that end the answer (not included in it).
    pub stops: &'a [String],
}

#[derive(Debug, Clone, Default)]
pub struct Sampling {
    /// 0 or `None`: greedy.
    pub temperature: Option<f64>,
    /// Seeds the sampler (only used with a temperature); `None` draws a seed.
    pub seed: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// `<|im_end|>`, another control token, or a stop string.
    Stop,
    /// The token budget (or the context) ran out.
    Length,
    /// The caller asked to stop (its stream was dropped).
    Cancelled,
}

#[derive(Debug, Clone)]
pub struct Generated {
    pub text: String,
    pub tokens: usize,
    pub finish: Finish,
}

/// Picks the next token.
pub struct Sampler {
    temperature: f32,
    rng: StdRng,
}

impl Sampler {
    pub fn new(sampling: &Sampling) -> Self {
        let temperature = sampling.temperature.unwrap_or(0.0).max(0.0) as f32;
        let rng = match sampling.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::seed_from_u64(rand::rng().random()),
        };
        Self { temperature, rng }
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.temperature <= 0.0 {
            return argmax(logits);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let weights: Vec<f32> = logits.iter().map(|l| ((l - max) / self.temperature).exp()).collect();
        let total: f32 = weights.iter().sum();
        let mut target = self.rng.random::<f32>() * total;
        for (id, weight) in weights.iter().enumerate() {
            target -= weight;
            if target <= 0.0 {
                return id as u32;
            }
        }
        argmax(logits)
    }
}

pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// Holds back text that might be the start of a stop string, and finds stop strings that
/// span token boundaries.
struct StopMatcher<'a> {
    stops: &'a [String],
    /// All text so far.
    text: String,
    /// How much of `text` has been handed out.
    emitted: usize,
}

impl<'a> StopMatcher<'a> {
    fn new(stops: &'a [String]) -> Self {
        Self { stops, text: String::new(), emitted: 0 }
    }

    /// Adds text; returns what can be shown now and whether a stop string was reached (the
    /// text is then cut just before it).
    fn push(&mut self, piece: &str) -> (String, bool) {
        self.text.push_str(piece);
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let search_from = floor_char_boundary(&self.text, self.emitted.saturating_sub(longest));
        let found = self
            .stops
            .iter()
            .filter(|stop| !stop.is_empty())
            .filter_map(|stop| self.text[search_from..].find(stop.as_str()).map(|at| search_from + at))
            .min();
        if let Some(at) = found {
            self.text.truncate(at);
            let out = self.text[self.emitted.min(at)..].to_owned();
            self.emitted = self.text.len();
            return (out, true);
        }
        // Keep back the longest tail that is a prefix of some stop string.
        let mut safe = self.text.len();
        for stop in self.stops {
            for len in (1..stop.len().min(self.text.len() + 1)).rev() {
                if self.text.is_char_boundary(self.text.len() - len)
                    && stop.is_char_boundary(len)
                    && self.text.ends_with(&stop[..len])
                {
                    safe = safe.min(self.text.len() - len);
                    break;
                }
            }
        }
        let safe = safe.max(self.emitted);
        let out = self.text[self.emitted..safe].to_owned();
        self.emitted = safe;
        (out, false)
    }

    /// Everything not shown yet (no stop string came).
    fn flush(&mut self) -> String {
        let out = self.text[self.emitted..].to_owned();
        self.emitted = self.text.len();
        out
    }
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Runs `prompt` (after what `session` holds) and decodes up to `max_tokens` tokens,
/// calling `on_text` with each piece of text as it becomes final; `on_text` returning false
/// cancels. `keep_going` is also asked before every token (a dropped stream whose text is
/// held back by a stop-string prefix still stops promptly).
pub fn generate(
    session: &mut Session<'_>,
    tokenizer: &ChatTokenizer,
    prompt: &[u32],
    limits: &Limits<'_>,
    mut on_text: impl FnMut(&str) -> bool,
    keep_going: impl Fn() -> bool,
) -> Result<Generated, String> {
    let mut sampler = Sampler::new(&limits.sampling);
    let mut utf8 = Utf8Stream::default();
    let mut matcher = StopMatcher::new(limits.stops);
    let max_tokens = limits.max_tokens;
    let mut logits = session.forward(prompt, Logits::Last)?;
    let mut tokens = 0;
    let mut stopped_by_string = false;
    let finish = loop {
        if !keep_going() {
            break Finish::Cancelled;
        }
        if tokens >= max_tokens || session.len() >= session.max_len() {
            break Finish::Length;
        }
        let token = sampler.sample(&logits);
        tokens += 1;
        if token == tokenizer.eos() || tokenizer.is_special(token) {
            break Finish::Stop;
        }
        let piece = utf8.push(tokenizer.token_bytes(token));
        let (shown, stopped) = matcher.push(&piece);
        if !shown.is_empty() && !on_text(&shown) {
            break Finish::Cancelled;
        }
        if stopped {
            stopped_by_string = true;
            break Finish::Stop;
        }
        logits = session.forward(&[token], Logits::Last)?;
    };
    if finish != Finish::Cancelled && !stopped_by_string {
        let (shown, stopped) = matcher.push(&utf8.finish());
        let rest = if stopped { shown } else { shown + &matcher.flush() };
        if !rest.is_empty() {
            on_text(&rest);
        }
    }
    Ok(Generated { text: matcher.text, tokens, finish })
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool, String) {
        let stops: Vec<String> = stops.iter().map(|s| (*s).to_owned()).collect();
        let mut matcher = StopMatcher::new(&stops);
        let mut shown = Vec::new();
        for piece in pieces {
            let (out, stopped) = matcher.push(piece);
            shown.push(out);
            if stopped {
                return (shown, true, matcher.text);
            }
        }
        shown.push(matcher.flush());
        (shown, false, matcher.text)
    }

    #[test]
    fn stop_strings_across_pieces_are_cut_and_never_shown() {
        let (shown, stopped, text) = run(&["END"], &["Hello E", "N", "D more"]);
        assert!(stopped);
        assert_eq!(text, "Hello ");
        assert_eq!(shown.concat(), "Hello ");
        assert_eq!(shown[0], "Hello ", "the possible start of the stop string is held back");

        let (shown, stopped, _) = run(&["END"], &["Hello E", "x"]);
        assert!(!stopped);
        assert_eq!(shown.concat(), "Hello Ex");

        let (shown, stopped, text) = run(&["\n\n", "é!"], &["a\u{e9}", "!b"]);
        assert!(stopped);
        assert_eq!((shown.concat(), text), ("a".to_owned(), "a".to_owned()));
    }
}
