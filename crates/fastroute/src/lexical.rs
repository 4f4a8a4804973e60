//! Word features beside the embedding: hashed word unigrams and bigrams of a message, unit
//! length. MiniLM places "What is the latest news on X?" and "What is X?" close together,
//! yet words like "latest", "current", "book" or "my file" are what make a tool necessary;
//! the linear head learns such words from the exemplars directly.

/// Hash buckets: enough that the few thousand words of the exemplars rarely collide.
pub const BUCKETS: usize = 1 << 14;

/// Sparse `(bucket, value)` pairs, unit length, scaled by `weight`.
pub fn features(text: &str, weight: f32) -> Vec<(u32, f32)> {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).collect();
    let mut pairs: Vec<(u32, f32)> = Vec::with_capacity(words.len() * 2);
    for (index, word) in words.iter().enumerate() {
        pairs.push((bucket(&[word]), 1.0));
        if let Some(next) = words.get(index + 1) {
            pairs.push((bucket(&[word, next]), 1.0));
        }
    }
    pairs.sort_by_key(|pair| pair.0);
    let mut merged: Vec<(u32, f32)> = Vec::with_capacity(pairs.len());
    for (bucket, value) in pairs {
        match merged.last_mut() {
            Some(last) if last.0 == bucket => last.1 += value,
            _ => merged.push((bucket, value)),
        }
    }
    let norm = merged.iter().map(|pair| pair.1 * pair.1).sum::<f32>().sqrt();
    if norm > 0.0 {
        for pair in &mut merged {
            pair.1 *= weight / norm;
        }
    }
    merged
}

fn bucket(words: &[&str]) -> u32 {
    // FNV-1a over the words and a separator: stable across runs and platforms.
    let mut hash: u32 = 0x811c_9dc5;
    for word in words {
        for byte in word.bytes().chain([0xff]) {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    hash % BUCKETS as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_length_and_case_blind() {
        let a = features("Find the LATEST news", 1.0);
        assert_eq!(a, features("find the latest news!", 1.0));
        let norm: f32 = a.iter().map(|p| p.1 * p.1).sum();
        assert!((norm - 1.0).abs() < 1e-5);
        assert!(features("  ", 1.0).is_empty());
    }
}
