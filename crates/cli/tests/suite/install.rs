//! Installing Claude Code: one install for concurrent first runs, npm's output kept out of
//! sight unless it fails, other versions next to the pin, and `doctor`'s account of them.
//!
//! These tests put a stand-in `npm` on `PATH`: what is under test is claude-host's side (the
//! lock, the temporary folder and its rename, the progress line, the versions), and a real
//! registry would make them depend on the network (`account::a_missing_cli_is_installed_from_npm_then_reused`
//! runs the real npm once). The stand-in lays out the package as npm does, with the pinned real
//! CLI as the binary for 2.1.330 and a script answering `--version` for any other version; its
//! `ln -s` fails when the binary is already there, as two npm runs writing one tree collide.

use super::*;
use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;

const FAKE_NPM: &str = r#"#!/bin/sh
echo "$*" >> "$FAKE_NPM_CALLS"
for a; do spec="$a"; done
version="${spec##*@}"
while [ "$1" != "--prefix" ]; do shift; done
prefix="$2"
echo "npm http fetch GET 200 https://registry.npmjs.org/@anthropic-ai%2fclaude-code 12ms"
if [ -n "$FAKE_NPM_FAIL" ]; then
  echo "npm error code E404" >&2
  echo "npm error 404 Not Found - GET https://registry.npmjs.org/@anthropic-ai%2fclaude-code-nope" >&2
  exit 1
fi
# Held until the test has seen every other process wait for the lock.
if [ -n "$FAKE_NPM_GATE" ]; then
  while [ ! -e "$FAKE_NPM_GATE" ]; do sleep 0.05; done
fi
pkg="$prefix/node_modules/@anthropic-ai/claude-code-linux-x64"
mkdir -p "$pkg" || exit 1
if [ "$version" = "2.1.330" ]; then
  ln -s "$REAL_CLI" "$pkg/claude" || exit 1
else
  printf '#!/bin/sh\necho "%s (Claude Code)"\n' "$version" > "$pkg/claude" && chmod +x "$pkg/claude"
fi
echo "added 2 packages in 1s"
"#;

struct FakeNpm {
    bin: PathBuf,
    calls: PathBuf,
}

impl FakeNpm {
    fn new(h: &Host) -> FakeNpm {
        let bin = h.dir.path().join("fake-npm-bin");
        std::fs::create_dir_all(&bin).unwrap();
        let npm = bin.join("npm");
        std::fs::write(&npm, FAKE_NPM).unwrap();
        std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeNpm {
            calls: h.dir.path().join("npm-calls"),
            bin,
        }
    }

