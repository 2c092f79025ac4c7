//! Which collections the API may create: topics from an allow-list (never
//! an internal `__*` topic, which eddy would read with its own Kafka
//! credentials and serve back) and at most so many collections.

use eddy_model::CollectionDef;

use crate::error::ApiError;

/// The rules a create request must pass.
#[derive(Debug, Clone)]
pub struct CollectionPolicy {
    topic_patterns: Vec<String>,
    max_collections: usize,
}

impl CollectionPolicy {
    /// Topics matching one of `topic_patterns` (`*` matches any run of
    /// characters; empty entries are ignored), at most `max_collections`.
    pub fn new(topic_patterns: Vec<String>, max_collections: usize) -> Self {
        let topic_patterns = topic_patterns
            .into_iter()
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        Self {
            topic_patterns,
            max_collections,
        }
    }

    /// Allows creating `def` next to `existing` collections (`exists`:
    /// `def` names one of them, so nothing new would be created).
    pub fn check(
        &self,
        def: &CollectionDef,
        existing: usize,
        exists: bool,
    ) -> Result<(), ApiError> {
        if def.topic.starts_with("__") {
            return Err(ApiError::Forbidden(format!(
                "topic {:?} is internal to Kafka; collections cannot read it",
                def.topic
            )));
        }
        if !self
            .topic_patterns
            .iter()
            .any(|p| glob_matches(p, &def.topic))
        {
            return Err(ApiError::Forbidden(format!(
                "topic {:?} is not in this service's topic allow-list",
                def.topic
            )));
        }
        if !exists && existing >= self.max_collections {
            return Err(ApiError::Conflict(format!(
                "this service holds at most {} collections",
                self.max_collections
            )));
        }
        Ok(())
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of
/// characters (possibly empty) and every other character itself.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = parts.collect();
    let Some((last, middle)) = pieces.split_last() else {
        // No `*`: the whole text must be the pattern.
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(topic: &str) -> CollectionDef {
        CollectionDef {
            topic: topic.into(),
            ..CollectionDef::new("c", 4)
        }
    }

    #[test]
    fn globs() {
        assert!(glob_matches("*", "anything"));
        assert!(glob_matches("emb.*", "emb.docs"));
        assert!(!glob_matches("emb.*", "other"));
        assert!(glob_matches("a*b*c", "a-x-b-y-c"));
        assert!(!glob_matches("a*b*c", "a-x-c-b"));
        assert!(glob_matches("exact", "exact"));
        assert!(!glob_matches("exact", "exactly"));
        assert!(glob_matches("*-prod", "docs-prod"));
        assert!(!glob_matches("ab*ba", "aba"));
    }

    #[test]
    fn internal_topics_never_and_others_by_pattern_and_cap() {
        let open = CollectionPolicy::new(vec!["*".into()], 2);
        let status = |r: Result<(), ApiError>| r.err().map(|e| e.status().as_u16());
        assert_eq!(
            status(open.check(&def("__consumer_offsets"), 0, false)),
            Some(403)
        );
        assert_eq!(status(open.check(&def("docs"), 0, false)), None);
        assert_eq!(status(open.check(&def("docs"), 2, false)), Some(409));
        // Re-declaring an existing collection is not a new one.
        assert_eq!(status(open.check(&def("docs"), 2, true)), None);
        let narrow = CollectionPolicy::new(vec!["emb.*".into(), " ".into()], 10);
        assert_eq!(status(narrow.check(&def("emb.docs"), 0, false)), None);
        assert_eq!(status(narrow.check(&def("payroll"), 0, false)), Some(403));
    }
}
