//! What a cloud store is opened with: credentials, region, endpoint and the like, named as the
//! environment variables the `object_store` crate reads (`AWS_*`, `GOOGLE_*`, `AZURE_*`, plus
//! GCP's `SERVICE_ACCOUNT` and Azure's `IDENTITY_ENDPOINT`). The caller decides where they come
//! from: `from_env` takes the process environment; fardisk's CLI adds its config file's settings
//! beneath it (`set_default`) and passes the result down, so nothing writes the environment.

use std::collections::BTreeMap;

/// Variables outside the `AWS_`/`GOOGLE_`/`AZURE_` prefixes that the builders read.
const EXTRA_VARS: [&str; 2] = ["SERVICE_ACCOUNT", "IDENTITY_ENDPOINT"];

/// True for a variable a store builder reads.
pub fn is_store_var(name: &str) -> bool {
    ["AWS_", "GOOGLE_", "AZURE_"].iter().any(|p| name.starts_with(p)) || EXTRA_VARS.contains(&name)
}

/// Store settings by variable name. `Debug` shows the names only: values may be secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StoreSettings {
    vars: BTreeMap<String, String>,
}

impl std::fmt::Debug for StoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

impl StoreSettings {
    /// The store variables of this process's environment (the `object_store` builders'
    /// `from_env` read the same ones).
    pub fn from_env() -> StoreSettings {
        StoreSettings::from_vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// The store variables among `vars` (others are left out).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> StoreSettings {
        StoreSettings { vars: vars.into_iter().filter(|(k, _)| is_store_var(k)).collect() }
    }

    /// Sets `name` unless it is set already (the environment wins over a config file).
    pub fn set_default(&mut self, name: &str, value: &str) {
        self.vars.entry(name.to_string()).or_insert_with(|| value.to_string());
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The settings whose names start with `prefix`, lower-cased as the builders' config keys.
    #[cfg_attr(not(feature = "cloud"), allow(dead_code))]
    pub(crate) fn config_keys<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (String, &'a str)> + 'a {
        self.vars
            .iter()
            .filter(move |(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_store_variables_and_the_first_value_wins() {
        let mut s = StoreSettings::from_vars([
            ("AWS_REGION".to_string(), "eu-west-1".to_string()),
            ("HOME".to_string(), "/root".to_string()),
            ("SERVICE_ACCOUNT".to_string(), "/sa.json".to_string()),
        ]);
        s.set_default("AWS_REGION", "us-east-1");
        s.set_default("AWS_SECRET_ACCESS_KEY", "s3cr3t");
        assert_eq!(s.get("AWS_REGION"), Some("eu-west-1"));
        assert_eq!(s.get("AWS_SECRET_ACCESS_KEY"), Some("s3cr3t"));
        assert_eq!(s.get("HOME"), None);
        assert_eq!(s.get("SERVICE_ACCOUNT"), Some("/sa.json"));
        let aws: Vec<_> = s.config_keys("AWS_").collect();
        assert_eq!(
            aws,
            vec![("aws_region".into(), "eu-west-1"), ("aws_secret_access_key".into(), "s3cr3t")]
        );
        let shown = format!("{s:?}");
        assert!(shown.contains("AWS_SECRET_ACCESS_KEY") && !shown.contains("s3cr3t"), "{shown}");
    }
}
