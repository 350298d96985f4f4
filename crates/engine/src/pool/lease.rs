//! `multihost=on` (OpenZFS's MMP, for object stores): the writer holds a lease in the store and
//! acknowledges a sync request only while it can prove the lease is still its own, and an
//! importer (`--force` included) waits the lease out before claiming. Without it a writer cut off
//! from the store (exactly when an operator runs `import --force` elsewhere) goes on
//! acknowledging fsyncs from its local log, and those writes are lost when the new writer takes
//! over.
//!
//! The lease is a chain of objects `leases/<n>` written with create-only PUTs, so it works on
//! every store fardisk runs on (no If-Match needed). The writer renews by creating `n+1` every
//! `lease_ms / 4`. Its lease is valid until the moment it *sent* its last successful renewal plus
//! `lease_ms - LEASE_MARGIN_MS`, on its own monotonic clock. An importer reads the newest lease
//! `n`, waits `lease_ms + LEASE_MARGIN_MS`, and then creates `n+1` itself before it claims the
//! root:
//! - if the old writer renewed meanwhile, `n+1` exists and the importer refuses (the pool is
//!   alive elsewhere);
//! - if the old writer's renewal lands after the importer's create, that renewal fails
//!   (AlreadyExists with a foreign import id): the old writer is fenced and acknowledges nothing
//!   more;
//! - the old writer's last successful renewal was sent before the importer read `n`, so its
//!   validity ended before the importer's wait did: from the claim on it acknowledges nothing.
//!   The two margins absorb clock-rate differences between the hosts (a few percent at most).

use super::Inner;
use crate::codec::{verify_sealed, Reader, Writer};
use crate::error::{Error, Result};
use crate::objstore::{PutMode, Store, StoreErrorKind};
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

pub const LEASE_MAGIC: u64 = u64::from_le_bytes(*b"FDLEASE1");
pub const LEASE_VERSION: u32 = 1;
/// `flags` bit: the holder exported the pool; an importer need not wait.
pub const LEASE_RELEASED: u32 = 1;
/// The lease length when the pool does not set `multihost_lease_ms`.
pub const LEASE_MS_DEFAULT: u64 = crate::props::MULTIHOST_LEASE_MS.default_number();
/// Taken off the writer's validity and added to the importer's wait (clock-rate differences).
pub const LEASE_MARGIN_MS: u64 = 2_000;
/// Leases kept behind the newest (older ones are deleted as the writer renews).
const LEASES_KEPT: u64 = 4;
/// How often a sync request that found the lease unproven looks again before failing.
const RECHECK_MS: u64 = 100;

pub fn lease_key(n: u64) -> String {
    format!("leases/{n:016x}")
}

/// One lease object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    pub pool_guid: u128,
    pub import_id: u128,
    pub epoch: u64,
    pub n: u64,
    pub lease_ms: u64,
    /// Wall-clock time of the renewal, for operators only (validity uses monotonic clocks).
    pub time_ms: u64,
    pub hostname: String,
    pub flags: u32,
}

impl LeaseRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(96 + self.hostname.len());
        w.u64(LEASE_MAGIC)
            .u32(LEASE_VERSION)
            .u32(self.flags)
            .u128(self.pool_guid)
            .u128(self.import_id)
            .u64(self.epoch)
            .u64(self.n)
            .u64(self.lease_ms)
            .u64(self.time_ms)
            .str(&self.hostname)
            .seal();
        w.buf
    }

    pub fn decode(buf: &[u8]) -> Result<LeaseRecord> {
        let body = verify_sealed(buf, "lease")?;
        let mut r = Reader::new(body, "lease");
        if r.u64()? != LEASE_MAGIC {
            return Err(Error::corrupt("lease", "bad magic"));
        }
        let version = r.u32()?;
        if version != LEASE_VERSION {
            return Err(Error::corrupt(
                "lease",
                format!("version {version} is not {LEASE_VERSION}"),
            ));
        }
        let flags = r.u32()?;
        let rec = LeaseRecord {
            flags,
            pool_guid: r.u128()?,
            import_id: r.u128()?,
            epoch: r.u64()?,
            n: r.u64()?,
            lease_ms: r.u64()?,
            time_ms: r.u64()?,
            hostname: r.str()?,
        };
        if r.remaining() != 0 {
            return Err(Error::corrupt("lease", "trailing bytes"));
        }
        Ok(rec)
    }
}

/// What the writer knows of its lease.
#[derive(Debug)]
struct LeaseState {
    /// The newest lease this writer created.
    n: u64,
    /// Monotonic time until which this writer may acknowledge.
    valid_until_us: u64,
    /// Set once another writer took the lease: this one acknowledges nothing more.
    fenced: Option<String>,
    /// The loss of the lease was logged (once per loss; a renewal clears it).
    loss_logged: bool,
}

#[derive(Debug)]
pub(crate) struct Lease {
    me: LeaseRecord,
    state: Mutex<LeaseState>,
}

