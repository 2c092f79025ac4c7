//! HTTP connections served on threads of their own, each running a
//! single-threaded tokio runtime: a connection's requests are read,
//! searched (small searches run where they arrive) and answered on one
//! thread, with no hand-over between runtime workers.
//!
//! Why not the shared multi-threaded runtime: while hyper reads a request
//! body it wakes its own connection task, tokio then re-queues the task as
//! a yield and wakes an idle worker to steal it, for nothing. On 2 cores
//! that was ~0.7 futex wake-ups and ~15 µs of CPU per search request, and
//! ~30 µs of a single client's latency (`docs/benchmarks.md`, 2026-12-05).
//!
//! An acceptor task on the main runtime takes each connection and hands
//! it to the thread with the fewest open connections; TLS handshakes run
//! on that thread too (bounded in number and time, so a slow or silent
//! client never holds up the others).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::error::Error;

/// Longest a client may take over its TLS handshake (waiting for a
/// handshake slot included).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// TLS handshakes in progress at once, over all threads.
const MAX_HANDSHAKES: usize = 256;
/// Pause after a failed accept (out of file descriptors, say) before the
/// next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// TLS for the HTTP threads: the acceptor and the slots its handshakes
/// share.
#[derive(Clone)]
struct Tls {
    acceptor: TlsAcceptor,
    handshakes: Arc<Semaphore>,
}

/// One HTTP thread as the acceptor sees it.
struct Thread {
    connections: mpsc::UnboundedSender<std::net::TcpStream>,
    /// Connections handed to it and not yet closed.
    open: Arc<AtomicUsize>,
}

/// The running HTTP threads and their acceptor; stopped on drop (open
/// connections are closed).
pub(crate) struct HttpThreads {
    acceptor: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl HttpThreads {
    /// Serves `app` on `listener` from `threads` threads (at least one),
    /// over TLS when `tls` is given. Call from within the main runtime.
    pub(crate) fn start(
        listener: TcpListener,
        app: Router,
        tls: Option<TlsAcceptor>,
        threads: usize,
    ) -> Result<Self, Error> {
        let tls = tls.map(|acceptor| Tls {
            acceptor,
            handshakes: Arc::new(Semaphore::new(MAX_HANDSHAKES)),
        });
        let (stop, stopped) = watch::channel(false);
        let mut handles = Vec::with_capacity(threads.max(1));
        for index in 0..threads.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(Error::HttpThread)?;
            let (tx, rx) = mpsc::unbounded_channel();
            let open = Arc::new(AtomicUsize::new(0));
            let (app, tls, stopped) = (app.clone(), tls.clone(), stopped.clone());
            let counted = open.clone();
            std::thread::Builder::new()
                .name(format!("eddy-http-{index}"))
                .spawn(move || runtime.block_on(run_thread(rx, counted, app, tls, stopped)))
                .map_err(Error::HttpThread)?;
            handles.push(Thread {
                connections: tx,
                open,
            });
        }
        let acceptor = tokio::spawn(accept(listener, handles));
        Ok(Self { acceptor, stop })
    }
}

impl Drop for HttpThreads {
    fn drop(&mut self) {
        self.acceptor.abort();
        // Each thread ends its runtime, which closes its connections.
        let _ = self.stop.send(true);
    }
}

/// Takes connections and hands each to the thread with the fewest open
/// ones (the first such thread after the last one chosen, so ties
/// rotate).
async fn accept(listener: TcpListener, threads: Vec<Thread>) {
    let mut last = 0;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!(error = %e, "HTTP accept");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // No Nagle: an answer would otherwise wait for the client's
        // delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
        let tcp = match tcp.into_std() {
            Ok(tcp) => tcp,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "handing an HTTP connection over");
                continue;
            }
        };
        let Some(chosen) = least_loaded(&threads, last) else {
            tracing::error!("every HTTP thread has stopped; no longer accepting");
            return;
        };
        last = chosen;
        let thread = &threads[chosen];
        thread.open.fetch_add(1, Ordering::Relaxed);
        if let Err(refused) = thread.connections.send(tcp) {
            thread.open.fetch_sub(1, Ordering::Relaxed);
            drop(refused);
            tracing::warn!(thread = chosen, "an HTTP thread has stopped");
        }
    }
}

/// The running thread with the fewest open connections, ties going to
/// the first after `last`; `None` when every thread has stopped.
fn least_loaded(threads: &[Thread], last: usize) -> Option<usize> {
    let n = threads.len();
    (1..=n)
        .map(|step| (last + step) % n)
        .filter(|&i| !threads[i].connections.is_closed())
        .min_by_key(|&i| threads[i].open.load(Ordering::Relaxed))
}

/// One HTTP thread: serves the connections handed to it until told to
/// stop (or the acceptor is gone and its connections have closed).
async fn run_thread(
    mut connections: mpsc::UnboundedReceiver<std::net::TcpStream>,
    open: Arc<AtomicUsize>,
    app: Router,
    tls: Option<Tls>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            handed = connections.recv() => match handed {
                Some(tcp) => {
                    let counted = OpenConnection(open.clone());
                    tokio::spawn(serve_connection(tcp, app.clone(), tls.clone(), counted));
                }
                None => return,
            },
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// A connection counted in its thread's open connections until dropped.
struct OpenConnection(Arc<AtomicUsize>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one connection (after its TLS handshake, if any) until it
/// closes.
async fn serve_connection(
    tcp: std::net::TcpStream,
    app: Router,
    tls: Option<Tls>,
    _open: OpenConnection,
) {
    let peer = tcp.peer_addr().ok();
    let tcp = match TcpStream::from_std(tcp) {
        Ok(tcp) => tcp,
        Err(e) => {
            tracing::debug!(?peer, error = %e, "registering an HTTP connection");
            return;
        }
    };
    match tls {
        None => serve(TokioIo::new(tcp), app, peer).await,
        Some(tls) => {
            let handshake = async {
                let _slot = tls.handshakes.acquire().await.ok()?;
                tls.acceptor
                    .accept(tcp)
                    .await
                    .map_err(|e| {
                        tracing::debug!(?peer, error = %e, "TLS handshake failed");
                    })
                    .ok()
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Some(stream)) => serve(TokioIo::new(stream), app, peer).await,
                Ok(None) => {}
                Err(_) => tracing::debug!(?peer, "TLS handshake timed out"),
            }
        }
    }
}

/// HTTP/1.1 or HTTP/2 (and upgrades) on `io`, as `axum::serve` does.
async fn serve<I>(io: TokioIo<I>, app: Router, peer: Option<SocketAddr>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().enable_connect_protocol();
    if let Err(e) = builder.serve_connection_with_upgrades(io, service).await {
        tracing::trace!(?peer, error = %e, "HTTP connection ended with an error");
    }
}

#[cfg(test)]
mod tests;
