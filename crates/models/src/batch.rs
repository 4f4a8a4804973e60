//! Grouping texts into model calls. A forward pass pads every text of a call to the longest
//! one, and padded positions cost as much as real tokens, so texts are taken shortest first and
//! a call is closed before padding would waste much: a batch of short queries and long tool
//! descriptions then costs about what its real tokens cost.

/// Texts per forward pass at most.
pub const MAX_BATCH: usize = 32;
/// Token positions (padding included) per forward pass at most, so the activations of one
/// call (the widest is `positions × 1,536` floats) stay within the CPU caches' reach.
pub const MAX_POSITIONS: usize = 4096;
/// Padding allowed in a call, as a fraction of its positions.
const MAX_PADDING: f32 = 0.2;

/// Splits texts, given as their token counts, into calls: each call lists indexes into
/// `lengths`, all of similar length. Every index appears exactly once.
pub fn plan(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&index| lengths[index]);
    let mut calls: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut real_tokens = 0usize;
    for index in order {
        let length = lengths[index].max(1);
        // Sorted ascending, so the newcomer sets the call's padded length.
        let positions = length * (current.len() + 1);
        let padding = positions - (real_tokens + length);
        let fits =
            current.len() < MAX_BATCH && positions <= MAX_POSITIONS && padding as f32 <= MAX_PADDING * positions as f32;
        if !fits && !current.is_empty() {
            calls.push(std::mem::take(&mut current));
            real_tokens = 0;
        }
        current.push(index);
        real_tokens += length;
    }
    if !current.is_empty() {
        calls.push(current);
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_once_similar_lengths_together() {
        let lengths = [12, 80, 11, 13, 79, 300, 12];
        let calls = plan(&lengths);
        let mut seen: Vec<usize> = calls.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
        assert_eq!(calls, vec![vec![2, 0, 6, 3], vec![4, 1], vec![5]]);
    }

    #[test]
    fn calls_respect_the_batch_and_position_limits() {
        let calls = plan(&[10; 100]);
        assert!(calls.iter().all(|c| c.len() <= MAX_BATCH));
        let calls = plan(&[256; 40]);
        assert!(calls.iter().all(|c| c.len() * 256 <= MAX_POSITIONS), "{calls:?}");
        assert!(plan(&[]).is_empty());
    }
}
