//! The sessions service's client of the triggers service: picking the best role for a query
//! (with hysteresis towards the session's role) and keeping role registrations in step.

use sha2::{Digest, Sha256};
use switchyard_kit::client::{InvalidUrl, TracedChannel, connect_lazy};
use switchyard_proto::triggers::v1::{
    self as pb, GetBestRoleRequest, RegisterRoleTriggersRequest, UnregisterRoleRequest,
    trigger_service_client::TriggerServiceClient,
};
use tonic::Code;

use crate::domain::{Role, RoleId, TriggerKind};

/// The id a role is registered under with the triggers service, whose registry holds every
/// tenant's roles in one namespace: a built-in role's own id; for a tenant's role, its id (cut
/// to fit) and `.t` with 80 bits of a digest of tenant and id, so two tenants' roles of one id
/// (or a tenant's copy of a built-in) never share a registration.
pub fn registry_id(role: &Role) -> RoleId {
    let Some(tenant) = &role.tenant else {
        return role.id.clone();
    };
    let digest = Sha256::digest(format!("{tenant}\n{}", role.id).as_bytes());
    let hex: String = digest.iter().take(10).map(|byte| format!("{byte:02x}")).collect();
    let prefix: String = role.id.as_str().chars().take(RoleId::MAX_LEN - 2 - hex.len()).collect();
    // Cannot fail: a valid id's prefix, then lowercase letters and digits, within the length.
    RoleId::parse(&format!("{prefix}.t{hex}")).unwrap_or_else(|_| role.id.clone())
}

#[derive(Debug, thiserror::Error)]
pub enum TriggersError {
    /// The triggers service does not know the role.
    #[error("the triggers service does not know role `{0}`")]
    UnknownRole(String),
    /// The triggers service rejected a request field (e.g. `custom_triggers[0].pattern`);
    /// `field` is `None` when the answer did not say which.
    /// `logged`: the triggers service logged it (passed on, it is not logged again).
    #[error("{}{reason}", .field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
    Rejected { field: Option<String>, reason: String, logged: bool },
    #[error("triggers service unavailable: {message}")]
    Unavailable { message: String, logged: bool },
}

impl TriggersError {
    fn from_status(status: tonic::Status, role: &str) -> Self {
        // A triggers replica gone mid-call: its message says the connection broke.
        let status = switchyard_kit::status::from_upstream("triggers", status);
        let logged = switchyard_kit::failures::logged_upstream(&status);
        match status.code() {
            Code::NotFound => Self::UnknownRole(role.to_owned()),
            Code::InvalidArgument => Self::rejected(&status),
            _ => Self::Unavailable { message: format!("{}: {}", status.code(), status.message()), logged },
        }
    }

    /// The field at fault, from the status's `BadRequest` detail (or its message).
    fn rejected(status: &tonic::Status) -> Self {
        let (field, reason) = switchyard_kit::error::field_violation(status);
        Self::Rejected { field, reason, logged: switchyard_kit::failures::logged_upstream(status) }
    }

    /// Whether the triggers service logged this error.
    pub fn logged_upstream(&self) -> bool {
        matches!(self, Self::Rejected { logged: true, .. } | Self::Unavailable { logged: true, .. })
    }
}

/// The decision for one query.
#[derive(Debug, Clone)]
pub struct Detection {
    /// The best role, or `None` when nothing matched.
    pub role_id: Option<String>,
    pub kept_current: bool,
    pub reason: pb::BestRoleReason,
    pub explanation: String,
    pub top_score: u32,
    pub current_score: u32,
    pub matches: Vec<pb::RoleMatch>,
}

#[derive(Clone)]
pub struct TriggersClient {
    client: TriggerServiceClient<TracedChannel>,
}

impl TriggersClient {
    /// A lazily connecting client for `url` (e.g. `http://127.0.0.1:50051`).
    pub fn new(url: &str) -> Result<Self, InvalidUrl> {
        Ok(Self { client: TriggerServiceClient::new(connect_lazy(url)?) })
    }

    /// The best role for `query` among `candidates` (registry ids; see [`registry_id`]), with
    /// hysteresis towards `current` (a registry id) when given.
    pub async fn best_role(
        &self,
        query: &str,
        current: Option<&RoleId>,
        candidates: Vec<String>,
    ) -> Result<Detection, TriggersError> {
        let current_role_id = current.map(ToString::to_string).unwrap_or_default();
        let request = GetBestRoleRequest {
            query: query.to_owned(),
            current_role_id: current_role_id.clone(),
            hysteresis_ratio: None,
            candidate_role_ids: candidates,
        };
        let response = self
            .client
            .clone()
            .get_best_role(request)
            .await
            .map_err(|status| TriggersError::from_status(status, &current_role_id))?
            .into_inner();
        Ok(Detection {
            role_id: (!response.role_id.is_empty()).then(|| response.role_id.clone()),
            kept_current: response.kept_current,
            reason: response.reason(),
            explanation: response.explanation,
            top_score: response.top_score,
            current_score: response.current_score,
            matches: response.matches,
        })
    }

