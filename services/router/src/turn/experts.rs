//! The multi-agent route: each domain the routing call named resolves to an expert role (a
//! role id, a trigger domain a role draws from, or the nearest role by name; otherwise the
//! general assistant), the experts answer in parallel with their own system prompts (bounded
//! concurrency, each with a timeout), and one synthesis call combines what they said. An
//! expert that fails or is too slow is left out of the synthesis and named in the metadata.

use std::{sync::Arc, time::Duration};

use futures::{StreamExt, stream};
use switchyard_llm::{Message, ModelRef, ToolChoice};
use switchyard_proto::sessions::v1::Role;

use super::{RouteAnswer, Scope};
use crate::{
    cost::{CallKind, ModelCall},
    error::RouterError,
    outcome::Metadata,
    route::Decision,
};

const GENERAL_ASSISTANT: &str = "general-assistant";

/// The role for one requested domain.
pub fn resolve<'a>(domain: &str, roles: &'a [Role]) -> Option<&'a Role> {
    let wanted = normalize(domain);
    if wanted.is_empty() {
        return None;
    }
    let by_id = || roles.iter().find(|r| normalize(&r.id) == wanted);
    let by_domain = || roles.iter().find(|r| r.domains.iter().any(|d| normalize(d) == wanted));
    // "technical" → technology, "legal" → legal-expert, "business" → a role whose name or
    // description says business: the longest shared stem wins, at least five letters long.
    let nearest = || {
        roles
            .iter()
            .filter(|r| r.id != GENERAL_ASSISTANT)
            .map(|r| (best_stem(&wanted, r), r))
            .filter(|(stem, _)| *stem >= 5)
            .max_by_key(|(stem, _)| *stem)
            .map(|(_, r)| r)
    };
    by_id().or_else(by_domain).or_else(nearest)
}

fn normalize(text: &str) -> String {
    text.trim().to_lowercase().replace([' ', '_'], "-")
}

