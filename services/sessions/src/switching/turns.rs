//! Turns: processing a query with context switching and switching by hand. Each turn decides
//! from the session's current role (see [`super::decision`]), applies the outcome as one
//! conditional update, records a switch and answers with the prompt for the active role.

use switchyard_kit::Identity;
use switchyard_proto::triggers::v1::RoleMatch;

use super::{
    ContextSwitcher,
    decision::Decision,
    now,
    requests::{Query, manual_reason},
    retry::{self, Attempt},
};
use crate::{
    clients::{Detection, TriggersError, registry_id},
    domain::{LiveSession, Message, Role, RoleId, SessionKey, SwitchEvent, SwitchReason, TenantId, excerpt},
    error::SessionsError,
    store::{Record, TurnOutcome, TurnUpdate},
    transition::{system_prompt, transition_context},
};

/// Characters of the query kept with a switch event.
const EXCERPT_CHARS: usize = 200;

/// The result of processing a query or switching by hand.
#[derive(Debug, Clone)]
pub struct Turn {
    pub session: LiveSession,
    pub role: Role,
    pub switched: bool,
    pub previous_role_id: RoleId,
    pub reason: SwitchReason,
    pub reason_detail: String,
    pub scores: Vec<RoleMatch>,
    pub transition_context: String,
    pub system_prompt: String,
}

/// A detection in the ids the tenant knows its roles by (the triggers service knows a
/// tenant's roles by their registry ids); scores of roles the tenant does not see are dropped.
fn in_tenant_ids(detection: Detection, visible: &std::collections::HashMap<String, RoleId>) -> Detection {
    let tenant_id = |id: &str| visible.get(id).map(ToString::to_string);
    Detection {
        role_id: detection.role_id.map(|id| tenant_id(&id).unwrap_or(id)),
        matches: detection
            .matches
            .into_iter()
            .filter_map(|score| Some(RoleMatch { role_id: tenant_id(&score.role_id)?, ..score }))
            .collect(),
        ..detection
    }
}

/// The conditional update that applies `decision` to `session` as it was read.
fn update_for(session: &LiveSession, decision: &Decision, count_turn: bool) -> TurnUpdate {
    TurnUpdate {
        expected_role: session.role_id.clone(),
        expected_switch_count: session.switch_count,
        new_role: decision.new_role.as_ref().map(|role| role.id.clone()),
        count_turn,
        now: now(),
    }
}

impl ContextSwitcher {
    /// Processes a query with context switching (docs/requirements.md#sessions-switching).
    /// With `include_messages`, the turn carries the session's recent messages (the fast path
    /// that skips reading the session is then not taken: the read is needed anyway).
    pub async fn process_query(
        &self,
        caller: &Identity,
        session_id: &str,
        query: &str,
        custom_instructions: Option<&str>,
        force_role_id: Option<&str>,
        include_messages: bool,
    ) -> Result<Turn, SessionsError> {
        let key = Self::key(&caller.tenant, session_id)?;
        let query = Query::new(query, custom_instructions, force_role_id, &self.limits, |id| {
            self.roles.require(&caller.tenant, id, "force_role_id")
        })?;
        if !include_messages && let Some(turn) = self.keep_by_hint(caller, &key, &query).await? {
            return Ok(turn);
        }
        let (key, query) = (&key, &query);
        retry::on_conflict(&key.id, move || async move {
            let session = self.load_open_changeable(caller, key).await?;
            let current = self.role_of(&session);
            let decision = self.decide(&key.tenant, query, &current).await?;
            let update = update_for(&session, &decision, true);
            Ok(match self.apply(key, &update).await? {
                Attempt::Done(after) => Attempt::Done(
                    self.finish(session.recent, after, current, decision, Some(query.text), query.custom_instructions)
                        .await,
                ),
                Attempt::Conflict => Attempt::Conflict,
            })
        })
        .await
    }

