//! [`Store`] over any `object_store::ObjectStore`: local directory, memory, S3, GCS, Azure.

use super::{PutMode, Store, StoreError, StoreErrorKind, StoreResult};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutOptions};
use std::ops::Range;
use std::sync::Arc;

#[derive(Debug)]
pub struct ObjectStoreBackend {
    inner: Arc<dyn ObjectStore>,
    prefix: String,
    description: String,
}

impl ObjectStoreBackend {
    pub fn new(inner: Arc<dyn ObjectStore>, prefix: &str, description: String) -> Self {
        let prefix = prefix.trim_matches('/').to_string();
        ObjectStoreBackend { inner, prefix, description }
    }

    fn path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }
}

fn map_err(op: &'static str, key: &str, e: object_store::Error) -> StoreError {
    use object_store::Error as E;
    let kind = match &e {
        E::NotFound { .. } => StoreErrorKind::NotFound,
        E::AlreadyExists { .. } | E::Precondition { .. } => StoreErrorKind::AlreadyExists,
        E::NotImplemented { .. } | E::NotSupported { .. } => StoreErrorKind::Unsupported,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } | E::InvalidPath { .. } => {
            StoreErrorKind::Permanent
        }
        E::Generic { store, source } => classify_generic(store, &source.to_string()),
        _ => StoreErrorKind::Transient,
    };
    StoreError::new(kind, op, key, e.to_string())
}

/// object_store reports most HTTP failures as `Generic`; a local filesystem's ENOSPC or EACCES is
/// not worth retrying, a connection error or 5xx is.
fn classify_generic(store: &str, message: &str) -> StoreErrorKind {
    let m = message.to_ascii_lowercase();
    if m.contains("no such bucket") || m.contains("nosuchbucket") || m.contains("access denied")
        || m.contains("invalidaccesskeyid") || m.contains("signaturedoesnotmatch") || m.contains("forbidden")
        || m.contains("permission denied")
    {
        return StoreErrorKind::Permanent;
    }
    if store == "LocalFileSystem" && (m.contains("no space left") || m.contains("read-only file system")) {
        return StoreErrorKind::Permanent;
    }
    StoreErrorKind::Transient
}

#[async_trait::async_trait]
impl Store for ObjectStoreBackend {
    async fn put(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let opts = PutOptions {
            mode: match mode {
                PutMode::Create => object_store::PutMode::Create,
                PutMode::Overwrite => object_store::PutMode::Overwrite,
            },
            ..Default::default()
        };
        self.inner.put_opts(&self.path(key), data.into(), opts).await.map_err(|e| map_err("PUT", key, e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        let r = self.inner.get(&self.path(key)).await.map_err(|e| map_err("GET", key, e))?;
        r.bytes().await.map_err(|e| map_err("GET", key, e))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        let want = range.end - range.start;
        let b = self.inner.get_range(&self.path(key), range).await.map_err(|e| map_err("GET", key, e))?;
        if b.len() as u64 != want {
            return Err(StoreError::new(
                StoreErrorKind::Transient,
                "GET",
                key,
                format!("short read: {} of {want} bytes", b.len()),
            ));
        }
        Ok(b)
    }

    async fn head(&self, key: &str) -> StoreResult<u64> {
        let meta = self.inner.head(&self.path(key)).await.map_err(|e| map_err("HEAD", key, e))?;
        Ok(meta.size)
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        match self.inner.delete(&self.path(key)).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_err("DELETE", key, e)),
        }
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        let full = self.path(prefix);
        let strip = if self.prefix.is_empty() { 0 } else { self.prefix.len() + 1 };
        let mut out: Vec<(String, u64)> = self
            .inner
            .list(Some(&full))
            .map_ok(|m| (m.location.as_ref()[strip..].to_string(), m.size))
            .try_collect()
            .await
            .map_err(|e| map_err("LIST", prefix, e))?;
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}