    /// Registers (or replaces) a role's triggers under `registry_id`.
    pub async fn register(&self, registry_id: &RoleId, role: &Role) -> Result<(), TriggersError> {
        let request = RegisterRoleTriggersRequest {
            role_id: registry_id.to_string(),
            domains: role.domains.clone(),
            custom_triggers: role
                .custom_triggers
                .iter()
                .map(|t| pb::Trigger {
                    pattern: t.pattern.clone(),
                    kind: kind_to_proto(t.kind).into(),
                    priority: t.priority,
                })
                .collect(),
            // The role's description is not passed on: the seeded generalist's ("anything that
            // does not call for a domain expert") would draw domain questions to it, and a
            // domain role's is already covered by its domains' exemplars.
            ..RegisterRoleTriggersRequest::default()
        };
        self.client
            .clone()
            .register_role_triggers(request)
            .await
            .map_err(|status| TriggersError::from_status(status, registry_id.as_str()))?;
        Ok(())
    }

    /// Removes a role's triggers; a role the triggers service does not know is fine.
    pub async fn unregister(&self, role: &RoleId) -> Result<(), TriggersError> {
        match self.client.clone().unregister_role(UnregisterRoleRequest { role_id: role.to_string() }).await {
            Ok(_) => Ok(()),
            Err(status) if status.code() == Code::NotFound => Ok(()),
            Err(status) => Err(TriggersError::from_status(status, role.as_str())),
        }
    }
}

/// A role's trigger kind as the triggers service names it.
pub(crate) fn kind_to_proto(kind: TriggerKind) -> pb::TriggerKind {
    match kind {
        TriggerKind::Keyword => pb::TriggerKind::Keyword,
        TriggerKind::Phrase => pb::TriggerKind::Phrase,
        TriggerKind::Regex => pb::TriggerKind::Regex,
    }
}

/// A trigger kind from the wire; `None` for unspecified or unknown values.
pub(crate) fn kind_from_proto(kind: i32) -> Option<TriggerKind> {
    match pb::TriggerKind::try_from(kind).ok()? {
        pb::TriggerKind::Keyword => Some(TriggerKind::Keyword),
        pb::TriggerKind::Phrase => Some(TriggerKind::Phrase),
        pb::TriggerKind::Regex => Some(TriggerKind::Regex),
        pb::TriggerKind::Unspecified => None,
    }
}

#[cfg(test)]
mod tests {
    use switchyard_kit::{ErrorCode, ServiceError, to_status};
    use switchyard_triggers::error::TriggersError as TriggersServiceError;

    use super::*;

    fn rejected(status: tonic::Status) -> (Option<String>, String) {
        match TriggersError::from_status(status, "tech-expert") {
            TriggersError::Rejected { field, reason, .. } => (field, reason),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn the_field_comes_from_the_bad_request_detail() {
        let status = to_status(&TriggersServiceError::invalid("query", "must not be empty".to_owned()));
        assert_eq!(rejected(status), (Some("query".to_owned()), "must not be empty".to_owned()));
    }

    /// An error whose message does not start with its field: only the detail can name it.
    #[derive(Debug, thiserror::Error)]
    #[error("pattern is not a valid regex: unclosed group")]
    struct BadPattern;

    impl ServiceError for BadPattern {
        fn code(&self) -> ErrorCode {
            ErrorCode::InvalidArgument
        }
        fn field(&self) -> Option<&str> {
            Some("custom_triggers[0].pattern")
        }
    }

    #[test]
    fn the_detail_wins_over_the_message_text() {
        let (field, reason) = rejected(to_status(&BadPattern));
        assert_eq!(field.as_deref(), Some("custom_triggers[0].pattern"));
        assert_eq!(reason, "pattern is not a valid regex: unclosed group");
    }

    #[test]
    fn without_a_detail_the_message_is_split_at_the_field() {
        let status = tonic::Status::invalid_argument("domains[1]: unknown domain `x`");
        assert_eq!(rejected(status), (Some("domains[1]".to_owned()), "unknown domain `x`".to_owned()));
        let status = tonic::Status::invalid_argument("bad request");
        assert_eq!(rejected(status), (None, "bad request".to_owned()));
    }

    #[test]
    fn tenants_roles_register_apart_from_each_other_and_from_built_ins() {
        use crate::domain::{TenantId, test_role};
        let builtin = test_role("finance-expert");
        assert_eq!(registry_id(&builtin), builtin.id, "a built-in keeps its id");
        let of = |tenant: &str, id: &str| Role { tenant: Some(TenantId::parse(tenant).unwrap()), ..test_role(id) };
        let acme = registry_id(&of("acme", "finance-expert"));
        assert!(acme.as_str().starts_with("finance-expert.t"), "{acme}");
        assert_ne!(acme, registry_id(&of("globex", "finance-expert")));
        assert_ne!(acme, builtin.id);
        assert_eq!(acme, registry_id(&of("acme", "finance-expert")), "stable");
        let long = of("acme", &"x".repeat(RoleId::MAX_LEN));
        assert_eq!(registry_id(&long).as_str().len(), RoleId::MAX_LEN);
        assert_ne!(registry_id(&long), registry_id(&of("acme", &"x".repeat(RoleId::MAX_LEN - 1))));
    }

    #[test]
    fn a_rejection_prints_as_the_triggers_service_wrote_it() {
        let with_field =
            TriggersError::Rejected { field: Some("query".to_owned()), reason: "too long".to_owned(), logged: false };
        assert_eq!(with_field.to_string(), "query: too long");
        let without = TriggersError::Rejected { field: None, reason: "bad request".to_owned(), logged: false };
        assert_eq!(without.to_string(), "bad request");
    }
}
