//! An interactive shell on a pseudo-terminal, for a client's terminal channel: its own
//! session and process group (killed whole when the handle is dropped), dies with the host,
//! an explicit environment.

use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// What a shell reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PtyEvent {
    /// Output (escape sequences and all), as text.
    Data(String),
    /// The shell exited (its code, when it had one).
    Exited(Option<i64>),
}

enum PtyCommand {
    Input(Vec<u8>),
    Resize(u16, u16),
}

/// A running shell. Dropping it kills the shell and everything it started.
#[derive(Debug)]
pub struct Pty {
    commands: mpsc::UnboundedSender<PtyCommand>,
    pgid: Option<i32>,
    keeper: Option<std::sync::Arc<claude_host_sdk::Keeper>>,
    mark: Option<String>,
}

impl Pty {
    /// Starts the user's shell (`$SHELL`, else `/bin/bash`) in `cwd` with a `cols`×`rows`
    /// terminal; `events` gets its output and its exit, in order. `keeper` learns of its
    /// session, so it does not outlive a host killed with SIGKILL.
    pub fn spawn(
        cwd: &Path,
        cols: u16,
        rows: u16,
        events: mpsc::UnboundedSender<PtyEvent>,
        keeper: Option<std::sync::Arc<claude_host_sdk::Keeper>>,
    ) -> std::io::Result<Pty> {
        let (pty, pts) = pty_process::open().map_err(std::io::Error::other)?;
        pty.resize(pty_process::Size::new(rows.max(1), cols.max(1)))
            .map_err(std::io::Error::other)?;
        let shell = std::env::var("SHELL")
            .ok()
            .filter(|s| Path::new(s).is_absolute())
            .unwrap_or_else(|| "/bin/bash".to_owned());
        let mut cmd = pty_process::Command::new(&shell)
            .env_clear()
            .env("TERM", "xterm-256color")
            .env("COLORTERM", "truecolor")
            .current_dir(cwd)
            .kill_on_drop(true);
        for key in ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"] {
            if let Ok(v) = std::env::var(key) {
                cmd = cmd.env(key, v);
            }
        }
        cmd = cmd.env("SHELL", &shell);
        let mark = keeper.as_ref().map(|k| k.mark());
        if let Some(m) = &mark {
            cmd = cmd.env(claude_host_sdk::keeper::MARK_ENV, m);
        }
        let cmd = die_with_parent(cmd);
        let mut child = cmd.spawn(pts).map_err(std::io::Error::other)?;
        // The shell leads its own session, so its pid is its group's id.
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        if let (Some(k), Some(sid)) = (&keeper, pgid) {
            k.watch(sid);
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (mut reader, mut writer) = pty.into_split();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            // Bytes of a character split across two reads.
            let mut partial: Vec<u8> = Vec::new();
            let mut reading = true;
            let code = loop {
                tokio::select! {
                    n = reader.read(&mut buf), if reading => match n {
                        Ok(n) if n > 0 => {
                            partial.extend_from_slice(&buf[..n]);
                            let text = take_text(&mut partial);
                            if !text.is_empty() {
                                let _ = events.send(PtyEvent::Data(text));
                            }
                        }
                        // EOF, or EIO once the shell and its children closed the terminal.
                        _ => reading = false,
                    },
                    cmd = rx.recv() => match cmd {
                        Some(PtyCommand::Input(bytes)) => {
                            let _ = writer.write_all(&bytes).await;
                        }
                        Some(PtyCommand::Resize(cols, rows)) => {
                            let _ = writer.resize(pty_process::Size::new(rows.max(1), cols.max(1)));
                        }
                        // The handle is gone: the group was killed; reap the shell.
                        None => break child.wait().await.ok().and_then(|s| s.code()),
                    },
                    status = child.wait() => {
                        // Output still buffered in the terminal comes before the exit.
                        while let Ok(Ok(n)) = tokio::time::timeout(
                            std::time::Duration::from_millis(50),
                            reader.read(&mut buf),
                        )
                        .await
                        {
                            if n == 0 {
                                break;
                            }
                            partial.extend_from_slice(&buf[..n]);
                        }
                        let text = String::from_utf8_lossy(&partial).into_owned();
                        if !text.is_empty() {
                            let _ = events.send(PtyEvent::Data(text));
                        }
                        break status.ok().and_then(|s| s.code());
                    }
                }
            };
            let _ = events.send(PtyEvent::Exited(code.map(i64::from)));
        });
        Ok(Pty {
            commands: tx,
            pgid,
            keeper,
            mark,
        })
    }

    /// Types `data` into the shell.
    pub fn input(&self, data: &str) {
        let _ = self
            .commands
            .send(PtyCommand::Input(data.as_bytes().to_vec()));
    }

    /// Resizes the terminal.
    pub fn resize(&self, cols: u16, rows: u16) {
        let _ = self.commands.send(PtyCommand::Resize(cols, rows));
    }

    /// The shell's process group.
    pub fn pgid(&self) -> Option<i32> {
        self.pgid
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Some(sid) = self.pgid {
            // An interactive shell puts each job in a process group of its own, all in the
            // shell's session: every group of the session goes.
            for pgid in claude_host_sdk::keeper::session_groups(sid) {
                claude_host_sdk::kill_group(pgid, libc::SIGKILL);
            }
            if let Some(mark) = &self.mark {
                claude_host_sdk::keeper::kill_marked(mark);
            }
            if let Some(k) = &self.keeper {
                k.forget(sid);
            }
        }
    }
}

