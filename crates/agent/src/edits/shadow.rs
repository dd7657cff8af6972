//! What a shell command changed: a git index and object store of our own (never the user's)
//! over a working directory, snapshotted before and after the command and compared.
//!
//! In a git repository the shadow starts from a copy of the repository's index (so only files
//! that differ from it are read again) and borrows the repository's objects through
//! `alternates` (so nothing already committed is stored twice); `.gitignore` rules apply.
//! Outside one, a folder with more files than the limit is not tracked at all.

use super::EditError;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One file a command created, changed or deleted, as git object ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChange {
    /// The file, absolute.
    pub path: PathBuf,
    /// Its object before (`None`: it did not exist).
    pub before: Option<String>,
    /// Its object after (`None`: it was deleted).
    pub after: Option<String>,
    /// Where it was before, when it was moved (`path` is where it is now).
    pub from: Option<PathBuf>,
}

/// A shadow over one working directory.
#[derive(Debug)]
pub struct Shadow {
    git_dir: PathBuf,
    top: PathBuf,
    pathspec: String,
}

const NULL_OID: &str = "0000000000000000000000000000000000000000";

impl Shadow {
    /// Opens (creating on first use) the shadow of `dir` under `base`.
    pub fn open(base: &Path, dir: &Path, file_limit: usize) -> Result<Shadow, EditError> {
        let dir = dir.canonicalize().map_err(|e| EditError::io(dir, e))?;
        let repo = repository_of(&dir);
        let top = repo.as_ref().map_or_else(|| dir.clone(), |r| r.top.clone());
        let name = super::store::Blob::of(top.as_os_str().as_encoded_bytes()).hash;
        let git_dir = base.join(&name[..16]);
        let pathspec = match dir.strip_prefix(&top) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
            _ => ".".to_owned(),
        };
        let shadow = Shadow {
            git_dir,
            top,
            pathspec,
        };
        if !shadow.git_dir.join("HEAD").exists() {
            if repo.is_none() {
                let files = shadow.count_files(file_limit + 1)?;
                if files > file_limit {
                    return Err(EditError::TooManyFiles {
                        dir: dir.clone(),
                        limit: file_limit,
                    });
                }
            }
            std::fs::create_dir_all(base).map_err(|e| EditError::io(base, e))?;
            init(&shadow.git_dir)?;
            if let Some(r) = &repo {
                // Objects the repository already has are read from it, not copied.
                let info = shadow.git_dir.join("objects").join("info");
                std::fs::create_dir_all(&info).map_err(|e| EditError::io(&info, e))?;
                let objects = r.common.join("objects");
                std::fs::write(info.join("alternates"), format!("{}\n", objects.display()))
                    .map_err(|e| EditError::io(&info, e))?;
                let exclude = r.common.join("info").join("exclude");
                if let Ok(rules) = std::fs::read(&exclude) {
                    let ours = shadow.git_dir.join("info");
                    let _ = std::fs::create_dir_all(&ours);
                    let _ = std::fs::write(ours.join("exclude"), rules);
                }
                // The repository's index already knows every unchanged file's stat data.
                let _ = std::fs::copy(r.git_dir.join("index"), shadow.git_dir.join("index"));
            }
        }
        Ok(shadow)
    }

    /// Records the directory as it is now; the tree's id names the snapshot.
    pub fn snapshot(&self) -> Result<String, EditError> {
        if self
            .git(&["add", "-A", "--ignore-errors", "--", &self.pathspec])
            .is_err()
        {
            // A copied index a newer git wrote, or one left locked: start it afresh.
            let _ = std::fs::remove_file(self.git_dir.join("index"));
            let _ = std::fs::remove_file(self.git_dir.join("index.lock"));
            self.git(&["add", "-A", "--ignore-errors", "--", &self.pathspec])?;
        }
        let out = self.git(&["write-tree"])?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }

    /// The regular files that differ between two snapshots.
    pub fn changes(&self, before: &str, after: &str) -> Result<Vec<RawChange>, EditError> {
        if before == after {
            return Ok(Vec::new());
        }
        let out = self.git(&[
            "diff-tree",
            "-r",
            "-z",
            // Moves are found (content at least half the same), as VS Code shows them.
            "-M",
            before,
            after,
            "--",
            &self.pathspec,
        ])?;
        let mut changes = Vec::new();
        let mut fields = out.split(|b| *b == 0);
        while let Some(head) = fields.next() {
            if head.is_empty() {
                continue;
            }
            let Some(path) = fields.next() else { break };
            let head = String::from_utf8_lossy(head);
            let parts: Vec<&str> = head.trim_start_matches(':').split(' ').collect();
            let [old_mode, new_mode, old, new, status] = parts[..] else {
                continue;
            };
            let abs = |p: &[u8]| {
                self.top
                    .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(p))
            };
            // A move names both paths: where it was, then where it is.
            let (from, path) = if status.starts_with('R') {
                let Some(to) = fields.next() else { break };
                (Some(abs(path)), to)
            } else {
                (None, path)
            };
            // Links and submodules are not files whose bytes can be shown or put back.
            let regular = |mode: &str| mode == "000000" || mode.starts_with("100");
            if !regular(old_mode) || !regular(new_mode) {
                continue;
            }
            let side = |oid: &str| (oid != NULL_OID).then(|| oid.to_owned());
            changes.push(RawChange {
                path: abs(path),
                before: side(old),
                after: side(new),
                from,
            });
        }
        Ok(changes)
    }

    /// The contents of these objects, in order.
    pub fn read_blobs(&self, ids: &[String]) -> Result<Vec<Vec<u8>>, EditError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut child = self
            .command(&["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| EditError::Git(format!("cannot run git: {e}")))?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| EditError::Git("no stdin".into()))?;
        let input: String = ids.iter().map(|id| format!("{id}\n")).collect();
        // Written beside the reader: both pipes can fill.
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| EditError::Git("no stdout".into()))?;
        let mut reader = BufReader::new(stdout);
        let mut blobs = Vec::with_capacity(ids.len());
        for id in ids {
            let mut header = String::new();
            reader
                .read_line(&mut header)
                .map_err(|e| EditError::Git(format!("cat-file: {e}")))?;
            let size = header
                .trim_end()
                .strip_prefix(id.as_str())
                .and_then(|rest| rest.strip_prefix(" blob "))
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| EditError::Git(format!("cat-file: {}", header.trim_end())))?;
            let mut bytes = vec![0; size + 1];
            reader
                .read_exact(&mut bytes)
                .map_err(|e| EditError::Git(format!("cat-file: {e}")))?;
            bytes.truncate(size);
            blobs.push(bytes);
        }
        let _ = writer.join();
        let _ = child.wait();
        Ok(blobs)
    }

    /// Files git would snapshot in a folder that is not a repository, counted up to `cap`.
    fn count_files(&self, cap: usize) -> Result<usize, EditError> {
        // Counted with a temporary, empty shadow so ignore rules apply as they will later.
        let probe = tempfile_dir(&self.git_dir)?;
        let mut cmd = Command::new("git");
        cmd.args(git_config())
            .args(["ls-files", "-o", "--exclude-standard", "-z", "--", "."])
            .current_dir(&self.top)
            .env_clear()
            .envs(base_env())
            .env("GIT_DIR", &probe)
            .env("GIT_WORK_TREE", &self.top)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        init(&probe)?;
        let mut child = cmd
            .spawn()
            .map_err(|e| EditError::Git(format!("cannot run git: {e}")))?;
        let mut count = 0;
        if let Some(out) = child.stdout.take() {
            let mut reader = BufReader::new(out);
            let mut buf = Vec::new();
            while count < cap {
                buf.clear();
                match reader.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => count += 1,
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&probe);
        Ok(count)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        cmd.args(git_config())
            .args(args)
            .current_dir(&self.top)
            .env_clear()
            .envs(base_env())
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.top);
        cmd
    }

    fn git(&self, args: &[&str]) -> Result<Vec<u8>, EditError> {
        let out = self
            .command(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| EditError::Git(format!("cannot run git: {e}")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(EditError::Git(format!(
                "git {} failed: {}",
                args.first().copied().unwrap_or_default(),
                err.lines().next().unwrap_or("no message")
            )));
        }
        Ok(out.stdout)
    }
}

