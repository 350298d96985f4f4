//! The root (uberblock) of a txg: everything needed to open the pool at that txg. Written once as
//! `roots/<txg>` with a create-only PUT (which is also the fencing point), never modified.
//! Layout in docs/format.md ("Root").

use crate::blkptr::BlockPtr;
use crate::blockmap::TreeRef;
use crate::codec::{verify_sealed, Reader, Writer};
use crate::destroying::DestroyingTree;
use crate::error::{Error, Result};
use crate::frees::FreeEntry;
use crate::space::SpaceTotals;
use std::collections::BTreeMap;

pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"FDROOT01");
/// Version 2 added snapshots, clone origins and the trees' page tag; version 3 the free queue
/// (frees.rs); version 4 the trees being destroyed (destroying.rs). A root is written with the
/// oldest version that holds it: without trees being destroyed as version 3, and without queued
/// frees either as version 2, byte for byte as before, so only a pool with such work pending
/// needs a fardisk that knows the newer version. Versions 1 to 3 open.
pub const ROOT_VERSION: u32 = 4;
/// The version of a root with frees queued but no tree being destroyed.
const ROOT_VERSION_NO_DESTROYS: u32 = 3;
/// The version of a root without pending frees.
const ROOT_VERSION_NO_FREES: u32 = 2;
pub const HEAD_MAGIC: u64 = u64::from_le_bytes(*b"FDHEAD01");
pub const HEAD_VERSION: u32 = 1;

pub fn root_key(txg: u64) -> String {
    format!("roots/{txg:016x}")
}
pub const HEAD_KEY: &str = "head";

/// Who holds the pool: shown to a second importer, checked for staleness after a crash.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    pub hostname: String,
    pub pid: u32,
    pub import_id: u128,
    pub since_ms: u64,
    /// False once exported: the next import needs no force.
    pub active: bool,
}

/// What a vdev is for. Stored in the root as its name, a `str` ("log" or "cache"): the bytes
/// are the same as when the role was a string (docs/format.md, "Root").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VdevRole {
    /// An intent log vdev: one device or a mirror.
    Log,
    /// A cache (L2ARC) device.
    Cache,
}

impl VdevRole {
    /// The name stored in the root and shown to the operator.
    pub const fn name(self) -> &'static str {
        match self {
            VdevRole::Log => "log",
            VdevRole::Cache => "cache",
        }
    }

    pub fn parse(name: &str) -> Option<VdevRole> {
        match name {
            "log" => Some(VdevRole::Log),
            "cache" => Some(VdevRole::Cache),
            _ => None,
        }
    }
}

