//! One registry version's exemplars as vectors: every distinct text once, each role pointing
//! at its own, and the everyday questions of no domain (`exemplars/general.toml`) as a
//! competing class. Scoring a query is one dot product per distinct text (several hundred: a
//! few microseconds), then a per-role aggregate.

use std::collections::HashMap;

use switchyard_models::{EmbeddingCache, cosines};

use crate::{
    domain::{RoleId, RoleRegistration},
    packs::DomainPacks,
};

/// How close a query is to one role.
#[derive(Debug, Clone, PartialEq)]
pub struct Similarity<'i> {
    pub role_id: &'i RoleId,
    /// Mean cosine similarity of the query to the role's closest exemplars.
    pub similarity: f32,
    /// The role's exemplar (question or description) closest to the query.
    pub nearest: &'i str,
}

/// How close a query is to every role, and to the everyday questions of no domain.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Similarities<'i> {
    /// Every indexed role, in registration order.
    pub roles: Vec<Similarity<'i>>,
    /// Mean cosine similarity of the query to its closest general questions; `None` when
    /// there are none (no competing class).
    pub general: Option<f32>,
}

impl<'i> From<Vec<Similarity<'i>>> for Similarities<'i> {
    fn from(roles: Vec<Similarity<'i>>) -> Self {
        Self { roles, general: None }
    }
}

struct IndexedRole {
    role_id: RoleId,
    /// Indexes into `texts`.
    rows: Vec<u32>,
}

pub struct SemanticIndex {
    texts: Vec<String>,
    /// Row-major, one unit vector per text.
    vectors: Vec<f32>,
    dimensions: usize,
    roles: Vec<IndexedRole>,
    /// Indexes into `texts`: the general questions.
    general: Vec<u32>,
}

impl SemanticIndex {
    /// Every text the roles' exemplars are made of (what must be embedded before `build`).
    pub fn texts(roles: &[RoleRegistration], packs: &DomainPacks) -> Vec<String> {
        let mut texts = Vec::new();
        for role in roles {
            texts.extend(role_texts(role, packs).map(str::to_owned));
        }
        if !roles.is_empty() {
            texts.extend(packs.general_questions().iter().cloned());
        }
        texts.sort_unstable();
        texts.dedup();
        texts
    }

    /// Every domain pack's exemplar texts and the general questions: what most roles' indexes
    /// draw on, embedded once while the model loads.
    pub fn pack_texts(packs: &DomainPacks) -> Vec<String> {
        let mut texts: Vec<String> = packs
            .iter()
            .flat_map(|pack| std::iter::once(&pack.description).chain(&pack.exemplar_questions))
            .chain(packs.general_questions())
            .cloned()
            .collect();
        texts.sort_unstable();
        texts.dedup();
        texts
    }

