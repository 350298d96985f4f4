//! Opens a store from a URL: `file://DIR` (the embedded default), `memory://NAME` (tests; shared
//! within a process by name so a test can "restart" on the same bytes), `s3://BUCKET/PREFIX`,
//! `gs://BUCKET/PREFIX`, `az://CONTAINER/PREFIX`. Credentials come from the store settings (the
//! standard variables of each cloud, `settings.rs`) and are never printed: `describe()` shows the
//! URL only.

use super::{DynStore, ObjectStoreBackend, StoreSettings};
use crate::error::{Error, Result};
use object_store::memory::InMemory;
use object_store::ObjectStore;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
#[cfg(feature = "cloud")]
use std::time::Duration;

fn memory_stores() -> &'static Mutex<HashMap<String, Arc<InMemory>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    STORES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Splits `bucket/some/prefix` into the bucket and the prefix.
#[cfg(feature = "cloud")]
fn bucket_and_prefix(rest: &str) -> (String, String) {
    let rest = rest.trim_matches('/');
    match rest.split_once('/') {
        Some((b, p)) => (b.to_string(), p.to_string()),
        None => (rest.to_string(), String::new()),
    }
}

/// `open_store_url_with` the settings of this process's environment.
pub fn open_store_url(url: &str, create: bool) -> Result<DynStore> {
    open_store_url_with(url, create, &StoreSettings::from_env())
}

/// `create` makes a missing local directory; import refuses one (a typo must not create a pool).
/// A cloud store takes its credentials, region and endpoint from `settings`.
#[cfg_attr(not(feature = "cloud"), allow(unused_variables))]
pub fn open_store_url_with(url: &str, create: bool, settings: &StoreSettings) -> Result<DynStore> {
    let bad = |why: &str| Error::BadInput(format!("store URL '{url}': {why}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        bad("expected file://DIR, s3://BUCKET/PREFIX, gs://, az:// or memory://NAME")
    })?;
    if matches!(scheme, "s3" | "gs" | "az" | "azure")
        && rest.split('/').next().is_some_and(|authority| authority.contains('@'))
    {
        // Not echoed: the part before '@' is a secret. Every message and record shows the URL.
        return Err(Error::BadInput(format!(
            "store URL {scheme}://...@...: credentials do not belong in the URL (it is shown in status, logs and the pool's history); \
             give them in {} (or the config file)",
            scheme_settings(scheme).credentials
        )));
    }
    let (inner, prefix): (Arc<dyn ObjectStore>, String) = match scheme {
        "file" => {
            let dir = std::path::Path::new(rest);
            if !dir.is_absolute() {
                return Err(bad("a file:// store needs an absolute directory, e.g. file:///var/lib/fardisk/pool"));
            }
            if create {
                std::fs::create_dir_all(dir)
                    .map_err(|e| bad(&format!("cannot create directory: {e}")))?;
            } else if !dir.is_dir() {
                return Err(Error::Unavailable(format!(
                    "store directory {} does not exist; check the URL or create the pool first",
                    dir.display()
                )));
            }
            let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| bad(&e.to_string()))?
                .with_fsync(FILE_STORE_FSYNC);
            (Arc::new(fs), String::new())
        }
        "memory" => {
            let store = memory_stores().lock().entry(rest.to_string()).or_default().clone();
            (store, String::new())
        }
        #[cfg(feature = "cloud")]
        "s3" => {
            let (bucket, prefix) = bucket_and_prefix(rest);
            let mut b = object_store::aws::AmazonS3Builder::new();
            for (key, value) in settings.config_keys("AWS_") {
                if let Ok(key) = key.parse() {
                    b = b.with_config(key, value);
                }
            }
            b = b.with_bucket_name(bucket);
            if let Some(endpoint) = settings.get("AWS_ENDPOINT_URL") {
                b = b.with_allow_http(endpoint.starts_with("http://")).with_endpoint(endpoint);
            }
            if settings.get("AWS_REGION").is_none() && settings.get("AWS_DEFAULT_REGION").is_none()
            {
                b = b.with_region("us-east-1");
            }
            // The engine deletes one key at a time: a plain DELETE is core S3 that every
            // implementation has, where object_store's default sends each one as a bulk
            // DeleteObjects POST (which older s3proxy releases, for one, refuse).
            b = b.with_retry(client_retry()).with_disable_bulk_delete(true);
            (Arc::new(b.build().map_err(|e| bad(&e.to_string()))?), prefix)
        }
        #[cfg(feature = "cloud")]
        "gs" => {
            let (bucket, prefix) = bucket_and_prefix(rest);
            let mut b = object_store::gcp::GoogleCloudStorageBuilder::new();
            if let Some(path) = settings.get("SERVICE_ACCOUNT") {
                b = b.with_service_account_path(path);
            }
            for (key, value) in settings.config_keys("GOOGLE_") {
                if let Ok(key) = key.parse() {
                    b = b.with_config(key, value);
                }
            }
            let b = b.with_bucket_name(bucket).with_retry(client_retry());
            (Arc::new(b.build().map_err(|e| bad(&e.to_string()))?), prefix)
        }
        #[cfg(feature = "cloud")]
        "az" | "azure" => {
            let (container, prefix) = bucket_and_prefix(rest);
            let mut b = object_store::azure::MicrosoftAzureBuilder::new();
            for (key, value) in settings.config_keys("AZURE_") {
                if let Ok(key) = key.parse() {
                    b = b.with_config(key, value);
                }
            }
            if let Some(endpoint) = settings.get("IDENTITY_ENDPOINT") {
                b = b.with_msi_endpoint(endpoint);
            }
            let b = b.with_container_name(container).with_retry(client_retry());
            (Arc::new(b.build().map_err(|e| bad(&e.to_string()))?), prefix)
        }
        #[cfg(not(feature = "cloud"))]
        "s3" | "gs" | "az" | "azure" => {
            return Err(bad(
                "this fardisk was built without the cloud stores (cargo's --no-default-features, \
                 as scripts/demo.sh builds it): rebuild with `cargo build --release -p fardisk`",
            ))
        }
        other => return Err(bad(&format!("unknown scheme '{other}'"))),
    };
    Ok(Arc::new(ObjectStoreBackend::new(inner, &prefix, url.to_string())))
}

