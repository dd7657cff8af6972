//! The GitHub credential: `$CLAUDE_HOST_HOME/credentials.json`, mode 0600, written atomically;
//! `GH_TOKEN` / `GITHUB_TOKEN` in the environment take precedence.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A stored GitHub sign-in.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCredential {
    /// The GitHub OAuth token.
    pub github_token: String,
    /// The GitHub login, when known.
    #[serde(default)]
    pub login: Option<String>,
    /// When it was obtained (Unix seconds).
    #[serde(default)]
    pub obtained_at: i64,
    /// The OAuth client id used.
    #[serde(default)]
    pub client_id: Option<String>,
    /// The granted scope.
    #[serde(default)]
    pub scope: Option<String>,
}

impl std::fmt::Debug for StoredCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredCredential")
            .field("github_token", &"<redacted>")
            .field("login", &self.login)
            .field("obtained_at", &self.obtained_at)
            .finish_non_exhaustive()
    }
}

/// Where a GitHub token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable (its name).
    Env(&'static str),
    /// The credentials file.
    File(PathBuf),
}

impl std::fmt::Display for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::Env(name) => write!(f, "environment variable {name}"),
            TokenSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A GitHub token and where it came from.
#[derive(Clone)]
pub struct GithubToken {
    /// The token.
    pub token: String,
    /// Its source.
    pub source: TokenSource,
    /// The login, when the file recorded it.
    pub login: Option<String>,
}

impl std::fmt::Debug for GithubToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubToken")
            .field("token", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

/// Credential file errors.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Reading or writing failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid JSON of the expected shape.
    #[error("{path} is corrupt ({message}); run `claude-host login` to replace it")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The credentials file.
#[derive(Debug, Clone)]
pub struct CredentialStore {
    path: PathBuf,
}

impl CredentialStore {
    /// The store under a claude-host home directory.
    pub fn in_home(home: &Path) -> Self {
        CredentialStore {
            path: home.join("credentials.json"),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that the credential can be written here (its folder created, a file written
    /// and removed), before anyone goes through a sign-in whose result would be lost.
    pub fn check_writable(&self) -> Result<(), CredentialError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let probe = || -> std::io::Result<()> {
            crate::private_files::create_private_dir(dir)?;
            tempfile::NamedTempFile::new_in(dir)?.close()
        };
        probe().map_err(|source| CredentialError::Io {
            action: "cannot write",
            path: dir.to_path_buf(),
            source,
        })
    }

    /// Reads the stored credential, `None` when there is none.
    pub fn load(&self) -> Result<Option<StoredCredential>, CredentialError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(CredentialError::Io {
                    action: "cannot read",
                    path: self.path.clone(),
                    source,
                });
            }
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CredentialError::Corrupt {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// Writes the credential atomically (temp file in the same directory, mode 0600, fsync,
    /// rename), creating the directory with mode 0700.
    pub fn save(&self, cred: &StoredCredential) -> Result<(), CredentialError> {
        let json = serde_json::to_vec_pretty(cred).unwrap_or_default();
        crate::private_files::write_atomic(&self.path, &json).map_err(|source| {
            CredentialError::Io {
                action: "cannot write",
                path: self.path.clone(),
                source,
            }
        })
    }

    /// Removes the file. Returns whether there was one.
    pub fn delete(&self) -> Result<bool, CredentialError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(CredentialError::Io {
                action: "cannot remove",
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// The token to use: `GH_TOKEN`, then `GITHUB_TOKEN` (read through `env`), then the file.
    pub fn resolve(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<GithubToken>, CredentialError> {
        for name in ["GH_TOKEN", "GITHUB_TOKEN"] {
            if let Some(token) = env(name).filter(|t| !t.trim().is_empty()) {
                return Ok(Some(GithubToken {
                    token: token.trim().to_owned(),
                    source: TokenSource::Env(name),
                    login: None,
                }));
            }
        }
        Ok(self.load()?.map(|c| GithubToken {
            token: c.github_token,
            source: TokenSource::File(self.path.clone()),
            login: c.login,
        }))
    }
}
