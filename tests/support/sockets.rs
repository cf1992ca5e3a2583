//! Host unix sockets for the boundary tests: a listening socket that is
//! removed with its guard, and a probe command that tries to connect to
//! each of a list (contract section 20).

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// A listening socket bound to a path, removed when dropped.
pub struct Listening {
    pub path: PathBuf,
    _l: UnixListener,
}

impl Listening {
    pub fn at(path: &Path) -> Listening {
        let _ = std::fs::remove_file(path);
        let l = UnixListener::bind(path).unwrap();
        l.set_nonblocking(true).unwrap();
        Listening {
            path: path.to_path_buf(),
            _l: l,
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A listening socket in the abstract namespace of this network namespace.
pub fn listen_abstract(name: &str) -> UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    UnixListener::bind_addr(&addr).unwrap()
}

/// A python probe that connects to each of `targets` (a path, or `@name`
/// for an abstract socket) and prints `CONNECTED <t>` or `refused <t>`,
/// then `probe-done`.
pub fn connect_probe(targets: &[String]) -> String {
    let script = format!(
        r#"
import socket
for t in {targets:?}:
    s = socket.socket(socket.AF_UNIX)
    addr = "\0" + t[1:] if t.startswith("@") else t
    try:
        s.connect(addr)
        print("CONNECTED", t)
    except OSError as e:
        print("refused", t, e.errno)
print("probe-done")
"#
    );
    format!("python3 -c '{}'", script.replace('\'', r"'\''"))
}
