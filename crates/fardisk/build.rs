//! Puts the commit a binary was built from into `fardisk --version` (`FARDISK_GIT_REV`), so a
//! benchmark row measured with a binary built elsewhere (`FARDISK_BIN2`, an older commit) names
//! that binary's commit, not the tree's (bench/lib/result.py). "-dirty" when the code differs from
//! the commit; "unknown" without git (a source tarball).

use std::path::Path;
use std::process::Command;

fn git(root: &Path, args: &[&str]) -> Option<std::process::Output> {
    Command::new("git").arg("-C").arg(root).args(args).output().ok()
}

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir).join("../..");
    // Rerun when the commit or the code that goes into the binary changes (a directory is scanned
    // for changes within; a change to another crate's tests does not rebuild this one). Not
    // .git/index: `git status` rewrites it, and a rerun rebuilds the crate.
    for path in [".git/HEAD", ".git/refs", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    let crates = std::fs::read_dir(root.join("crates")).expect("the workspace's crates directory");
    for entry in crates.flatten() {
        // Only paths that exist: cargo reruns the script on every build for a missing one.
        for path in ["src", "Cargo.toml", "build.rs"].map(|part| entry.path().join(part)) {
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let rev = git(&root, &["rev-parse", "--short=7", "HEAD"])
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|rev| !rev.is_empty());
    let rev = match rev {
        Some(rev) => {
            // The same paths as above: the code that goes into the binary.
            let code = [
                "crates/*/src",
                "crates/*/Cargo.toml",
                "crates/*/build.rs",
                "Cargo.toml",
                "Cargo.lock",
            ];
            let mut args = vec!["diff", "--quiet", "HEAD", "--"];
            args.extend(code);
            match git(&root, &args).map(|out| out.status.code()) {
                Some(Some(0)) => rev,
                _ => format!("{rev}-dirty"),
            }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=FARDISK_GIT_REV={rev}");
}
