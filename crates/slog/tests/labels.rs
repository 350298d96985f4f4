//! Device identity: wrong pool, swapped role or vdev, missing devices, and format refusals.

mod common;

use std::sync::Arc;

use common::*;
use fardisk_slog::label::write_label;
use fardisk_slog::{
    DeviceLabel, FormatOptions, HealthState, IntentLog, LogDevice, LogError, MemProvider,
    MissingPolicy, Role, VdevSpec,
};

#[test]
fn device_of_another_pool_is_refused_by_name() {
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 1);
    let err =
        IntentLog::open("other", 0xbad, &[config], &open_opts(&provider)).expect_err("refused");
    match &err {
        LogError::WrongDevice { path: p, found, expected } => {
            assert_eq!(p, &path("log0"));
            assert!(found.contains("pool 'tank'"), "says what the device carries: {found}");
            assert!(expected.contains("pool 'other'"), "{expected}");
        }
        other => panic!("expected WrongDevice, got {other:?}"),
    }
    assert!(err.to_string().contains("/dev/mem/log0"), "message names the path: {err}");
}

#[test]
fn cache_device_in_a_log_slot_is_refused() {
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 2);
    let device = provider.device(path("log0")).expect("device");
    let cache_label = DeviceLabel {
        pool_name: POOL.into(),
        pool_guid: POOL_GUID,
        vdev_guid: config.vdev_guid,
        role: Role::Cache,
        leg_index: 0,
        leg_count: 1,
        ring_start_bytes: 16384,
        ring_end_bytes: 1 << 20,
    };
    write_label(&device, &cache_label).expect("relabel");
    device.flush().expect("flush");
    let err =
        IntentLog::open(POOL, POOL_GUID, &[config], &open_opts(&provider)).expect_err("refused");
    assert!(
        matches!(&err, LogError::WrongDevice { found, .. } if found.starts_with("cache device")),
        "{err:?}"
    );
}

#[test]
fn swapped_log_vdevs_are_refused() {
    let provider = MemProvider::new();
    let a = format_mem(&provider, &VdevSpec::Single(path("a")), 1 << 20, 3);
    let b = format_mem(&provider, &VdevSpec::Single(path("b")), 1 << 20, 4);
    assert_ne!(a.vdev_guid, b.vdev_guid);
    let swapped = fardisk_slog::VdevConfig { legs: b.legs.clone(), ..a.clone() };
    let err =
        IntentLog::open(POOL, POOL_GUID, &[swapped], &open_opts(&provider)).expect_err("refused");
    assert!(matches!(&err, LogError::WrongDevice { path: p, .. } if *p == path("b")), "{err:?}");
}

#[test]
fn blank_device_is_refused() {
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 5);
    provider.add(path("log0"), 1 << 20);
    let err =
        IntentLog::open(POOL, POOL_GUID, &[config], &open_opts(&provider)).expect_err("refused");
    assert!(matches!(&err, LogError::NoLabel { path: p } if *p == path("log0")), "{err:?}");
}

#[test]
fn missing_device_is_reported_or_degraded_by_policy() {
    let rt = runtime();
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Mirror(vec![path("m0"), path("m1")]), 1 << 20, 6);
    {
        let log = open_mem(&provider, std::slice::from_ref(&config));
        rt.block_on(log.commit(vec![record(1, 1, 100)])).expect("commit");
    }
    provider.remove(path("m1"));
    let err =
        IntentLog::open(POOL, POOL_GUID, std::slice::from_ref(&config), &open_opts(&provider))
            .expect_err("refused");
    assert!(
        matches!(&err, LogError::Missing { path: p, vdev_guid } if *p == path("m1") && *vdev_guid == config.vdev_guid),
        "{err:?}"
    );
    let mut opts = open_opts(&provider);
    opts.missing = MissingPolicy::Degrade;
    let log = IntentLog::open(POOL, POOL_GUID, &[config], &opts).expect("degraded open");
    let status = log.status();
    assert_eq!(status[0].state, HealthState::Degraded);
    assert_eq!(status[0].legs[1].state, HealthState::Unavail);
    assert_eq!(replay_checked(&log, 0).expect("replay").records.len(), 1);
    rt.block_on(log.commit(vec![record(2, 2, 100)]))
        .expect("commits continue on the remaining leg");
}

#[test]
fn format_refuses_a_device_of_another_pool_unless_forced() {
    let provider = MemProvider::new();
    format_mem(&provider, &VdevSpec::Single(path("log0")), 1 << 20, 7);
    let mut opts = FormatOptions::new(Arc::new(provider.clone()), 8);
    let spec = VdevSpec::Single(path("log0"));
    let err = IntentLog::format("other", 0x0abc, &spec, &opts).expect_err("refused");
    assert!(
        matches!(&err, LogError::DeviceInUse { found, .. } if found.contains("pool 'tank'")),
        "{err:?}"
    );
    opts.force = true;
    let config = IntentLog::format("other", 0x0abc, &spec, &opts).expect("forced");
    IntentLog::open("other", 0x0abc, &[config], &open_opts(&provider))
        .expect("opens for its new pool");
}

#[test]
fn format_creates_devices_and_refuses_tiny_ones() {
    let provider = MemProvider::new();
    let mut opts = FormatOptions::new(Arc::new(provider.clone()), 9);
    opts.size_bytes = 2 << 20;
    let config = IntentLog::format(POOL, POOL_GUID, &VdevSpec::Single(path("new")), &opts)
        .expect("format creates");
    assert_eq!(provider.device(path("new")).expect("created").len_bytes(), 2 << 20);
    let log = open_mem(&provider, &[config]);
    assert_eq!(log.space_total_bytes(), (2 << 20) - 16384);
    provider.add(path("tiny"), 32 * 1024);
    let err = IntentLog::format(POOL, POOL_GUID, &VdevSpec::Single(path("tiny")), &opts)
        .expect_err("too small");
    assert!(matches!(err, LogError::TooSmall { .. }), "{err:?}");
}

#[test]
fn volatile_devices_are_flagged() {
    let provider = MemProvider::new();
    let config = format_mem(&provider, &VdevSpec::Single(path("ram0")), 1 << 20, 10);
    provider.device(path("ram0")).expect("device").set_volatile(true);
    let log = open_mem(&provider, &[config]);
    assert!(log.status()[0].legs[0].volatile);
}