    /// What context switching would decide for `query`, without switching or counting the
    /// turn: a caller's tool loop finishes in the role that started it. The turn is the
    /// session as it stands; the role returned beside it is the one the query would have
    /// switched to.
    pub async fn preview(
        &self,
        caller: &Identity,
        session_id: &str,
        query: &str,
        custom_instructions: Option<&str>,
    ) -> Result<(Turn, Option<RoleId>), SessionsError> {
        let key = Self::key(&caller.tenant, session_id)?;
        let query = Query::new(query, custom_instructions, None, &self.limits, |id| {
            self.roles.require(&caller.tenant, id, "force_role_id")
        })?;
        let session = self.load_open_changeable(caller, &key).await?;
        let current = self.role_of(&session);
        let decision = self.decide(&key.tenant, &query, &current).await?;
        let held = decision.new_role.map(|role| role.id);
        let turn = Turn {
            system_prompt: system_prompt(&current, "", query.custom_instructions),
            previous_role_id: current.id.clone(),
            role: current,
            session,
            switched: false,
            reason: decision.reason,
            reason_detail: decision.detail,
            scores: decision.scores,
            transition_context: String::new(),
        };
        Ok((turn, held))
    }

    /// The fast path: from this replica's last known state of the session, decide and apply a
    /// turn that keeps the role in one conditional update, with no read first. `None` when
    /// the full path must run: no usable hint, a switch to make, or a stale hint (which costs
    /// only a conflict).
    async fn keep_by_hint(
        &self,
        caller: &Identity,
        key: &SessionKey,
        query: &Query<'_>,
    ) -> Result<Option<Turn>, SessionsError> {
        let Some((role_id, switch_count, owner)) = self.hints.get(key) else { return Ok(None) };
        // Another user's session: the full path answers, as for a session never seen here.
        if !caller.may_change(owner.as_ref()) {
            return Ok(None);
        }
        let Some(current) = self.roles.get(&key.tenant, &role_id) else { return Ok(None) };
        let decision = self.decide(&key.tenant, query, &current).await?;
        if decision.new_role.is_some() {
            return Ok(None);
        }
        let update = TurnUpdate {
            expected_role: role_id,
            expected_switch_count: switch_count,
            new_role: None,
            count_turn: true,
            now: now(),
        };
        match self.apply(key, &update).await? {
            Attempt::Done(after) => Ok(Some(
                self.finish(Vec::new(), after, current, decision, Some(query.text), query.custom_instructions).await,
            )),
            Attempt::Conflict => {
                self.hints.forget(key);
                Ok(None)
            }
        }
    }

    /// Switches by hand (docs/requirements.md#sessions-switching).
    pub async fn switch(
        &self,
        caller: &Identity,
        session_id: &str,
        new_role_id: &str,
        reason: &str,
    ) -> Result<Turn, SessionsError> {
        let key = Self::key(&caller.tenant, session_id)?;
        let target = self.roles.require(&caller.tenant, new_role_id, "new_role_id")?;
        let detail = manual_reason(reason);
        let (key, target, detail) = (&key, &target, &detail);
        retry::on_conflict(&key.id, move || async move {
            let session = self.load_open_changeable(caller, key).await?;
            let current = self.role_of(&session);
            let decision = Decision::manual(&current, target, detail.clone());
            let update = update_for(&session, &decision, false);
            Ok(match self.apply(key, &update).await? {
                Attempt::Done(after) => {
                    Attempt::Done(self.finish(session.recent, after, current, decision, None, None).await)
                }
                Attempt::Conflict => Attempt::Conflict,
            })
        })
        .await
    }

    /// A conditional update: done (refreshing this replica's hint for the session), lost to
    /// another call, or refused because the session is closed.
    async fn apply(&self, key: &SessionKey, update: &TurnUpdate) -> Result<Attempt<LiveSession>, SessionsError> {
        let outcome = self
            .live
            .apply_turn(key, update)
            .await
            .map_err(|err| SessionsError::unavailable("updating the session", err))?;
        match outcome {
            TurnOutcome::Applied(session) => {
                self.hints.remember(key, session.role_id.clone(), session.switch_count, session.owner.clone());
                Ok(Attempt::Done(session))
            }
            TurnOutcome::Conflict | TurnOutcome::Missing => Ok(Attempt::Conflict),
            TurnOutcome::Closed => Err(SessionsError::SessionClosed(key.id.to_string())),
        }
    }

