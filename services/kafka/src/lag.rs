//! Consumer lag: how far a consumer's position trails a partition's high
//! watermark.

/// The lag of one partition: its high watermark minus the consumer's
/// position (the next offset it will read), never negative.
pub fn lag(high_watermark: i64, position: i64) -> i64 {
    (high_watermark - position).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_distance_to_the_high_watermark_and_never_negative() {
        assert_eq!(lag(100, 40), 60);
        assert_eq!(lag(100, 100), 0);
        assert_eq!(lag(5, 9), 0, "a position past a truncated log is no lag");
    }
}