impl std::fmt::Display for VdevRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Compares with the stored name, so a role reads as it is written: `role == "log"`.
impl PartialEq<&str> for VdevRole {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VdevEntry {
    pub role: VdevRole,
    pub mirror: bool,
    pub guid: u64,
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeEntry {
    pub id: u32,
    pub name: String,
    pub size_bytes: u64,
    pub created_txg: u64,
    pub tree: TreeRef,
    pub allocated_blocks: u64,
    pub props: BTreeMap<String, String>,
    /// The snapshot this volume was cloned from (None for an original volume).
    pub origin: Option<u32>,
}

/// A snapshot: a volume's block map as of one txg, frozen. Its id comes from the volume id space
/// and names its page-cache namespace (`tree.tree_id`), so it never shares cached pages with the
/// live volume; its pages in the store are the volume's own, shared copy-on-write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub id: u32,
    /// The volume that owns it (after a promote, the promoted clone).
    pub volume_id: u32,
    pub name: String,
    /// The txg whose root first recorded it: every block it references was born at or before.
    pub txg: u64,
    pub time_ms: u64,
    pub size_bytes: u64,
    pub tree: TreeRef,
    pub allocated_blocks: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Root {
    pub pool_guid: u128,
    pub pool_name: String,
    pub txg: u64,
    pub epoch: u64,
    pub time_ms: u64,
    /// Random per PUT: tells our own retried PUT apart from another writer's.
    pub put_id: u128,
    pub holder: Holder,
    pub next_segment_counter: u64,
    pub next_volume_id: u32,
    pub space: TreeRef,
    pub totals: SpaceTotals,
    /// Space-table deltas for the space pages written by this txg, applied by the next txg.
    pub space_carry: Vec<(u64, i64)>,
    pub props: BTreeMap<String, String>,
    pub vdevs: Vec<VdevEntry>,
    pub volumes: Vec<VolumeEntry>,
    pub snapshots: Vec<SnapshotEntry>,
    /// Subtrees whose space the next txgs free, a bounded number of pages each (frees.rs);
    /// *v3*, empty in older roots.
    pub free_queue: Vec<FreeEntry>,
    /// Destroyed snapshots and former maps freed a slice per txg, in the order they came
    /// (destroying.rs); *v4*, empty in older roots.
    pub destroying: Vec<DestroyingTree>,
}

/// `NO_ORIGIN` in the encoding of `VolumeEntry::origin`.
const NO_ORIGIN: u32 = 0;

pub(crate) fn put_tree(w: &mut Writer, t: &TreeRef) {
    w.u32(t.tree_id).u8(t.levels);
    t.top.encode(w);
    w.u32(t.page_tag);
}

pub(crate) fn get_tree(r: &mut Reader, version: u32) -> Result<TreeRef> {
    let (tree_id, levels, top) = (r.u32()?, r.u8()?, BlockPtr::decode(r)?);
    // Trees have 1 to 8 levels (levels_for_slots, grow): 0 underflowed every descent and walk,
    // more overflows page indices (found by fuzz/fuzz_targets/engine_map_tree.rs).
    if levels == 0 || levels > 8 {
        return Err(Error::corrupt("root", format!("tree {tree_id} has {levels} levels")));
    }
    let page_tag = if version >= 2 { r.u32()? } else { tree_id };
    Ok(TreeRef { tree_id, levels, top, page_tag })
}

fn put_props(w: &mut Writer, props: &BTreeMap<String, String>) {
    w.u16(props.len() as u16);
    for (k, v) in props {
        w.str(k).str(v);
    }
}

fn get_props(r: &mut Reader) -> Result<BTreeMap<String, String>> {
    let n = r.u16()?;
    let mut m = BTreeMap::new();
    for _ in 0..n {
        let k = r.str()?;
        m.insert(k, r.str()?);
    }
    Ok(m)
}

impl Root {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(1024);
        let version = if !self.destroying.is_empty() {
            ROOT_VERSION
        } else if !self.free_queue.is_empty() {
            ROOT_VERSION_NO_DESTROYS
        } else {
            ROOT_VERSION_NO_FREES
        };
        w.u64(ROOT_MAGIC).u32(version).u32(0);
        w.u128(self.pool_guid)
            .str(&self.pool_name)
            .u64(self.txg)
            .u64(self.epoch)
            .u64(self.time_ms)
            .u128(self.put_id);
        let h = &self.holder;
        w.str(&h.hostname).u32(h.pid).u128(h.import_id).u64(h.since_ms).u8(h.active as u8);
        w.u64(self.next_segment_counter).u32(self.next_volume_id);
        put_tree(&mut w, &self.space);
        let t = &self.totals;
        w.u64(t.logical_bytes).u64(t.physical_bytes).u64(t.live_bytes);
        w.u32(self.space_carry.len() as u32);
        for (seg, delta) in &self.space_carry {
            w.u64(*seg).u64(*delta as u64);
        }
        put_props(&mut w, &self.props);
        w.u16(self.vdevs.len() as u16);
        for v in &self.vdevs {
            w.str(v.role.name()).u8(v.mirror as u8).u64(v.guid).u16(v.paths.len() as u16);
            for p in &v.paths {
                w.str(p);
            }
        }
        w.u32(self.volumes.len() as u32);
        for v in &self.volumes {
            w.u32(v.id).str(&v.name).u64(v.size_bytes).u64(v.created_txg);
            put_tree(&mut w, &v.tree);
            w.u64(v.allocated_blocks);
            put_props(&mut w, &v.props);
            w.u32(v.origin.unwrap_or(NO_ORIGIN));
        }
        w.u32(self.snapshots.len() as u32);
        for s in &self.snapshots {
            w.u32(s.id).u32(s.volume_id).str(&s.name).u64(s.txg).u64(s.time_ms).u64(s.size_bytes);
            put_tree(&mut w, &s.tree);
            w.u64(s.allocated_blocks);
        }
        if version >= 3 {
            w.u32(self.free_queue.len() as u32);
            for e in &self.free_queue {
                e.encode(&mut w);
            }
        }
        if version >= 4 {
            w.u32(self.destroying.len() as u32);
            for d in &self.destroying {
                d.encode(&mut w);
            }
        }
        w.seal();
        w.buf
    }

