//! The device grammar of `create` and `add`: `log [mirror] DEV... | cache DEV...`, repeated.

use crate::vdev_format::VdevArg;
use anyhow::{bail, Result};
use fardisk_engine::root::VdevRole;

pub fn parse_vdevs(words: &[String]) -> Result<Vec<VdevArg>> {
    let mut out: Vec<VdevArg> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        let Some(role) = VdevRole::parse(word) else {
            bail!("unexpected '{word}': devices are given as 'log [mirror] DEVICE...' or 'cache DEVICE...'");
        };
        i += 1;
        let mirror = words.get(i).is_some_and(|w| w == "mirror");
        if mirror {
            if role == VdevRole::Cache {
                bail!("cache devices are striped, never mirrored: use 'cache DEVICE...'");
            }
            i += 1;
        }
        let mut paths = Vec::new();
        while i < words.len() && !["log", "cache", "mirror"].contains(&words[i].as_str()) {
            paths.push(words[i].clone());
            i += 1;
        }
        if paths.is_empty() {
            bail!("'{role}' needs at least one device path");
        }
        if mirror && paths.len() < 2 {
            bail!("a log mirror needs at least two devices");
        }
        if mirror {
            out.push(VdevArg { role, mirror, paths });
        } else {
            // `log A B` is two single log vdevs, as in zpool; cache devices are striped.
            for p in paths {
                out.push(VdevArg { role, mirror: false, paths: vec![p] });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }
    #[test]
    fn grammar() {
        let v = parse_vdevs(&w("log mirror /a /b cache /c /d")).expect("valid");
        assert_eq!(v.len(), 3);
        assert!(v[0].mirror && v[0].paths == ["/a", "/b"]);
        assert_eq!(v[2].paths, ["/d"]);
        assert!(parse_vdevs(&w("log")).is_err());
        assert!(parse_vdevs(&w("cache mirror /a /b")).is_err());
        assert!(parse_vdevs(&w("spare /a")).is_err());
        assert!(parse_vdevs(&w("log mirror /a")).is_err());
    }
}
