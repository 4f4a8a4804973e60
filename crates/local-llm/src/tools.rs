//! Tool calls by constrained decoding.
//!
//! A 135M-parameter model does not reliably write a well-formed call on its own, so it is
//! never asked to: the call is assembled as `{"name": …, "arguments": {…}}` with the model
//! only choosing where there is a choice.
//!
//! 1. The tool: each candidate name is scored by its log-likelihood after `{"name": "` (one
//!    forward pass per candidate over a shared, cached prefix), less a prior for its place in
//!    the caller's ranked list (`RANK_PRIOR_NATS` per place); candidates are tried best
//!    first.
//! 2. Each required argument, in schema order, after `"key": `: enums and booleans by the
//!    likeliest allowed value (scored the same way), numbers digit by digit (digits only,
//!    a sign and one decimal point where allowed, ending when the model prefers anything
//!    else), strings token by token among tokens that keep the string valid JSON, ending at
//!    the model's closing quote.
//! 3. The arguments are checked against the schema ([`check_arguments`]); a tool whose
//!    schema needs something this cannot produce (a required array or object) is skipped.
//!
//! When no candidate yields a valid call the provider answers in text, saying so (see
//! [`crate::NO_TOOL_CALL_PREFIX`]).

use serde_json::{Map, Value};
use switchyard_llm::ToolSpec;

use crate::{
    forward::{Logits, Session},
    generate::argmax,
    tokenizer::ChatTokenizer,
};

/// Tools tried (best-scored first) before giving up.
const MAX_ATTEMPTS: usize = 3;
/// Log-likelihood (nats) a tool loses per place down the caller's list. Callers pass tools
/// ranked (the MCP gateway's order, from retrieval that is right first about four times in
/// five); a 135M model's preference between names is much weaker evidence, so the order is
/// a prior the model must clearly beat.
const RANK_PRIOR_NATS: f32 = 2.0;
/// Longest string argument, in tokens.
const MAX_STRING_TOKENS: usize = 48;
/// Longest number argument, in characters.
const MAX_NUMBER_CHARS: usize = 16;

/// A call that passed the schema check.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
}

/// Picks a tool and fills its arguments, after `prompt` (a rendered conversation ending with
/// an open assistant turn). `Err` says why no valid call could be made.
pub fn plan_call(
    session: &mut Session<'_>,
    tokenizer: &ChatTokenizer,
    prompt: &[u32],
    tools: &[ToolSpec],
    keep_going: &dyn Fn() -> bool,
) -> Result<PlannedCall, String> {
    if tools.is_empty() {
        return Err("no tools were offered".into());
    }
    let mut decoder = Constrained { session, tokenizer, logits: Vec::new() };
    decoder.force_ids(prompt)?;
    decoder.force("{\"name\": \"")?;
    let base = decoder.session.len();
    let base_logits = decoder.logits.clone();

    let names: Vec<String> = tools.iter().map(|t| format!("{}\"", t.name)).collect();
    let scores: Vec<f32> = decoder
        .scores(&names)?
        .into_iter()
        .enumerate()
        .map(|(rank, score)| score - RANK_PRIOR_NATS * rank as f32)
        .collect();
    let mut order: Vec<usize> = (0..tools.len()).collect();
    order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));

    let mut reasons = Vec::new();
    for &index in order.iter().take(MAX_ATTEMPTS) {
        if !keep_going() {
            return Err("cancelled".into());
        }
        let tool = &tools[index];
        decoder.session.truncate(base);
        decoder.logits.clone_from(&base_logits);
        match decoder.arguments(tool) {
            Ok(arguments) => match check_arguments(&tool.parameters, &arguments) {
                Ok(()) => return Ok(PlannedCall { name: tool.name.clone(), arguments: arguments.to_string() }),
                Err(reason) => reasons.push(format!("{}: {reason}", tool.name)),
            },
            Err(reason) => reasons.push(format!("{}: {reason}", tool.name)),
        }
    }
    Err(reasons.join("; "))
}

/// Feeds text to the session and keeps the logits after it.
struct Constrained<'s, 'w, 't> {
    session: &'s mut Session<'w>,
    tokenizer: &'t ChatTokenizer,
    logits: Vec<f32>,
}

