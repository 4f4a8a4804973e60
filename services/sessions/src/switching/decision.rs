//! The switch decision (docs/requirements.md#sessions-switching): from the caller's forced
//! role, a manual switch, or the triggers service's answer (with its hysteresis,
//! docs/requirements.md#triggers-hysteresis), whether a session keeps its role or switches, to
//! which role and why. No I/O: the core asks the triggers service and applies the outcome.

use switchyard_proto::triggers::v1::{BestRoleReason, RoleMatch};

use crate::{
    clients::{Detection, TriggersError},
    domain::{Role, RoleId, SwitchReason},
    error::SessionsError,
};

/// What to do with a session's role for one turn.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The role to switch to; `None` keeps the current one.
    pub new_role: Option<Role>,
    pub reason: SwitchReason,
    pub detail: String,
    pub scores: Vec<RoleMatch>,
    pub from_score: u32,
    pub to_score: u32,
}

impl Decision {
    fn unscored(new_role: Option<Role>, reason: SwitchReason, detail: String) -> Self {
        Self { new_role, reason, detail, scores: Vec::new(), from_score: 0, to_score: 0 }
    }

    /// The caller forced `forced` (`force_role_id`, docs/requirements.md#sessions-switching): a
    /// switch, unless it is already active.
    pub fn forced(current: &Role, forced: &Role) -> Self {
        if forced.id == current.id {
            let detail = format!("forced to {}, which is already active", current.id);
            Self::unscored(None, SwitchReason::Forced, detail)
        } else {
            Self::unscored(Some(forced.clone()), SwitchReason::Forced, format!("forced to {}", forced.id))
        }
    }

    /// A switch by hand to `target` (`manually_switch_context`,
    /// docs/requirements.md#sessions-switching); none when it is active.
    pub fn manual(current: &Role, target: &Role, detail: String) -> Self {
        Self::unscored((target.id != current.id).then(|| target.clone()), SwitchReason::Manual, detail)
    }