#[allow(unsafe_code)]
fn die_with_parent(cmd: pty_process::Command) -> pty_process::Command {
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The parent may have died before prctl took effect.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        })
    }
}

/// The valid UTF-8 at the front of `bytes` (invalid bytes replaced), leaving an incomplete
/// character at the end for the next read.
fn take_text(bytes: &mut Vec<u8>) -> String {
    let keep = match std::str::from_utf8(bytes) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => bytes.len() - e.valid_up_to(),
        Err(_) => 0,
    };
    let rest = bytes.split_off(bytes.len() - keep);
    let text = String::from_utf8_lossy(bytes).into_owned();
    *bytes = rest;
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_reads_waits_for_its_end() {
        let mut b = "a€".as_bytes()[..3].to_vec();
        assert_eq!(take_text(&mut b), "a");
        b.extend_from_slice(&"€".as_bytes()[2..]);
        assert_eq!(take_text(&mut b), "€");
        assert!(b.is_empty());
    }

    #[tokio::test]
    async fn a_shell_echoes_its_folder_and_dies_with_its_handle() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pty = Pty::spawn(dir.path(), 80, 24, tx, None).unwrap();
        pty.input("echo \"at:$PWD\"\n");
        let want = format!("at:{}", dir.path().canonicalize().unwrap().display());
        let mut out = String::new();
        while !out.contains(&want) {
            match tokio::time::timeout(std::time::Duration::from_secs(20), rx.recv()).await {
                Ok(Some(PtyEvent::Data(d))) => out.push_str(&d),
                other => panic!("no echo: {other:?}; {out}"),
            }
        }
        let pgid = pty.pgid().unwrap();
        drop(pty);
        loop {
            match tokio::time::timeout(std::time::Duration::from_secs(20), rx.recv()).await {
                Ok(Some(PtyEvent::Exited(_))) => break,
                Ok(Some(_)) => {}
                other => panic!("no exit: {other:?}"),
            }
        }
        // Its children, reparented when it died, are reaped by init: wait for the group to go.
        let group_alive = || {
            std::process::Command::new("kill")
                .args(["-0", "--", &format!("-{pgid}")])
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap()
                .success()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while group_alive() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(!group_alive(), "the shell's group is gone");
    }
}
