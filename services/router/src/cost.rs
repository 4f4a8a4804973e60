//! What a turn costs: the price table (`--model-prices`, USD per million tokens per model) and
//! every model call a turn made — the routing call, each agent step, each expert, the
//! synthesis — priced from the usage its vendor reported.
//!
//! Money is integer nano-dollars (10⁻⁹ USD): a call's cost is rounded to the nearest
//! nano-dollar once, and from there every sum (a turn's parts, a window's turns, in memory and
//! in Postgres) is exact, so both stores report the same figures to the last digit. Micro-dollars
//! would round a ten-token call of a cheap model to nothing; nano-dollars in an `i64` still hold
//! nine billion dollars.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    sync::Mutex,
};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use switchyard_llm::{ModelRef, Usage};

use crate::llm_chain::Answered;

/// The price table the router uses without `--model-prices`: the vendors' list prices for the
/// models the project names, and the local model at zero.
pub const DEFAULT_PRICES: &str = include_str!("../model-prices.toml");

pub const NANOS_PER_USD: f64 = 1e9;

const INPUT: &str = "input_per_mtok";
const OUTPUT: &str = "output_per_mtok";
const CACHED_INPUT: &str = "cached_input_per_mtok";
/// Above this a price is a typo, and tokens × price could overflow.
const MAX_PER_MTOK: f64 = 1_000_000.0;

/// One model's prices in pico-dollars per token (= micro-dollars per million tokens), exact for
/// prices given to six decimals of a dollar per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Price {
    input: u64,
    cached_input: u64,
    output: u64,
}

impl Price {
    /// Nano-dollars, rounded to the nearest.
    fn cost(&self, usage: &Usage) -> i64 {
        let cached = u128::from(usage.cached_prompt_tokens.min(usage.prompt_tokens));
        let uncached = u128::from(usage.uncached_prompt_tokens());
        let picos = uncached * u128::from(self.input)
            + cached * u128::from(self.cached_input)
            + u128::from(usage.completion_tokens) * u128::from(self.output);
        i64::try_from((picos + 500) / 1000).unwrap_or(i64::MAX)
    }
}

/// The price table, by model (`openai/gpt-4o-mini`).
#[derive(Debug, Default)]
pub struct Prices {
    models: HashMap<String, Price>,
    /// Models met without a price, each logged once.
    unpriced_seen: Mutex<HashSet<String>>,
}

impl Prices {
    /// The file at `path`, or the shipped table without one.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        match path {
            None => Self::parse(DEFAULT_PRICES).context("the shipped model price table"),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("ROUTER_MODEL_PRICES: reading {}", path.display()))?;
                Self::parse(&text).with_context(|| format!("ROUTER_MODEL_PRICES: {}", path.display()))
            }
        }
    }

    /// Reads a price table: a TOML table per model with `input_per_mtok`, `output_per_mtok`
    /// and optionally `cached_input_per_mtok` (the input price when absent), each a number of
    /// USD per million tokens, zero or more. Anything else is refused, naming the model and
    /// the field.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let table: toml::Table = toml::from_str(text).map_err(|err| anyhow::anyhow!("not a TOML table: {err}"))?;
        let mut models = HashMap::new();
        for (name, entry) in &table {
            name.parse::<ModelRef>()
                .map_err(|_| anyhow::anyhow!("[\"{name}\"]: not a model: name it as `<provider>/<model>`"))?;
            let toml::Value::Table(fields) = entry else {
                anyhow::bail!(
                    "[\"{name}\"]: must be a table of prices ({INPUT}, {OUTPUT}, {CACHED_INPUT}), got a {}",
                    entry.type_str()
                );
            };
            if let Some(unknown) = fields.keys().find(|key| ![INPUT, OUTPUT, CACHED_INPUT].contains(&key.as_str())) {
                anyhow::bail!("[\"{name}\"]: unknown key `{unknown}` (expected {INPUT}, {OUTPUT}, {CACHED_INPUT})");
            }
            let price = |field: &str| -> anyhow::Result<Option<u64>> {
                let Some(value) = fields.get(field) else { return Ok(None) };
                let usd = match value {
                    toml::Value::Integer(n) => *n as f64,
                    toml::Value::Float(x) => *x,
                    other => anyhow::bail!(
                        "[\"{name}\"].{field}: must be a number of USD per million tokens, got a {}",
                        other.type_str()
                    ),
                };
                anyhow::ensure!(usd.is_finite() && usd >= 0.0, "[\"{name}\"].{field}: must be zero or more, got {usd}");
                anyhow::ensure!(usd <= MAX_PER_MTOK, "[\"{name}\"].{field}: must be at most {MAX_PER_MTOK}, got {usd}");
                Ok(Some((usd * 1e6).round() as u64))
            };
            let required =
                |field: &str| price(field)?.ok_or_else(|| anyhow::anyhow!("[\"{name}\"]: `{field}` is missing"));
            let input = required(INPUT)?;
            let output = required(OUTPUT)?;
            let cached_input = price(CACHED_INPUT)?.unwrap_or(input);
            models.insert(name.clone(), Price { input, cached_input, output });
        }
        Ok(Self { models, unpriced_seen: Mutex::default() })
    }

    /// Models priced, for the start-up log.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// What one call cost in nano-dollars, or `None` when the model has no price (logged the
    /// first time each model is met).
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<i64> {
        let price = self.models.get(model);
        if price.is_none() {
            let mut seen = self.unpriced_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if seen.insert(model.to_owned()) {
                tracing::warn!(
                    model,
                    "model has no price in the model price table: its calls count as 0 USD (unpriced)"
                );
            }
        }
        price.map(|price| price.cost(usage))
    }
}

