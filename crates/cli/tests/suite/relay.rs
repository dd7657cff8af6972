//! A TCP relay between a host and PostgreSQL that a test controls: pass, black-hole (bytes
//! are taken and held, nothing is forwarded either way, until the link passes again), delay,
//! or cut (every connection closed, new ones refused).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the link does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Bytes go through.
    Pass,
    /// Bytes are taken and held (the sender sees no error), none go through.
    BlackHole,
    /// Bytes go through this much later.
    Delay(Duration),
    /// Every connection is closed; new ones are closed at once.
    Cut,
}

/// A relay on 127.0.0.1 to `target`, ended when dropped.
pub(crate) struct Relay {
    port: u16,
    mode: watch::Sender<Mode>,
    held: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
        self.mode.send_replace(Mode::Cut);
    }
}

impl Relay {
    pub(crate) async fn start(target: u16) -> Relay {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (mode, _) = watch::channel(Mode::Pass);
        let held = Arc::new(AtomicUsize::new(0));
        let (modes, counter) = (mode.clone(), held.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if *modes.borrow() == Mode::Cut {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, modes.subscribe(), counter.clone()));
                tokio::spawn(pump(sr, cw, modes.subscribe(), counter.clone()));
            }
        });
        Relay {
            port,
            mode,
            held,
            task,
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn set(&self, mode: Mode) {
        // Kept even with no connection open to see it (`send` would drop it then).
        self.mode.send_replace(mode);
    }

    /// Bytes taken and not yet passed on.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    held: Arc<AtomicUsize>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut open = true;
    loop {
        let now = *mode.borrow_and_update();
        match now {
            Mode::Cut => {
                held.fetch_sub(pending.len(), Ordering::SeqCst);
                return;
            }
            Mode::BlackHole => {}
            Mode::Pass | Mode::Delay(_) if !pending.is_empty() => {
                if let Mode::Delay(d) = now {
                    tokio::time::sleep(d).await;
                }
                let n = pending.len();
                let ok = to.write_all(&pending).await.is_ok();
                pending.clear();
                held.fetch_sub(n, Ordering::SeqCst);
                if !ok {
                    return;
                }
                continue;
            }
            Mode::Pass | Mode::Delay(_) => {
                if !open {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
        tokio::select! {
            r = from.read(&mut buf), if open => match r {
                Ok(0) | Err(_) => open = false,
                Ok(n) => {
                    held.fetch_add(n, Ordering::SeqCst);
                    pending.extend_from_slice(&buf[..n]);
                }
            },
            c = mode.changed() => if c.is_err() { return },
        }
    }
}
