//! The gRPC adapter: proto ⇄ domain conversion and error mapping, nothing else.

use std::sync::Arc;

use switchyard_kit::{proto_time::timestamp, to_status};
use switchyard_proto::triggers::v1::{self as pb, trigger_service_server::TriggerService};
use tonic::{Request, Response, Status};

use crate::{
    blend::{DecidedBy, Ranking, SemanticState},
    domain::{RoleRegistration, Trigger, TriggerKind},
    error::TriggersError,
    hysteresis::{BestRole, BestRoleReason},
    matcher::MatchedTrigger,
    registry::{RoleInput, TriggerInput, TriggerRegistry},
};

pub struct TriggersGrpc {
    registry: Arc<TriggerRegistry>,
}

impl TriggersGrpc {
    pub fn new(registry: Arc<TriggerRegistry>) -> Self {
        Self { registry }
    }
}

fn status(err: TriggersError) -> Status {
    to_status(&err)
}

fn kind_to_proto(kind: TriggerKind) -> pb::TriggerKind {
    match kind {
        TriggerKind::Keyword => pb::TriggerKind::Keyword,
        TriggerKind::Phrase => pb::TriggerKind::Phrase,
        TriggerKind::Regex => pb::TriggerKind::Regex,
    }
}

fn kind_from_proto(kind: i32) -> Option<TriggerKind> {
    match pb::TriggerKind::try_from(kind).ok()? {
        pb::TriggerKind::Keyword => Some(TriggerKind::Keyword),
        pb::TriggerKind::Phrase => Some(TriggerKind::Phrase),
        pb::TriggerKind::Regex => Some(TriggerKind::Regex),
        pb::TriggerKind::Unspecified => None,
    }
}

fn trigger_to_proto(trigger: &Trigger) -> pb::Trigger {
    pb::Trigger {
        pattern: trigger.pattern.clone(),
        kind: kind_to_proto(trigger.kind).into(),
        priority: trigger.priority,
    }
}

fn role_to_proto(registration: &RoleRegistration, trigger_count: u32) -> pb::RoleTriggers {
    pb::RoleTriggers {
        role_id: registration.role_id.to_string(),
        domains: registration.domains.clone(),
        custom_triggers: registration.custom_triggers.iter().map(trigger_to_proto).collect(),
        trigger_count,
        updated_at: Some(timestamp(registration.updated_at)),
        description: registration.description.clone(),
        example_questions: registration.example_questions.clone(),
    }
}

fn matched_to_proto(trigger: &MatchedTrigger<'_>) -> pb::MatchedTrigger {
    pb::MatchedTrigger {
        pattern: trigger.pattern.to_string(),
        kind: kind_to_proto(trigger.kind).into(),
        priority: trigger.priority,
        source: trigger.source.to_string(),
    }
}

/// Converts a ranking for the wire.
pub fn ranking_to_proto(ranking: &Ranking<'_>) -> Vec<pb::RoleMatch> {
    ranking
        .roles
        .iter()
        .map(|ranked| {
            let triggers = ranked.triggers.as_ref();
            pb::RoleMatch {
                role_id: ranked.role_id.to_string(),
                score: ranked.trigger_score(),
                base_score: triggers.map_or(0, |t| t.base_score),
                diversity_bonus: triggers.map_or(0, |t| t.diversity_bonus),
                matched_triggers: triggers
                    .map(|t| t.matched.iter().map(matched_to_proto).collect())
                    .unwrap_or_default(),
                semantic_similarity: ranked.semantic.as_ref().map(|s| s.similarity),
                semantic_score: ranked.semantic_score,
                combined_score: ranked.combined,
                nearest_exemplar: ranked.semantic.as_ref().map(|s| s.nearest.to_owned()).unwrap_or_default(),
            }
        })
        .collect()
}

fn decided_by_to_proto(decided_by: DecidedBy) -> pb::DecidingSignal {
    match decided_by {
        DecidedBy::Triggers => pb::DecidingSignal::Triggers,
        DecidedBy::Semantic => pb::DecidingSignal::Semantic,
        DecidedBy::Nothing => pb::DecidingSignal::None,
    }
}

fn semantic_state_to_proto(state: SemanticState) -> pb::SemanticState {
    match state {
        SemanticState::Scored => pb::SemanticState::Scored,
        SemanticState::NotNeeded => pb::SemanticState::NotNeeded,
        SemanticState::Loading => pb::SemanticState::Loading,
        SemanticState::Unavailable => pb::SemanticState::Unavailable,
    }
}

