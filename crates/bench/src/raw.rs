//! The baseline: the same bytes as whole objects of the engine's segment size, PUT and then GET
//! with the engine's upload concurrency, through the same `object_store` S3 client the engine
//! uses (`open_store_url`), counted by the same instrumentation. No retries: a failed request
//! fails the benchmark instead of hiding inside a number.

use crate::data::Dataset;
use crate::progress::{Direction, Sampler};
use crate::stats::{Requests, Sample};
use anyhow::{bail, Context, Result};
use fardisk_engine::clock::Clock;
use fardisk_engine::objstore::{open_store_url, DynStore, InstrumentedStore, PutMode, Store};
use futures::StreamExt;
use std::sync::Arc;

/// Objects deleted concurrently when cleaning up a run's prefix.
const DELETE_CONCURRENCY: usize = 16;

/// An instrumented store at `url`, so raw requests are counted exactly like the engine's.
pub fn open_counted(url: &str, clock: Arc<dyn Clock>) -> Result<Arc<InstrumentedStore>> {
    let store = open_store_url(url, true).with_context(|| format!("opening {url}"))?;
    Ok(Arc::new(InstrumentedStore::new(store, clock)))
}

pub fn object_key(index: usize) -> String {
    format!("raw/{index:08}")
}

/// PUTs every object of `data` with at most `concurrency` in flight; times the whole batch.
/// Create-only PUTs (If-None-Match: *), the same request the engine makes for a segment.
pub async fn write(
    store: &Arc<InstrumentedStore>,
    data: &Dataset,
    concurrency: usize,
    clock: &Arc<dyn Clock>,
) -> Result<Sample> {
    let before = store.stats.snapshot();
    let sampler = Sampler::start(store.stats.clone(), Direction::Put, clock.clone());
    let t0 = clock.mono_us();
    // Each PUT is its own task, as the engine's segment uploads are.
    let results: Vec<Result<()>> = futures::stream::iter(data.objects.iter().cloned().enumerate())
        .map(|(i, bytes)| {
            let store = store.clone();
            async move {
                let task =
                    tokio::spawn(
                        async move { store.put(&object_key(i), bytes, PutMode::Create).await },
                    );
                task.await.context("PUT task")?.with_context(|| format!("PUT {}", object_key(i)))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let elapsed_us = clock.mono_us() - t0;
    let progress = sampler.finish().await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    let requests = Requests::between(&before, &store.stats.snapshot());
    Ok(Sample::new(data.total_bytes(), elapsed_us, requests, progress))
}

/// GETs every object whole with at most `concurrency` in flight and checks each against `data`.
pub async fn read(
    store: &Arc<InstrumentedStore>,
    data: &Dataset,
    concurrency: usize,
    clock: &Arc<dyn Clock>,
) -> Result<Sample> {
    let before = store.stats.snapshot();
    let sampler = Sampler::start(store.stats.clone(), Direction::Get, clock.clone());
    let t0 = clock.mono_us();
    let results: Vec<Result<()>> = futures::stream::iter(data.objects.iter().cloned().enumerate())
        .map(|(i, want)| {
            let store = store.clone();
            async move {
                let task = tokio::spawn(async move { store.get(&object_key(i)).await });
                let got = task
                    .await
                    .context("GET task")?
                    .with_context(|| format!("GET {}", object_key(i)))?;
                if got != want {
                    bail!(
                        "object {} read back different bytes ({} of {} bytes)",
                        object_key(i),
                        got.len(),
                        want.len()
                    );
                }
                Ok(())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let elapsed_us = clock.mono_us() - t0;
    let progress = sampler.finish().await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    let requests = Requests::between(&before, &store.stats.snapshot());
    Ok(Sample::new(data.total_bytes(), elapsed_us, requests, progress))
}

/// Deletes every object under the store's prefix (a finished run's data), so a full-size run
/// does not fill the disk MinIO lives on. Returns how many objects were deleted.
pub async fn delete_all(store: &DynStore) -> Result<usize> {
    let keys = store.list("").await.context("listing the run's objects")?;
    let results: Vec<Result<()>> = futures::stream::iter(keys.iter())
        .map(|(key, _)| {
            let store = store.clone();
            async move { store.delete(key).await.with_context(|| format!("DELETE {key}")) }
        })
        .buffer_unordered(DELETE_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(keys.len())
}
