//! Shell completions and the man page, generated from the clap definitions.

use super::*;

/// The subcommands `claude-host --help` lists.
fn subcommands(h: &Host) -> Vec<String> {
    let out = run({
        let mut c = h.bare_cmd();
        c.arg("--help");
        c
    });
    assert!(out.status.success());
    let text = stdout(&out);
    let names: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_owned)
        .collect();
    assert!(names.len() >= 15, "{names:?}");
    names
}

fn generated(h: &Host, args: &[&str]) -> String {
    let out = run({
        let mut c = h.bare_cmd();
        c.args(args);
        c
    });
    assert!(out.status.success(), "{args:?}");
    stdout(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_completion_parses_and_completes_subcommands_and_options() {
    let h = Host::new().await;
    let script = generated(&h, &["completions", "bash"]);
    let file = h.dir.path().join("claude-host.bash");
    std::fs::write(&file, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Completed by bash itself, as at a prompt: `claude-host <TAB>`, `claude-host install-cli --<TAB>`.
    let complete = |words: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                r#"set -e; source "$1"; fn=$(complete -p claude-host | sed -E 's/.* -F ([^ ]+) .*/\1/'); COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE="{words}"; COMP_POINT=${{#COMP_LINE}}; "$fn" claude-host "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"; printf '%s\n' "${{COMPREPLY[@]}}""#
            ))
            .arg("bash")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let top = complete("claude-host ''");
    for name in subcommands(&h) {
        assert!(top.contains(&name), "{name} not offered: {top:?}");
    }
    let opts = complete("claude-host install-cli --");
    assert!(
        opts.contains(&"--version".to_owned()) && opts.contains(&"--force".to_owned()),
        "{opts:?}"
    );
    let nested = complete("claude-host sessions list --");
    assert!(nested.contains(&"--limit".to_owned()), "{nested:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zsh_and_fish_completions_name_every_subcommand() {
    let h = Host::new().await;
    // Neither shell is on the test machines: the scripts are checked by their content.
    let zsh = generated(&h, &["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef claude-host"), "{zsh}");
    let fish = generated(&h, &["completions", "fish"]);
    for name in subcommands(&h) {
        assert!(zsh.contains(&format!("'{name}:")), "{name} missing in zsh");
        assert!(
            fish.contains(&format!("-a \"{name}\"")),
            "{name} missing in fish"
        );
    }
    let out = run({
        let mut c = h.bare_cmd();
        c.args(["completions", "tcsh"]);
        c
    });
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_man_page_has_name_synopsis_and_every_subcommand() {
    let h = Host::new().await;
    let page = generated(&h, &["man"]);
    assert!(page.contains(".TH claude-host 1"), "{page}");
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH DESCRIPTION",
        ".SH OPTIONS",
        ".SH SUBCOMMANDS",
    ] {
        assert!(page.contains(section), "{section} missing");
    }
    for name in subcommands(&h) {
        assert!(
            page.contains(&format!("claude\\-host\\-{}(1)", name.replace('-', "\\-"))),
            "{name} missing"
        );
    }
    // The environment variables are in it.
    assert!(page.contains("CLAUDE_HOST_UPSTREAM"));
    // Each page it refers to is there.
    for name in subcommands(&h) {
        let sub = generated(&h, &["man", &name]);
        assert!(
            sub.contains(&format!(".TH claude-host-{name} 1")),
            "{name}: {}",
            &sub[..sub.len().min(300)]
        );
    }
    let serve = generated(&h, &["man", "serve"]);
    assert!(serve.contains("connection\\-token") && serve.contains("\\-\\-upstream"));
    let out = run({
        let mut c = h.bare_cmd();
        c.args(["man", "nope"]);
        c
    });
    assert_eq!(out.status.code(), Some(2));
    // groff reads it.
    let file = h.dir.path().join("claude-host.1");
    std::fs::write(&file, &page).unwrap();
    // Plain text: no overstriking for bold, ASCII hyphens.
    let out = Command::new("groff")
        .args(["-man", "-Tascii", "-P-cbou"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SYNOPSIS") && text.contains("install-cli"),
        "{text}"
    );
}
