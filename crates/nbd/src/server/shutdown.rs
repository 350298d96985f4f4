//! The shutdown signal: a `watch::Receiver<bool>` that turns `true` when the server
//! should stop. A dropped sender means nobody can ask for shutdown any more, so the
//! server keeps running (it does not treat a forgotten sender as a stop request).

use tokio::sync::watch;

/// Resolves once shutdown has been requested; never resolves if the sender is gone
/// without having requested it.
pub async fn wait_for_shutdown(shutdown: &mut watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        if shutdown.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// True if shutdown has been requested (non-blocking).
pub fn shutdown_requested(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow()
}