impl Constrained<'_, '_, '_> {
    fn force(&mut self, text: &str) -> Result<(), String> {
        let ids = self.tokenizer.encode(text)?;
        self.force_ids(&ids)
    }

    fn force_ids(&mut self, ids: &[u32]) -> Result<(), String> {
        if !ids.is_empty() {
            self.logits = self.session.forward(ids, Logits::Last)?;
        }
        Ok(())
    }

    /// Log-likelihood of each continuation after the current position (the session is left
    /// where it was).
    fn scores(&mut self, continuations: &[String]) -> Result<Vec<f32>, String> {
        let base = self.session.len();
        let first = log_softmax(&self.logits);
        let vocab = first.len();
        let mut scores = Vec::with_capacity(continuations.len());
        for text in continuations {
            let ids = self.tokenizer.encode(text)?;
            let Some((&head, rest)) = ids.split_first() else {
                scores.push(f32::NEG_INFINITY);
                continue;
            };
            let mut score = first[head as usize];
            if !rest.is_empty() {
                // Logits after each token but the last predict the next one.
                let all = self.session.forward(&ids[..ids.len() - 1], Logits::All)?;
                for (position, next) in rest.iter().enumerate() {
                    let step = log_softmax(&all[position * vocab..(position + 1) * vocab]);
                    score += step[*next as usize];
                }
                self.session.truncate(base);
            }
            scores.push(score);
        }
        Ok(scores)
    }

    /// The arguments object for `tool`, each required property generated by its type.
    fn arguments(&mut self, tool: &ToolSpec) -> Result<Value, String> {
        self.force(&format!("{}\", \"arguments\": {{", tool.name))?;
        let schema = &tool.parameters;
        let properties = schema.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut arguments = Map::new();
        for (i, key) in required.iter().enumerate() {
            let property = properties.and_then(|p| p.get(*key)).unwrap_or(&Value::Null);
            let separator = if i == 0 { "" } else { ", " };
            self.force(&format!("{separator}{}: ", Value::from(*key)))?;
            let value = self.value(key, property)?;
            arguments.insert((*key).to_owned(), value);
        }
        self.force("}}")?;
        Ok(Value::Object(arguments))
    }

    fn value(&mut self, key: &str, schema: &Value) -> Result<Value, String> {
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            return self.choose(options);
        }
        match primary_type(schema) {
            Some("boolean") => self.choose(&[Value::Bool(true), Value::Bool(false)]),
            Some("integer") => self.number(false),
            Some("number") => self.number(true),
            Some("string") | None => self.string(),
            Some(other) => Err(format!("argument `{key}` has type {other}, which the local model cannot fill")),
        }
    }

    /// The likeliest of fixed values, which is then fed to the model.
    fn choose(&mut self, options: &[Value]) -> Result<Value, String> {
        if options.is_empty() {
            return Err("an enum without values".into());
        }
        let texts: Vec<String> = options.iter().map(Value::to_string).collect();
        let scores = self.scores(&texts)?;
        let best = (0..options.len()).max_by(|a, b| scores[*a].total_cmp(&scores[*b])).unwrap_or(0);
        self.force(&texts[best])?;
        Ok(options[best].clone())
    }

    /// Digits (SmolLM2 has one token per digit), with a leading minus and, for `number`, one
    /// decimal point; stops when the model's favourite token is none of those.
    fn number(&mut self, fractional: bool) -> Result<Value, String> {
        let mut text = String::new();
        while text.len() < MAX_NUMBER_CHARS {
            let allowed = |token: &[u8]| match token {
                [b'0'..=b'9'] => true,
                b"-" => text.is_empty(),
                b"." => fractional && !text.contains('.') && text.chars().last().is_some_and(|c| c.is_ascii_digit()),
                _ => false,
            };
            let favourite = argmax(&self.logits);
            let has_digit = text.chars().any(|c| c.is_ascii_digit());
            if has_digit && !allowed(self.tokenizer.token_bytes(favourite)) {
                break;
            }
            let Some(token) = self.best(|t| allowed(t)) else { break };
            text.push_str(&String::from_utf8_lossy(self.tokenizer.token_bytes(token)));
            self.force_ids(&[token])?;
        }
        let text = text.trim_end_matches('.');
        let value: Value = serde_json::from_str(text).map_err(|_| format!("the model wrote no number (`{text}`)"))?;
        Ok(value)
    }

    /// Tokens that keep the string valid JSON (no quote, backslash or control character),
    /// until the model prefers a closing quote (not before the first token).
    fn string(&mut self) -> Result<Value, String> {
        self.force("\"")?;
        let mut bytes = Vec::new();
        for _ in 0..MAX_STRING_TOKENS {
            let inside =
                |token: &[u8]| !token.is_empty() && token.iter().all(|b| *b >= 0x20 && *b != b'"' && *b != b'\\');
            let closes = |token: &[u8]| token.first() == Some(&b'"');
            let Some(token) = self.best(|t| inside(t) || (!bytes.is_empty() && closes(t))) else { break };
            let token_bytes = self.tokenizer.token_bytes(token);
            if closes(token_bytes) {
                break;
            }
            bytes.extend_from_slice(token_bytes);
            self.force_ids(&[token])?;
        }
        self.force("\"")?;
        let text = String::from_utf8_lossy(&bytes).trim().to_owned();
        if text.is_empty() {
            return Err("the model wrote an empty string".into());
        }
        Ok(Value::String(text))
    }

    /// The likeliest token whose bytes `allowed` accepts.
    fn best(&self, allowed: impl Fn(&[u8]) -> bool) -> Option<u32> {
        let mut best: Option<(u32, f32)> = None;
        for (id, logit) in self.logits.iter().enumerate() {
            let id = id as u32;
            if best.is_some_and(|(_, b)| *logit <= b) || self.tokenizer.is_special(id) {
                continue;
            }
            if allowed(self.tokenizer.token_bytes(id)) {
                best = Some((id, *logit));
            }
        }
        best.map(|(id, _)| id)
    }
}

fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_total = logits.iter().map(|l| (l - max).exp()).sum::<f32>().ln() + max;
    logits.iter().map(|l| l - log_total).collect()
}

/// Whether a call of `tool` can be built at all: every required argument is of a type
/// [`plan_call`] fills (a string, a number, a boolean or an enum). `Err` names the first
/// argument that is not.
pub fn fillable(tool: &ToolSpec) -> Result<(), String> {
    let schema = &tool.parameters;
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    for key in required {
        let property = properties.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
        if property.get("enum").and_then(Value::as_array).is_some() {
            continue;
        }
        match primary_type(property) {
            Some("boolean" | "integer" | "number" | "string") | None => {}
            Some(other) => {
                return Err(format!(
                    "its required argument `{key}` is of type {other}, which the local model cannot fill"
                ));
            }
        }
    }
    Ok(())
}

/// The schema's type (the first non-null one when it lists several).
fn primary_type(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(types) => types.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

/// Checks `value` against the parts of JSON Schema a tool's parameters use: `type` (one or
/// several), `required`, `properties` (recursively), `items`, `enum`, and
/// `additionalProperties: false`. Anything else in the schema is not checked.
pub fn check_arguments(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "arguments")
}

fn check(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return Err(format!("{at} is {value}, not one of {}", Value::from(options.clone())));
    }
    if let Some(types) = schema.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !allowed.is_empty() && !allowed.iter().any(|t| has_type(value, t)) {
            return Err(format!("{at} is {value}, not of type {}", allowed.join(" or ")));
        }
    }
    match value {
        Value::Object(object) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for key in required.iter().filter_map(Value::as_str) {
                    if !object.contains_key(key) {
                        return Err(format!("{at} lacks the required `{key}`"));
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            for (key, item) in object {
                match properties.and_then(|p| p.get(key)) {
                    Some(property) => check(property, item, &format!("{at}.{key}"))?,
                    None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("{at} has `{key}`, which the schema does not allow"));
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{at}[{i}]"))?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn has_type(value: &Value, kind: &str) -> bool {
    match kind {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::check_arguments;

    #[test]
    fn schema_check_covers_types_required_enums_and_nesting() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": "number"},
                "n": {"type": "integer"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "maybe": {"type": ["string", "null"]}
            },
            "required": ["a", "unit"],
            "additionalProperties": false
        });
        assert_eq!(check_arguments(&schema, &json!({"a": 1.5, "unit": "c"})), Ok(()));
        assert_eq!(
            check_arguments(&schema, &json!({"a": 1, "n": 2, "unit": "f", "tags": ["x"], "maybe": null})),
            Ok(())
        );
        let fails = [
            json!({"unit": "c"}),
            json!({"a": "1", "unit": "c"}),
            json!({"a": 1, "unit": "k"}),
            json!({"a": 1, "unit": "c", "n": 1.5}),
            json!({"a": 1, "unit": "c", "tags": [1]}),
            json!({"a": 1, "unit": "c", "other": true}),
            json!([1]),
        ];
        for value in fails {
            assert!(check_arguments(&schema, &value).is_err(), "{value} should fail");
        }
    }
}
