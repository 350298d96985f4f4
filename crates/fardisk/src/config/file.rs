//! The host's config file (`/etc/fardisk/fardisk.conf`, or `FARDISK_CONFIG`): store credentials
//! and defaults for daemons started by an init system. `key = value` lines, `#` comments. Every
//! setting stands for an environment variable, and a variable that is already set wins
//! (`Config::resolve`), so a one-off `AWS_PROFILE=x fardisk import ...` behaves as everywhere else.
//!
//! A file holding a secret must be owner-only: like ssh with its keys, fardisk refuses to read
//! credentials others can read, rather than use them and leave them exposed.

use anyhow::{bail, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const CONFIG_PATH_DEFAULT: &str = "/etc/fardisk/fardisk.conf";

/// `(key in the file, environment variable, holds a secret)`, by store scheme, then fardisk's own.
/// The store settings are the variables object_store's builders read for that scheme.
pub(crate) const SETTINGS: &[(&str, &str, bool)] = &[
    // s3://
    ("aws_access_key_id", "AWS_ACCESS_KEY_ID", true),
    ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", true),
    ("aws_session_token", "AWS_SESSION_TOKEN", true),
    ("aws_region", "AWS_REGION", false),
    ("aws_endpoint_url", "AWS_ENDPOINT_URL", false),
    ("aws_allow_http", "AWS_ALLOW_HTTP", false),
    // gs://
    ("google_service_account", "GOOGLE_SERVICE_ACCOUNT", false),
    ("google_service_account_key", "GOOGLE_SERVICE_ACCOUNT_KEY", true),
    ("google_application_credentials", "GOOGLE_APPLICATION_CREDENTIALS", false),
    ("google_base_url", "GOOGLE_BASE_URL", false),
    // az://
    ("azure_storage_account_name", "AZURE_STORAGE_ACCOUNT_NAME", false),
    ("azure_storage_account_key", "AZURE_STORAGE_ACCOUNT_KEY", true),
    ("azure_storage_sas_key", "AZURE_STORAGE_SAS_KEY", true),
    ("azure_storage_endpoint", "AZURE_STORAGE_ENDPOINT", false),
    ("azure_storage_use_emulator", "AZURE_STORAGE_USE_EMULATOR", false),
    // fardisk
    ("key_file", "FARDISK_KEY_FILE", false),
    ("home", "FARDISK_HOME", false),
    ("run_dir", "FARDISK_RUN_DIR", false),
    ("metrics", "FARDISK_METRICS", false),
    ("log", "FARDISK_LOG", false),
];

/// The settings of one file, in file order: `(environment variable, value)`.
pub fn parse(path: &Path, text: &str, mode: u32) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    let mut secret = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            // Not echoed: a malformed line may well be a secret (`aws_secret_access_key: ...`).
            bail!(
                "{} line {}: expected 'key = value' (the line is not shown: it may hold a secret)",
                path.display(),
                i + 1
            );
        };
        let (k, v) = (k.trim(), v.trim().trim_matches('"'));
        let Some((_, var, is_secret)) = SETTINGS.iter().find(|(key, _, _)| *key == k) else {
            let known: Vec<&str> = SETTINGS.iter().map(|s| s.0).collect();
            // Named only when it looks like a setting's name: a pasted secret may hold '=' too.
            let shown = if k.len() <= 40
                && k.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
            {
                format!("'{k}'")
            } else {
                "(name not shown)".to_string()
            };
            bail!(
                "{} line {}: unknown setting {shown} (known: {})",
                path.display(),
                i + 1,
                known.join(", ")
            );
        };
        secret |= *is_secret;
        out.push((*var, v.to_string()));
    }
    if secret && mode & 0o077 != 0 {
        bail!(
            "{} holds credentials but others can read it (mode {:o}); run 'chmod 600 {}'",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    Ok(out)
}

/// The file named by `FARDISK_CONFIG` (`explicit`: it must exist), or the default one.
pub fn config_path(from_env: Option<std::ffi::OsString>) -> (PathBuf, bool) {
    match from_env {
        Some(p) => (PathBuf::from(p), true),
        None => (PathBuf::from(CONFIG_PATH_DEFAULT), false),
    }
}

/// The settings of the config file at `path`, in file order. A missing default file has none;
/// a missing file named by FARDISK_CONFIG is an error.
pub fn read(path: &Path, explicit: bool) -> Result<Vec<(&'static str, String)>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(Vec::new()),
        Err(e) => {
            return Err(e).with_context(|| {
                format!("cannot read config file {} (FARDISK_CONFIG)", path.display())
            })
        }
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    parse(path, &text, meta.permissions().mode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_map_to_environment_variables() {
        let text = "# S3 through MinIO\naws_endpoint_url = http://127.0.0.1:9000\n\naws_region=\"us-east-1\"\nmetrics = 127.0.0.1:9464\n";
        let got = parse(Path::new("f.conf"), text, 0o644).unwrap();
        assert_eq!(
            got,
            vec![
                ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000".into()),
                ("AWS_REGION", "us-east-1".into()),
                ("FARDISK_METRICS", "127.0.0.1:9464".into())
            ]
        );
    }

    #[test]
    fn every_setting_of_the_example_file_is_known_gcs_and_azure_included() {
        let example = include_str!("../../../../contrib/fardisk.conf.example");
        // The commented-out settings too: a user uncomments the lines of their scheme.
        let all: String = example
            .lines()
            .map(|l| l.strip_prefix("# ").filter(|r| r.contains(" = ")).unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        let got = parse(Path::new("example"), &all, 0o600).expect("the example parses");
        for var in [
            "GOOGLE_SERVICE_ACCOUNT",
            "GOOGLE_BASE_URL",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_KEY",
            "AZURE_STORAGE_USE_EMULATOR",
        ] {
            assert!(got.iter().any(|(v, _)| *v == var), "{var} missing from the example");
        }
    }

    #[test]
    fn bad_lines_name_the_line_and_the_fix() {
        let e = parse(Path::new("f.conf"), "aws_region = x\nregion = y\n", 0o600)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("f.conf line 2: unknown setting 'region' (known: aws_access_key_id"),
            "{e}"
        );
        let e = parse(Path::new("f.conf"), "just words\n", 0o600).unwrap_err().to_string();
        assert!(e.contains("line 1: expected 'key = value'"), "{e}");
        let e = parse(Path::new("f.conf"), "aws_secret_access_key: s3cr3t\n", 0o600)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 1: expected 'key = value'") && !e.contains("s3cr3t"),
            "a malformed line is not echoed: {e}"
        );
        let e = parse(Path::new("f.conf"), "Zm9vYmFyK2F6dXJlL2tleQ==\n", 0o600)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 1: unknown setting (name not shown)") && !e.contains("Zm9v"),
            "nor a pasted base64 key: {e}"
        );
    }

    #[test]
    fn credentials_must_be_owner_only() {
        let text = "aws_access_key_id = AKIA\naws_secret_access_key = s3cr3t\n";
        let e =
            parse(Path::new("/etc/fardisk/fardisk.conf"), text, 0o100644).unwrap_err().to_string();
        assert!(e.contains("others can read it (mode 644)") && e.contains("chmod 600"), "{e}");
        assert!(
            !e.contains("s3cr3t") && !e.contains("AKIA"),
            "the message must not show the secret: {e}"
        );
        assert_eq!(parse(Path::new("f"), text, 0o100600).unwrap().len(), 2);
        // Without secrets any mode is fine.
        assert!(parse(Path::new("f"), "aws_region = x\n", 0o644).is_ok());
    }
}
