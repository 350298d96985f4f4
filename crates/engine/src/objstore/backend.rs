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
    let detail = e.to_string();
    let message = match hint(&e, &detail) {
        // What to do first; the client's own (long) text after it, shortened to keep one line.
        Some(h) => format!("{h} ({})", shorten(&detail, 240)),
        None => detail,
    };
    StoreError::new(kind, op, key, message)
}

/// What an operator should do about the common failures, which object_store words for
/// developers ("Generic S3 error: ... error sending request").
fn hint(e: &object_store::Error, detail: &str) -> Option<&'static str> {
    let m = detail.to_ascii_lowercase();
    if matches!(e, object_store::Error::Unauthenticated { .. })
        || [
            "invalidaccesskeyid",
            "signaturedoesnotmatch",
            "invalid access key",
            "the access key id you provided",
        ]
        .iter()
        .any(|s| m.contains(s))
    {
        return Some("the store refused the credentials: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the config file)");
    }
    if matches!(e, object_store::Error::PermissionDenied { .. })
        || m.contains("access denied")
        || m.contains("forbidden")
    {
        return Some(
            "the store denied access: check the credentials' permissions on this bucket and prefix",
        );
    }
    if m.contains("nosuchbucket")
        || m.contains("no such bucket")
        || m.contains("bucket does not exist")
    {
        return Some("the bucket does not exist: create it first, or check the URL");
    }
    if m.contains("no space left") {
        return Some("the store's disk is full: free space there (the pool retries by itself)");
    }
    if [
        "error sending request",
        "connection refused",
        "tcp connect error",
        "dns error",
        "timed out",
        "connection reset",
    ]
    .iter()
    .any(|s| m.contains(s))
    {
        return Some("cannot reach the store: check AWS_ENDPOINT_URL (or the URL), the network, and that the store is up");
    }
    None
}

fn shorten(text: &str, chars_max: usize) -> String {
    let one_line = text.replace('\n', " ");
    if one_line.chars().count() <= chars_max {
        return one_line;
    }
    format!("{}...", one_line.chars().take(chars_max).collect::<String>())
}

/// object_store reports most HTTP failures as `Generic`; a local filesystem's ENOSPC or EACCES is
/// not worth retrying, a connection error or 5xx is.
fn classify_generic(store: &str, message: &str) -> StoreErrorKind {
    let m = message.to_ascii_lowercase();
    if m.contains("no such bucket")
        || m.contains("nosuchbucket")
        || m.contains("access denied")
        || m.contains("invalidaccesskeyid")
        || m.contains("signaturedoesnotmatch")
        || m.contains("forbidden")
        || m.contains("permission denied")
    {
        return StoreErrorKind::Permanent;
    }
    if store == "LocalFileSystem"
        && (m.contains("no space left") || m.contains("read-only file system"))
    {
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
        self.inner
            .put_opts(&self.path(key), data.into(), opts)
            .await
            .map_err(|e| map_err("PUT", key, e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        let r = self.inner.get(&self.path(key)).await.map_err(|e| map_err("GET", key, e))?;
        r.bytes().await.map_err(|e| map_err("GET", key, e))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        let want = range.end - range.start;
        let b = self
            .inner
            .get_range(&self.path(key), range)
            .await
            .map_err(|e| map_err("GET", key, e))?;
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