/// What a user of each scheme sets, named in the hints of store errors (backend.rs) and in the
/// refusal of credentials in a URL: never another cloud's settings. Each variable is also a
/// config-file key, in lower case (crates/fardisk/src/config_file.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemeSettings {
    /// Where the credentials go.
    pub credentials: &'static str,
    /// Where the endpoint is set, when the store is not the cloud's own.
    pub endpoint: &'static str,
    /// What a bucket is called there.
    pub bucket: &'static str,
}

/// The settings of the scheme of `url_or_scheme` (`s3`, `gs://b/p`, ...); local schemes get the
/// S3 ones, which their errors never name.
pub fn scheme_settings(url_or_scheme: &str) -> SchemeSettings {
    let scheme = url_or_scheme.split("://").next().unwrap_or(url_or_scheme);
    match scheme {
        "gs" => SchemeSettings {
            credentials: "GOOGLE_SERVICE_ACCOUNT (the path of a service-account JSON file) or \
                          GOOGLE_SERVICE_ACCOUNT_KEY (its contents), or GOOGLE_APPLICATION_CREDENTIALS",
            endpoint: "GOOGLE_BASE_URL",
            bucket: "bucket",
        },
        "az" | "azure" => SchemeSettings {
            credentials: "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or \
                          AZURE_STORAGE_SAS_KEY",
            endpoint: "AZURE_STORAGE_ENDPOINT (or AZURE_STORAGE_USE_EMULATOR=true with \
                       AZURITE_BLOB_STORAGE_URL for the emulator)",
            bucket: "container",
        },
        _ => SchemeSettings {
            credentials: "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            endpoint: "AWS_ENDPOINT_URL",
            bucket: "bucket",
        },
    }
}

/// Whether a `file://` store's PUT is durable when it returns: the staged file is fsynced, linked
/// or renamed into place, and its directory fsynced. Without it a published root, the `head` hint
/// or a segment could still sit in the page cache when the txg's log records are released, and a
/// power cut lost acknowledged writes or left a root that no longer decodes (the pool did not
/// import). Deletes are not fsynced: one undone by a power cut brings back a whole object that
/// nothing references any more (a pruned root, a freed segment), which import and the orphan
/// collector take in their stride. The simulation's file host (`power_cut.rs`) reads this too.
pub const FILE_STORE_FSYNC: bool = true;

/// The HTTP client's own retries, kept short: the engine retries every request itself within a
/// budget (retry.rs) and waits out outages where it must (commits). With the client's default
/// (10 retries within 3 minutes) one engine attempt against an unreachable store took minutes,
/// so a read the engine meant to give up after 30 s hung far longer, and every retry loop above
/// it was multiplied.
#[cfg(feature = "cloud")]
fn client_retry() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: CLIENT_RETRIES_MAX,
        retry_timeout: Duration::from_secs(10),
    }
}

/// Retries of one request inside the HTTP client (see `client_retry`).
#[cfg(feature = "cloud")]
const CLIENT_RETRIES_MAX: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_is_told_its_own_settings_never_another_clouds() {
        for (url, own, foreign) in [
            ("gs://user:s3cr3t@bucket", "GOOGLE_SERVICE_ACCOUNT", ["AWS_", "AZURE_"]),
            ("az://acct:s3cr3t@container/p", "AZURE_STORAGE_ACCOUNT_KEY", ["AWS_", "GOOGLE_"]),
            ("s3://AKIAXX:s3cr3t@bucket/prefix", "AWS_SECRET_ACCESS_KEY", ["GOOGLE_", "AZURE_"]),
        ] {
            let e = open_store_url(url, false).map(|_| ()).unwrap_err().to_string();
            assert!(e.contains(own), "{e}");
            for f in foreign {
                assert!(!e.contains(f), "{url}: {e}");
            }
            let s = scheme_settings(url);
            for f in foreign {
                assert!(!s.credentials.contains(f) && !s.endpoint.contains(f), "{url}: {s:?}");
            }
        }
        assert_eq!(scheme_settings("az").bucket, "container");
    }

    #[test]
    fn credentials_in_a_url_are_refused_without_being_echoed() {
        for url in [
            "s3://AKIAXX:s3cr3t@bucket/prefix",
            "gs://user:s3cr3t@bucket",
            "az://acct:s3cr3t@container/p",
        ] {
            let e = open_store_url(url, false).map(|_| ()).unwrap_err().to_string();
            assert!(
                e.contains("credentials do not belong in the URL")
                    && !e.contains("s3cr3t")
                    && !e.contains("AKIAXX"),
                "{e}"
            );
        }
    }
}
