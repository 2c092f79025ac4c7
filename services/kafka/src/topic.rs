//! What eddy reads about a topic before consuming it: whether compaction
//! can leave gaps in its offsets.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, KafkaResult};

use crate::{Gaps, KafkaSettings};

/// How offset gaps in `topic` are judged, from its `cleanup.policy`: a
/// compacted topic (`compact` or `compact,delete`) has them, a
/// delete-only one must not.
pub fn topic_gaps(settings: &KafkaSettings, topic: &str, timeout: Duration) -> KafkaResult<Gaps> {
    let admin: AdminClient<DefaultClientContext> = settings.admin().create()?;
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    let resources = [ResourceSpecifier::Topic(topic)];
    let described = futures::executor::block_on(admin.describe_configs(&resources, &opts))?;
    let resource = described
        .into_iter()
        .next()
        .ok_or(KafkaError::AdminOpCreation(format!(
            "no configuration returned for topic {topic}"
        )))?
        .map_err(KafkaError::AdminOp)?;
    let policy = resource
        .get("cleanup.policy")
        .and_then(|e| e.value.as_deref())
        .unwrap_or("delete");
    Ok(gaps_of(policy))
}

/// How gaps are judged under a `cleanup.policy` value.
pub fn gaps_of(cleanup_policy: &str) -> Gaps {
    if cleanup_policy
        .split(',')
        .any(|p| p.trim().eq_ignore_ascii_case("compact"))
    {
        Gaps::Compacted
    } else {
        Gaps::Refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_compaction_explains_gaps() {
        assert_eq!(gaps_of("delete"), Gaps::Refused);
        assert_eq!(gaps_of("compact"), Gaps::Compacted);
        assert_eq!(gaps_of("delete, compact"), Gaps::Compacted);
        assert_eq!(gaps_of(""), Gaps::Refused);
    }
}
