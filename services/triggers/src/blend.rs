//! One ranking from the two signals: the trigger scores (docs/requirements.md#triggers-scoring) and the semantic signal.
//!
//! The semantic signal is worth at most `weight` trigger points: a similarity at or below
//! `floor` adds nothing, one at `ceiling` or above adds `weight`, linearly between; and a role
//! gets nothing unless its similarity beats the everyday questions of no domain
//! (`exemplars/general.toml`) by `margin`, so small talk goes to no domain role. So:
//! - when the top role's trigger score leads every other role's by more than `weight`, the
//!   decision is clear and the semantic signal is not even computed (no embedding: the trigger
//!   path keeps its speed, and a clear trigger decision is never overturned);
//! - otherwise (nothing matched, or a near tie) each role's combined score is its trigger
//!   score plus its semantic points, and hysteresis compares combined scores as it compared
//!   trigger scores before.

use std::collections::HashMap;

use crate::{
    domain::RoleId,
    matcher::RoleScore,
    semantic::{Similarities, Similarity},
};

/// The semantic signal's scale, in trigger points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SemanticScoring {
    /// Most trigger points the semantic signal adds to a role (and the largest trigger lead
    /// it can reverse).
    pub weight: f64,
    /// Similarity at or below which a role gets no semantic points.
    pub floor: f32,
    /// Similarity at or above which a role gets all `weight` points.
    pub ceiling: f32,
    /// How far a role's similarity must exceed the general questions' for the role to get
    /// any semantic points.
    pub margin: f32,
    /// How many of a role's (and the general questions') closest exemplars are averaged into
    /// its similarity.
    pub nearest: usize,
}

impl Default for SemanticScoring {
    /// The flags' defaults, chosen by leave-one-out cross-validation over the exemplars alone
    /// (each domain and general question routed by all the others; tests/semantic_eval.rs
    /// prints the grid): see BENCHMARKS.md.
    fn default() -> Self {
        crate::TriggersConfig::defaults().semantic_scoring()
    }
}

/// The defaults (also `TriggersConfig`'s).
pub const DEFAULT_FLOOR: f32 = 0.15;
pub const DEFAULT_MARGIN: f32 = 0.04;
pub const DEFAULT_NEAREST: usize = 16;

impl SemanticScoring {
    /// The trigger points a similarity is worth.
    pub fn points(&self, similarity: f32) -> f64 {
        let span = (self.ceiling - self.floor).max(f32::EPSILON);
        self.weight * f64::from(((similarity - self.floor) / span).clamp(0.0, 1.0))
    }

    /// The trigger points a role's similarity is worth against the general questions'
    /// (`None`: no competing class).
    pub fn points_against(&self, similarity: f32, general: Option<f32>) -> f64 {
        match general {
            Some(general) if similarity < general + self.margin => 0.0,
            _ => self.points(similarity),
        }
    }

    /// Whether `scores` (best first) decide without the semantic signal: something matched
    /// and the top role leads every other of the `role_count` roles by more than `weight`
    /// (a role no trigger matched scores 0).
    pub fn is_clear(&self, scores: &[RoleScore<'_>], role_count: usize) -> bool {
        let Some(top) = scores.first() else { return false };
        if role_count <= 1 {
            return true;
        }
        let runner_up = scores.get(1).map_or(0, |s| s.score);
        f64::from(top.score - runner_up) > self.weight
    }
}

/// Which signal put the first role first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    Triggers,
    Semantic,
    /// Nothing matched and no role was similar enough.
    Nothing,
}

/// Whether the semantic signal took part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SemanticState {
    Scored,
    /// The trigger scores were clear.
    NotNeeded,
    /// Needed while the model loads.
    Loading,
    /// Needed, but there is no model (or embedding failed).
    Unavailable,
}

/// One role's place in a ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked<'m> {
    pub role_id: &'m RoleId,
    /// `None` when no trigger of the role matched.
    pub triggers: Option<RoleScore<'m>>,
    /// `None` when the semantic signal did not score the role.
    pub semantic: Option<Similarity<'m>>,
    pub semantic_score: f64,
    /// Trigger score + semantic score.
    pub combined: f64,
}

impl Ranked<'_> {
    pub fn trigger_score(&self) -> u32 {
        self.triggers.as_ref().map_or(0, |t| t.score)
    }

    fn matched_count(&self) -> usize {
        self.triggers.as_ref().map_or(0, |t| t.matched.len())
    }
}

