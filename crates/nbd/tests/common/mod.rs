//! Test harness: runs the server in-process on a unix socket in a temp dir (its own
//! tokio runtime on a background thread), and runs real NBD clients against it with a
//! deadline. A missing client binary fails the test with the Debian package to install.
#![allow(dead_code)]
// Real time is the point here: real sockets and real clients take real time.
#![allow(clippy::disallowed_methods)]

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub mod raw_client;

use fardisk_nbd::{serve_unix, ExportMap, ExportProvider, MemDevice, ServerConfig};
use tokio::sync::watch;

/// No client invocation in these tests should take anywhere near this long.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    shutdown: watch::Sender<bool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl TestServer {
    pub fn start(provider: Arc<dyn ExportProvider>, config: ServerConfig) -> TestServer {
        let dir =
            tempfile::Builder::new().prefix("fardisk-nbd-").tempdir().expect("create temp dir");
        let socket = dir.path().join("nbd.sock");
        Self::start_at(dir, socket, provider, config)
    }

    pub fn start_at(
        dir: tempfile::TempDir,
        socket: PathBuf,
        provider: Arc<dyn ExportProvider>,
        config: ServerConfig,
    ) -> TestServer {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let socket_for_thread = socket.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            runtime.block_on(serve_unix(&socket_for_thread, provider, config, shutdown_rx))
        });
        let server = TestServer { dir, socket, shutdown, thread: Some(thread) };
        server.wait_until_listening();
        server
    }

    fn wait_until_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if self.thread.as_ref().is_some_and(|thread| thread.is_finished()) {
                panic!("server thread exited before listening");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("server did not start listening on {}", self.socket.display());
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    /// Requests shutdown and returns what `serve_unix` returned.
    pub fn stop(mut self) -> io::Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> io::Result<()> {
        let _ = self.shutdown.send(true);
        match self.thread.take() {
            Some(thread) => thread.join().expect("server thread panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// One writable export "vol" (with a description) over a fresh MemDevice.
pub fn mem_export(size_bytes: u64) -> (Arc<MemDevice>, Arc<ExportMap>) {
    let device = Arc::new(MemDevice::new(size_bytes));
    let exports = ExportMap::new().with_export("vol", "test volume", device.clone());
    (device, Arc::new(exports))
}

fn find_in_path(program: &str, path_var: &str) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The PATH for client tools: /usr/bin first, so `nbdsh` finds the system python3
/// that has the libnbd bindings even where a pyenv python3 shadows it.
pub fn client_path() -> String {
    let inherited = std::env::var("PATH").unwrap_or_default();
    format!("/usr/bin:/bin:{inherited}")
}

/// Panics with the package to install if `program` is missing.
pub fn require_tool(program: &str, debian_package: &str) -> PathBuf {
    find_in_path(program, &client_path()).unwrap_or_else(|| {
        panic!(
            "`{program}` is not installed: this test needs the Debian package \
             {debian_package} (apt-get install {debian_package})"
        )
    })
}

/// Checks that nbdsh can import the libnbd Python bindings.
pub fn require_nbdsh() -> PathBuf {
    let nbdsh = require_tool("nbdsh", "libnbd-bin");
    let probe = Command::new("python3")
        .env("PATH", client_path())
        .args(["-c", "import nbd"])
        .output()
        .expect("run python3");
    assert!(
        probe.status.success(),
        "python3 cannot import the libnbd bindings: this test needs the Debian package \
         python3-libnbd (apt-get install python3-libnbd): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    nbdsh
}

/// Runs `program` with `args`, killing it (by its PID) if it exceeds the deadline.
pub fn run(program: &Path, args: &[&str]) -> Output {
    let child = Command::new(program)
        .args(args)
        .env("PATH", client_path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("spawn {}: {error}", program.display()));
    let pid = child.id();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(CLIENT_DEADLINE) {
        Ok(output) => output.expect("wait for client"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{} {:?} did not finish within {:?}", program.display(), args, CLIENT_DEADLINE);
        }
    }
}

/// Runs and asserts success, returning stdout.
pub fn run_ok(program: &Path, args: &[&str]) -> String {
    let output = run(program, args);
    assert!(
        output.status.success(),
        "{} {:?} failed ({}):\nstdout: {}\nstderr: {}",
        program.display(),
        args,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs a Python script under nbdsh (libnbd's Python shell; `h` is a handle).
pub fn nbdsh_script(script: &str) -> Output {
    let nbdsh = require_nbdsh();
    run(&nbdsh, &["-c", script])
}

pub fn nbdsh_ok(script: &str) -> String {
    let nbdsh = require_nbdsh();
    run_ok(&nbdsh, &["-c", script])
}
