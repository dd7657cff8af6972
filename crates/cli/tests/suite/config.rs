//! The config file: where it is, the order flag > environment > file > default, and its
//! errors. Each test runs the real binary with a temporary HOME (and XDG_CONFIG_HOME where
//! it matters).

use super::*;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes `~/.config/claude-host/config.toml` under the test's HOME.
fn write_config(h: &Host, text: &str) -> PathBuf {
    let path = h.dir.path().join(".config/claude-host/config.toml");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

/// `config show`'s line for `key`.
fn shown<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(&format!("{key} = ")) || l.starts_with(&format!("# {key}: ")))
        .unwrap_or_else(|| panic!("no line for {key} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_is_found_by_xdg_config_home_then_home() {
    let h = Host::new().await;
    let path = |env: &[(&str, PathBuf)]| {
        let out = run({
            let mut c = h.bare_cmd();
            for (k, v) in env {
                c.env(k, v);
            }
            c.args(["config", "path"]);
            c
        });
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_owned()
    };
    let home = h.dir.path();
    assert_eq!(
        path(&[]),
        home.join(".config/claude-host/config.toml")
            .display()
            .to_string()
    );
    assert_eq!(
        path(&[("XDG_CONFIG_HOME", home.join("xdg"))]),
        home.join("xdg/claude-host/config.toml")
            .display()
            .to_string()
    );
    // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
    assert_eq!(
        path(&[("XDG_CONFIG_HOME", PathBuf::from("relative"))]),
        home.join(".config/claude-host/config.toml")
            .display()
            .to_string()
    );
    assert_eq!(
        path(&[("CLAUDE_HOST_CONFIG", home.join("elsewhere.toml"))]),
        home.join("elsewhere.toml").display().to_string()
    );

    // And the file at XDG_CONFIG_HOME is the one read.
    let xdg = home.join("xdg");
    std::fs::create_dir_all(xdg.join("claude-host")).unwrap();
    std::fs::write(
        xdg.join("claude-host/config.toml"),
        "small-model = \"from-xdg\"\n",
    )
    .unwrap();
    let out = run({
        let mut c = h.bare_cmd();
        c.env("XDG_CONFIG_HOME", &xdg).args(["config", "show"]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        shown(&text, "small-model"),
        "small-model = \"from-xdg\"  # config file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_beats_environment_beats_file_beats_default() {
    let h = Host::new().await;
    write_config(
        &h,
        r#"# every layer at once
small-model = "file-small"
subagent-model = "file-subagent"
session-lease-secs = 7
cli-idle-secs = 42
warm-up = false
no-install = true

[serve]
port = 9001
"#,
    );
    let out = run({
        let mut c = h.bare_cmd();
        c.env("CLAUDE_HOST_SUBAGENT_MODEL", "env-subagent")
            .env("CLAUDE_HOST_SESSION_LEASE_SECS", "8")
            .env("CLAUDE_HOST_SMALL_MODEL", "env-small")
            .args(["--small-model", "flag-small", "config", "show"]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        shown(&text, "small-model"),
        "small-model = \"flag-small\"  # command line"
    );
    assert_eq!(
        shown(&text, "subagent-model"),
        "subagent-model = \"env-subagent\"  # environment (CLAUDE_HOST_SUBAGENT_MODEL)"
    );
    assert_eq!(
        shown(&text, "session-lease-secs"),
        "session-lease-secs = 8  # environment (CLAUDE_HOST_SESSION_LEASE_SECS)"
    );
    assert_eq!(
        shown(&text, "cli-idle-secs"),
        "cli-idle-secs = 42  # config file"
    );
    assert_eq!(shown(&text, "warm-up"), "warm-up = false  # config file");
    assert_eq!(
        shown(&text, "no-install"),
        "no-install = true  # config file"
    );
    assert_eq!(
        shown(&text, "anthropic-base-url"),
        "anthropic-base-url = \"https://api.anthropic.com\"  # default"
    );
    assert_eq!(
        shown(&text, "quota-fallback-model"),
        "# quota-fallback-model: not set"
    );
    assert!(
        text.contains("\n[serve]\nport = 9001  # config file\n"),
        "{text}"
    );

    // The file's values are the ones commands use: its upstream answers `models`, an
    // environment variable overrides it, and a flag overrides both.
    let replay = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/hello.replay.jsonl"
    );
    write_config(&h, &format!("upstream = \"replay:{replay}\"\n"));
    let models = |env: Option<&str>, flag: Option<&str>| {
        run({
            let mut c = h.bare_cmd();
            if let Some(e) = env {
                c.env("CLAUDE_HOST_UPSTREAM", e);
            }
            if let Some(f) = flag {
                c.args(["--upstream", f]);
            }
            c.args(["models", "--json"]);
            c
        })
    };
    let out = models(None, None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = models(Some("bogus-from-env"), None);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bogus-from-env"), "{}", stderr(&out));
    let out = models(Some("bogus-from-env"), Some(&format!("replay:{replay}")));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = models(None, Some("bogus-from-flag"));
    assert!(stderr(&out).contains("bogus-from-flag"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_masked_and_a_conflicting_variable_wins_over_the_file() {
    let h = Host::new().await;
    write_config(
        &h,
        "database-url = \"postgres://claude:hunter2@db.example/sessions\"\n",
    );
    let show = |env: &[(&str, &str)]| {
        let out = run({
            let mut c = h.bare_cmd();
            for (k, v) in env {
                c.env(k, v);
            }
            c.args(["config", "show"]);
            c
        });
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let text = show(&[]);
    assert_eq!(
        shown(&text, "database-url"),
        "database-url = \"********\"  # config file"
    );
    assert!(!text.contains("hunter2"), "{text}");
    let text = show(&[("CLAUDE_HOST_DATABASE_URL", "postgres://u:s3cret@h/db")]);
    assert_eq!(
        shown(&text, "database-url"),
        "database-url = \"********\"  # environment (CLAUDE_HOST_DATABASE_URL)"
    );
    assert!(
        !text.contains("s3cret") && !text.contains("hunter2"),
        "{text}"
    );
    // `--database-url-file` conflicts with `--database-url`: given by the environment, it
    // wins over the file's URL, which stands back.
    let text = show(&[("CLAUDE_HOST_DATABASE_URL_FILE", "/run/secrets/db")]);
    assert_eq!(shown(&text, "database-url"), "# database-url: not set");
    assert_eq!(
        shown(&text, "database-url-file"),
        "database-url-file = \"/run/secrets/db\"  # environment (CLAUDE_HOST_DATABASE_URL_FILE)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_and_bad_values_name_the_key_and_the_file() {
    let h = Host::new().await;
    let fails = |text: &str| {
        let path = write_config(&h, text);
        let out = run({
            let mut c = h.bare_cmd();
            c.arg("status");
            c
        });
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = stderr(&out);
        assert!(err.contains(&path.display().to_string()), "{err}");
        err
    };
    let err = fails("upstream = \"copilot\"\nupstreem = \"copilot\"\n");
    assert!(
        err.contains("line 2, column 1") && err.contains("unknown key `upstreem`"),
        "{err}"
    );
    let err = fails("[serve]\nport = 9000\nbogus = 1\n");
    assert!(
        err.contains("line 3, column 1")
            && err.contains("unknown key `bogus`")
            && err.contains("`claude-host serve` has no option --bogus"),
        "{err}"
    );
    let err = fails("[serve]\nport = \"eighty\"\n");
    assert!(
        err.contains("line 2, column 1") && err.contains("`port`") && err.contains("eighty"),
        "{err}"
    );
    let err = fails("warm-up = \"maybe\"\n");
    assert!(err.contains("`warm-up`") && err.contains("maybe"), "{err}");
    let err = fails("no-install = \"yes\"\n");
    assert!(err.contains("`no-install` is a switch"), "{err}");
    let err = fails("serve = 1\n");
    assert!(err.contains("`serve` is a subcommand"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_file_is_refused_with_line_and_column() {
    let h = Host::new().await;
    let path = write_config(&h, "upstream = \"copilot\"\ncli-idle-secs = \n");
    let out = run({
        let mut c = h.bare_cmd();
        c.arg("status");
        c
    });
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&path.display().to_string()) && err.contains("line 2, column"),
        "{err}"
    );
    // Nothing ran: no data directory was made.
    assert!(!h.home().exists());
}
