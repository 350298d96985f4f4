//! Progress bars for operations that can take more than a few seconds (scrub, export drain,
//! warm-up, L2ARC rebuild). Drawn on stderr only when it is a terminal: scripts and logs get the
//! final one-line result and nothing else.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// A bar counting `unit` ("bytes" draws sizes and rates), or None when stderr is not a terminal
/// or progress is off (`enabled`: `Config::progress`, false with FARDISK_NO_PROGRESS).
pub fn bar(enabled: bool, prefix: &str, unit: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() || !enabled {
        return None;
    }
    let template = if unit == "bytes" {
        "{prefix:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}"
    } else {
        "{prefix:>10} [{bar:30}] {pos}/{len} {msg}"
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::new(0).with_style(style).with_prefix(prefix.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(bar)
}

/// A spinner with a message, for waits whose length is unknown (the daemon replaying the log).
pub fn spinner(enabled: bool, message: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() || !enabled {
        return None;
    }
    let bar = ProgressBar::new_spinner().with_message(message.to_string());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    Some(bar)
}
