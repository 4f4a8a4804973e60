//! Choosing the best role with hysteresis (spec: "the current role is maintained if its score
//! is at least 80% of the top score"), so a conversation does not flap between roles when a
//! query touches several domains.

use crate::{domain::RoleId, matcher::RoleScore};

/// Why a role was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BestRoleReason {
    /// The top-scoring role, different from the current one.
    TopScore,
    /// The current role has (or shares) the top score.
    CurrentIsTop,
    /// Another role scored higher, but the current role is within the ratio.
    KeptByHysteresis,
    /// Nothing matched; the current role (if any) stays.
    NoMatch,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BestRole {
    /// The chosen role; `None` when nothing matched and there is no current role.
    pub role_id: Option<RoleId>,
    pub kept_current: bool,
    pub reason: BestRoleReason,
    pub top: Option<(RoleId, u32)>,
    pub current_score: u32,
    pub hysteresis_ratio: f64,
    pub explanation: String,
}

/// Decides between the current role and the top of `scores` (best first, as the matcher
/// returns them). The current role stays when `current_score ≥ ratio × top_score`.
pub fn best_role(scores: &[RoleScore<'_>], current: Option<&RoleId>, ratio: f64) -> BestRole {
    let current_score = current.and_then(|current| scores.iter().find(|s| s.role_id == current)).map_or(0, |s| s.score);
    let Some(top) = scores.first() else {
        let explanation = match current {
            Some(role) => format!("no trigger matched; keeping {role}"),
            None => "no trigger matched and there is no current role".to_owned(),
        };
        return BestRole {
            role_id: current.cloned(),
            kept_current: current.is_some(),
            reason: BestRoleReason::NoMatch,
            top: None,
            current_score: 0,
            hysteresis_ratio: ratio,
            explanation,
        };
    };
    let top_pair = Some((top.role_id.clone(), top.score));
    let decided = |role: &RoleId, kept, reason, explanation| BestRole {
        role_id: Some(role.clone()),
        kept_current: kept,
        reason,
        top: top_pair.clone(),
        current_score,
        hysteresis_ratio: ratio,
        explanation,
    };
    match current {
        Some(role) if current_score == top.score => {
            decided(role, true, BestRoleReason::CurrentIsTop, format!("{role} has the top score ({current_score})"))
        }
        Some(role) if f64::from(current_score) >= ratio * f64::from(top.score) => decided(
            role,
            true,
            BestRoleReason::KeptByHysteresis,
            format!(
                "kept {role}: its score {current_score} is at least {:.0}% of the top score {} ({})",
                ratio * 100.0,
                top.score,
                top.role_id
            ),
        ),
        Some(role) => decided(
            top.role_id,
            false,
            BestRoleReason::TopScore,
            format!(
                "switched from {role} to {}: score {} against {current_score}, below {:.0}% of the top score",
                top.role_id,
                top.score,
                ratio * 100.0
            ),
        ),
        None => decided(
            top.role_id,
            false,
            BestRoleReason::TopScore,
            format!("{} has the top score ({})", top.role_id, top.score),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(role: &'static str, score: u32) -> RoleScore<'static> {
        RoleScore {
            role_id: Box::leak(Box::new(RoleId::parse(role).expect("valid"))),
            score,
            base_score: score,
            diversity_bonus: 0,
            matched: Vec::new(),
        }
    }

    fn id(role: &str) -> RoleId {
        RoleId::parse(role).expect("valid")
    }

    #[test]
    fn current_role_is_kept_at_exactly_eighty_percent() {
        let scores = [score("finance", 10), score("tech", 8)];
        let best = best_role(&scores, Some(&id("tech")), 0.8);
        assert_eq!(best.role_id, Some(id("tech")));
        assert!(best.kept_current);
        assert_eq!(best.reason, BestRoleReason::KeptByHysteresis);
        assert_eq!(best.current_score, 8);
        assert!(best.explanation.contains("80%"), "{}", best.explanation);
    }

    #[test]
    fn current_role_below_the_ratio_is_switched_away_from() {
        let scores = [score("finance", 10), score("tech", 7)];
        let best = best_role(&scores, Some(&id("tech")), 0.8);
        assert_eq!(best.role_id, Some(id("finance")));
        assert!(!best.kept_current);
        assert_eq!(best.reason, BestRoleReason::TopScore);
    }

    #[test]
    fn a_current_role_with_no_match_is_replaced() {
        let best = best_role(&[score("finance", 3)], Some(&id("legal")), 0.8);
        assert_eq!((best.role_id, best.current_score), (Some(id("finance")), 0));
    }

    #[test]
    fn a_tie_with_the_current_role_keeps_it_as_top() {
        let scores = [score("finance", 9), score("tech", 9)];
        let best = best_role(&scores, Some(&id("tech")), 0.8);
        assert_eq!((best.role_id, best.reason), (Some(id("tech")), BestRoleReason::CurrentIsTop));
    }

    #[test]
    fn the_ratio_is_configurable() {
        let scores = [score("finance", 10), score("tech", 8)];
        assert_eq!(best_role(&scores, Some(&id("tech")), 0.9).role_id, Some(id("finance")));
        assert_eq!(best_role(&scores, Some(&id("tech")), 0.5).role_id, Some(id("tech")));
        assert_eq!(best_role(&scores, Some(&id("tech")), 1.0).role_id, Some(id("finance")));
    }

    #[test]
    fn no_match_keeps_the_current_role_or_returns_none() {
        let kept = best_role(&[], Some(&id("tech")), 0.8);
        assert_eq!((kept.role_id, kept.kept_current, kept.reason), (Some(id("tech")), true, BestRoleReason::NoMatch));
        let none = best_role(&[], None, 0.8);
        assert_eq!((none.role_id, none.kept_current), (None, false));
    }

    #[test]
    fn without_a_current_role_the_top_wins() {
        let best = best_role(&[score("finance", 4), score("tech", 3)], None, 0.8);
        assert_eq!((best.role_id, best.kept_current), (Some(id("finance")), false));
    }
}
