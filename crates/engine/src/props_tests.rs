use super::*;

#[test]
fn every_property_has_a_default_that_validates() {
    for p in POOL_PROPS {
        let default = p.default_text();
        assert_eq!(p.canonical(&default).as_deref().ok(), Some(default.as_str()), "{}", p.name);
        match (p.ty, p.default) {
            (PropType::Choice { values, .. }, PropDefault::Word(w)) => {
                assert!(values.contains(&w), "{}", p.name)
            }
            (PropType::Size { .. } | PropType::Number { .. }, PropDefault::Number(_)) => {}
            _ => panic!("{}: the default's kind does not match the type", p.name),
        }
    }
}

#[test]
fn names_are_unique_and_found() {
    for (i, p) in POOL_PROPS.iter().enumerate() {
        assert!(POOL_PROPS[i + 1..].iter().all(|q| q.name != p.name), "{} twice", p.name);
        assert_eq!(find(p.name).map(|f| f.name).ok(), Some(p.name));
    }
    let e = find("colour").unwrap_err().to_string();
    assert!(e.starts_with("unknown property 'colour'; known: compression, txg_timeout"), "{e}");
}

#[test]
fn sizes_take_suffixes_in_create_and_set_and_are_stored_in_bytes() {
    for for_set in [false, true] {
        assert_eq!(canonical_prop("arc_max", "16M", for_set).ok().as_deref(), Some("16777216"));
        assert_eq!(
            canonical_prop("arc_max", "16777216", for_set).ok().as_deref(),
            Some("16777216")
        );
        assert_eq!(
            canonical_prop("dirty_bytes_max", "1G", for_set).ok().as_deref(),
            Some("1073741824")
        );
        assert_eq!(
            canonical_prop("map_cache_bytes", "1.5m", for_set).ok().as_deref(),
            Some("1572864")
        );
        assert_eq!(
            canonical_prop("scrub_rate_max", "16MiB", for_set).ok().as_deref(),
            Some("16777216")
        );
        assert_eq!(
            canonical_prop("l2arc_write_max", "8M", for_set).ok().as_deref(),
            Some("8388608")
        );
    }
    assert!(validate_prop("arc_max", "16M").is_ok());
    // Durations and counts stay plain numbers.
    assert!(validate_prop("txg_timeout", "5s").is_err());
    assert!(validate_prop("roots_kept", "1K").is_err());
}

#[test]
fn refusals_say_what_is_allowed() {
    let msg = |k: &str, v: &str| validate_prop(k, v).unwrap_err().to_string();
    assert_eq!(
        msg("scrub_rate_max", "fast"),
        "scrub_rate_max must be a whole number of bytes per second (K, M, G or T suffixes allowed; 0 = no limit), not 'fast'"
    );
    assert_eq!(
        msg("dirty_bytes_max", "8M"),
        "dirty_bytes_max must be at least 16 MiB (16777216 bytes; K, M, G or T suffixes allowed), not '8M'"
    );
    assert_eq!(msg("txg_timeout", "0"), "txg_timeout must be 1 to 300 seconds, not '0'");
    assert_eq!(
        msg("root_retention_s", "x"),
        "root_retention_s must be 0 to 31536000 seconds (a year), not 'x'"
    );
    assert_eq!(msg("roots_kept", "-1"), "roots_kept must be a whole number, not '-1'");
    assert_eq!(
        msg("sync", "sometimes"),
        "sync must be standard, always or disabled, not 'sometimes'"
    );
    assert_eq!(msg("compression", "gzip"), "compression must be off, lz4 or zstd, not 'gzip'");
    assert_eq!(msg("multihost", "yes"), "multihost must be on or off, not 'yes'");
    assert_eq!(
        msg("arc_max", "12Q"),
        "arc_max must be a whole number of bytes (K, M, G or T suffixes allowed), not '12Q'"
    );
    // Aliases are accepted and kept as given.
    assert_eq!(canonical_prop("compression", "on", true).ok().as_deref(), Some("on"));
}

#[test]
fn read_only_and_create_only_properties() {
    let ro = Prop { change: Change::ReadOnly, ..ARC_MAX };
    let co = Prop { change: Change::CreateOnly, ..ARC_MAX };
    assert!(check_change(&ro, false).is_err() && check_change(&ro, true).is_err());
    assert!(check_change(&co, false).is_ok());
    assert!(check_change(&co, true).unwrap_err().to_string().contains("create -o arc_max="));
    assert!(check_change(&ARC_MAX, true).is_ok());
}

#[test]
fn volumes_take_only_volume_properties() {
    assert_eq!(canonical_volume_prop("logbias", "throughput").ok().as_deref(), Some("throughput"));
    assert!(canonical_volume_prop("logbias", "fast").is_err());
    assert!(canonical_volume_prop("arc_max", "1G")
        .unwrap_err()
        .to_string()
        .contains("pool property"));
}

#[test]
fn stored_values_and_defaults() {
    let mut set = BTreeMap::new();
    assert_eq!(ARC_MAX.number_or_default(&set), 1 << 30);
    assert_eq!(ARC_MAX.stored_number(&set).ok(), Some(None));
    set.insert("arc_max".to_string(), "16777216".to_string());
    assert_eq!(ARC_MAX.number_or_default(&set), 16 << 20);
    set.insert("scrub_rate_max".to_string(), "garbage".to_string());
    assert!(SCRUB_RATE_MAX.stored_number(&set).is_err());
    assert_eq!(SCRUB_RATE_MAX.number_or_default(&set), 64 << 20);
}

#[test]
fn get_rows_show_local_values_and_defaults() {
    let set = BTreeMap::from([("compression".to_string(), "zstd".to_string())]);
    let rows = prop_rows(&set);
    assert_eq!(rows.len(), POOL_PROPS.len());
    assert_eq!(
        rows[0],
        PropRow { property: "compression".into(), value: "zstd".into(), source: "local".into() }
    );
    let arc = rows.iter().find(|r| r.property == "arc_max").expect("arc_max row");
    assert_eq!((arc.value.as_str(), arc.source.as_str()), ("1073741824", "default"));
}
