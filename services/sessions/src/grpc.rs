//! The gRPC adapters: proto ⇄ domain conversion and error mapping. The caller's tenant, user
//! and administrator flag come from the kit's identity layer, which has already checked them.

use std::{sync::Arc, time::Duration};

use switchyard_kit::{
    Identity,
    proto_time::{timestamp, timestamp_ms},
    to_status,
};
use switchyard_proto::{
    sessions::v1::{self as pb, role_service_server::RoleService, session_service_server::SessionService},
    triggers::v1 as triggers_pb,
};
use tonic::{Request, Response, Status};

use crate::{
    clients::{kind_from_proto, kind_to_proto},
    domain::{LiveSession, Message, MessageRole, Role, SessionStatus, SwitchEvent, SwitchReason},
    error::SessionsError,
    roles::{RoleCatalog, RoleInput},
    switching::{ContextSwitcher, NewMessage, NewSession, Turn},
};

fn status(err: SessionsError) -> Status {
    to_status(&err)
}

fn count(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn session_to_proto(session: &LiveSession) -> pb::Session {
    let expires = session.updated_at + chrono::Duration::from_std(session.ttl).unwrap_or_default();
    pb::Session {
        session_id: session.key.id.to_string(),
        role_id: session.role_id.to_string(),
        status: match session.status {
            SessionStatus::Active => pb::SessionStatus::Active,
            SessionStatus::Closed => pb::SessionStatus::Closed,
        }
        .into(),
        turn_count: count(session.turn_count),
        switch_count: count(session.switch_count),
        created_at: Some(timestamp(session.created_at)),
        updated_at: Some(timestamp(session.updated_at)),
        expires_at: Some(timestamp(expires)),
        metadata: session.metadata.clone().into_iter().collect(),
        tenant_id: session.key.tenant.to_string(),
        user_id: session.owner.as_ref().map(ToString::to_string).unwrap_or_default(),
    }
}

fn role_to_proto(role: &Role) -> pb::Role {
    pb::Role {
        id: role.id.to_string(),
        name: role.name.clone(),
        description: role.description.clone(),
        domains: role.domains.clone(),
        system_prompt: role.system_prompt.clone(),
        custom_triggers: role
            .custom_triggers
            .iter()
            .map(|t| triggers_pb::Trigger {
                pattern: t.pattern.clone(),
                kind: kind_to_proto(t.kind).into(),
                priority: t.priority,
            })
            .collect(),
        preferred_model: role.preferred_model.clone(),
        created_at: Some(timestamp(role.created_at)),
        updated_at: Some(timestamp(role.updated_at)),
        built_in: role.tenant.is_none(),
    }
}

fn role_from_proto(role: pb::Role) -> RoleInput {
    RoleInput {
        id: role.id,
        name: role.name,
        description: role.description,
        domains: role.domains,
        system_prompt: role.system_prompt,
        custom_triggers: role
            .custom_triggers
            .into_iter()
            .map(|t| (t.pattern, kind_from_proto(t.kind), t.priority))
            .collect(),
        preferred_model: role.preferred_model,
    }
}

fn reason_to_proto(reason: SwitchReason) -> pb::SwitchReason {
    match reason {
        SwitchReason::Triggered => pb::SwitchReason::Triggered,
        SwitchReason::Forced => pb::SwitchReason::Forced,
        SwitchReason::KeptByHysteresis => pb::SwitchReason::KeptByHysteresis,
        SwitchReason::NoTriggerMatched => pb::SwitchReason::NoTriggerMatched,
        SwitchReason::CurrentIsBest => pb::SwitchReason::CurrentIsBest,
        SwitchReason::Manual => pb::SwitchReason::Manual,
        SwitchReason::DetectionUnavailable => pb::SwitchReason::DetectionUnavailable,
        SwitchReason::Semantic => pb::SwitchReason::Semantic,
    }
}

fn message_role_to_proto(role: MessageRole) -> pb::MessageRole {
    match role {
        MessageRole::User => pb::MessageRole::User,
        MessageRole::Assistant => pb::MessageRole::Assistant,
        MessageRole::System => pb::MessageRole::System,
        MessageRole::Tool => pb::MessageRole::Tool,
    }
}

fn message_role_from_proto(role: i32) -> Option<MessageRole> {
    match pb::MessageRole::try_from(role).ok()? {
        pb::MessageRole::User => Some(MessageRole::User),
        pb::MessageRole::Assistant => Some(MessageRole::Assistant),
        pb::MessageRole::System => Some(MessageRole::System),
        pb::MessageRole::Tool => Some(MessageRole::Tool),
        pb::MessageRole::Unspecified => None,
    }
}

fn message_to_proto(message: &Message) -> pb::ConversationMessage {
    pb::ConversationMessage {
        role: message_role_to_proto(message.role).into(),
        content: message.content.clone(),
        role_id: message.role_id.clone(),
        created_at: Some(timestamp_ms(message.created_at_ms)),
    }
}

fn event_to_proto(event: &SwitchEvent) -> pb::SwitchEvent {
    pb::SwitchEvent {
        sequence: event.sequence,
        from_role_id: event.from_role_id.to_string(),
        to_role_id: event.to_role_id.to_string(),
        reason: reason_to_proto(event.reason).into(),
        reason_detail: event.reason_detail.clone(),
        from_score: event.from_score,
        to_score: event.to_score,
        query_excerpt: event.query_excerpt.clone(),
        occurred_at: Some(timestamp(event.occurred_at)),
    }
}

fn ttl_from_proto(ttl: Option<prost_types::Duration>) -> Result<Option<Duration>, SessionsError> {
    match ttl {
        None => Ok(None),
        Some(ttl) if ttl.seconds < 0 || ttl.nanos < 0 => Err(SessionsError::invalid("ttl", "must not be negative")),
        Some(ttl) => Ok(Some(Duration::new(ttl.seconds.unsigned_abs(), ttl.nanos.unsigned_abs()))),
    }
}

pub struct SessionsGrpc {
    switcher: Arc<ContextSwitcher>,
}

impl SessionsGrpc {
    pub fn new(switcher: Arc<ContextSwitcher>) -> Self {
        Self { switcher }
    }
}

#[tonic::async_trait]
impl SessionService for SessionsGrpc {
    async fn create_session(
        &self,
        request: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::CreateSessionResponse>, Status> {
        let caller = Identity::of(&request);
        let request = request.into_inner();
        let new = NewSession {
            session_id: request.session_id,
            initial_role_id: request.initial_role_id,
            metadata: request.metadata.into_iter().collect(),
            ttl: ttl_from_proto(request.ttl).map_err(status)?,
        };
        let (session, role) = self.switcher.create(&caller, new).await.map_err(status)?;
        Ok(Response::new(pb::CreateSessionResponse {
            session: Some(session_to_proto(&session)),
            role: Some(role_to_proto(&role)),
        }))
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::GetSessionResponse>, Status> {
        let caller = Identity::of(&request);
        let request = request.into_inner();
        let (session, role) = self.switcher.get(&caller, &request.session_id).await.map_err(status)?;
        let recent_messages =
            if request.include_messages { session.recent.iter().map(message_to_proto).collect() } else { Vec::new() };
        Ok(Response::new(pb::GetSessionResponse {
            session: Some(session_to_proto(&session)),
            role: Some(role_to_proto(&role)),
            recent_messages,
        }))
    }

    async fn close_session(
        &self,
        request: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let caller = Identity::of(&request);
        let session = self.switcher.close(&caller, &request.get_ref().session_id).await.map_err(status)?;
        Ok(Response::new(pb::CloseSessionResponse { session: Some(session_to_proto(&session)) }))
    }

    async fn process_query(
        &self,
        request: Request<pb::ProcessQueryRequest>,
    ) -> Result<Response<pb::ProcessQueryResponse>, Status> {
        let caller = Identity::of(&request);
        let request = request.into_inner();
        if request.preview {
            if request.force_role_id.is_some() {
                return Err(status(SessionsError::invalid("force_role_id", "is not allowed with preview")));
            }
            let (turn, held) = self
                .switcher
                .preview(&caller, &request.session_id, &request.query, request.custom_instructions.as_deref())
                .await
                .map_err(status)?;
            let recent_messages = if request.include_messages {
                turn.session.recent.iter().map(message_to_proto).collect()
            } else {
                Vec::new()
            };
            let held_role_id = held.map(|id| id.to_string()).unwrap_or_default();
            return Ok(Response::new(pb::ProcessQueryResponse {
                recent_messages,
                held_role_id,
                ..turn_to_proto(turn)
            }));
        }
        let turn = self
            .switcher
            .process_query(
                &caller,
                &request.session_id,
                &request.query,
                request.custom_instructions.as_deref(),
                request.force_role_id.as_deref(),
                request.include_messages,
            )
            .await
            .map_err(status)?;
        let recent_messages = if request.include_messages {
            turn.session.recent.iter().map(message_to_proto).collect()
        } else {
            Vec::new()
        };
        Ok(Response::new(pb::ProcessQueryResponse { recent_messages, ..turn_to_proto(turn) }))
    }

    async fn switch_context(
        &self,
        request: Request<pb::SwitchContextRequest>,
    ) -> Result<Response<pb::SwitchContextResponse>, Status> {
        let caller = Identity::of(&request);
        let request = request.into_inner();
        let turn = self
            .switcher
            .switch(&caller, &request.session_id, &request.new_role_id, &request.reason)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::SwitchContextResponse {
            session_id: turn.session.key.id.to_string(),
            role_id: turn.role.id.to_string(),
            role: Some(role_to_proto(&turn.role)),
            switched: turn.switched,
            previous_role_id: turn.previous_role_id.to_string(),
            transition_context: turn.transition_context,
            session: Some(session_to_proto(&turn.session)),
        }))
    }

    async fn get_history(
        &self,
        request: Request<pb::GetHistoryRequest>,
    ) -> Result<Response<pb::GetHistoryResponse>, Status> {
        let caller = Identity::of(&request);
        let request = request.into_inner();
        let (events, next) = self
            .switcher
            .history(&caller, &request.session_id, request.page_size, &request.page_token)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::GetHistoryResponse {
            events: events.iter().map(event_to_proto).collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn append_messages(
        &self,
        request: Request<pb::AppendMessagesRequest>,
    ) -> Result<Response<pb::AppendMessagesResponse>, Status> {
        let caller = Identity::of(&request);
        let request = request.into_inner();
        let messages = request
            .messages
            .into_iter()
            .map(|m| NewMessage { role: message_role_from_proto(m.role), content: m.content, role_id: m.role_id })
            .collect();
        let session = self
            .switcher
            .append_messages(&caller, &request.session_id, messages, request.append_id)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::AppendMessagesResponse {
            turn_count: count(session.turn_count),
            message_count: session.message_count,
        }))
    }
}

fn turn_to_proto(turn: Turn) -> pb::ProcessQueryResponse {
    pb::ProcessQueryResponse {
        session_id: turn.session.key.id.to_string(),
        role_id: turn.role.id.to_string(),
        role: Some(role_to_proto(&turn.role)),
        switched: turn.switched,
        previous_role_id: turn.previous_role_id.to_string(),
        reason: reason_to_proto(turn.reason).into(),
        reason_detail: turn.reason_detail,
        scores: turn.scores,
        transition_context: turn.transition_context,
        system_prompt: turn.system_prompt,
        session: Some(session_to_proto(&turn.session)),
        recent_messages: Vec::new(),
        held_role_id: String::new(),
    }
}

pub struct RolesGrpc {
    roles: Arc<RoleCatalog>,
}

impl RolesGrpc {
    pub fn new(roles: Arc<RoleCatalog>) -> Self {
        Self { roles }
    }
}

fn required_role(role: Option<pb::Role>) -> Result<pb::Role, Status> {
    role.ok_or_else(|| status(SessionsError::invalid("role", "is required")))
}

#[tonic::async_trait]
impl RoleService for RolesGrpc {
    async fn create_role(
        &self,
        request: Request<pb::CreateRoleRequest>,
    ) -> Result<Response<pb::CreateRoleResponse>, Status> {
        let tenant = Identity::of(&request).tenant;
        let role = required_role(request.into_inner().role)?;
        let role = self.roles.create(&tenant, role_from_proto(role)).await.map_err(status)?;
        Ok(Response::new(pb::CreateRoleResponse { role: Some(role_to_proto(&role)) }))
    }

    async fn get_role(&self, request: Request<pb::GetRoleRequest>) -> Result<Response<pb::GetRoleResponse>, Status> {
        let tenant = Identity::of(&request).tenant;
        let role = self.roles.require(&tenant, &request.get_ref().role_id, "role_id").map_err(status)?;
        Ok(Response::new(pb::GetRoleResponse { role: Some(role_to_proto(&role)) }))
    }

    async fn list_roles(
        &self,
        request: Request<pb::ListRolesRequest>,
    ) -> Result<Response<pb::ListRolesResponse>, Status> {
        let tenant = Identity::of(&request).tenant;
        let request = request.into_inner();
        let (roles, next) =
            self.roles.list(&tenant, &request.domain, request.page_size, &request.page_token).map_err(status)?;
        Ok(Response::new(pb::ListRolesResponse {
            roles: roles.iter().map(role_to_proto).collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn update_role(
        &self,
        request: Request<pb::UpdateRoleRequest>,
    ) -> Result<Response<pb::UpdateRoleResponse>, Status> {
        let tenant = Identity::of(&request).tenant;
        let request = request.into_inner();
        let role = required_role(request.role)?;
        let mask = request.update_mask.map(|m| m.paths).unwrap_or_default();
        let role = self.roles.update(&tenant, role_from_proto(role), &mask).await.map_err(status)?;
        Ok(Response::new(pb::UpdateRoleResponse { role: Some(role_to_proto(&role)) }))
    }

    async fn delete_role(
        &self,
        request: Request<pb::DeleteRoleRequest>,
    ) -> Result<Response<pb::DeleteRoleResponse>, Status> {
        let tenant = Identity::of(&request).tenant;
        self.roles.delete(&tenant, &request.get_ref().role_id).await.map_err(status)?;
        Ok(Response::new(pb::DeleteRoleResponse {}))
    }
}
