//! A real PostgreSQL server for tests: a private cluster (initdb into a temporary directory,
//! its own port on 127.0.0.1, password authentication), started from the machine's PostgreSQL
//! binaries and killed when the test process exits. Tests create a database each.

use anyhow::{Context, bail};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The role tests connect as.
pub const USER: &str = "claude_host";
/// Its password.
pub const PASSWORD: &str = "test-secret-pw";

/// A running private cluster.
pub struct PgCluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    owner: Option<(u32, u32)>,
    durable: bool,
    server: Mutex<Option<Child>>,
}

/// The directory holding `initdb`, `postgres` and `pg_isready`: `CLAUDE_HOST_TEST_PG_BIN`, else
/// the newest `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`.
fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("CLAUDE_HOST_TEST_PG_BIN") {
        return Ok(PathBuf::from(p));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, p)| p.join("postgres").exists())
        .collect();
    versions.sort();
    if let Some((_, p)) = versions.pop() {
        return Ok(p);
    }
    let out = Command::new("pg_config").arg("--bindir").output();
    if let Ok(out) = out
        && out.status.success()
    {
        return Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    bail!(
        "PostgreSQL server binaries not found (install postgresql, or set CLAUDE_HOST_TEST_PG_BIN); scripts/test.sh installs them"
    )
}

/// PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user.
#[allow(unsafe_code)]
fn owner() -> anyhow::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let id = |flag: &str| -> anyhow::Result<u32> {
        let out = Command::new("id").args([flag, "postgres"]).output()?;
        if !out.status.success() {
            bail!("running as root and there is no postgres user to run PostgreSQL as");
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Removes clusters of test processes that are gone.
#[allow(unsafe_code)]
fn clean_stale(root: &Path) {
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl PgCluster {
    /// initdb and start a new cluster, with `fsync` off (tests lose nothing to a crash of
    /// the machine they run on).
    pub fn start() -> anyhow::Result<PgCluster> {
        PgCluster::start_with(false)
    }

    /// initdb and start a new cluster; `durable`: with PostgreSQL's defaults for `fsync` and
    /// `synchronous_commit`, as a real deployment runs (benchmarks).
    pub fn start_with(durable: bool) -> anyhow::Result<PgCluster> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let bin = bin_dir()?;
        let owner = owner()?;
        let root = std::env::temp_dir().join("claude-host-test-pg");
        std::fs::create_dir_all(&root)?;
        clean_stale(&root);
        let dir = root.join(format!(
            "{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        // The parent must let the postgres user through.
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, PASSWORD)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid))?;
        }
        let mut init = Command::new(bin.join("initdb"));
        init.arg("-D")
            .arg(dir.join("data"))
            .args([
                "-U",
                USER,
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["--no-sync", "-E", "UTF8", "--locale=C"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = owner {
            init.uid(uid).gid(gid);
        }
        let out = init.output().context("cannot run initdb")?;
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let cluster = PgCluster {
            bin,
            dir,
            port: free_port()?,
            owner,
            durable,
            server: Mutex::new(None),
        };
        cluster.resume()?;
        Ok(cluster)
    }

    /// The cluster every test of this process shares (one per test binary).
    pub fn shared() -> &'static PgCluster {
        static SHARED: OnceLock<PgCluster> = OnceLock::new();
        SHARED.get_or_init(|| match PgCluster::start() {
            Ok(c) => c,
            Err(e) => panic!("cannot start PostgreSQL for the tests: {e:#}"),
        })
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for database `db` with the test role's password.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new empty database and returns its URL.
    pub fn create_database(&self) -> anyhow::Result<String> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(&name))
    }

    /// Runs one SQL command against database `db` through the socket; returns its output.
    pub fn psql(&self, db: &str, sql: &str) -> anyhow::Result<String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .output()
            .context("cannot run psql")?;
        if !out.status.success() {
            bail!("psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Stops the server (fast shutdown: clients are disconnected), waiting until it is down.
    #[allow(unsafe_code)]
    pub fn stop(&self) -> anyhow::Result<()> {
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = server.take() {
            let pid = i32::try_from(child.id())?;
            // SAFETY: signalling a child we spawned and have not reaped.
            unsafe { libc::kill(pid, libc::SIGINT) };
            child.wait()?;
        }
        Ok(())
    }

    /// Starts the server (again), waiting until it accepts connections.
    #[allow(unsafe_code)]
    pub fn resume(&self) -> anyhow::Result<()> {
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        if server.is_some() {
            return Ok(());
        }
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                if self.durable {
                    "fsync=on"
                } else {
                    "fsync=off"
                },
                "-c",
                "max_connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        // SAFETY: prctl is async-signal-safe; the server dies with the thread that spawned it.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        // PR_SET_PDEATHSIG fires when the spawning *thread* ends: spawn from one that lives as
        // long as the process.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(cmd.spawn());
            loop {
                std::thread::park();
            }
        });
        let child = rx.recv()?.context("cannot start postgres")?;
        *server = Some(child);
        drop(server);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()?;
            if ready.success() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("PostgreSQL did not become ready on port {}", self.port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
