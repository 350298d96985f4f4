use super::*;

fn env(vars: &[(&str, &str)]) -> BTreeMap<String, OsString> {
    vars.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect()
}

#[test]
fn defaults_without_environment_or_file() {
    let c = Config::resolve(&env(&[]), &[]);
    assert_eq!(c.paths.home, PathBuf::from("/var/lib/fardisk"));
    assert_eq!(c.paths.run_dir, PathBuf::from("/run/fardisk"));
    assert_eq!((c.key_hex, c.key_file, c.metrics, c.log), (None, None, None, None));
    assert!(c.progress);
    assert_eq!(c.store, StoreSettings::default());
}

#[test]
fn a_variable_already_set_wins_over_the_file() {
    let file = [
        ("FARDISK_HOME", "/srv/fardisk".to_string()),
        ("FARDISK_RUN_DIR", "/run/from-file".to_string()),
        ("FARDISK_METRICS", "127.0.0.1:9464".to_string()),
        ("FARDISK_LOG", "debug".to_string()),
        ("FARDISK_KEY_FILE", "/etc/fardisk/tank.key".to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "from-file".to_string()),
    ];
    let c = Config::resolve(
        &env(&[
            ("FARDISK_RUN_DIR", "/tmp/run"),
            ("FARDISK_LOG", ""),
            ("AWS_REGION", "eu-west-1"),
            ("FARDISK_NO_PROGRESS", "1"),
        ]),
        &file,
    );
    assert_eq!(c.paths.home, PathBuf::from("/srv/fardisk"), "the file fills what is unset");
    assert_eq!(c.paths.run_dir, PathBuf::from("/tmp/run"), "the environment wins");
    assert_eq!(c.log.as_deref(), Some(""), "set, even if empty, wins");
    assert_eq!(c.metrics.as_deref(), Some("127.0.0.1:9464"));
    assert_eq!(c.key_file, Some(PathBuf::from("/etc/fardisk/tank.key")));
    assert_eq!(c.store.get("AWS_REGION"), Some("eu-west-1"));
    assert_eq!(c.store.get("AWS_SECRET_ACCESS_KEY"), Some("from-file"));
    assert!(!c.progress);
}

#[test]
fn the_first_setting_in_the_file_wins() {
    let file = [
        ("FARDISK_HOME", "/first".to_string()),
        ("FARDISK_HOME", "/second".to_string()),
        ("AWS_REGION", "first".to_string()),
        ("AWS_REGION", "second".to_string()),
    ];
    let c = Config::resolve(&env(&[]), &file);
    assert_eq!(c.paths.home, PathBuf::from("/first"));
    assert_eq!(c.store.get("AWS_REGION"), Some("first"));
}

#[test]
fn store_variables_come_from_the_environment_too_and_secrets_are_not_shown() {
    let c = Config::resolve(
        &env(&[
            ("AWS_ACCESS_KEY_ID", "AKIAE2E"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("AZURE_STORAGE_ACCOUNT_KEY", "azs3cr3t"),
            ("FARDISK_KEY", "00112233"),
            ("PATH", "/usr/bin"),
        ]),
        &[],
    );
    assert_eq!(c.store.get("AWS_SECRET_ACCESS_KEY"), Some("s3cr3t"));
    assert_eq!(c.store.get("PATH"), None);
    assert_eq!(c.key_hex.as_ref().map(Secret::expose), Some("00112233"));
    let shown = format!("{c:?}");
    for secret in ["s3cr3t", "azs3cr3t", "00112233"] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

#[test]
fn the_example_lists_every_setting_and_parses() {
    let example = include_str!("../../../../contrib/fardisk.conf.example");
    for (key, _, _) in file::SETTINGS {
        assert!(
            example
                .lines()
                .any(|l| l.trim_start_matches(['#', ' ']).starts_with(&format!("{key} ="))),
            "contrib/fardisk.conf.example does not list '{key}'"
        );
    }
    let settings =
        file::parse(std::path::Path::new("fardisk.conf.example"), example, 0o600).expect("parses");
    assert!(!settings.is_empty());
}