    /// The index of `roles`, from vectors in `cache` (texts it lacks are left out). Roles
    /// with no exemplar at all (no domains, description or example questions) are not indexed:
    /// the semantic signal cannot speak for them.
    pub fn build<'a>(roles: &'a [RoleRegistration], packs: &'a DomainPacks, cache: &EmbeddingCache) -> Self {
        let mut texts: Vec<String> = Vec::new();
        let mut vectors: Vec<f32> = Vec::new();
        let mut dimensions = 0;
        let mut rows_by_text: HashMap<&str, u32> = HashMap::new();
        let mut indexed = Vec::new();
        let mut rows_of = |role_texts: &mut dyn Iterator<Item = &'a str>| {
            let mut rows = Vec::new();
            for text in role_texts {
                let row = match rows_by_text.get(text) {
                    Some(&row) => row,
                    None => {
                        let Some(vector) = cache.get(text) else { continue };
                        if dimensions == 0 {
                            dimensions = vector.len();
                        }
                        if vector.len() != dimensions {
                            continue;
                        }
                        vectors.extend_from_slice(&vector);
                        texts.push(text.to_owned());
                        let row = (texts.len() - 1) as u32;
                        rows_by_text.insert(text, row);
                        row
                    }
                };
                if !rows.contains(&row) {
                    rows.push(row);
                }
            }
            rows
        };
        for role in roles {
            let rows = rows_of(&mut role_texts(role, packs));
            if !rows.is_empty() {
                indexed.push(IndexedRole { role_id: role.role_id.clone(), rows });
            }
        }
        let general = if indexed.is_empty() {
            Vec::new()
        } else {
            rows_of(&mut packs.general_questions().iter().map(String::as_str))
        };
        Self { texts, vectors, dimensions, roles: indexed, general }
    }

    /// Whether no role has exemplars.
    pub fn is_empty(&self) -> bool {
        self.roles.is_empty()
    }

    pub fn role_count(&self) -> usize {
        self.roles.len()
    }

    pub fn text_count(&self) -> usize {
        self.texts.len()
    }

    /// Every indexed role's similarity to `query` (a unit vector), in registration order, and
    /// the general questions': each the mean of the `nearest` closest exemplars' cosines.
    pub fn similarities(&self, query: &[f32], nearest: usize) -> Similarities<'_> {
        self.score(query, nearest, None)
    }

    /// As `similarities`, as if `left_out` were not an exemplar: for leave-one-out
    /// cross-validation over the exemplars themselves (tests/semantic_eval.rs).
    pub fn similarities_without(&self, query: &[f32], nearest: usize, left_out: &str) -> Similarities<'_> {
        let row = self.texts.iter().position(|text| text == left_out).map(|row| row as u32);
        self.score(query, nearest, row)
    }

    fn score(&self, query: &[f32], nearest: usize, left_out: Option<u32>) -> Similarities<'_> {
        if query.len() != self.dimensions || self.dimensions == 0 {
            return Similarities::default();
        }
        let per_text = cosines(&self.vectors, query);
        let closest = |rows: &[u32]| -> Option<(f32, u32)> {
            let mut closest: Vec<u32> = rows.iter().copied().filter(|&row| Some(row) != left_out).collect();
            let by_similarity = |a: &u32, b: &u32| per_text[*b as usize].total_cmp(&per_text[*a as usize]);
            // Only the `nearest` closest are wanted: partition them off, then order just those.
            let keep = nearest.max(1);
            if closest.len() > keep {
                closest.select_nth_unstable_by(keep - 1, by_similarity);
                closest.truncate(keep);
            }
            closest.sort_unstable_by(by_similarity);
            let first = *closest.first()?;
            let mean = closest.iter().map(|&row| per_text[row as usize]).sum::<f32>() / closest.len() as f32;
            Some((mean, first))
        };
        let roles = self
            .roles
            .iter()
            .filter_map(|role| {
                let (similarity, first) = closest(&role.rows)?;
                Some(Similarity { role_id: &role.role_id, similarity, nearest: &self.texts[first as usize] })
            })
            .collect();
        let general = closest(&self.general).map(|(similarity, _)| similarity);
        Similarities { roles, general }
    }
}

/// A role's exemplar texts: its domains' descriptions and questions, then its own.
fn role_texts<'a>(role: &'a RoleRegistration, packs: &'a DomainPacks) -> impl Iterator<Item = &'a str> {
    let domains = role.domains.iter().filter_map(|domain| packs.get(domain)).flat_map(|pack| {
        std::iter::once(pack.description.as_str()).chain(pack.exemplar_questions.iter().map(String::as_str))
    });
    let own = std::iter::once(role.description.as_str())
        .filter(|description| !description.is_empty())
        .chain(role.example_questions.iter().map(String::as_str));
    domains.chain(own)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(id: &str, description: &str, examples: &[&str]) -> RoleRegistration {
        RoleRegistration {
            role_id: RoleId::parse(id).expect("valid"),
            domains: Vec::new(),
            custom_triggers: Vec::new(),
            description: description.to_owned(),
            example_questions: examples.iter().map(|e| (*e).to_owned()).collect(),
            updated_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn each_role_scores_by_its_closest_exemplars_and_names_the_nearest() {
        let roles = [role("a", "", &["east", "north"]), role("b", "west", &[]), role("empty", "", &[])];
        let texts = SemanticIndex::texts(&roles, &DomainPacks::default());
        assert_eq!(texts, ["east", "north", "west"]);
        // Hand-made unit vectors: the index's arithmetic, no model.
        let cache = EmbeddingCache::default();
        for (text, vector) in [("east", [1.0, 0.0]), ("north", [0.0, 1.0]), ("west", [-1.0, 0.0])] {
            cache.insert(text, vector.to_vec());
        }
        let index = SemanticIndex::build(&roles, &DomainPacks::default(), &cache);
        assert_eq!(index.role_count(), 2, "a role with no exemplar is not indexed");
        let query = [0.6, 0.8];
        let scores = index.similarities(&query, 2).roles;
        assert_eq!(scores[0].role_id.as_str(), "a");
        assert!((scores[0].similarity - 0.7).abs() < 1e-6, "mean of 0.8 and 0.6: {}", scores[0].similarity);
        assert_eq!(scores[0].nearest, "north");
        assert!((scores[1].similarity + 0.6).abs() < 1e-6);
        assert_eq!(index.similarities(&query, 2).general, None, "no general questions: no competing class");
        assert!(index.similarities(&[1.0], 2).roles.is_empty(), "a vector of another model is not scored");
        let without = index.similarities_without(&query, 2, "north").roles;
        assert!((without[0].similarity - 0.6).abs() < 1e-6, "only east is left: {}", without[0].similarity);
        assert_eq!(without[0].nearest, "east");
    }
}
