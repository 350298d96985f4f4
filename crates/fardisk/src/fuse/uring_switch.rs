//! Whether the FUSE mount asks for io_uring, and the kernel's module switch
//! (`/sys/module/fuse/parameters/enable_uring`). fardisk writes the switch only when told
//! to (`import --fuse-uring on`): it is machine-wide, root-only, and changes what every
//! FUSE server on the host may negotiate. Decision and alternatives:
//! docs/design/0004-fuse-path-profile.md.

use std::path::Path;

/// The module parameter that lets connections negotiate FUSE over io_uring.
pub const URING_SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// `import --fuse-uring MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UringMode {
    /// /dev/fuse only.
    Off,
    /// io_uring when the kernel offers it (the switch is on), /dev/fuse otherwise; the
    /// switch is left as it is.
    #[default]
    Auto,
    /// Turn the switch on if it is off, then use io_uring; refuse when the kernel has none.
    On,
}

impl UringMode {
    pub fn parse(text: &str) -> Result<UringMode, String> {
        match text {
            "off" => Ok(UringMode::Off),
            "auto" => Ok(UringMode::Auto),
            "on" => Ok(UringMode::On),
            other => Err(format!("--fuse-uring {other}: expected on, off or auto")),
        }
    }
}

/// Prepares the switch for `mode`; returns whether the mount should ask for io_uring.
pub fn prepare_uring(mode: UringMode) -> Result<bool, String> {
    prepare_at(mode, Path::new(URING_SWITCH))
}

fn prepare_at(mode: UringMode, switch: &Path) -> Result<bool, String> {
    match mode {
        UringMode::Off => Ok(false),
        UringMode::Auto => Ok(true),
        UringMode::On => {
            let value = std::fs::read_to_string(switch).map_err(|_| {
                format!("--fuse-uring on: this kernel has no FUSE over io_uring ({} is missing: needs Linux 6.14+ with CONFIG_FUSE_IO_URING); use --fuse-uring auto or off", switch.display())
            })?;
            if value.trim() != "Y" {
                std::fs::write(switch, b"Y").map_err(|e| {
                    format!(
                        "--fuse-uring on: cannot turn on {}: {e} (needs root)",
                        switch.display()
                    )
                })?;
                tracing::info!(switch = %switch.display(), "fuse: turned on FUSE over io_uring (--fuse-uring on)");
            }
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_on_flips_only_when_told() {
        assert_eq!(UringMode::parse("on"), Ok(UringMode::On));
        assert!(UringMode::parse("yes").is_err());
        let dir = std::env::temp_dir().join(format!("fardisk-uring-switch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let switch = dir.join("enable_uring");
        std::fs::write(&switch, b"N\n").expect("switch");
        assert_eq!(prepare_at(UringMode::Auto, &switch), Ok(true));
        assert_eq!(std::fs::read_to_string(&switch).expect("read"), "N\n", "auto leaves it");
        assert_eq!(prepare_at(UringMode::Off, &switch), Ok(false));
        assert_eq!(prepare_at(UringMode::On, &switch), Ok(true));
        assert_eq!(std::fs::read_to_string(&switch).expect("read"), "Y", "on turns it on");
        let missing = prepare_at(UringMode::On, &dir.join("nope")).expect_err("no switch");
        assert!(missing.contains("no FUSE over io_uring"), "{missing}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