/// Roles best first by combined score.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking<'m> {
    pub roles: Vec<Ranked<'m>>,
    pub decided_by: DecidedBy,
    pub semantic_state: SemanticState,
    /// The query's similarity to the general questions, when the semantic signal scored it.
    pub general_similarity: Option<f32>,
}

impl<'m> Ranking<'m> {
    /// The trigger scores alone (already best first), as before the semantic signal.
    pub fn triggers_only(scores: Vec<RoleScore<'m>>, semantic_state: SemanticState) -> Self {
        let decided_by = if scores.is_empty() { DecidedBy::Nothing } else { DecidedBy::Triggers };
        let roles = scores
            .into_iter()
            .map(|score| Ranked {
                role_id: score.role_id,
                combined: f64::from(score.score),
                triggers: Some(score),
                semantic: None,
                semantic_score: 0.0,
            })
            .collect();
        Self { roles, decided_by, semantic_state, general_similarity: None }
    }

    /// Trigger scores (best first) and similarities blended: each role's combined score is
    /// its trigger score plus its semantic points. Roles with neither are left out.
    pub fn blended(
        scores: Vec<RoleScore<'m>>,
        similarities: impl Into<Similarities<'m>>,
        scoring: &SemanticScoring,
    ) -> Self {
        let Similarities { roles: similarities, general } = similarities.into();
        let trigger_top = scores.first().map(|s| s.role_id);
        let mut similar: HashMap<&RoleId, Similarity<'m>> =
            similarities.into_iter().map(|similarity| (similarity.role_id, similarity)).collect();
        let mut roles: Vec<Ranked<'m>> = Vec::with_capacity(scores.len() + similar.len());
        for score in scores {
            let semantic = similar.remove(score.role_id);
            let semantic_score = semantic.as_ref().map_or(0.0, |s| scoring.points_against(s.similarity, general));
            roles.push(Ranked {
                role_id: score.role_id,
                combined: f64::from(score.score) + semantic_score,
                triggers: Some(score),
                semantic,
                semantic_score,
            });
        }
        for (_, similarity) in similar {
            let semantic_score = scoring.points_against(similarity.similarity, general);
            if semantic_score > 0.0 {
                roles.push(Ranked {
                    role_id: similarity.role_id,
                    triggers: None,
                    semantic: Some(similarity),
                    semantic_score,
                    combined: semantic_score,
                });
            }
        }
        roles.sort_by(|a, b| {
            b.combined
                .total_cmp(&a.combined)
                .then_with(|| b.trigger_score().cmp(&a.trigger_score()))
                .then_with(|| b.matched_count().cmp(&a.matched_count()))
                .then_with(|| a.role_id.cmp(b.role_id))
        });
        let decided_by = match (roles.first(), trigger_top) {
            (None, _) => DecidedBy::Nothing,
            (Some(first), Some(top)) if first.role_id == top => DecidedBy::Triggers,
            (Some(_), _) => DecidedBy::Semantic,
        };
        Self { roles, decided_by, semantic_state: SemanticState::Scored, general_similarity: general }
    }

