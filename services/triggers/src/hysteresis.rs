//! Choosing the best role with hysteresis (docs/requirements.md#triggers-hysteresis: the current
//! role stays while its score is at least 80 % of the top score), so a conversation does not flap between roles when a
//! query touches several domains. The scores compared are the combined ones (`crate::blend`):
//! the trigger scores themselves whenever they decide clearly.

use crate::{
    blend::{DecidedBy, Ranked, Ranking},
    domain::RoleId,
};

/// Why a role was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BestRoleReason {
    /// The top-scoring role by its triggers, different from the current one.
    TopScore,
    /// The current role has (or shares) the top score.
    CurrentIsTop,
    /// Another role scored higher, but the current role is within the ratio.
    KeptByHysteresis,
    /// Nothing matched; the current role (if any) stays.
    NoMatch,
    /// The top role by the semantic signal (no trigger matched, or a near tie), different
    /// from the current one.
    SemanticMatch,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BestRole {
    /// The chosen role; `None` when nothing matched and there is no current role.
    pub role_id: Option<RoleId>,
    pub kept_current: bool,
    pub reason: BestRoleReason,
    /// The top role and its trigger score.
    pub top: Option<(RoleId, u32)>,
    pub top_combined: f64,
    /// The current role's trigger score.
    pub current_score: u32,
    pub current_combined: f64,
    pub hysteresis_ratio: f64,
    pub decided_by: DecidedBy,
    pub explanation: String,
}

/// Decides between the current role and the top of `ranking`. The current role stays when
/// `current_combined ≥ ratio × top_combined`.
pub fn best_role(ranking: &Ranking<'_>, current: Option<&RoleId>, ratio: f64) -> BestRole {
    let current_entry = current.and_then(|current| ranking.get(current));
    let current_score = current_entry.map_or(0, Ranked::trigger_score);
    let current_combined = current_entry.map_or(0.0, |r| r.combined);
    let Some(top) = ranking.top() else {
        let closeness = match ranking.general_similarity {
            Some(general) => format!("no role is closer in meaning than everyday questions (similarity {general:.2})"),
            None => "no role is close in meaning".to_owned(),
        };
        let explanation = match current {
            Some(role) => format!("no trigger matched and {closeness}; keeping {role}"),
            None => format!("no trigger matched, {closeness} and there is no current role"),
        };
        return BestRole {
            role_id: current.cloned(),
            kept_current: current.is_some(),
            reason: BestRoleReason::NoMatch,
            top: None,
            top_combined: 0.0,
            current_score: 0,
            current_combined: 0.0,
            hysteresis_ratio: ratio,
            decided_by: ranking.decided_by,
            explanation,
        };
    };
    let decided = |role: &RoleId, kept, reason, explanation| BestRole {
        role_id: Some(role.clone()),
        kept_current: kept,
        reason,
        top: Some((top.role_id.clone(), top.trigger_score())),
        top_combined: top.combined,
        current_score,
        current_combined,
        hysteresis_ratio: ratio,
        decided_by: ranking.decided_by,
        explanation,
    };
    let why = why_top(top, ranking.decided_by);
    match current {
        Some(role) if current_combined == top.combined => decided(
            role,
            true,
            BestRoleReason::CurrentIsTop,
            format!("{role} has the top score ({})", points(current_combined)),
        ),
        Some(role) if current_combined >= ratio * top.combined => decided(
            role,
            true,
            BestRoleReason::KeptByHysteresis,
            format!(
                "kept {role}: its score {} is at least {:.0}% of the top score {} ({})",
                points(current_combined),
                ratio * 100.0,
                points(top.combined),
                top.role_id
            ),
        ),
        Some(role) => decided(
            top.role_id,
            false,
            switch_reason(ranking.decided_by),
            format!(
                "switched from {role} to {}: score {} against {}, below {:.0}% of the top score; {why}",
                top.role_id,
                points(top.combined),
                points(current_combined),
                ratio * 100.0
            ),
        ),
        None => decided(
            top.role_id,
            false,
            switch_reason(ranking.decided_by),
            format!("{} has the top score ({}); {why}", top.role_id, points(top.combined)),
        ),
    }
}

fn switch_reason(decided_by: DecidedBy) -> BestRoleReason {
    if decided_by == DecidedBy::Semantic { BestRoleReason::SemanticMatch } else { BestRoleReason::TopScore }
}

/// Scores print as whole numbers when they are (always, without the semantic signal).
fn points(score: f64) -> String {
    if score.fract() == 0.0 { format!("{score:.0}") } else { format!("{score:.2}") }
}