/// The longest common prefix between the domain and any word naming the role.
fn best_stem(domain: &str, role: &Role) -> usize {
    let words = [role.id.as_str(), role.name.as_str(), role.description.as_str()]
        .into_iter()
        .chain(role.domains.iter().map(String::as_str))
        .flat_map(|text| text.split(|c: char| !c.is_alphanumeric()))
        .map(str::to_lowercase)
        .collect::<Vec<_>>();
    domain.split('-').flat_map(|part| words.iter().map(move |w| common_prefix(part, w))).max().unwrap_or(0)
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// The experts for the requested domains: resolved, without repeats, at most `limit`.
pub fn experts_for(domains: &[String], roles: &[Role], limit: usize) -> Vec<Role> {
    let mut experts: Vec<Role> = Vec::new();
    for domain in domains {
        let role = resolve(domain, roles).or_else(|| roles.iter().find(|r| r.id == GENERAL_ASSISTANT));
        if let Some(role) = role
            && !experts.iter().any(|e| e.id == role.id)
        {
            experts.push(role.clone());
        }
    }
    experts.truncate(limit);
    experts
}

fn expert_prompt(role: &Role) -> String {
    format!(
        "{}\n\nYou are one of several experts consulted on the user's request. Answer from your specialty ({}) \
         only: the points, risks and recommendations that specialty sees, concisely. Another step combines the \
         experts' answers.",
        role.system_prompt, role.name
    )
}

fn synthesis_prompt(persona: &str) -> String {
    format!(
        "{persona}\n\nSeveral experts have answered the user's request from their specialties. Write one answer \
         that combines their perspectives: keep what matters, make trade-offs and disagreements explicit, and \
         attribute points to the specialty they come from where it helps the reader."
    )
}

struct ExpertAnswer {
    role: Role,
    result: Result<(String, ModelCall), String>,
}

pub(super) async fn run(
    scope: &Scope<'_>,
    decision: &Decision,
    meta: &mut Metadata,
) -> Result<RouteAnswer, RouterError> {
    let Scope { router, identity, ctx, chain, events, .. } = *scope;
    let roles = match router.sessions.roles(identity).await {
        Ok(roles) => roles,
        Err(status) => {
            meta.degraded.push(format!("multiagent: roles unavailable ({}); answered directly", status.message()));
            return scope.answer_directly().await;
        }
    };
    let mut domains = decision.domains.clone();
    if domains.is_empty() {
        // A forced multi-agent turn names no domains: the session's role answers with the
        // general assistant beside it.
        domains = vec![ctx.routing.role_id.clone(), GENERAL_ASSISTANT.to_owned()];
    }
    let experts = experts_for(&domains, &roles, router.limits.max_experts);
    if decision.domains.len() > router.limits.max_experts {
        meta.degraded.push(format!("multiagent: limited to {} experts", router.limits.max_experts));
    }
    meta.domains = decision.domains.clone();
    meta.expert_role_ids = experts.iter().map(|r| r.id.clone()).collect();

    let answers = consult(scope, experts).await;
    let mut model_calls = Vec::new();
    let mut perspectives = String::new();
    for answer in &answers {
        match &answer.result {
            Ok((text, call)) => {
                model_calls.push(call.clone());
                perspectives.push_str(&format!("\n\n### {} ({})\n{}", answer.role.name, answer.role.id, text.trim()));
            }
            Err(why) => meta.degraded.push(format!("expert {}: {why}", answer.role.id)),
        }
    }
    if perspectives.is_empty() {
        meta.degraded.push("multiagent: no expert answered; answered directly".to_owned());
        return scope.answer_directly().await.map(|mut a| {
            model_calls.append(&mut a.calls);
            a.calls = model_calls;
            a
        });
    }

    let mut messages = ctx.conversation.clone();
    messages.push(Message::user(format!("{}\n\n---\nThe experts' answers:{perspectives}", ctx.message)));
    let call = scope.call(synthesis_prompt(&ctx.persona), messages, Vec::new(), ToolChoice::None);
    let answered = router.llm.stream_answer(chain, call, events).await?;
    model_calls.push(ModelCall::of(CallKind::Synthesis, &answered));
    Ok(RouteAnswer { answered, calls: model_calls })
}

/// Asks every expert at once (at most `expert_concurrency` at a time), each with its own
/// timeout, and returns their answers in the order of the experts.
async fn consult(scope: &Scope<'_>, experts: Vec<Role>) -> Vec<ExpertAnswer> {
    let Scope { router, ctx, chain, .. } = *scope;
    let timeout: Duration = router.limits.expert_timeout;
    let chain: Arc<[ModelRef]> = chain.into();
    let asks = experts.into_iter().map(|role| {
        let chain = chain.clone();
        async move {
            // A role's preferred model answers for it when its provider is configured.
            let mut models: Vec<ModelRef> = role
                .preferred_model
                .as_deref()
                .and_then(|m| m.parse::<ModelRef>().ok())
                .filter(|m| router.llm.providers().get(m).is_ok())
                .into_iter()
                .collect();
            models.extend(chain.iter().filter(|m| !models.contains(m)).cloned().collect::<Vec<_>>());
            let call = scope.call(expert_prompt(&role), ctx.messages_with_user(), Vec::new(), ToolChoice::None);
            let result = match tokio::time::timeout(timeout, router.llm.complete(&models, call)).await {
                Ok(Ok(answered)) => {
                    let call = ModelCall { role_id: role.id.clone(), ..ModelCall::of(CallKind::Expert, &answered) };
                    Ok((answered.completion.content, call))
                }
                Ok(Err(err)) => Err(err.to_string()),
                Err(_) => Err(format!("timed out after {timeout:?}")),
            };
            ExpertAnswer { role, result }
        }
    });
    stream::iter(asks).buffered(router.limits.expert_concurrency).collect().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(id: &str, name: &str, domains: &[&str]) -> Role {
        Role {
            id: id.into(),
            name: name.into(),
            description: String::new(),
            domains: domains.iter().map(|d| (*d).to_owned()).collect(),
            ..Role::default()
        }
    }

    fn catalog() -> Vec<Role> {
        vec![
            role("tech-expert", "Technology Expert", &["technology"]),
            role("finance-expert", "Finance Expert", &["finance"]),
            role("legal-expert", "Legal Expert", &["legal"]),
            role("general-assistant", "General Assistant", &[]),
        ]
    }

    #[test]
    fn domains_resolve_by_id_then_trigger_domain_then_nearest_name() {
        let roles = catalog();
        let id_of = |d: &str| resolve(d, &roles).map(|r| r.id.as_str());
        assert_eq!(id_of("legal-expert"), Some("legal-expert"));
        assert_eq!(id_of("Finance"), Some("finance-expert"));
        assert_eq!(id_of("technical"), Some("tech-expert"));
        assert_eq!(id_of("creative"), None);
        assert_eq!(id_of(""), None);
    }

    #[test]
    fn experts_are_unique_bounded_and_default_to_the_general_assistant() {
        let roles = catalog();
        let domains: Vec<String> =
            ["technical", "technology", "creative", "finance", "legal"].iter().map(|d| (*d).to_owned()).collect();
        let ids: Vec<String> = experts_for(&domains, &roles, 3).into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["tech-expert", "general-assistant", "finance-expert"]);
    }
}