    pub fn decode(bytes: &[u8]) -> Result<Root> {
        let body = verify_sealed(bytes, "root")?;
        let mut r = Reader::new(body, "root");
        let (magic, version, _flags) = (r.u64()?, r.u32()?, r.u32()?);
        if magic != ROOT_MAGIC {
            return Err(Error::corrupt("root", "bad magic: not a fardisk root"));
        }
        if version == 0 || version > ROOT_VERSION {
            return Err(Error::Unavailable(format!(
                "root version {version} is newer than this fardisk"
            )));
        }
        let pool_guid = r.u128()?;
        let pool_name = r.str()?;
        let (txg, epoch, time_ms, put_id) = (r.u64()?, r.u64()?, r.u64()?, r.u128()?);
        let holder = Holder {
            hostname: r.str()?,
            pid: r.u32()?,
            import_id: r.u128()?,
            since_ms: r.u64()?,
            active: r.u8()? != 0,
        };
        let (next_segment_counter, next_volume_id) = (r.u64()?, r.u32()?);
        let space = get_tree(&mut r, version)?;
        let totals =
            SpaceTotals { logical_bytes: r.u64()?, physical_bytes: r.u64()?, live_bytes: r.u64()? };
        let n = r.u32()?;
        let mut space_carry = Vec::new();
        for _ in 0..n {
            space_carry.push((r.u64()?, r.u64()? as i64));
        }
        let props = get_props(&mut r)?;
        let mut vdevs = Vec::new();
        for _ in 0..r.u16()? {
            let role = r.str()?;
            let role = VdevRole::parse(&role)
                .ok_or_else(|| Error::corrupt("root", format!("unknown vdev role '{role}'")))?;
            let (mirror, guid) = (r.u8()? != 0, r.u64()?);
            let mut paths = Vec::new();
            for _ in 0..r.u16()? {
                paths.push(r.str()?);
            }
            vdevs.push(VdevEntry { role, mirror, guid, paths });
        }
        let mut volumes = Vec::new();
        for _ in 0..r.u32()? {
            let (id, name, size_bytes, created_txg) = (r.u32()?, r.str()?, r.u64()?, r.u64()?);
            let tree = get_tree(&mut r, version)?;
            let allocated_blocks = r.u64()?;
            let props = get_props(&mut r)?;
            let origin =
                if version >= 2 { Some(r.u32()?).filter(|o| *o != NO_ORIGIN) } else { None };
            volumes.push(VolumeEntry {
                id,
                name,
                size_bytes,
                created_txg,
                tree,
                allocated_blocks,
                props,
                origin,
            });
        }
        let mut snapshots = Vec::new();
        if version >= 2 {
            for _ in 0..r.u32()? {
                let (id, volume_id, name) = (r.u32()?, r.u32()?, r.str()?);
                let (txg, time_ms, size_bytes) = (r.u64()?, r.u64()?, r.u64()?);
                let tree = get_tree(&mut r, version)?;
                snapshots.push(SnapshotEntry {
                    id,
                    volume_id,
                    name,
                    txg,
                    time_ms,
                    size_bytes,
                    tree,
                    allocated_blocks: r.u64()?,
                });
            }
        }
        let mut free_queue = Vec::new();
        if version >= 3 {
            for _ in 0..r.u32()? {
                free_queue.push(FreeEntry::decode(&mut r)?);
            }
            // Version 3 is written only with something queued (`encode`).
            if version == 3 && free_queue.is_empty() {
                return Err(Error::corrupt("root", "version 3 with an empty free queue"));
            }
        }
        let mut destroying = Vec::new();
        if version >= 4 {
            for _ in 0..r.u32()? {
                destroying.push(DestroyingTree::decode(&mut r)?);
            }
            // Version 4 is written only with a tree being destroyed (`encode`).
            if destroying.is_empty() {
                return Err(Error::corrupt("root", "version 4 without a tree being destroyed"));
            }
        }
        Ok(Root {
            pool_guid,
            pool_name,
            txg,
            epoch,
            time_ms,
            put_id,
            holder,
            next_segment_counter,
            next_volume_id,
            space,
            totals,
            space_carry,
            props,
            vdevs,
            volumes,
            snapshots,
            free_queue,
            destroying,
        })
    }