fn newest_lease_n(keys: &[(String, u64)]) -> Option<u64> {
    keys.iter()
        .filter_map(|(k, _)| {
            k.strip_prefix("leases/").and_then(|h| u64::from_str_radix(h, 16).ok())
        })
        .max()
}

async fn read_lease(store: &dyn Store, n: u64) -> Result<Option<LeaseRecord>> {
    match store.get(&lease_key(n)).await {
        Ok(b) => Ok(Some(LeaseRecord::decode(&b)?)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Creates `leases/<n>` for `me`: Ok(true) when ours is there and no newer lease exists (also
/// after an ambiguous answer), Ok(false) when another writer's is there or newer. The listing
/// matters: old leases are deleted, so a writer cut off long enough may find its next key free
/// again although another writer's chain has moved on past it.
async fn create_lease(store: &dyn Store, me: &LeaseRecord) -> Result<bool> {
    if !create_lease_key(store, me).await? {
        return Ok(false);
    }
    let newest = newest_lease_n(&store.list("leases/").await?).unwrap_or(me.n);
    Ok(newest <= me.n)
}

async fn create_lease_key(store: &dyn Store, me: &LeaseRecord) -> Result<bool> {
    match store.put(&lease_key(me.n), Bytes::from(me.encode()), PutMode::Create).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind == StoreErrorKind::AlreadyExists => match read_lease(store, me.n).await? {
            Some(theirs) => Ok(theirs.import_id == me.import_id),
            None => Err(Error::Store(crate::objstore::StoreError::new(
                StoreErrorKind::Transient,
                "PUT",
                &lease_key(me.n),
                "create-only PUT conflicted but no lease is there; retrying",
            ))),
        },
        Err(e) => Err(e.into()),
    }
}

impl Lease {
    /// Import with `multihost=on`: waits out the newest lease (saying how long and why through
    /// `say`), then takes the next one. Refuses when the holder renewed meanwhile.
    pub async fn acquire(
        store: &dyn Store,
        env: &super::Env,
        me_template: LeaseRecord,
        say: &(dyn Fn(String) + Send + Sync),
    ) -> Result<Lease> {
        let keys = store.list("leases/").await?;
        let mut me = me_template;
        if let Some(n) = newest_lease_n(&keys) {
            let held = read_lease(store, n).await?;
            if held.as_ref().is_some_and(|h| h.flags & LEASE_RELEASED != 0) {
                me.n = n + 1;
                return Self::take(store, env, me).await;
            }
            let (lease_ms, holder) = match &held {
                Some(h) => (h.lease_ms, format!("host {} (epoch {})", h.hostname, h.epoch)),
                None => (me.lease_ms, "a writer".to_string()),
            };
            let wait_ms = lease_ms + LEASE_MARGIN_MS;
            say(format!(
                "multihost=on: waiting {:.1} s for the lease of {holder} (lease {n}) to lapse before claiming the pool; if that writer is alive it renews and this import is refused",
                wait_ms as f64 / 1000.0
            ));
            env.clock.sleep(Duration::from_millis(wait_ms)).await;
            if let Some(renewed) = read_lease(store, n + 1).await? {
                return Err(Error::Unavailable(format!(
                    "pool is active on host {} (it renewed its multihost lease while this import waited); export it there first",
                    renewed.hostname
                )));
            }
            me.n = n + 1;
        } else {
            me.n = 1;
        }
        Self::take(store, env, me).await
    }

    /// Creates lease `me.n` for this writer, refusing if another writer's is there.
    async fn take(store: &dyn Store, env: &super::Env, me: LeaseRecord) -> Result<Lease> {
        let sent_us = env.clock.mono_us();
        if !create_lease(store, &me).await? {
            let newest = newest_lease_n(&store.list("leases/").await?).unwrap_or(me.n).max(me.n);
            let theirs = read_lease(store, newest).await?.map(|t| t.hostname).unwrap_or_default();
            return Err(Error::Unavailable(format!("pool is active on host {theirs} (it renewed its multihost lease first); export it there first")));
        }
        let valid_until_us = sent_us + (me.lease_ms - LEASE_MARGIN_MS) * 1000;
        let n = me.n;
        Ok(Lease {
            me,
            state: Mutex::new(LeaseState { n, valid_until_us, fenced: None, loss_logged: false }),
        })
    }

    pub fn lease_ms(&self) -> u64 {
        self.me.lease_ms
    }

    /// One renewal: creates the next lease; on success the lease is valid until the send time
    /// plus `lease_ms - LEASE_MARGIN_MS`. A foreign lease there fences this writer for good.
    pub async fn renew(&self, store: &dyn Store, env: &super::Env) -> Result<()> {
        let fenced = self.state.lock().fenced.clone();
        if let Some(why) = fenced {
            return Err(Error::Fenced(why));
        }
        let mut next = self.me.clone();
        next.n = self.state.lock().n + 1;
        next.time_ms = env.clock.wall_ms();
        let sent_us = env.clock.mono_us();
        if create_lease(store, &next).await? {
            {
                let mut st = self.state.lock();
                st.n = next.n;
                st.loss_logged = false;
                st.valid_until_us =
                    st.valid_until_us.max(sent_us + (self.me.lease_ms - LEASE_MARGIN_MS) * 1000);
            }
            if next.n > LEASES_KEPT {
                let _ = store.delete(&lease_key(next.n - LEASES_KEPT - 1)).await;
            }
            return Ok(());
        }
        let newest = newest_lease_n(&store.list("leases/").await?).unwrap_or(next.n).max(next.n);
        let theirs = read_lease(store, newest).await?;
        let theirs = theirs
            .map(|t| format!("host {} (epoch {})", t.hostname, t.epoch))
            .unwrap_or_else(|| "another writer".into());
        let why =
            format!("pool was imported by {theirs}: its multihost lease replaced this writer's");
        self.state.lock().fenced = Some(why.clone());
        Err(Error::Fenced(why))
    }

    /// Ok while this writer may acknowledge a sync request; otherwise waits up to the lease
    /// length for a renewal to prove it again, then fails with the reason.
    pub async fn check_acknowledge(&self, env: &super::Env) -> Result<()> {
        let deadline_us = env.clock.mono_us() + self.me.lease_ms * 1000;
        loop {
            let (valid_until_us, fenced) = {
                let st = self.state.lock();
                (st.valid_until_us, st.fenced.clone())
            };
            if let Some(why) = fenced {
                return Err(Error::Fenced(why));
            }
            let now = env.clock.mono_us();
            if now < valid_until_us {
                return Ok(());
            }
            if now >= deadline_us {
                let e = Error::Unavailable(format!(
                    "multihost lease lost: it could not be renewed in the store for {:.1} s, so the pool may have been imported elsewhere; this writer acknowledges nothing until it can renew (sync writes fail)",
                    (now - valid_until_us) as f64 / 1e6 + (self.me.lease_ms - LEASE_MARGIN_MS) as f64 / 1000.0
                ));
                if !std::mem::replace(&mut self.state.lock().loss_logged, true) {
                    tracing::error!("{e}");
                }
                return Err(e);
            }
            env.clock.sleep(Duration::from_millis(RECHECK_MS)).await;
        }
    }

    /// At export: the next lease says the pool was released, so the next import need not wait
    /// (the chain goes on, so a writer that was cut off can never renew into it).
    pub async fn release(&self, store: &dyn Store, env: &super::Env) -> Result<()> {
        let mut last = self.me.clone();
        last.n = self.state.lock().n + 1;
        last.time_ms = env.clock.wall_ms();
        last.flags |= LEASE_RELEASED;
        if create_lease(store, &last).await? {
            self.state.lock().n = last.n;
        }
        Ok(())
    }
}

/// The background renewal loop of an imported pool with `multihost=on`.
pub(crate) async fn renew_loop(inner: Arc<Inner>, lease: Arc<Lease>) {
    let every = Duration::from_millis(lease.lease_ms() / 4);
    loop {
        inner.env.clock.sleep(every).await;
        match lease.renew(inner.store.as_ref(), &inner.env).await {
            Ok(()) => {}
            Err(Error::Fenced(why)) => {
                super::held::fence(&inner, &why).await;
                return;
            }
            Err(e) => tracing::warn!(error = %e, "could not renew the multihost lease; will retry"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> LeaseRecord {
        LeaseRecord {
            pool_guid: 0x0102,
            import_id: 0x0304,
            epoch: 7,
            n: 9,
            lease_ms: 20_000,
            time_ms: 1_700_000_000_000,
            hostname: "db1".into(),
            flags: LEASE_RELEASED,
        }
    }

    #[test]
    fn a_lease_is_laid_out_as_docs_format_md_says_and_verified_on_read() {
        let bytes = record().encode();
        assert_eq!(bytes.len(), 80 + 2 + 3 + 8);
        assert_eq!(&bytes[0..8], b"FDLEASE1");
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), LEASE_VERSION);
        assert_eq!(u32::from_le_bytes(bytes[12..16].try_into().unwrap()), LEASE_RELEASED);
        assert_eq!(u128::from_le_bytes(bytes[16..32].try_into().unwrap()), 0x0102);
        assert_eq!(u128::from_le_bytes(bytes[32..48].try_into().unwrap()), 0x0304);
        assert_eq!(u64::from_le_bytes(bytes[48..56].try_into().unwrap()), 7);
        assert_eq!(u64::from_le_bytes(bytes[56..64].try_into().unwrap()), 9);
        assert_eq!(u64::from_le_bytes(bytes[64..72].try_into().unwrap()), 20_000);
        assert_eq!(&bytes[80..85], b"\x03\x00db1");
        assert_eq!(LeaseRecord::decode(&bytes).unwrap(), record());
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(LeaseRecord::decode(&bad).is_err(), "bit {bit} flipped was accepted");
        }
        assert!(LeaseRecord::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