    pub fn top(&self) -> Option<&Ranked<'m>> {
        self.roles.first()
    }

    pub fn get(&self, role: &RoleId) -> Option<&Ranked<'m>> {
        self.roles.iter().find(|r| r.role_id == role)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn id(role: &str) -> &'static RoleId {
        Box::leak(Box::new(RoleId::parse(role).expect("valid")))
    }

    pub(crate) fn score(role: &str, score: u32) -> RoleScore<'static> {
        RoleScore { role_id: id(role), score, base_score: score, diversity_bonus: 0, matched: Vec::new() }
    }

    pub(crate) fn similar(role: &str, similarity: f32) -> Similarity<'static> {
        Similarity { role_id: id(role), similarity, nearest: "an exemplar" }
    }

    const SCORING: SemanticScoring =
        SemanticScoring { weight: 4.0, floor: 0.3, ceiling: 0.6, margin: 0.05, nearest: 2 };

    #[test]
    fn similarity_is_worth_up_to_the_weight_between_floor_and_ceiling() {
        assert_eq!(SCORING.points(0.1), 0.0);
        assert_eq!(SCORING.points(0.3), 0.0);
        assert!((SCORING.points(0.45) - 2.0).abs() < 1e-6);
        assert_eq!(SCORING.points(0.6), 4.0);
        assert_eq!(SCORING.points(0.95), 4.0);
    }

    #[test]
    fn a_role_no_closer_than_the_general_questions_by_the_margin_gets_nothing() {
        assert_eq!(SCORING.points_against(0.45, None), SCORING.points(0.45), "no competing class");
        assert_eq!(SCORING.points_against(0.45, Some(0.3)), SCORING.points(0.45));
        assert_eq!(SCORING.points_against(0.45, Some(0.41)), 0.0, "0.04 closer is within the margin");
        let ranking = Ranking::blended(
            vec![score("a", 2)],
            Similarities { roles: vec![similar("a", 0.5), similar("b", 0.6)], general: Some(0.58) },
            &SCORING,
        );
        let order: Vec<_> = ranking.roles.iter().map(|r| (r.role_id.as_str(), r.semantic_score)).collect();
        assert_eq!(order, [("a", 0.0)], "b is not clear of the general questions; a keeps its trigger score");
        assert_eq!((ranking.decided_by, ranking.general_similarity), (DecidedBy::Triggers, Some(0.58)));
        let small_talk =
            Ranking::blended(Vec::new(), Similarities { roles: vec![similar("a", 0.5)], general: Some(0.7) }, &SCORING);
        assert_eq!((small_talk.roles.len(), small_talk.decided_by), (0, DecidedBy::Nothing));
    }

    #[test]
    fn a_lead_above_the_weight_is_clear_and_anything_less_is_open() {
        assert!(SCORING.is_clear(&[score("a", 9), score("b", 4)], 3), "lead 5 > 4");
        assert!(!SCORING.is_clear(&[score("a", 8), score("b", 4)], 3), "lead 4 is a near tie");
        assert!(SCORING.is_clear(&[score("a", 5)], 3), "unmatched roles score 0: lead 5");
        assert!(!SCORING.is_clear(&[score("a", 3)], 3), "one weak trigger is open");
        assert!(!SCORING.is_clear(&[], 3), "nothing matched");
        assert!(SCORING.is_clear(&[score("a", 1)], 1), "no rival to reverse it");
    }

    #[test]
    fn with_no_trigger_match_the_most_similar_role_leads() {
        let ranking =
            Ranking::blended(Vec::new(), vec![similar("a", 0.4), similar("b", 0.55), similar("c", 0.2)], &SCORING);
        let order: Vec<_> = ranking.roles.iter().map(|r| r.role_id.as_str()).collect();
        assert_eq!(order, ["b", "a"], "c is below the floor and left out");
        assert_eq!(ranking.decided_by, DecidedBy::Semantic);
        assert!((ranking.roles[0].combined - SCORING.points(0.55)).abs() < 1e-9);
    }

    #[test]
    fn a_near_tie_is_broken_by_meaning_and_nothing_similar_is_nothing() {
        let ranking =
            Ranking::blended(vec![score("a", 6), score("b", 5)], vec![similar("a", 0.3), similar("b", 0.5)], &SCORING);
        assert_eq!(ranking.top().map(|r| r.role_id.as_str()), Some("b"));
        assert_eq!(ranking.decided_by, DecidedBy::Semantic);
        assert_eq!(ranking.roles[0].trigger_score(), 5);
        let agreed = Ranking::blended(vec![score("a", 6), score("b", 5)], vec![similar("a", 0.5)], &SCORING);
        assert_eq!(agreed.decided_by, DecidedBy::Triggers);
        let nothing = Ranking::blended(Vec::new(), vec![similar("a", 0.1)], &SCORING);
        assert_eq!((nothing.roles.len(), nothing.decided_by), (0, DecidedBy::Nothing));
    }

    #[test]
    fn triggers_only_keeps_the_trigger_order_and_scores() {
        let ranking = Ranking::triggers_only(vec![score("a", 7), score("b", 3)], SemanticState::NotNeeded);
        let combined: Vec<_> = ranking.roles.iter().map(|r| (r.role_id.as_str(), r.combined)).collect();
        assert_eq!(combined, [("a", 7.0), ("b", 3.0)]);
        assert_eq!(ranking.decided_by, DecidedBy::Triggers);
        assert_eq!(Ranking::triggers_only(Vec::new(), SemanticState::Loading).decided_by, DecidedBy::Nothing);
    }
}
