//! Nothing a session started outlives the host, even a host killed with SIGKILL.
//!
//! The CLI dies with its parent (`PR_SET_PDEATHSIG`), but what its tools started would be
//! handed to init and run on: Claude Code runs each Bash command in a session of its own, and
//! a job it puts in the background is init's child as soon as that shell exits. Process groups
//! and sessions cannot find such a job; its environment can. Every CLI and terminal is started
//! with a mark in its environment ([`MARK_ENV`]: the host's random token and a number), which
//! everything it starts inherits. Ending a CLI kills its process group and every process with
//! its mark. A small keeper process — this same program, started with [`KEEPER_ENV`] set —
//! holds the read end of a pipe whose only writer is the host: when the pipe closes, however
//! the host ended (SIGKILL too), it kills every process group the host still had and every
//! process with the host's token, and exits.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// Set (to `1`) in the keeper's environment: the program's `main` calls [`keeper_main`].
pub const KEEPER_ENV: &str = "CLAUDE_HOST_KEEPER";
/// The host's token, for the keeper.
const TOKEN_ENV: &str = "CLAUDE_HOST_KEEPER_TOKEN";
/// The mark every process a CLI or terminal starts inherits: `<host token>-<n>`.
pub const MARK_ENV: &str = "CLAUDE_HOST_MARK";

/// The host's end of the keeper.
#[derive(Debug)]
pub struct Keeper {
    pipe: Mutex<ChildStdin>,
    child: Mutex<Child>,
    token: String,
    marks: std::sync::atomic::AtomicU64,
}

impl Keeper {
    /// Starts `exe` (normally this program) as the keeper.
    pub fn start(exe: &Path) -> std::io::Result<Keeper> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut child = Command::new(exe)
            .env_clear()
            .env(KEEPER_ENV, "1")
            .env(TOKEN_ENV, &token)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pipe = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the keeper has no stdin"))?;
        Ok(Keeper {
            pipe: Mutex::new(pipe),
            child: Mutex::new(child),
            token,
            marks: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// A new mark for one process tree ([`MARK_ENV`]).
    pub fn mark(&self) -> String {
        let n = self
            .marks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}-{n}", self.token)
    }

    fn say(&self, line: &str) {
        let mut pipe = self
            .pipe
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = pipe.write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "the process keeper is gone; sessions started now may outlive a killed host");
        }
    }

    /// Process group `pgid` is the host's: killed if the host ends without ending it.
    pub fn watch(&self, pgid: i32) {
        self.say(&format!("+{pgid}\n"));
    }

    /// Process group `pgid` ended (its id may be reused by anyone now).
    pub fn forget(&self, pgid: i32) {
        self.say(&format!("-{pgid}\n"));
    }

    /// The keeper's pid.
    pub fn pid(&self) -> u32 {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .id()
    }
}

/// Whether this process was started as the keeper.
pub fn is_keeper() -> bool {
    std::env::var_os(KEEPER_ENV).is_some_and(|v| v == "1")
}

/// The keeper: reads `+pgid` / `-pgid` lines until its input closes, then kills the groups
/// still watched and every process with the host's mark. Returns the exit code.
#[allow(unsafe_code)]
pub fn keeper_main() -> i32 {
    // A Ctrl-C or a group kill meant for the host must not stop the one who cleans up after
    // it: it ends when its input does.
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: setting a signal to be ignored has no handler to race with.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let token = std::env::var(TOKEN_ENV).unwrap_or_default();
    let mut watched = std::collections::BTreeSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (sign, rest) = line.split_at(line.len().min(1));
        let Ok(sid) = rest.trim().parse::<i32>() else {
            continue;
        };
        match sign {
            "+" => {
                watched.insert(sid);
            }
            "-" => {
                watched.remove(&sid);
            }
            _ => {}
        }
    }
    for pgid in watched {
        crate::process::kill_group(pgid, libc::SIGKILL);
    }
    if !token.is_empty() {
        // Twice: a process may have started another while the first pass read the list.
        for _ in 0..2 {
            kill_marked(&format!("{token}-"));
        }
    }
    0
}

/// Kills every process whose [`MARK_ENV`] is `mark`, or starts with it when it ends in `-`.
/// Returns how many were signalled.
pub fn kill_marked(mark: &str) -> usize {
    let needle = format!("{MARK_ENV}={mark}");
    let prefix = mark.ends_with('-');
    let me = std::process::id();
    let mut killed = 0;
    for (pid, dir) in pids() {
        if u32::try_from(pid).ok() == Some(me) {
            continue;
        }
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        let marked = environ
            .split(|b| *b == 0)
            .any(|var| var.starts_with(needle.as_bytes()) && (prefix || var.len() == needle.len()));
        if marked {
            // SAFETY: kill(2) of a process that carries this host's mark.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            killed += 1;
        }
    }
    killed
}

/// Every process's id and `/proc` folder.
fn pids() -> Vec<(i32, std::path::PathBuf)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            Some((pid, e.path()))
        })
        .collect()
}

/// One process as `/proc/<pid>/stat` shows it.
struct ProcStat {
    pgrp: i32,
    session: i32,
}

/// Every process's stat line, read from `/proc` (processes that end meanwhile are skipped).
fn processes() -> Vec<ProcStat> {
    let mut out = Vec::new();
    for (_, dir) in pids() {
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp session …`; comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| fields.get(i).and_then(|s| s.parse::<i32>().ok());
        let (Some(pgrp), Some(session)) = (num(2), num(3)) else {
            continue;
        };
        out.push(ProcStat { pgrp, session });
    }
    out
}

/// The process groups of session `sid` (the session's own first).
pub fn session_groups(sid: i32) -> Vec<i32> {
    let mut groups = vec![sid];
    for p in processes() {
        if p.session == sid && !groups.contains(&p.pgrp) {
            groups.push(p.pgrp);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.split_whitespace().next() != Some("Z"))
        })
    }

    #[test]
    fn marked_processes_are_killed_and_no_other() {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let spawn = |mark: &str| {
            Command::new("tail")
                .args(["-f", "/dev/null"])
                .env(MARK_ENV, mark)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut mine = spawn(&format!("{token}-1"));
        let mut other = spawn(&format!("{token}-10"));
        let mut foreign = spawn("someone-else-1");
        let wait_env = |c: &Child| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !std::fs::read(format!("/proc/{}/environ", c.id()))
                .is_ok_and(|e| e.windows(MARK_ENV.len()).any(|w| w == MARK_ENV.as_bytes()))
            {
                assert!(std::time::Instant::now() < deadline, "the child started");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        for c in [&mine, &other, &foreign] {
            wait_env(c);
        }
        assert_eq!(kill_marked(&format!("{token}-1")), 1, "exactly that mark");
        let _ = mine.wait();
        assert!(!alive(mine.id()));
        assert!(alive(other.id()), "{token}-10 is another mark");
        assert_eq!(kill_marked(&format!("{token}-")), 1, "the host's token");
        let _ = other.wait();
        assert!(alive(foreign.id()), "another host's process is left alone");
        foreign.kill().unwrap();
        let _ = foreign.wait();
    }
}