/// What a model call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// The routing call (which may also have written a direct answer).
    Routing,
    /// A direct answer without a routing call of its own (a forced route, the caller's tools,
    /// an answer after the routing call chose a handler that degraded).
    Answer,
    /// One model ↔ tool round trip of the MCP agent, its final answer included.
    AgentStep,
    Expert,
    Synthesis,
}

impl CallKind {
    pub const ALL: [CallKind; 5] = [Self::Routing, Self::Answer, Self::AgentStep, Self::Expert, Self::Synthesis];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Routing => "routing",
            Self::Answer => "answer",
            Self::AgentStep => "agent_step",
            Self::Expert => "expert",
            Self::Synthesis => "synthesis",
        }
    }
}

/// One model call a turn made, before pricing.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    pub kind: CallKind,
    pub model: ModelRef,
    /// The expert role an expert call answered as; empty for the turn's own role.
    pub role_id: String,
    pub usage: Usage,
}

impl ModelCall {
    pub fn of(kind: CallKind, answered: &Answered) -> Self {
        Self { kind, model: answered.model.clone(), role_id: String::new(), usage: answered.completion.usage }
    }
}

/// One priced call: a part of the turn's cost (in the response metadata and the decision
/// record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCost {
    pub kind: CallKind,
    /// `<provider>/<model>`.
    pub model: String,
    /// The role the call answered as (an expert's own role, else the turn's).
    pub role_id: String,
    pub prompt_tokens: u32,
    pub cached_prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cost_nanousd: i64,
    /// False when the model has no price (its cost is 0).
    pub priced: bool,
}

/// The priced parts of a turn: `calls` in the order made, experts in the turn's role unless
/// they say otherwise.
pub fn price_calls(prices: &Prices, calls: &[ModelCall], turn_role: &str) -> Vec<CallCost> {
    calls
        .iter()
        .map(|call| {
            let model = call.model.to_string();
            let cost = prices.cost(&model, &call.usage);
            CallCost {
                kind: call.kind,
                role_id: if call.role_id.is_empty() { turn_role.to_owned() } else { call.role_id.clone() },
                prompt_tokens: call.usage.prompt_tokens,
                cached_prompt_tokens: call.usage.cached_prompt_tokens,
                completion_tokens: call.usage.completion_tokens,
                cost_nanousd: cost.unwrap_or(0),
                priced: cost.is_some(),
                model,
            }
        })
        .collect()
}

impl CallCost {
    pub fn to_proto(&self) -> switchyard_proto::router::v1::CallCost {
        switchyard_proto::router::v1::CallCost {
            kind: self.kind.as_str().to_owned(),
            model: self.model.clone(),
            role_id: self.role_id.clone(),
            prompt_tokens: self.prompt_tokens,
            cached_prompt_tokens: self.cached_prompt_tokens,
            completion_tokens: self.completion_tokens,
            cost_usd: nanos_to_usd(self.cost_nanousd),
            priced: self.priced,
        }
    }
}

