//! Which exports a server offers, and a simple fixed table of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::device::BlockDevice;

/// Name and human-readable description of one export (NBD_OPT_LIST, NBD_INFO_*).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    pub name: String,
    pub description: String,
}

/// The server asks the provider for exports by name. The empty name is the protocol's
/// "default export"; what it means is up to the provider.
pub trait ExportProvider: Send + Sync + 'static {
    fn list(&self) -> Vec<ExportInfo>;
    fn open(&self, name: &str) -> Option<Arc<dyn BlockDevice>>;

    /// Description of one export (NBD_INFO_DESCRIPTION); looked up in `list()` unless a
    /// provider has a cheaper way.
    fn description(&self, name: &str) -> Option<String> {
        self.list().into_iter().find(|info| info.name == name).map(|info| info.description)
    }

    /// The server's canonical name for `name` (NBD_INFO_NAME); differs from `name` for
    /// the default export.
    fn canonical_name(&self, name: &str) -> Option<String> {
        Some(name.to_owned())
    }
}

struct ExportEntry {
    description: String,
    device: Arc<dyn BlockDevice>,
}

/// A fixed set of named exports. The first export added also answers to the empty
/// (default) name unless an export named "" is added explicitly.
#[derive(Default)]
pub struct ExportMap {
    entries: BTreeMap<String, ExportEntry>,
    default_name: Option<String>,
}

impl ExportMap {
    pub fn new() -> ExportMap {
        ExportMap::default()
    }

    pub fn with_export(
        mut self,
        name: &str,
        description: &str,
        device: Arc<dyn BlockDevice>,
    ) -> ExportMap {
        if self.default_name.is_none() {
            self.default_name = Some(name.to_owned());
        }
        let entry = ExportEntry { description: description.to_owned(), device };
        self.entries.insert(name.to_owned(), entry);
        self
    }

    fn resolve<'a>(&'a self, name: &'a str) -> Option<(&'a str, &'a ExportEntry)> {
        if let Some(entry) = self.entries.get(name) {
            return Some((name, entry));
        }
        if name.is_empty() {
            let default_name = self.default_name.as_deref()?;
            return self.entries.get(default_name).map(|entry| (default_name, entry));
        }
        None
    }
}

impl ExportProvider for ExportMap {
    fn list(&self) -> Vec<ExportInfo> {
        self.entries
            .iter()
            .map(|(name, entry)| ExportInfo {
                name: name.clone(),
                description: entry.description.clone(),
            })
            .collect()
    }

    fn open(&self, name: &str) -> Option<Arc<dyn BlockDevice>> {
        self.resolve(name).map(|(_, entry)| entry.device.clone())
    }

    fn description(&self, name: &str) -> Option<String> {
        self.resolve(name).map(|(_, entry)| entry.description.clone())
    }

    fn canonical_name(&self, name: &str) -> Option<String> {
        self.resolve(name).map(|(canonical, _)| canonical.to_owned())
    }
}