    /// `claude-host` with no CLI to be found but the one the stand-in npm installs.
    fn cmd(&self, h: &Host) -> Command {
        let mut c = h.cmd();
        c.env_remove("CLAUDE_HOST_CLAUDE_PATH")
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("FAKE_NPM_CALLS", &self.calls)
            .env("REAL_CLI", cli());
        c
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Hidden leftovers under `<home>/cli` (temporary and moved-aside installs).
fn leftovers(home: &Path) -> Vec<String> {
    std::fs::read_dir(home.join("cli"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-") || n.starts_with(".old-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_first_runs_at_once_share_one_install() {
    let h = Host::new().await;
    let npm = FakeNpm::new(&h);
    let gate = h.dir.path().join("npm-gate");
    let replay = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/hello.replay.jsonl"
    );
    let mut children = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, String)>();
    for i in 0..5 {
        let mut c = npm.cmd(&h);
        c.env("FAKE_NPM_GATE", &gate)
            .args(["--upstream", &format!("replay:{replay}")])
            .args(["claude", "-p", "say hello"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let err = child.stderr.take().unwrap();
        let tx = tx.clone();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for line in std::io::BufReader::new(err).lines() {
                let line = line.unwrap();
                let _ = tx.send((i, line.clone()));
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        children.push((child, reader));
    }
    drop(tx);
    // The install is held until the four others are seen waiting for it: all five are
    // running at once.
    let mut waiting = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while waiting.len() < 4 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let (i, line) = rx
            .recv_timeout(left)
            .expect("four runs waiting for the install");
        if line.contains("Another claude-host is installing Claude Code 2.1.330; waiting for it") {
            waiting.insert(i);
        }
    }
    std::fs::write(&gate, "").unwrap();
    for (child, reader) in children {
        let out = child.wait_with_output().unwrap();
        let err = reader.join().unwrap();
        eprintln!("--- stdout\n{}\n--- stderr\n{err}", stdout(&out));
        assert!(out.status.success(), "{err}");
        assert!(
            stdout(&out).contains("Hello from the claude-host replay upstream!"),
            "{err}"
        );
        assert!(
            !err.contains("added 2 packages"),
            "npm's output shown: {err}"
        );
    }
    assert_eq!(npm.calls().len(), 1, "{:?}", npm.calls());
    assert!(claude_host_sdk::find::pinned_binary(&h.home()).is_some());
    assert_eq!(leftovers(&h.home()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_output_is_one_line_and_all_of_it_when_npm_fails() {
    let h = Host::new().await;
    let npm = FakeNpm::new(&h);
    // What an install killed midway leaves: cleared by the next one, under the lock.
    let killed = h.home().join("cli/.tmp-2.1.330-99999/node_modules");
    std::fs::create_dir_all(&killed).unwrap();

    let out = run({
        let mut c = npm.cmd(&h);
        c.env("FAKE_NPM_FAIL", "1").arg("install-cli");
        c
    });
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("npm error 404 Not Found") && err.contains("npm http fetch GET 200"),
        "the whole log: {err}"
    );
    assert!(err.contains("npm install failed"), "{err}");
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(
        !claude_host_sdk::find::install_dir(&h.home()).exists(),
        "nothing half-installed"
    );
    assert_eq!(leftovers(&h.home()), Vec::<String>::new());

    let out = run({
        let mut c = npm.cmd(&h);
        c.arg("install-cli");
        c
    });
    assert!(out.status.success());
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one progress line: {err}");
    assert!(
        lines[0].starts_with("Installing Claude Code 2.1.330 with npm… done in "),
        "{err}"
    );
    let bin = claude_host_sdk::find::pinned_binary(&h.home()).unwrap();
    assert_eq!(stdout(&out).trim(), bin.display().to_string());

    // Installed: nothing to do, even with npm failing.
    let out = run({
        let mut c = npm.cmd(&h);
        c.env("FAKE_NPM_FAIL", "1").arg("install-cli");
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(npm.calls().len(), 2);

    // `--force` installs afresh, into place by a rename.
    let out = run({
        let mut c = npm.cmd(&h);
        c.args(["install-cli", "--force"]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(npm.calls().len(), 3);
    assert!(claude_host_sdk::find::pinned_binary(&h.home()).is_some());
    assert_eq!(leftovers(&h.home()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_version_installs_next_to_the_pin_and_doctor_names_both() {
    let h = Host::new().await;
    let npm = FakeNpm::new(&h);
    let install = |args: &[&str]| {
        run({
            let mut c = npm.cmd(&h);
            c.arg("install-cli").args(args);
            c
        })
    };
    assert!(install(&[]).status.success());
    let out = install(&["--version", "2.1.329"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let other = claude_host_sdk::find::installed_binary(&h.home(), "2.1.329").unwrap();
    assert_eq!(stdout(&out).trim(), other.display().to_string());
    assert!(stderr(&out).contains("--claude-path"), "{}", stderr(&out));
    assert!(
        npm.calls()
            .last()
            .unwrap()
            .ends_with("@anthropic-ai/claude-code@2.1.329"),
        "{:?}",
        npm.calls()
    );

    for bad in ["latest", "^2.1.0", "../2.1.330", "2.1", "file:/tmp/x"] {
        let out = install(&["--version", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(
            stderr(&out).contains("is not a Claude Code version"),
            "{bad}: {}",
            stderr(&out)
        );
    }
    assert_eq!(npm.calls().len(), 2, "npm never ran for a bad version");

    let doctor = |claude_path: Option<&Path>| {
        let out = run({
            let mut c = npm.cmd(&h);
            if let Some(p) = claude_path {
                c.env("CLAUDE_HOST_CLAUDE_PATH", p);
            }
            c.arg("doctor");
            c
        });
        stdout(&out)
    };
    let dir = h.home().join("cli");
    let text = doctor(None);
    assert!(
        text.contains(&format!(
            "ok   Installed Claude Code versions: 2.1.329, 2.1.330 (pinned, in use) in {}",
            dir.display()
        )),
        "{text}"
    );
    let text = doctor(Some(&other));
    assert!(
        text.contains("Claude Code CLI: 2.1.329")
            && text
                .contains("Installed Claude Code versions: 2.1.329 (in use), 2.1.330 (pinned) in"),
        "{text}"
    );
}
