use claude_host_upstream::credentials::{CredentialStore, StoredCredential, TokenSource};
use std::os::unix::fs::PermissionsExt;

fn cred(token: &str) -> StoredCredential {
    StoredCredential {
        github_token: token.into(),
        login: Some("octocat".into()),
        obtained_at: 1,
        client_id: None,
        scope: Some("read:user".into()),
    }
}

#[test]
fn saved_with_mode_0600_in_a_0700_directory_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("nested/home");
    let store = CredentialStore::in_home(&home);
    store.save(&cred("gho_one")).unwrap();
    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let dmode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
    assert_eq!(dmode, 0o700);
    // Replacing keeps the mode and leaves no temporary files behind.
    store.save(&cred("gho_two")).unwrap();
    assert_eq!(store.load().unwrap().unwrap().github_token, "gho_two");
    assert_eq!(
        std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let entries: Vec<_> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("credentials.json")]);
    assert!(
        !format!("{:?}", store.load().unwrap()).contains("gho_two"),
        "Debug must redact the token"
    );
    assert!(store.delete().unwrap());
    assert!(!store.delete().unwrap());
    assert!(store.load().unwrap().is_none());
}

#[test]
fn environment_tokens_take_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let store = CredentialStore::in_home(dir.path());
    store.save(&cred("gho_file")).unwrap();
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let t = store
        .resolve(&env(&[("GITHUB_TOKEN", "gho_gh"), ("GH_TOKEN", "gho_env")]))
        .unwrap()
        .unwrap();
    assert_eq!(
        (t.token.as_str(), t.source),
        ("gho_env", TokenSource::Env("GH_TOKEN"))
    );
    let t = store
        .resolve(&env(&[("GITHUB_TOKEN", "gho_gh")]))
        .unwrap()
        .unwrap();
    assert_eq!(t.source, TokenSource::Env("GITHUB_TOKEN"));
    let t = store.resolve(&env(&[("GH_TOKEN", "  ")])).unwrap().unwrap();
    assert_eq!(t.token, "gho_file");
    assert_eq!(t.login.as_deref(), Some("octocat"));
}

#[test]
fn a_corrupt_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = CredentialStore::in_home(dir.path());
    std::fs::write(store.path(), "{oops").unwrap();
    let err = store.load().unwrap_err().to_string();
    assert!(
        err.contains("corrupt") && err.contains("claude-host login"),
        "{err}"
    );
}
