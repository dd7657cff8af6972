//! Spawning the CLI with hygiene: explicit environment, own process group, dies with the
//! parent, whole group killed on drop, stderr into tracing with a bounded tail.

use crate::SessionOptions;
use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncBufReadExt;

/// Lines of stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// Longest stderr line logged or kept.
const STDERR_LINE_MAX: usize = 2048;

/// The running child; kills its whole session when dropped.
pub(crate) struct ChildGuard {
    pub child: tokio::process::Child,
    pgid: Option<i32>,
    keeper: Option<Arc<crate::Keeper>>,
    /// The mark its process tree carries (with a keeper).
    mark: Option<String>,
    pub stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
}

impl ChildGuard {
    /// Kills the CLI's group (the groups of its session, when it leads one).
    pub(crate) fn kill_group(&self) {
        if let Some(sid) = self.pgid {
            for pgid in crate::keeper::session_groups(sid) {
                kill_group(pgid, libc::SIGKILL);
            }
        }
    }

    /// Waits (briefly) until stderr has been read to its end, so the tail holds the last
    /// words of a process that just exited. Tools that inherited stderr may keep it open, hence
    /// the bound.
    pub(crate) async fn drain_stderr(&mut self) {
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), task).await;
        }
    }

    pub(crate) fn tail(&self) -> Vec<String> {
        self.stderr_tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The process group id (the child's pid).
    pub(crate) fn pgid(&self) -> Option<i32> {
        self.pgid
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Tools the CLI started (shells, MCP servers) are in its group: take them all down.
        self.kill_group();
        // Jobs its tools left running in sessions of their own (init's children by now).
        if let Some(mark) = &self.mark {
            crate::keeper::kill_marked(mark);
        }
        if let (Some(k), Some(pgid)) = (&self.keeper, self.pgid) {
            k.forget(pgid);
        }
    }
}

/// Sends `sig` to process group `pgid` (a group this process created).
#[allow(unsafe_code)]
pub fn kill_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) on a process group we created; a stale id at worst gets ESRCH.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

#[allow(unsafe_code)]
pub(crate) fn spawn(opts: &SessionOptions) -> std::io::Result<ChildGuard> {
    let mark = opts.keeper.as_ref().map(|k| k.mark());
    let mut cmd = tokio::process::Command::new(&opts.cli);
    cmd.args(opts.argv())
        .env_clear()
        .envs(opts.env(&|k| std::env::var(k).ok()))
        .envs(mark.iter().map(|m| (crate::keeper::MARK_ENV, m.as_str())))
        .current_dir(&opts.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A group of its own, not a session: Claude Code 2.1.330 started as a session leader
        // loses the tool calls of a subagent's subagent. What its tools start in sessions of
        // their own carries its mark instead.
        .process_group(0)
        .kill_on_drop(true);
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) run between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            #[cfg(target_os = "linux")]
            {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The parent may have died before prctl took effect.
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    if let (Some(k), Some(pgid)) = (&opts.keeper, pgid) {
        k.watch(pgid);
    }
    let stderr_tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
    let mut stderr_task = None;
    if let Some(stderr) = child.stderr.take() {
        let tail = stderr_tail.clone();
        stderr_task = Some(tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(mut line)) = lines.next_line().await {
                if line.len() > STDERR_LINE_MAX {
                    let mut end = STDERR_LINE_MAX;
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    line.truncate(end);
                }
                tracing::debug!(target: "claude_cli", "{line}");
                let mut t = tail
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if t.len() == STDERR_TAIL {
                    t.pop_front();
                }
                t.push_back(line);
            }
        }));
    }
    Ok(ChildGuard {
        child,
        pgid,
        keeper: opts.keeper.clone(),
        mark,
        stderr_tail,
        stderr_task,
    })
}