    /// Encodes and re-parses before the bytes leave the process (pair assertion).
    pub fn encode_verified(&self) -> Result<Vec<u8>> {
        let bytes = self.encode();
        let back = Root::decode(&bytes)?;
        if &back != self {
            return Err(Error::Bug("root does not survive its own encoding".into()));
        }
        Ok(bytes)
    }
}

/// The head hint: the newest txg known to be published. Import starts here and probes forward, so a
/// stale hint (a crash between the root PUT and the head PUT) costs one extra GET.
pub fn encode_head(txg: u64) -> Vec<u8> {
    let mut w = Writer::with_capacity(32);
    w.u64(HEAD_MAGIC).u32(HEAD_VERSION).u32(0).u64(txg);
    w.seal();
    w.buf
}

pub fn decode_head(bytes: &[u8]) -> Result<u64> {
    let body = verify_sealed(bytes, "head")?;
    let mut r = Reader::new(body, "head");
    if r.u64()? != HEAD_MAGIC {
        return Err(Error::corrupt("head", "bad magic"));
    }
    // Verified like every structure: a hint of an unknown version is not trusted (import then
    // starts from the newest key under `roots/`, as for a damaged one).
    let version = r.u32()?;
    if version != HEAD_VERSION {
        return Err(Error::corrupt("head", format!("unknown version {version}")));
    }
    let _pad = r.u32()?;
    Ok(r.u64()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with_vdevs() -> Root {
        Root {
            pool_guid: 1,
            pool_name: "tank".into(),
            txg: 2,
            epoch: 1,
            time_ms: 3,
            put_id: 4,
            holder: Holder::default(),
            next_segment_counter: 1,
            next_volume_id: 1,
            space: TreeRef { tree_id: u32::MAX, levels: 1, top: BlockPtr::HOLE, page_tag: 0 },
            totals: SpaceTotals::default(),
            space_carry: Vec::new(),
            props: BTreeMap::new(),
            vdevs: vec![
                VdevEntry {
                    role: VdevRole::Log,
                    mirror: true,
                    guid: 0x77,
                    paths: vec!["/a".into(), "/b".into()],
                },
                VdevEntry {
                    role: VdevRole::Cache,
                    mirror: false,
                    guid: 0,
                    paths: vec!["/c".into()],
                },
            ],
            volumes: Vec::new(),
            snapshots: Vec::new(),
            free_queue: Vec::new(),
            destroying: Vec::new(),
        }
    }

    /// The vdev list as it was stored when the role was a `String`: `u16 count`, then per vdev
    /// `str role`, `u8 mirror`, `u64 guid`, `u16 path count`, `str` paths.
    #[test]
    fn vdev_roles_are_stored_as_their_names() {
        let mut want = Vec::new();
        want.extend_from_slice(&2u16.to_le_bytes());
        want.extend_from_slice(&3u16.to_le_bytes());
        want.extend_from_slice(b"log");
        want.push(1);
        want.extend_from_slice(&0x77u64.to_le_bytes());
        want.extend_from_slice(&2u16.to_le_bytes());
        for p in [b"/a", b"/b"] {
            want.extend_from_slice(&2u16.to_le_bytes());
            want.extend_from_slice(p);
        }
        want.extend_from_slice(&5u16.to_le_bytes());
        want.extend_from_slice(b"cache");
        want.push(0);
        want.extend_from_slice(&0u64.to_le_bytes());
        want.extend_from_slice(&1u16.to_le_bytes());
        want.extend_from_slice(&2u16.to_le_bytes());
        want.extend_from_slice(b"/c");
        let root = root_with_vdevs();
        let bytes = root.encode();
        assert!(bytes.windows(want.len()).any(|w| w == want.as_slice()), "vdev bytes changed");
        assert_eq!(Root::decode(&bytes).expect("decodes"), root);
    }

    #[test]
    fn an_unknown_vdev_role_is_refused() {
        let mut bytes = root_with_vdevs().encode();
        let at = bytes.windows(5).position(|w| w == b"cache").expect("cache role");
        bytes[at..at + 5].copy_from_slice(b"spare");
        let body_len = bytes.len() - 8;
        let sum = crate::codec::checksum64(&bytes[..body_len]);
        bytes[body_len..].copy_from_slice(&sum.to_le_bytes());
        let e = Root::decode(&bytes).expect_err("unknown role").to_string();
        assert!(e.contains("unknown vdev role 'spare'"), "{e}");
    }

    #[test]
    fn roles_compare_with_their_names() {
        assert_eq!(VdevRole::parse("log"), Some(VdevRole::Log));
        assert_eq!(VdevRole::parse("Log"), None);
        assert!(VdevRole::Cache == "cache" && VdevRole::Log != "cache");
        assert_eq!(serde_json::to_string(&VdevRole::Log).expect("json"), "\"log\"");
    }
}