fn why_top(top: &Ranked<'_>, decided_by: DecidedBy) -> String {
    let similarity = top.semantic.as_ref().map(|s| format!("similarity {:.2} to \"{}\"", s.similarity, s.nearest));
    match (decided_by, similarity) {
        (DecidedBy::Semantic, Some(similarity)) if top.triggers.is_none() => {
            format!("no trigger matched; closest in meaning ({similarity})")
        }
        (DecidedBy::Semantic, Some(similarity)) => {
            format!("the semantic signal broke a near tie of trigger scores ({similarity})")
        }
        _ => format!("decided by its triggers (trigger score {})", top.trigger_score()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blend::{
        SemanticScoring, SemanticState,
        tests::{id, score, similar},
    };

    fn triggers(scores: &[(&str, u32)]) -> Ranking<'static> {
        Ranking::triggers_only(scores.iter().map(|(r, s)| score(r, *s)).collect(), SemanticState::NotNeeded)
    }

    fn owned(role: &str) -> RoleId {
        id(role).clone()
    }

    #[test]
    fn current_role_is_kept_at_exactly_eighty_percent() {
        let best = best_role(&triggers(&[("finance", 10), ("tech", 8)]), Some(&owned("tech")), 0.8);
        assert_eq!(best.role_id, Some(owned("tech")));
        assert!(best.kept_current);
        assert_eq!(best.reason, BestRoleReason::KeptByHysteresis);
        assert_eq!(best.current_score, 8);
        assert!(best.explanation.contains("80%"), "{}", best.explanation);
        assert!(best.explanation.contains("score 8 is at least 80% of the top score 10"), "{}", best.explanation);
    }

    #[test]
    fn current_role_below_the_ratio_is_switched_away_from() {
        let best = best_role(&triggers(&[("finance", 10), ("tech", 7)]), Some(&owned("tech")), 0.8);
        assert_eq!(best.role_id, Some(owned("finance")));
        assert!(!best.kept_current);
        assert_eq!((best.reason, best.decided_by), (BestRoleReason::TopScore, DecidedBy::Triggers));
    }

    #[test]
    fn a_current_role_with_no_match_is_replaced() {
        let best = best_role(&triggers(&[("finance", 3)]), Some(&owned("legal")), 0.8);
        assert_eq!((best.role_id, best.current_score), (Some(owned("finance")), 0));
    }

    #[test]
    fn a_tie_with_the_current_role_keeps_it_as_top() {
        let best = best_role(&triggers(&[("finance", 9), ("tech", 9)]), Some(&owned("tech")), 0.8);
        assert_eq!((best.role_id, best.reason), (Some(owned("tech")), BestRoleReason::CurrentIsTop));
    }

    #[test]
    fn the_ratio_is_configurable() {
        let ranking = triggers(&[("finance", 10), ("tech", 8)]);
        assert_eq!(best_role(&ranking, Some(&owned("tech")), 0.9).role_id, Some(owned("finance")));
        assert_eq!(best_role(&ranking, Some(&owned("tech")), 0.5).role_id, Some(owned("tech")));
        assert_eq!(best_role(&ranking, Some(&owned("tech")), 1.0).role_id, Some(owned("finance")));
    }

    #[test]
    fn no_match_keeps_the_current_role_or_returns_none() {
        let kept = best_role(&triggers(&[]), Some(&owned("tech")), 0.8);
        assert_eq!(
            (kept.role_id, kept.kept_current, kept.reason),
            (Some(owned("tech")), true, BestRoleReason::NoMatch)
        );
        let none = best_role(&triggers(&[]), None, 0.8);
        assert_eq!((none.role_id, none.kept_current), (None, false));
    }

    #[test]
    fn without_a_current_role_the_top_wins() {
        let best = best_role(&triggers(&[("finance", 4), ("tech", 3)]), None, 0.8);
        assert_eq!((best.role_id, best.kept_current), (Some(owned("finance")), false));
    }

    #[test]
    fn a_semantic_choice_is_its_own_reason_and_hysteresis_applies_to_combined_scores() {
        let scoring = SemanticScoring { weight: 4.0, floor: 0.3, ceiling: 0.6, margin: 0.05, nearest: 2 };
        // No trigger: health is closest (0.6 → 4 points), tech close behind (0.55 → 3.33).
        let ranking = Ranking::blended(Vec::new(), vec![similar("health", 0.6), similar("tech", 0.55)], &scoring);
        let fresh = best_role(&ranking, None, 0.8);
        assert_eq!((fresh.role_id, fresh.reason), (Some(owned("health")), BestRoleReason::SemanticMatch));
        assert!(fresh.explanation.contains("no trigger matched; closest in meaning"), "{}", fresh.explanation);
        let kept = best_role(&ranking, Some(&owned("tech")), 0.8);
        assert_eq!((kept.role_id, kept.reason), (Some(owned("tech")), BestRoleReason::KeptByHysteresis));
        assert!((kept.current_combined - scoring.points(0.55)).abs() < 1e-9);
        assert!((kept.top_combined - 4.0).abs() < 1e-9);
        let switched = best_role(&ranking, Some(&owned("legal")), 0.8);
        assert_eq!((switched.role_id, switched.reason), (Some(owned("health")), BestRoleReason::SemanticMatch));
    }
}