    /// What to do with `query` while `current` is active: the forced role, or detection
    /// among the roles `tenant` sees.
    async fn decide(&self, tenant: &TenantId, query: &Query<'_>, current: &Role) -> Result<Decision, SessionsError> {
        match &query.forced {
            Some(forced) => Ok(Decision::forced(current, forced)),
            None => {
                let answer = self.detect(tenant, query.text, current).await?;
                Decision::detected(answer, current, |id| self.roles.get(tenant, id))
            }
        }
    }

    /// Asks the triggers service for the best of the roles `tenant` sees, re-registering the
    /// roles first if it forgot the current one, and answers in the tenant's role ids. Only a
    /// failed re-registration is an error here; the triggers' own answer, failure included,
    /// is for the decision to weigh.
    async fn detect(
        &self,
        tenant: &TenantId,
        query: &str,
        current: &Role,
    ) -> Result<Result<Detection, TriggersError>, SessionsError> {
        let visible = self.roles.registry_ids(tenant);
        let candidates = || visible.keys().cloned().collect::<Vec<_>>();
        let current_id = registry_id(current);
        let mut detection = self.triggers.best_role(query, Some(&current_id), candidates()).await;
        if matches!(detection, Err(TriggersError::UnknownRole(_))) {
            detection = match self.roles.ensure_registered(tenant, &current.id).await {
                Ok(()) => self.triggers.best_role(query, Some(&current_id), candidates()).await,
                // The role itself was deleted: decide with no role to hold on to.
                Err(SessionsError::RoleNotFound(_)) => self.triggers.best_role(query, None, candidates()).await,
                Err(err) => return Err(err),
            };
        }
        Ok(detection.map(|detection| in_tenant_ids(detection, &visible)))
    }

    /// Records the outcome of an applied update and builds the answer.
    async fn finish(
        &self,
        recent: Vec<Message>,
        after: LiveSession,
        previous: Role,
        decision: Decision,
        // The query that caused the turn; `None` for a manual switch, which has none to quote.
        query: Option<&str>,
        custom_instructions: Option<&str>,
    ) -> Turn {
        let Decision { new_role, reason, detail, scores, from_score, to_score } = decision;
        let (role, transition) = match new_role {
            Some(next) => {
                let event = SwitchEvent {
                    sequence: after.switch_count,
                    from_role_id: previous.id.clone(),
                    to_role_id: next.id.clone(),
                    reason,
                    reason_detail: detail.clone(),
                    from_score,
                    to_score,
                    query_excerpt: excerpt(query.unwrap_or_default(), EXCERPT_CHARS),
                    occurred_at: after.updated_at,
                };
                let record = Record::Switched { key: after.key.clone(), event, turn_count: after.turn_count };
                self.durable(self.recorder.write_through(vec![record]).await, "context switch");
                tracing::info!(session_id = %after.key.id, from = %previous.id, to = %next.id, reason = reason.as_str(), "context switched");
                let transition = transition_context(&previous, &next, reason, &detail, &recent, query);
                (next, transition)
            }
            None => {
                self.recorder.push(Record::Turns {
                    key: after.key.clone(),
                    turn_count: after.turn_count,
                    at: after.updated_at,
                });
                (previous.clone(), String::new())
            }
        };
        let switched = role.id != previous.id;
        let prompt = system_prompt(&role, &transition, custom_instructions);
        let mut session = after;
        session.recent = recent;
        Turn {
            session,
            role,
            switched,
            previous_role_id: previous.id,
            reason,
            reason_detail: detail,
            scores,
            transition_context: transition,
            system_prompt: prompt,
        }
    }
}
