//! The sessions service's view of the triggers service: picking the best role for a query
//! (with hysteresis towards the session's role) and keeping role registrations in step.

use switchyard_kit::client::{InvalidUrl, TracedChannel, connect_lazy};
use switchyard_proto::triggers::v1::{
    self as pb, GetBestRoleRequest, RegisterRoleTriggersRequest, UnregisterRoleRequest,
    trigger_service_client::TriggerServiceClient,
};
use tonic::Code;

use crate::domain::{Role, RoleId, TriggerKind};

#[derive(Debug, thiserror::Error)]
pub enum TriggersError {
    /// The triggers service does not know the role.
    #[error("the triggers service does not know role `{0}`")]
    UnknownRole(String),
    /// The triggers service rejected a field; the message names it (e.g. `custom_triggers[0].pattern`).
    #[error("{0}")]
    Rejected(String),
    #[error("triggers service unavailable: {0}")]
    Unavailable(String),
}

impl TriggersError {
    fn from_status(status: tonic::Status, role: &str) -> Self {
        match status.code() {
            Code::NotFound => Self::UnknownRole(role.to_owned()),
            Code::InvalidArgument => Self::Rejected(status.message().to_owned()),
            _ => Self::Unavailable(format!("{}: {}", status.code(), status.message())),
        }
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

    /// The best role for `query`, with hysteresis towards `current` when given.
    pub async fn best_role(&self, query: &str, current: Option<&RoleId>) -> Result<Detection, TriggersError> {
        let current_role_id = current.map(ToString::to_string).unwrap_or_default();
        let request = GetBestRoleRequest {
            query: query.to_owned(),
            current_role_id: current_role_id.clone(),
            hysteresis_ratio: None,
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

    /// Registers (or replaces) a role's triggers.
    pub async fn register(&self, role: &Role) -> Result<(), TriggersError> {
        let request = RegisterRoleTriggersRequest {
            role_id: role.id.to_string(),
            domains: role.domains.clone(),
            custom_triggers: role
                .custom_triggers
                .iter()
                .map(|t| pb::Trigger {
                    pattern: t.pattern.clone(),
                    kind: match t.kind {
                        TriggerKind::Keyword => pb::TriggerKind::Keyword,
                        TriggerKind::Phrase => pb::TriggerKind::Phrase,
                        TriggerKind::Regex => pb::TriggerKind::Regex,
                    }
                    .into(),
                    priority: t.priority,
                })
                .collect(),
        };
        self.client
            .clone()
            .register_role_triggers(request)
            .await
            .map_err(|status| TriggersError::from_status(status, role.id.as_str()))?;
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