#[tonic::async_trait]
impl TriggerService for TriggersGrpc {
    async fn register_role_triggers(
        &self,
        request: Request<pb::RegisterRoleTriggersRequest>,
    ) -> Result<Response<pb::RegisterRoleTriggersResponse>, Status> {
        let request = request.into_inner();
        let input = RoleInput {
            custom_triggers: request
                .custom_triggers
                .iter()
                .map(|t| TriggerInput {
                    pattern: t.pattern.clone(),
                    kind: kind_from_proto(t.kind),
                    priority: t.priority,
                })
                .collect(),
            role_id: request.role_id,
            domains: request.domains,
            description: request.description,
            example_questions: request.example_questions,
        };
        let (registration, version) = self.registry.register(&input).await.map_err(status)?;
        let page = self.registry.list(registration.role_id.as_str(), 0, "").map_err(status)?;
        let trigger_count = page.roles.first().map_or(0, |(_, count)| *count);
        Ok(Response::new(pb::RegisterRoleTriggersResponse {
            role: Some(role_to_proto(&registration, trigger_count)),
            registry_version: version,
        }))
    }

    async fn unregister_role(
        &self,
        request: Request<pb::UnregisterRoleRequest>,
    ) -> Result<Response<pb::UnregisterRoleResponse>, Status> {
        let version = self.registry.unregister(&request.into_inner().role_id).await.map_err(status)?;
        Ok(Response::new(pb::UnregisterRoleResponse { registry_version: version }))
    }

    async fn list_role_triggers(
        &self,
        request: Request<pb::ListRoleTriggersRequest>,
    ) -> Result<Response<pb::ListRoleTriggersResponse>, Status> {
        let request = request.into_inner();
        let page = self.registry.list(&request.role_id, request.page_size, &request.page_token).map_err(status)?;
        Ok(Response::new(pb::ListRoleTriggersResponse {
            roles: page.roles.iter().map(|(r, count)| role_to_proto(r, *count)).collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
            registry_version: page.version,
        }))
    }

    async fn list_domains(
        &self,
        request: Request<pb::ListDomainsRequest>,
    ) -> Result<Response<pb::ListDomainsResponse>, Status> {
        let include = request.into_inner().include_triggers;
        let domains = self
            .registry
            .packs()
            .iter()
            .map(|pack| pb::Domain {
                name: pack.name.clone(),
                description: pack.description.clone(),
                trigger_count: u32::try_from(pack.triggers.len()).unwrap_or(u32::MAX),
                triggers: if include { pack.triggers.iter().map(trigger_to_proto).collect() } else { Vec::new() },
                example_questions: if include { pack.exemplar_questions.clone() } else { Vec::new() },
            })
            .collect();
        Ok(Response::new(pb::ListDomainsResponse { domains }))
    }

    async fn detect_triggers(
        &self,
        request: Request<pb::DetectTriggersRequest>,
    ) -> Result<Response<pb::DetectTriggersResponse>, Status> {
        let response = self
            .registry
            .detect(&request.get_ref().query, |ranking, version| pb::DetectTriggersResponse {
                matches: ranking_to_proto(ranking),
                registry_version: version,
                decided_by: decided_by_to_proto(ranking.decided_by).into(),
                semantic_state: semantic_state_to_proto(ranking.semantic_state).into(),
            })
            .await
            .map_err(status)?;
        Ok(Response::new(response))
    }

    async fn get_best_role(
        &self,
        request: Request<pb::GetBestRoleRequest>,
    ) -> Result<Response<pb::GetBestRoleResponse>, Status> {
        let request = request.into_inner();
        let response = self
            .registry
            .best_role_among(
                &request.query,
                &request.current_role_id,
                request.hysteresis_ratio,
                &request.candidate_role_ids,
                best_role_to_proto,
            )
            .await
            .map_err(status)?;
        Ok(Response::new(response))
    }
}

fn best_role_to_proto(best: BestRole, ranking: &Ranking<'_>, version: u64) -> pb::GetBestRoleResponse {
    let reason = match best.reason {
        BestRoleReason::TopScore => pb::BestRoleReason::TopScore,
        BestRoleReason::CurrentIsTop => pb::BestRoleReason::CurrentIsTop,
        BestRoleReason::KeptByHysteresis => pb::BestRoleReason::KeptByHysteresis,
        BestRoleReason::NoMatch => pb::BestRoleReason::NoMatch,
        BestRoleReason::SemanticMatch => pb::BestRoleReason::SemanticMatch,
    };
    let (top_role_id, top_score) = best.top.map(|(role, score)| (role.to_string(), score)).unwrap_or_default();
    pb::GetBestRoleResponse {
        role_id: best.role_id.map(|r| r.to_string()).unwrap_or_default(),
        kept_current: best.kept_current,
        reason: reason.into(),
        explanation: best.explanation,
        top_score,
        top_role_id,
        current_score: best.current_score,
        hysteresis_ratio: best.hysteresis_ratio,
        matches: ranking_to_proto(ranking),
        registry_version: version,
        top_combined_score: best.top_combined,
        current_combined_score: best.current_combined,
        decided_by: decided_by_to_proto(best.decided_by).into(),
        semantic_state: semantic_state_to_proto(ranking.semantic_state).into(),
    }
}
