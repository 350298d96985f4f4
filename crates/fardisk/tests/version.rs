//! `fardisk --version` names the commit the binary was built from (build.rs): benchmark rows
//! measured with a binary built elsewhere take their commit from it (bench/lib/result.py).

#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fardisk"))
        .arg("--version")
        .output()
        .expect("run fardisk --version");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let line = text.trim();
    let rev = line
        .strip_prefix(concat!("fardisk ", env!("CARGO_PKG_VERSION"), " ("))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected --version output: {line:?}"));
    let hex = rev.strip_suffix("-dirty").unwrap_or(rev);
    assert!(
        rev == "unknown" || (hex.len() >= 7 && hex.chars().all(|c| c.is_ascii_hexdigit())),
        "not a commit: {rev:?}"
    );
}
