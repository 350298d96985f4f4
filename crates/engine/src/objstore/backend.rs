//! [`Store`] over any `object_store::ObjectStore`: local directory, memory, S3, GCS, Azure.

use super::url::{scheme_settings, SchemeSettings};
use super::{BlockCutter, Body, CutBlock, PutMode, Store, StoreError, StoreErrorKind, StoreResult};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetResultPayload, ObjectStore, ObjectStoreExt, PutOptions};
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

    /// A store error with the hint for this store's scheme.
    fn err(&self, op: &'static str, key: &str, e: object_store::Error) -> StoreError {
        map_err(op, key, e, &scheme_settings(&self.description))
    }

    fn path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }
}

fn map_err(op: &'static str, key: &str, e: object_store::Error, s: &SchemeSettings) -> StoreError {
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
    let message = match hint(&e, &detail, s) {
        // What to do first; the client's own (long) text after it, shortened to keep one line.
        Some(h) => format!("{h} ({})", shorten(&detail, 240)),
        None => detail,
    };
    StoreError::new(kind, op, key, message)
}

/// What an operator should do about the common failures, which object_store words for
/// developers ("Generic S3 error: ... error sending request"), naming the settings of the store's
/// own scheme.
fn hint(e: &object_store::Error, detail: &str, s: &SchemeSettings) -> Option<String> {
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
        return Some(format!(
            "the store refused the credentials: check {} (or the config file)",
            s.credentials
        ));
    }
    if matches!(e, object_store::Error::PermissionDenied { .. })
        || m.contains("access denied")
        || m.contains("forbidden")
    {
        return Some(format!(
            "the store denied access: check the credentials' permissions on this {} and prefix \
             ({})",
            s.bucket, s.credentials
        ));
    }
    if m.contains("nosuchbucket")
        || m.contains("no such bucket")
        || m.contains("bucket does not exist")
        || m.contains("containernotfound")
    {
        return Some(format!("the {} does not exist: create it first, or check the URL", s.bucket));
    }
    if m.contains("no space left") {
        return Some(
            "the store's disk is full: free space there (the pool retries by itself)".into(),
        );
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
        return Some(format!(
            "cannot reach the store: check {} (or the URL), the network, and that the store is up",
            s.endpoint
        ));
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
            .map_err(|e| self.err("PUT", key, e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        let r = self.inner.get(&self.path(key)).await.map_err(|e| self.err("GET", key, e))?;
        r.bytes().await.map_err(|e| self.err("GET", key, e))
    }

    /// The body gathered into one buffer, as object_store's own `get_range` does.
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.get_range_body(key, range).await.map(Body::into_contiguous)
    }

    /// A network store's body as its chunks arrive (no gathering copy); a local file's range
    /// read into one buffer.
    async fn get_range_body(&self, key: &str, range: Range<u64>) -> StoreResult<Body> {
        let want = range.end - range.start;
        let r = self
            .inner
            .get_opts(&self.path(key), GetOptions::new().with_range(Some(range)))
            .await
            .map_err(|e| self.err("GET", key, e))?;
        let body = match r.payload {
            GetResultPayload::Stream(mut chunks) => {
                let mut body = Body::default();
                while let Some(chunk) =
                    chunks.try_next().await.map_err(|e| self.err("GET", key, e))?
                {
                    // A server sending more than it was asked for is cut off at once.
                    if body.len() + chunk.len() as u64 > want {
                        check_length(key, body.len() + chunk.len() as u64, want)?;
                    }
                    body.push(chunk);
                }
                body
            }
            GetResultPayload::File(..) => {
                Body::from(r.bytes().await.map_err(|e| self.err("GET", key, e))?)
            }
        };
        check_length(key, body.len(), want)?;
        Ok(body)
    }

    /// A network store's body cut into blocks as its chunks arrive, each chunk dropped once
    /// copied (objstore/blocks.rs); a local file's range read into one buffer and cut.
    async fn get_range_blocks(
        &self,
        key: &str,
        range: Range<u64>,
        ends: &[u64],
    ) -> StoreResult<Vec<CutBlock>> {
        super::blocks::check_cut(key, &range, ends)?;
        let r = self
            .inner
            .get_opts(&self.path(key), GetOptions::new().with_range(Some(range)))
            .await
            .map_err(|e| self.err("GET", key, e))?;
        let mut cutter = BlockCutter::new(ends);
        match r.payload {
            GetResultPayload::Stream(mut chunks) => {
                while let Some(chunk) =
                    chunks.try_next().await.map_err(|e| self.err("GET", key, e))?
                {
                    // A server sending more than it was asked for is cut off at once.
                    cutter.push(&chunk).map_err(|e| e.into_error(key))?;
                }
            }
            GetResultPayload::File(..) => {
                let whole = r.bytes().await.map_err(|e| self.err("GET", key, e))?;
                cutter.push(&whole).map_err(|e| e.into_error(key))?;
            }
        }
        cutter.finish().map_err(|e| e.into_error(key))
    }

    async fn head(&self, key: &str) -> StoreResult<u64> {
        let meta = self.inner.head(&self.path(key)).await.map_err(|e| self.err("HEAD", key, e))?;
        Ok(meta.size)
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        match self.inner.delete(&self.path(key)).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("DELETE", key, e)),
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
            .map_err(|e| self.err("LIST", prefix, e))?;
        out.sort();
        Ok(out)
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

/// A ranged GET that returned other than the bytes asked for (a short read: the connection
/// ended early) is worth retrying.
fn check_length(key: &str, got: u64, want: u64) -> StoreResult<()> {
    if got == want {
        return Ok(());
    }
    Err(super::blocks::length_error(key, got, want))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic { store: "S3", source: text.to_string().into() }
    }

    #[test]
    fn hints_name_the_settings_of_the_stores_own_scheme() {
        for (url, own, foreign) in [
            ("s3://b/p", "AWS_ENDPOINT_URL", ["GOOGLE_", "AZURE"]),
            ("gs://b/p", "GOOGLE_BASE_URL", ["AWS_", "AZURE"]),
            ("az://c/p", "AZURE_STORAGE_ENDPOINT", ["AWS_", "GOOGLE_"]),
        ] {
            let s = scheme_settings(url);
            let unreachable = map_err("GET", "k", generic("error sending request"), &s).message;
            let refused = map_err("GET", "k", generic("InvalidAccessKeyId"), &s).message;
            assert!(unreachable.contains(own), "{unreachable}");
            for f in foreign {
                assert!(!unreachable.contains(f) && !refused.contains(f), "{url}: {refused}");
            }
        }
        let az = map_err("PUT", "k", generic("ContainerNotFound"), &scheme_settings("az://c"));
        assert!(az.message.starts_with("the container does not exist"), "{}", az.message);
    }

    #[tokio::test]
    async fn a_body_holds_the_bytes_of_its_range_from_a_network_and_a_file_store() {
        let dir = std::env::temp_dir().join(format!("fardisk-body-{}", std::process::id()));
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let file_url = format!("file://{}", dir.display());
        // memory:// answers as a network store does (a stream), file:// with the file.
        for url in ["memory://body", file_url.as_str()] {
            let store = crate::objstore::open_store_url(url, true).expect("store");
            store.put("k", Bytes::from(data.clone()), PutMode::Create).await.expect("put");
            let body = store.get_range_body("k", 100..19_000).await.expect("body");
            assert_eq!(body.into_contiguous()[..], data[100..19_000], "{url}");
            let whole = store.get_range("k", 0..20_000).await.expect("range");
            assert_eq!(whole[..], data[..], "{url}");
            // The same range cut into blocks as it arrives: one block buffer long, shorter, longer.
            let ends = [4096, 8192, 8900, 18_900];
            let blocks = store.get_range_blocks("k", 100..19_000, &ends).await.expect("blocks");
            let mut at = 100;
            for (b, end) in blocks.iter().zip(ends) {
                assert_eq!(b.bytes[..], data[at..100 + end as usize], "{url}");
                at = 100 + end as usize;
            }
            assert_eq!(blocks.len(), ends.len());
            // Blocks that do not end where the range does: refused before the GET, for good.
            let past = store.get_range_blocks("k", 100..19_000, &[4096, 20_000]).await;
            let e = past.expect_err("blocks past the range");
            assert_eq!(e.kind, StoreErrorKind::Permanent, "{url}: {e}");
            assert!(e.message.contains("end at byte 20000 of a 18900-byte range"), "{url}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