/// Creates an empty object store and index holder at `git_dir`.
fn init(git_dir: &Path) -> Result<(), EditError> {
    let out = Command::new("git")
        .args(["init", "-q", "--bare", "--template="])
        .arg(git_dir)
        .env_clear()
        .envs(base_env())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| EditError::Git(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(EditError::Git(format!(
            "git init failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn tempfile_dir(near: &Path) -> Result<PathBuf, EditError> {
    let parent = near.parent().unwrap_or(near);
    std::fs::create_dir_all(parent).map_err(|e| EditError::io(parent, e))?;
    Ok(parent.join(format!(".probe-{}", uuid::Uuid::new_v4().simple())))
}

/// Settings that make git fast, quiet and inert here whatever the user's config says.
fn git_config() -> [&'static str; 16] {
    [
        "-c",
        "core.autocrlf=false",
        "-c",
        "core.safecrlf=false",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "gc.auto=0",
        "-c",
        "core.quotepath=off",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.untrackedCache=false",
        "-c",
        "advice.addIgnoredFile=false",
    ]
}

/// The environment git runs with: no inherited `GIT_*`, the user's home for their global
/// ignore rules.
fn base_env() -> Vec<(String, String)> {
    let mut env = vec![
        ("LC_ALL".to_owned(), "C".to_owned()),
        ("GIT_CONFIG_NOSYSTEM".to_owned(), "1".to_owned()),
        ("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned()),
    ];
    for key in ["PATH", "HOME", "XDG_CONFIG_HOME"] {
        if let Ok(v) = std::env::var(key) {
            env.push((key.to_owned(), v));
        }
    }
    env
}

struct Repository {
    top: PathBuf,
    git_dir: PathBuf,
    common: PathBuf,
}

fn repository_of(dir: &Path) -> Option<Repository> {
    let out = Command::new("git")
        .args([
            "rev-parse",
            "--show-toplevel",
            "--absolute-git-dir",
            "--git-common-dir",
        ])
        .current_dir(dir)
        .env_clear()
        .envs(base_env())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    let top = PathBuf::from(lines.next()?);
    let git_dir = PathBuf::from(lines.next()?);
    let common = PathBuf::from(lines.next()?);
    let common = if common.is_absolute() {
        common
    } else {
        dir.join(common)
    };
    Some(Repository {
        top,
        git_dir,
        common,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use claude_host_testkit::git;

    #[test]
    fn a_repository_subfolder_sees_creates_edits_and_deletes_and_not_ignored_files() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let sub = repo.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(repo.join(".gitignore"), "*.log\n").unwrap();
        std::fs::write(sub.join("kept.txt"), "k\n").unwrap();
        std::fs::write(sub.join("edit.txt"), "one\n").unwrap();
        std::fs::write(sub.join("gone.txt"), "bye\n").unwrap();
        std::fs::write(repo.join("outside.txt"), "o\n").unwrap();
        git(&repo, &["init", "-q"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        let shadow = Shadow::open(&tmp.path().join("shadow"), &sub, 10).unwrap();
        let a = shadow.snapshot().unwrap();
        std::fs::write(sub.join("edit.txt"), "two\n").unwrap();
        std::fs::remove_file(sub.join("gone.txt")).unwrap();
        std::fs::write(sub.join("new.txt"), "new\n").unwrap();
        std::fs::write(sub.join("noise.log"), "ignored\n").unwrap();
        std::fs::write(repo.join("outside.txt"), "changed\n").unwrap();
        let b = shadow.snapshot().unwrap();
        let mut changes = shadow.changes(&a, &b).unwrap();
        changes.sort_by(|x, y| x.path.cmp(&y.path));
        let names: Vec<_> = changes
            .iter()
            .map(|c| c.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["edit.txt", "gone.txt", "new.txt"]);
        let real = sub.canonicalize().unwrap();
        assert_eq!(changes[0].path, real.join("edit.txt"));
        assert!(changes[1].after.is_none() && changes[2].before.is_none());
        let blobs = shadow
            .read_blobs(&[
                changes[0].before.clone().unwrap(),
                changes[0].after.clone().unwrap(),
                changes[1].before.clone().unwrap(),
            ])
            .unwrap();
        assert_eq!(
            blobs,
            [b"one\n".to_vec(), b"two\n".to_vec(), b"bye\n".to_vec()]
        );
        assert!(
            !repo.join(".git").join("index.lock").exists()
                && std::fs::read_dir(repo.join(".git/objects"))
                    .unwrap()
                    .count()
                    > 0
        );
        // Nothing was written into the user's repository.
        let status = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(&repo)
            .output()
            .unwrap();
        let status = String::from_utf8(status.stdout).unwrap();
        assert!(!status.contains("shadow"), "{status}");
    }

    #[test]
    fn a_plain_folder_over_the_limit_is_not_tracked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("plain");
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..5 {
            std::fs::write(dir.join(format!("f{i}")), "x").unwrap();
        }
        let err = Shadow::open(&tmp.path().join("s1"), &dir, 4).unwrap_err();
        assert!(
            matches!(err, EditError::TooManyFiles { limit: 4, .. }),
            "{err}"
        );
        let shadow = Shadow::open(&tmp.path().join("s2"), &dir, 5).unwrap();
        let a = shadow.snapshot().unwrap();
        std::fs::write(dir.join("f0"), "y").unwrap();
        let b = shadow.snapshot().unwrap();
        assert_eq!(shadow.changes(&a, &b).unwrap().len(), 1);
        assert!(shadow.changes(&b, &b).unwrap().is_empty());
        // A move is one change that names both places.
        std::fs::write(dir.join("f1"), "a line long enough to be recognised\n").unwrap();
        let c = shadow.snapshot().unwrap();
        std::fs::rename(dir.join("f1"), dir.join("moved")).unwrap();
        let d = shadow.snapshot().unwrap();
        let moved = shadow.changes(&c, &d).unwrap();
        let real = dir.canonicalize().unwrap();
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(moved[0].from, Some(real.join("f1")));
        assert_eq!(moved[0].path, real.join("moved"));
        assert_eq!(moved[0].before, moved[0].after);
    }
}