    /// From the triggers service's `answer` while `current` is active; `known` finds the roles
    /// this service has. The triggers service choosing a role unknown here keeps the current
    /// one, and so does detection being down. A query it rejects is the caller's error.
    pub fn detected(
        answer: Result<Detection, TriggersError>,
        current: &Role,
        known: impl Fn(&RoleId) -> Option<Role>,
    ) -> Result<Self, SessionsError> {
        let detection = match answer {
            Ok(detection) => detection,
            Err(TriggersError::Rejected { field, reason, logged }) => {
                let err = SessionsError::invalid(field.unwrap_or_else(|| "query".to_owned()), reason);
                return Err(err.passed_on(logged));
            }
            Err(err) => {
                switchyard_kit::warn_throttled!("detection", %err, role_id = %current.id, "trigger detection unavailable, keeping the current role");
                let detail = format!("trigger detection unavailable ({err}); kept {}", current.id);
                return Ok(Self::unscored(None, SwitchReason::DetectionUnavailable, detail));
            }
        };
        let chosen = detection.role_id.as_deref().filter(|id| *id != current.id.as_str());
        let target = chosen.and_then(|id| RoleId::parse(id).ok()).and_then(|id| known(&id));
        if chosen.is_some() && target.is_none() {
            tracing::warn!(role_id = ?chosen, "triggers chose a role this service does not know; keeping the current role");
        }
        let (reason, new_role) = match (target, detection.reason) {
            (Some(role), BestRoleReason::SemanticMatch) => (SwitchReason::Semantic, Some(role)),
            (Some(role), _) => (SwitchReason::Triggered, Some(role)),
            (None, BestRoleReason::KeptByHysteresis) => (SwitchReason::KeptByHysteresis, None),
            (None, BestRoleReason::CurrentIsTop) => (SwitchReason::CurrentIsBest, None),
            (None, _) => (SwitchReason::NoTriggerMatched, None),
        };
        Ok(Self {
            new_role,
            reason,
            detail: detection.explanation,
            scores: detection.matches,
            from_score: detection.current_score,
            to_score: detection.top_score,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::domain::test_role as role;

    /// The roles this service knows in these tests.
    fn known(id: &RoleId) -> Option<Role> {
        ["tech-expert", "finance-expert"].contains(&id.as_str()).then(|| role(id.as_str()))
    }

    fn detection(role_id: Option<&str>, reason: BestRoleReason) -> Detection {
        Detection {
            role_id: role_id.map(str::to_owned),
            kept_current: false,
            reason,
            explanation: "finance 9 vs tech 3".to_owned(),
            top_score: 9,
            current_score: 3,
            matches: vec![RoleMatch { role_id: "finance-expert".to_owned(), score: 9, ..RoleMatch::default() }],
        }
    }

    fn new_role(decision: &Decision) -> Option<&str> {
        decision.new_role.as_ref().map(|r| r.id.as_str())
    }

    #[test]
    fn a_forced_role_switches_unless_it_is_already_active() {
        let switch = Decision::forced(&role("tech-expert"), &role("finance-expert"));
        assert_eq!((new_role(&switch), switch.reason), (Some("finance-expert"), SwitchReason::Forced));
        assert_eq!(switch.detail, "forced to finance-expert");
        let keep = Decision::forced(&role("tech-expert"), &role("tech-expert"));
        assert_eq!((new_role(&keep), keep.reason), (None, SwitchReason::Forced));
        assert_eq!(keep.detail, "forced to tech-expert, which is already active");
    }

    #[test]
    fn a_manual_switch_keeps_its_detail_and_is_a_no_op_to_the_active_role() {
        let switch = Decision::manual(&role("tech-expert"), &role("finance-expert"), "budget talk".to_owned());
        assert_eq!((new_role(&switch), switch.reason), (Some("finance-expert"), SwitchReason::Manual));
        assert_eq!(switch.detail, "budget talk");
        let keep = Decision::manual(&role("tech-expert"), &role("tech-expert"), "again".to_owned());
        assert_eq!((new_role(&keep), keep.reason), (None, SwitchReason::Manual));
    }

    #[test]
    fn a_better_known_role_is_switched_to_with_its_scores() {
        let answer = Ok(detection(Some("finance-expert"), BestRoleReason::TopScore));
        let decision = Decision::detected(answer, &role("tech-expert"), known).unwrap();
        assert_eq!((new_role(&decision), decision.reason), (Some("finance-expert"), SwitchReason::Triggered));
        assert_eq!((decision.from_score, decision.to_score), (3, 9));
        assert_eq!(decision.detail, "finance 9 vs tech 3");
        assert_eq!(decision.scores.len(), 1);
    }

    #[test]
    fn a_role_the_semantic_signal_chose_is_switched_to_as_semantic() {
        let answer = Ok(detection(Some("finance-expert"), BestRoleReason::SemanticMatch));
        let decision = Decision::detected(answer, &role("tech-expert"), known).unwrap();
        assert_eq!((new_role(&decision), decision.reason), (Some("finance-expert"), SwitchReason::Semantic));
    }

    #[test]
    fn the_current_role_is_kept_for_the_reason_the_triggers_gave() {
        let current = role("tech-expert");
        for (reason, kept) in [
            (BestRoleReason::KeptByHysteresis, SwitchReason::KeptByHysteresis),
            (BestRoleReason::CurrentIsTop, SwitchReason::CurrentIsBest),
            (BestRoleReason::NoMatch, SwitchReason::NoTriggerMatched),
        ] {
            let decision = Decision::detected(Ok(detection(Some("tech-expert"), reason)), &current, known).unwrap();
            assert_eq!((new_role(&decision), decision.reason), (None, kept), "{reason:?}");
        }
        let nothing = Decision::detected(Ok(detection(None, BestRoleReason::NoMatch)), &current, known).unwrap();
        assert_eq!((new_role(&nothing), nothing.reason), (None, SwitchReason::NoTriggerMatched));
    }

    #[test]
    fn a_role_unknown_here_keeps_the_current_one() {
        let answer = Ok(detection(Some("legal-expert"), BestRoleReason::TopScore));
        let decision = Decision::detected(answer, &role("tech-expert"), known).unwrap();
        assert_eq!((new_role(&decision), decision.reason), (None, SwitchReason::NoTriggerMatched));
    }

    #[test]
    fn detection_down_keeps_the_role_and_says_why() {
        let answer = Err(TriggersError::Unavailable { message: "connection refused".to_owned(), logged: false });
        let decision = Decision::detected(answer, &role("tech-expert"), known).unwrap();
        assert_eq!((new_role(&decision), decision.reason), (None, SwitchReason::DetectionUnavailable));
        assert_eq!(
            decision.detail,
            "trigger detection unavailable (triggers service unavailable: connection refused); kept tech-expert"
        );
    }

    #[test]
    fn a_rejected_query_is_the_callers_error_naming_the_field() {
        let rejected = |field: Option<&str>| {
            let answer = Err(TriggersError::Rejected {
                field: field.map(str::to_owned),
                reason: "too long".to_owned(),
                logged: false,
            });
            match Decision::detected(answer, &role("tech-expert"), known).unwrap_err() {
                SessionsError::InvalidArgument { field, reason } => (field, reason),
                other => panic!("expected an invalid argument, got {other:?}"),
            }
        };
        assert_eq!(rejected(Some("query")), ("query".to_owned(), "too long".to_owned()));
        assert_eq!(rejected(None), ("query".to_owned(), "too long".to_owned()));
    }
}
