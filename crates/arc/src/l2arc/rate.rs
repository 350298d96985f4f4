//! A token bucket on the injected clock: the L2ARC writer's bandwidth cap.
//!
//! Tokens accrue at `rate_bytes_per_s` up to one second's worth. The writer may take an entry
//! while the balance is positive and the entry's cost is then charged in full (the balance may
//! go negative), so over any window of `t` seconds it takes at most
//! `rate * (t + 1) + largest entry` bytes.

#[derive(Debug)]
pub(crate) struct TokenBucket {
    rate_bytes_per_s: u64,
    balance_bytes: i64,
    last_refill_ms: u64,
}

impl TokenBucket {
    pub(crate) fn new(rate_bytes_per_s: u64, now_ms: u64) -> Self {
        Self { rate_bytes_per_s, balance_bytes: 0, last_refill_ms: now_ms }
    }

    fn burst_bytes(&self) -> i64 {
        i64::try_from(self.rate_bytes_per_s).unwrap_or(i64::MAX)
    }

    pub(crate) fn refill(&mut self, now_ms: u64) {
        let elapsed_ms = now_ms.saturating_sub(self.last_refill_ms);
        if elapsed_ms == 0 {
            return;
        }
        let earned = u128::from(self.rate_bytes_per_s) * u128::from(elapsed_ms) / 1000;
        let earned = i64::try_from(earned).unwrap_or(i64::MAX);
        self.balance_bytes = self.balance_bytes.saturating_add(earned).min(self.burst_bytes());
        self.last_refill_ms = now_ms;
    }

    pub(crate) fn has_tokens(&self) -> bool {
        self.balance_bytes > 0
    }

    pub(crate) fn spend(&mut self, bytes: u64) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.balance_bytes = self.balance_bytes.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accrues_with_time_and_caps_at_one_second() {
        let mut b = TokenBucket::new(1000, 0);
        assert!(!b.has_tokens());
        b.refill(500);
        assert!(b.has_tokens());
        b.spend(499);
        assert!(b.has_tokens());
        b.spend(1);
        assert!(!b.has_tokens());
        b.refill(100_000);
        b.spend(1000);
        assert!(!b.has_tokens(), "balance capped at one second of rate");
    }

    #[test]
    fn debt_is_paid_back_before_more_is_taken() {
        let mut b = TokenBucket::new(1000, 0);
        b.refill(1);
        b.spend(3000);
        b.refill(2000);
        assert!(!b.has_tokens());
        b.refill(3001);
        assert!(b.has_tokens());
    }
}