pub fn nanos_to_usd(nanos: i64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u32, cached: u32, completion: u32) -> Usage {
        Usage { prompt_tokens: prompt, completion_tokens: completion, cached_prompt_tokens: cached }
    }

    #[test]
    fn the_shipped_table_parses_and_prices_the_default_model() {
        let prices = Prices::load(None).expect("shipped prices");
        assert!(prices.len() >= 5);
        // gpt-4o-mini: 1000 prompt (400 cached) and 200 completion tokens:
        // 600 × 0.15 + 400 × 0.075 + 200 × 0.60 = 90 + 30 + 120 USD per million = 0.00024 USD.
        assert_eq!(prices.cost("openai/gpt-4o-mini", &usage(1000, 400, 200)), Some(240_000));
        assert_eq!(prices.cost("local/smollm2-135m-instruct", &usage(5000, 0, 900)), Some(0));
        assert_eq!(prices.cost("openai/unknown-model", &usage(10, 0, 10)), None);
    }

    #[test]
    fn cached_input_is_priced_at_its_rate_or_the_input_rate() {
        let prices = Prices::parse(
            "[\"a/cached\"]\ninput_per_mtok = 2\noutput_per_mtok = 8\ncached_input_per_mtok = 0.5\n\
             [\"a/plain\"]\ninput_per_mtok = 2\noutput_per_mtok = 8\n",
        )
        .expect("prices");
        // 1M prompt tokens, all cached: 0.5 USD; without a cached price: 2 USD.
        assert_eq!(prices.cost("a/cached", &usage(1_000_000, 1_000_000, 0)), Some(500_000_000));
        assert_eq!(prices.cost("a/plain", &usage(1_000_000, 1_000_000, 0)), Some(2_000_000_000));
        // One cached token at $0.5 per million: 500 nano-dollars.
        assert_eq!(prices.cost("a/cached", &usage(1, 1, 0)), Some(500));
        // A call is rounded once, to the nearest nano-dollar: 3 tokens at $0.0005 per million
        // are 1.5 nano-dollars, 2.
        let tiny = Prices::parse("[\"a/tiny\"]\ninput_per_mtok = 0.0005\noutput_per_mtok = 0\n").expect("prices");
        assert_eq!(tiny.cost("a/tiny", &usage(3, 0, 0)), Some(2));
    }

    #[test]
    fn bad_tables_are_refused_naming_the_model_and_the_field() {
        let refused = |text: &str| Prices::parse(text).expect_err(text).to_string();
        let negative = refused("[\"openai/x\"]\ninput_per_mtok = -1\noutput_per_mtok = 1\n");
        assert!(negative.contains("[\"openai/x\"].input_per_mtok") && negative.contains("zero or more"), "{negative}");
        let unknown = refused("[\"openai/x\"]\ninput_per_mtok = 1\noutput_per_mtok = 1\ninput = 2\n");
        assert!(unknown.contains("[\"openai/x\"]") && unknown.contains("unknown key `input`"), "{unknown}");
        let typed = refused("[\"openai/x\"]\ninput_per_mtok = \"1\"\noutput_per_mtok = 1\n");
        assert!(typed.contains("[\"openai/x\"].input_per_mtok") && typed.contains("got a string"), "{typed}");
        let missing = refused("[\"openai/x\"]\ninput_per_mtok = 1\n");
        assert!(missing.contains("`output_per_mtok` is missing"), "{missing}");
        let unnamed = refused("[gpt]\ninput_per_mtok = 1\noutput_per_mtok = 1\n");
        assert!(unnamed.contains("[\"gpt\"]: not a model"), "{unnamed}");
        let flat = refused("\"openai/x\" = 3\n");
        assert!(flat.contains("must be a table of prices"), "{flat}");
        let huge = refused("[\"openai/x\"]\ninput_per_mtok = 1e300\noutput_per_mtok = 1\n");
        assert!(huge.contains("at most"), "{huge}");
        assert!(refused("[\"openai/x\"\n").contains("not a TOML table"));
    }
}
